"""Wire helpers shared by the hostile fake workers (stdlib, msgpack and the wire's table).

The fakes run with an empty environment under the test's own interpreter. Each imports
this module by putting its own directory on ``sys.path``. A frame is a 4-byte big-endian
length and one msgpack array; see ``pydeno/host/wire/connection.py`` for the shapes.

Their constants are the host's own, from ``pydeno/host/wire/protocol.py``, loaded by path from
the tree these tests are in: ``import pydeno`` would find whichever pydeno the interpreter
has installed, which need not be this one, and would import all of it.
"""

from __future__ import annotations

import os
import struct
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import msgpack

sys.path.append(str(Path(__file__).resolve().parents[2] / "pydeno" / "host" / "wire"))

from protocol import (  # type: ignore[import-not-found]
    EXIT_PERMISSION_KEPT,
    EXT_BIGINT,
    EXT_DATE,
    EXT_FUNCTION,
    EXT_JSON,
    EXT_SET,
    H_BIND,
    H_CALL,
    H_EVAL,
    H_RELEASE,
    PROTOCOL_VERSION,
    W_CONSOLE,
    W_ERROR,
    W_HELLO,
    W_HOSTCALL,
    W_PART,
    W_RESULT,
    WORKER_PREFIX,
)

__all__ = [
    "EXIT_PERMISSION_KEPT",
    "EXT_BIGINT",
    "EXT_DATE",
    "EXT_FUNCTION",
    "EXT_JSON",
    "EXT_SET",
    "HELLO",
    "PROTOCOL_VERSION",
    "WORKER_PREFIX",
    "W_CONSOLE",
    "W_ERROR",
    "W_HELLO",
    "W_HOSTCALL",
    "W_PART",
    "W_RESULT",
    "chosen_case",
    "drain_until_eof",
    "exit_now",
    "frame",
    "hello",
    "pack",
    "read_eval",
    "read_frame",
    "read_request",
    "say",
    "send",
    "sleep_forever",
    "write_raw",
]

HELLO = [W_HELLO, PROTOCOL_VERSION, "2.0.0", "13.0", []]


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


_settings_read = False


def read_frame() -> list[Any] | None:
    """The next frame from the host, or None when stdin is closed. The host's first, the
    worker's settings as JSON, is read and passed over, as a worker reads it before its loop."""
    global _settings_read
    if not _settings_read:
        _settings_read = True
        header = _read_exact(4)
        if header is None or _read_exact(struct.unpack(">I", header)[0]) is None:
            return None
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
