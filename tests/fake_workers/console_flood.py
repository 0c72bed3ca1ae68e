"""A worker that answers its first eval with an endless stream of console output and
never a RESULT, so the host is never without something to read.

Usage: ``console_flood.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _wirelib import W_CONSOLE, frame, hello, pack, read_eval, write_raw


def main() -> None:
    hello()
    read_eval()
    burst = frame(pack([W_CONSOLE, "log", "y" * 1000])) * 3
    while True:
        write_raw(burst)


if __name__ == "__main__":
    main()
