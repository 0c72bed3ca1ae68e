"""A worker that shakes hands and then misuses its pipes.

Usage: ``closed_pipes.py CASE``:

- ``close_stderr``: closes stderr, then answers the first eval with 42 after half a second
- ``close_stdout``: closes stdout once the first eval arrives, and idles
- ``close_stdin``: closes stdin before the handshake, and idles
- ``never_reads``: never reads stdin at all, and idles
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _wirelib import W_RESULT, chosen_case, drain_until_eof, hello, read_eval, send, sleep_forever


def main() -> None:
    case = chosen_case()
    if case == "close_stderr":
        os.close(2)
        hello()
        rid = read_eval()
        time.sleep(0.5)
        send([W_RESULT, rid, 42])
        drain_until_eof()
    elif case == "close_stdout":
        hello()
        read_eval()
        os.close(1)
        sleep_forever()
    elif case == "close_stdin":
        os.close(0)
        hello()
        sleep_forever()
    elif case == "never_reads":
        hello()
        sleep_forever()
    raise SystemExit(f"unknown case {case!r}")


if __name__ == "__main__":
    main()
