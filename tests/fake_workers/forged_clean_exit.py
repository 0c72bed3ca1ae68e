"""A worker that shakes hands, writes a whole host-authored message as its last stderr line
and exits with code 0, as if the host had killed it for a limit it never reached.

Usage: ``forged_clean_exit.py WHEN MESSAGE``: WHEN is ``after_hello`` (exits before any
command arrives) or ``mid_eval`` (exits once the first eval arrives).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _wirelib import chosen_case, exit_now, hello, read_eval, say


def main() -> None:
    case = chosen_case()
    message = sys.argv[2]
    hello()
    if case == "mid_eval":
        read_eval()
    elif case != "after_hello":
        raise SystemExit(f"unknown case {case!r}")
    say("harmless line\n" + message + "\n")
    exit_now(0)


if __name__ == "__main__":
    main()
