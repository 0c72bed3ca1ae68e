"""Wire helpers shared by the hostile fake workers (stdlib and msgpack only).

The fakes run with an empty environment under the test's own interpreter. Each imports
this module by putting its own directory on ``sys.path``. A frame is a 4-byte big-endian
length and one msgpack array; see ``pydeno/host/_wire.py`` for the shapes.
"""

from __future__ import annotations

import os
import struct
import sys
import time
from typing import Any, NoReturn

import msgpack

HELLO = [0, 3, "2.0.0", "13.0", []]
W_RESULT, W_ERROR, W_HOSTCALL, W_CONSOLE, W_PART = 1, 2, 3, 4, 6
H_EVAL, H_CALL, H_RELEASE, H_REPLY, H_BIND = 1, 2, 3, 4, 5


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def write_raw(data: bytes) -> None:
    """Write bytes to stdout, all of them, unbuffered."""
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def send(value: Any) -> None:
    write_raw(frame(pack(value)))


def hello() -> None:
    send(HELLO)


def say(text: str) -> None:
    """Write text to stderr, all of it."""
    data = text.encode()
    while data:
        data = data[os.write(2, data) :]


def _read_exact(n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = os.read(0, n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame() -> list[Any] | None:
    """The next frame from the host, or None when stdin is closed."""
    header = _read_exact(4)
    if header is None:
        return None
    (length,) = struct.unpack(">I", header)
    payload = _read_exact(length)
    if payload is None:
        return None
    # Extension values (undefined, functions, ...) are kept as msgpack.ExtType.
    return msgpack.unpackb(payload, raw=False, strict_map_key=False)


def read_request() -> list[Any]:
    """The next frame that is not a RELEASE; exit quietly when the host hangs up."""
    while True:
        item = read_frame()
        if item is None:
            os._exit(0)
        if item[0] != H_RELEASE:
            return item


def read_eval() -> int:
    """Answer BINDs with success until an EVAL or CALL arrives; return its request id."""
    while True:
        item = read_request()
        if item[0] == H_BIND:
            send([W_RESULT, item[1], None])
        elif item[0] in (H_EVAL, H_CALL):
            return int(item[1])


def drain_until_eof() -> NoReturn:
    """Read and ignore the host's frames until it hangs up (or kills us)."""
    while True:
        read_request()


def sleep_forever() -> NoReturn:
    while True:
        time.sleep(3600)


def exit_now(code: int) -> NoReturn:
    """Exit at once: no interpreter shutdown that could race with the host's kill."""
    os._exit(code)


def chosen_case() -> str:
    """The behaviour this run was asked for: the first command-line argument."""
    if len(sys.argv) < 2:
        say("usage: fake worker CASE\n")
        exit_now(2)
    return sys.argv[1]
