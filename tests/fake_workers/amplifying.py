"""A worker that shakes hands, then answers the first eval with a frame built to amplify:
one byte on the wire per empty map (0x80), each a 64-byte dict and a slot on the host.

Usage: ``amplifying.py CASE N``: ``N`` empty maps (or JSON ``{}``) in the frame CASE names.

- ``result``: a RESULT whose value is a msgpack array of them, in one frame.
- ``json``: the same as a JSON-lane payload (``[{},{},...]``).
- ``parts``: eight PART frames of N each, then the RESULT: each within the allowance of its
  own bytes, all of them together far over the one allowance they share.
- ``hostcall``: a HOSTCALL to the bound function ``f`` with them as its one argument.
- ``console``: a CONSOLE frame with them where its text goes.
- ``error``: an ERROR frame with them where its message goes.
- ``strings``: a RESULT of N two-byte strings, cheap to decode: the control case.

After its frame the worker reads stdin until the host kills it or hangs up.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import msgpack
from _wirelib import (
    EXT_JSON,
    W_CONSOLE,
    W_ERROR,
    W_HOSTCALL,
    W_PART,
    W_RESULT,
    chosen_case,
    drain_until_eof,
    frame,
    hello,
    pack,
    read_eval,
    write_raw,
)


def empties(n: int) -> bytes:
    """A msgpack array of n empty maps, as raw bytes."""
    return b"\xdd" + struct.pack(">I", n) + b"\x80" * n


def head(*items: object) -> bytes:
    """The start of a frame of len(items) + 1 items, the last one to follow as raw bytes."""
    return bytes([0x90 | (len(items) + 1)]) + b"".join(pack(item) for item in items)


def main() -> None:
    case = chosen_case()
    n = int(sys.argv[2])
    hello()
    rid = read_eval()
    if case == "result":
        write_raw(frame(head(W_RESULT, rid) + empties(n)))
    elif case == "json":
        text = ("[" + ",".join(["{}"] * n) + "]").encode()
        write_raw(frame(head(W_RESULT, rid) + pack(msgpack.ExtType(EXT_JSON, text))))
    elif case == "parts":
        part = frame(head(W_PART, rid) + empties(n))
        write_raw(part * 8 + frame(pack([W_RESULT, rid, []])))
    elif case == "hostcall":
        write_raw(frame(head(W_HOSTCALL, 1, "f") + b"\x91" + empties(n)))
    elif case == "console":
        write_raw(frame(head(W_CONSOLE, "log") + empties(n)))
    elif case == "error":
        write_raw(frame(b"\x96" + pack(W_ERROR) + pack(rid) + pack("Error") + empties(n) + pack("") + pack([])))
    elif case == "strings":
        write_raw(frame(head(W_RESULT, rid) + b"\xdd" + struct.pack(">I", n) + b"\xa2ab" * n))
    drain_until_eof()


if __name__ == "__main__":
    main()
