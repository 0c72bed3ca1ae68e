"""A worker that calls the bound host function ``f`` with call id 7 on the first eval, and
again with the same id 7 on the next eval, which ``f`` itself makes while call 7 is still
in flight.

Usage: ``reused_call_id.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _wirelib import W_HOSTCALL, drain_until_eof, hello, read_eval, send


def main() -> None:
    hello()
    read_eval()
    send([W_HOSTCALL, 7, "f", []])
    read_eval()
    send([W_HOSTCALL, 7, "f", []])
    drain_until_eof()


if __name__ == "__main__":
    main()
