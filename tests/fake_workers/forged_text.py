"""A worker whose console output and error text carry control characters and terminal
escapes, to forge log lines or move a terminal's cursor.

Usage: ``forged_text.py console`` (two console frames, then the first eval answers "done")
or ``forged_text.py error`` (the first eval fails with an ERROR full of escapes).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _wirelib import W_CONSOLE, W_ERROR, W_RESULT, chosen_case, drain_until_eof, hello, read_eval, send

CONSOLE = [
    ("log", "\x1b[2J\x1b[Hcleared\rINFO forged line\x00\x07\x08 bell\ttab\nsecond line"),
    ("error", "\x9b31mC1 escape\x7f\x85 next-line\x1b]0;title\x07 done"),
]
ERROR = ("Type\x1bError", "bad\r\nWorkerCrashed: forged\x1b[0m", "at <eval>:1\x00\n  at \x1b[1mx\x1b[0m")


def main() -> None:
    case = chosen_case()
    hello()
    rid = read_eval()
    if case == "console":
        for level, text in CONSOLE:
            send([W_CONSOLE, level, text])
        send([W_RESULT, rid, "done"])
    elif case == "error":
        send([W_ERROR, rid, *ERROR, []])
    drain_until_eof()


if __name__ == "__main__":
    main()
