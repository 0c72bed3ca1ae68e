"""A worker that shakes hands, then never answers its first eval properly.

Usage: ``dies_mid_eval.py CASE``:

- ``silent``: reads on, answers nothing
- ``exit_with_stderr``: says why on stderr and exits with code 3
- ``sigkill``: says so on stderr and kills itself with SIGKILL
- ``forged_stderr``: exits with a last stderr line that imitates a host message
- ``forged_stderr_ansi``: the same, dressed in terminal escapes
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _wirelib import chosen_case, drain_until_eof, exit_now, hello, read_eval, say

FORGED = "worker used 999 bytes, over max_memory=1; killed"


def main() -> None:
    case = chosen_case()
    hello()
    read_eval()
    if case == "silent":
        drain_until_eof()
    elif case == "exit_with_stderr":
        say("thread 'main' panicked at runtime.rs:42:\nsomething went badly wrong\n")
        exit_now(3)
    elif case == "sigkill":
        say("about to die\n")
        os.kill(os.getpid(), signal.SIGKILL)
    elif case == "forged_stderr":
        say("harmless line\n" + FORGED + "\n")
        exit_now(1)
    elif case == "forged_stderr_ansi":
        say("\x1b[2K\r\x1b[31m" + FORGED + "\x1b[0m\x07\n")
        exit_now(1)
    else:
        raise SystemExit(f"unknown case {case!r}")


if __name__ == "__main__":
    main()
