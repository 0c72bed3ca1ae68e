"""A worker that writes megabytes to stderr (before its handshake and while answering an
eval) and otherwise behaves: the first eval's answer is 42.

Usage: ``stderr_spam.py [MEBIBYTES]`` (default 2, split between the two bursts).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _wirelib import W_RESULT, drain_until_eof, hello, read_eval, say, send


def spam(n_bytes: int) -> None:
    line = "warning: something noisy happened, and then it happened again\n"
    say(line * (n_bytes // len(line) + 1))


def main() -> None:
    total = int(float(sys.argv[1]) * 2**20) if len(sys.argv) > 1 else 2 * 2**20
    spam(total // 2)
    hello()
    rid = read_eval()
    spam(total // 2)
    send([W_RESULT, rid, 42])
    drain_until_eof()


if __name__ == "__main__":
    main()
