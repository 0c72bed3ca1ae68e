"""The stdio transport of ``pydeno mcp``: the wire on a descriptor of its own, and messages over
--max-message-bytes read in linear time, discarded, and answered with an error."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import re
import select
import sys
from typing import Any, Final, cast

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectSendStream
from mcp import types
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from .mcp_config import GRACEFUL_SHUTDOWN, ServerConfig

log = logging.getLogger("pydeno.mcp")


@dataclasses.dataclass(frozen=True)
class Oversized:
    """A line over the cap, discarded: its size, and its request id when it could be read."""

    size: int
    ident: int | str | None


# Where a JSON-RPC message's id can be read without the message: first (the Python SDK's
# order, maybe after "jsonrpc") or last (the TypeScript SDK's). A key at the start or the
# end of the text is a key of the outer object, whatever the middle holds.
_ID_VALUE: Final = rb'(-?\d{1,18}|"(?:[^"\\\n]|\\.){0,200}")'
_HEAD_ID: Final = re.compile(rb'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*' + _ID_VALUE + rb"\s*[,}]")
_TAIL_ID: Final = re.compile(rb',\s*"id"\s*:\s*' + _ID_VALUE + rb"\s*\}\s*\Z")
_EDGE: Final = 512


def _ident(head: bytes, tail: bytes) -> int | str | None:
    found = _HEAD_ID.match(head) or _TAIL_ID.search(tail)
    if found is None:
        return None
    with contextlib.suppress(ValueError):
        value = json.loads(found.group(1))
        if isinstance(value, (int, str)):
            return value
    return None


class _LineSplitter:
    """Bytes in, lines out, in work linear in the input: each chunk is scanned once, and a
    line over ``cap`` bytes is dropped as it arrives (only its first and last bytes kept, to
    read its id) rather than buffered whole."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._parts: list[bytes] = []
        self.buffered = 0
        # An oversized line being skipped: its size so far, its start and its end.
        self._skipped: int | None = None
        self._head = b""
        self._tail = b""
        #: Bytes looked at, for the tests: never more than once each.
        self.scanned = 0

    def feed(self, chunk: bytes) -> list[str | Oversized]:
        out: list[str | Oversized] = []
        start = 0
        while start < len(chunk):
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline
            self.scanned += end - start + (newline >= 0)
            piece = chunk[start:end]
            if self._skipped is None and self.buffered + len(piece) > self.cap:
                whole = b"".join(self._parts)
                self._skipped, self._head, self._tail = len(whole), whole[:_EDGE], whole[-_EDGE:]
                self._parts, self.buffered = [], 0
            if self._skipped is not None:
                if len(self._head) < _EDGE:
                    self._head += piece[: _EDGE - len(self._head)]
                self._tail = (self._tail + piece[-_EDGE:])[-_EDGE:]
                self._skipped += len(piece)
            else:
                self._parts.append(piece)
                self.buffered += len(piece)
            if newline < 0:
                break
            out.append(self._end())
            start = newline + 1
        return out

    def finish(self) -> list[str | Oversized]:
        """What is left at the end of the input: a last line without its newline."""
        return [self._end()] if self._parts or self._skipped is not None else []

    def _end(self) -> str | Oversized:
        if self._skipped is not None:
            tail = self._tail.rstrip(b"\r")
            found = Oversized(self._skipped, _ident(self._head, tail))
            self._skipped, self._head, self._tail = None, b"", b""
            return found
        line = b"".join(self._parts)
        self._parts, self.buffered = [], 0
        return (line + b"\n").decode("utf-8", "replace")


class _Lines:
    """The lines of a pipe, read as it becomes readable: the transport's own reader waits in a
    thread that no cancellation reaches, so a signal could not stop a server waiting for input.
    A line over the cap is not handed on: it goes to ``oversized``, to be answered."""

    def __init__(self, fd: int, cap: int, oversized: MemoryObjectSendStream[Oversized]) -> None:
        self._fd = fd
        self._splitter = _LineSplitter(cap)
        self._ready: collections.deque[str | Oversized] = collections.deque()
        self._oversized = oversized
        self.ended = anyio.Event()

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        while True:
            while not self._ready:
                if self.ended.is_set():
                    raise StopAsyncIteration
                # A descriptor that cannot be polled (a regular file) never blocks for long.
                with contextlib.suppress(OSError):
                    await anyio.wait_readable(self._fd)
                chunk = os.read(self._fd, 1 << 16)
                if chunk:
                    self._ready.extend(self._splitter.feed(chunk))
                else:
                    self._ready.extend(self._splitter.finish())
                    self.ended.set()
            item = self._ready.popleft()
            if isinstance(item, str):
                return item
            await self._oversized.send(item)


class _Output:
    """The wire's writing end, written as it becomes writable: a write never blocks the
    process, so a client that stops reading cannot keep the server from stopping."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    async def write(self, text: str) -> None:
        data = memoryview(text.encode("utf-8", "surrogatepass"))
        while data:
            with contextlib.suppress(OSError):
                await anyio.wait_writable(self._fd)
            try:
                # A pipe that polls writable takes PIPE_BUF bytes without blocking.
                data = data[os.write(self._fd, data[: select.PIPE_BUF]) :]
            except BrokenPipeError:
                # The client is gone: nothing will read this; the end of stdin stops the server.
                return

    async def flush(self) -> None:
        await anyio.lowlevel.checkpoint()


def _oversized_error(found: Oversized, cap: int) -> SessionMessage:
    return SessionMessage(
        types.JSONRPCError(
            jsonrpc="2.0",
            id=found.ident,
            error=types.ErrorData(
                code=types.INVALID_REQUEST,
                message=f"message of {found.size} bytes is over this server's limit of {cap} bytes "
                "(--max-message-bytes); it was discarded",
            ),
        )
    )


async def serve_stdio(server: Server[Any], config: ServerConfig, stop: anyio.Event) -> None:
    # The wire moves to a descriptor of its own, and fd 1 to stderr: what else writes to
    # stdout (a child, a stray print) cannot break a message.
    wire = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    saved = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    os.dup2(2, 1)
    send_oversized, oversized = anyio.create_memory_object_stream[Oversized](1)
    lines = _Lines(sys.stdin.fileno(), config.max_message_bytes, send_oversized)
    try:
        async with anyio.create_task_group() as group, send_oversized, oversized:

            async def stop_on_signal() -> None:
                await stop.wait()
                group.cancel_scope.cancel()

            async def stop_after_input() -> None:
                # The client is gone, or has nothing more to say: what it still reads gets a
                # moment to go out, then the server stops, whether or not it was read.
                await lines.ended.wait()
                await anyio.sleep(GRACEFUL_SHUTDOWN)
                group.cancel_scope.cancel()

            group.start_soon(stop_on_signal)
            group.start_soon(stop_after_input)
            stdin = cast("anyio.AsyncFile[str]", lines)
            stdout = cast("anyio.AsyncFile[str]", _Output(wire))
            async with stdio_server(stdin=stdin, stdout=stdout) as (read_stream, write_stream):

                async def answer_oversized() -> None:
                    async for found in oversized:
                        log.warning(
                            "discarded a message of %d bytes (--max-message-bytes %d)",
                            found.size,
                            config.max_message_bytes,
                        )
                        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                            await write_stream.send(_oversized_error(found, config.max_message_bytes))

                group.start_soon(answer_oversized)
                await server.run(read_stream, write_stream, server.create_initialization_options())
            # stdin closed: the client is gone.
            group.cancel_scope.cancel()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(wire)
