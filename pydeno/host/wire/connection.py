"""The wire between host and worker, sans I/O: framing, frame shapes and bookkeeping.

A frame is a 4-byte big-endian length and one msgpack array whose first item is the frame
kind; the kinds, like every constant both ends share, are pydeno/host/wire/protocol.py's. This
module turns bytes from the worker into validated events and builds the bytes the host
sends; it never reads, writes or waits (the h11 pattern), so the sync and async runtimes
share every rule here and only move bytes.

Everything the worker sends is untrusted: a frame that is too long, not msgpack, not one of
the shapes below, or that names a request, call or function the host never issued raises
:class:`ProtocolError`, after which the driver kills the worker.

Worker -> host (the items are protocol.py's WORKER_FRAMES; tests/unit/test_prose_copies.py
checks this list against it)::

    [0, protocol, deno_version, v8_version, breaches]  HELLO, once, first; breaches: what
                                                got through the sandbox self-test
    [1, request_id, value]                      RESULT of an eval/call/bind
    [2, request_id, name, message, stack, []]   ERROR of an eval/call/bind; [value] in place
                                                of [] when what was thrown is not an Error
    [3, call_id, function_name, args]           HOSTCALL to a bound Python function
    [4, level, text]                            CONSOLE output of the guest
    [5]                                         TERMINATED: acknowledges TERMINATE, then exits
    [6, request_id, [item, ...]]                PART of a long array result, in order; the
                                                RESULT that follows carries the last items

A result in parts is one value: its frames' payloads share max_message_bytes and one decode
allowance, and an ERROR for the request drops the parts received so far.

Before a frame is decoded, what decoding it would build is charged against its allowance of
host memory (pydeno/host/wire/budget.py); a frame over it is refused without building anything.

Host -> worker (HOST_FRAMES)::

    [1, request_id, code]                       EVAL
    [2, request_id, function_id, args]          CALL a JsFunction
    [3, [function_id, ...]]                     RELEASE JsFunction handles
    [4, call_id, ok, value | [name, message]]   REPLY to a HOSTCALL
    [5, request_id, name]                       BIND a host function as a guest global
    [6]                                         TERMINATE: stop and exit
    [7, request_id, code]                       EVAL_TS: an eval of TypeScript
    [8, request_id, specifier, source]          MODULE the guest may import
    [9, request_id, source]                     EVAL_MODULE: run module code
    [10, request_id, specifier, requires, source]  PACKAGE: a bundled npm package
    [11, request_id, name, module]              WASM: compile module (bin) and bind it as name
    [12, request_id, code]                      EVAL_PROGRAM: a Code Mode program
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Any, Final, NamedTuple

import msgpack

from ..._base.failures import protocol_broken, worker_reported
from .budget import DecodeRefused, join_cost
from .codec import Codec, ValueRefused
from .protocol import (
    CONSOLE_LEVELS,
    DECODE_FLOOR,
    FRAME_HEADER_BYTES,
    H_BIND,
    H_CALL,
    H_EVAL,
    H_EVAL_MODULE,
    H_EVAL_PROGRAM,
    H_EVAL_TS,
    H_MODULE,
    H_PACKAGE,
    H_RELEASE,
    H_REPLY,
    H_TERMINATE,
    H_WASM,
    PROTOCOL_VERSION,
    W_CONSOLE,
    W_ERROR,
    W_HELLO,
    W_HOSTCALL,
    W_PART,
    W_RESULT,
    W_TERMINATED,
)

# A set: membership is tested on every console frame.
_LEVELS: Final = frozenset(CONSOLE_LEVELS)
# The self-test has a dozen probes; a longer list in the handshake is not one it wrote.
MAX_BREACHES: Final = 32

_HEADER = struct.Struct(">I")
# Control characters other than tab and newline are stripped from guest text, so console
# output and error messages cannot move a terminal's cursor or forge log lines' structure.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_PACK_SMALL = msgpack.Packer(use_bin_type=True, autoreset=True).pack


class ProtocolError(Exception):
    """The worker sent something the host refuses; ``malformed`` says which message fits.

    Internal: drivers turn it into :class:`pydeno.WorkerCrashed` after killing the worker.
    """

    def __init__(self, detail: str, *, malformed: bool) -> None:
        super().__init__(detail)
        self.detail = detail
        self.malformed = malformed

    def crash_message(self) -> str:
        return str(protocol_broken(self.detail, malformed=self.malformed))


def clean_text(text: str) -> str:
    """Guest-controlled text with control characters removed."""
    return _CONTROL.sub("", text)


def unconvertible(exc: BaseException) -> tuple[str, str]:
    """The Error a guest receives for a host function result that cannot cross the wire."""
    return "TypeError", f"the host function's result could not be converted: {exc}"


class Hello(NamedTuple):
    protocol: int
    deno_version: str
    v8_version: str
    # What got through the sandbox self-test (empty when it passed or did not run). Written
    # before any guest code ran, so the host may act on it.
    breaches: tuple[str, ...] = ()


class Completed(NamedTuple):
    """A request finished; its outcome is in :attr:`Connection.outcomes`."""

    request_id: int


class HostCall(NamedTuple):
    call_id: int
    name: str
    args: list[Any]


class Console(NamedTuple):
    level: str
    text: str


class Terminated:
    """The worker acknowledged a TERMINATE."""

    __slots__ = ()


Event = Hello | Completed | HostCall | Console | Terminated


class _Part:
    """A PART frame, which the connection keeps: never an event of its own."""


_PART: Final = _Part()


class Outcome:
    """The result of a request: a value, or the exception to raise."""

    __slots__ = ("error", "value")

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value = value
        self.error = error


# -- what a command asks of the worker: Core.request() makes its frame below ----------------
class _Request:
    """A request: its fields are its __match_args__, which its repr shows.

    Not a NamedTuple: one is made per command, and a tuple's construction and field reads cost
    the warm path more than a plain class's (nobody keeps or compares a request).
    """

    __slots__ = ()
    __match_args__: tuple[str, ...] = ()

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__match_args__)
        return f"{type(self).__name__}({fields})"


class Eval(_Request):
    """Evaluate code; typescript: strip its types first; program: a Code Mode program."""

    __slots__ = __match_args__ = ("code", "typescript", "program")

    def __init__(self, code: str, typescript: bool = False, program: bool = False) -> None:
        self.code = code
        self.typescript = typescript
        self.program = program


class AddModule(_Request):
    __slots__ = __match_args__ = ("specifier", "source")

    def __init__(self, specifier: str, source: str) -> None:
        self.specifier = specifier
        self.source = source


class AddPackage(_Request):
    __slots__ = __match_args__ = ("specifier", "requires", "source")

    def __init__(self, specifier: str, requires: tuple[str, ...], source: str) -> None:
        self.specifier = specifier
        self.requires = requires
        self.source = source


class EvalModule(_Request):
    __slots__ = __match_args__ = ("source",)

    def __init__(self, source: str) -> None:
        self.source = source


class LoadWasm(_Request):
    __slots__ = __match_args__ = ("name", "module")

    def __init__(self, name: str, module: bytes) -> None:
        self.name = name
        self.module = module


class Bind(_Request):
    """Bind fn as the guest global name (checked by Core.bind_check first)."""

    __slots__ = __match_args__ = ("name", "fn")

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        self.name = name
        self.fn = fn


class Call(_Request):
    """Call the guest function handle function_id with args."""

    __slots__ = __match_args__ = ("function_id", "args")

    def __init__(self, function_id: int, args: list[Any]) -> None:
        self.function_id = function_id
        self.args = args


Request = Eval | AddModule | AddPackage | EvalModule | LoadWasm | Bind | Call


def frame(payload: bytes) -> bytes:
    return _HEADER.pack(len(payload)) + payload


class Connection:
    """Protocol state for one worker: a byte buffer in, validated events out."""

    def __init__(self, codec: Codec, max_message_bytes: int) -> None:
        self.codec = codec
        self.max_message_bytes = max_message_bytes
        self._buf = bytearray()
        self._pos = 0
        self._next_request = 1
        self._next_release: list[int] = []
        self.hello: Hello | None = None
        self.pending: set[int] = set()
        self.outcomes: dict[int, Outcome] = {}
        # Request id -> the items of its result received in PART frames, their bytes, and
        # what decoding them was charged.
        self._parts: dict[int, tuple[list[Any], int, int]] = {}
        # What decoding the last frame was charged (pydeno/host/wire/budget.py), and what its allowance
        # left: a part adds them up, and the growth of the list the parts join into.
        self._charged = self._left = 0
        self.host_calls: set[int] = set()
        self.bound: set[str] = set()
        self.live_functions: set[int] = set()

    # -- outgoing --------------------------------------------------------------------
    def _request(self, head: list[Any], value: Any, *, items: bool = False) -> tuple[int, bytes]:
        rid = self._next_request
        body = self.codec.pack_frame([head[0], rid, *head[1:]], value, items=items)
        self._next_request += 1
        self.pending.add(rid)
        return rid, self._with_releases(frame(body))

    def _with_releases(self, data: bytes) -> bytes:
        # Releases of JsFunction handles closed since the last send travel with the next
        # frame, so closing a handle (also from __del__) never does I/O itself.
        if self._next_release:
            ids, self._next_release = self._next_release, []
            return frame(_PACK_SMALL([H_RELEASE, ids])) + data
        return data

    def eval(self, code: str, *, typescript: bool = False, program: bool = False) -> tuple[int, bytes]:
        return self._request([H_EVAL_PROGRAM if program else H_EVAL_TS if typescript else H_EVAL], code)

    def add_module(self, specifier: str, source: str) -> tuple[int, bytes]:
        return self._request([H_MODULE, specifier], source)

    def add_package(self, specifier: str, requires: list[str], source: str) -> tuple[int, bytes]:
        return self._request([H_PACKAGE, specifier, requires], source)

    def eval_module(self, source: str) -> tuple[int, bytes]:
        return self._request([H_EVAL_MODULE], source)

    def load_wasm(self, name: str, module: bytes) -> tuple[int, bytes]:
        return self._request([H_WASM, name], module)

    def call(self, function_id: int, args: list[Any]) -> tuple[int, bytes]:
        return self._request([H_CALL, function_id], args, items=True)

    def bind(self, name: str) -> tuple[int, bytes]:
        rid, data = self._request([H_BIND], name)
        self.bound.add(name)
        return rid, data

    def release(self, function_id: int) -> None:
        if function_id in self.live_functions:
            self.live_functions.discard(function_id)
            self._next_release.append(function_id)

    def terminate(self) -> bytes:
        return frame(_PACK_SMALL([H_TERMINATE]))

    def reply(self, call_id: int, value: Any) -> bytes:
        self.host_calls.discard(call_id)
        try:
            body = self.codec.pack_frame([H_REPLY, call_id, True], value)
        except (ValueError, TypeError, OverflowError) as exc:
            return self.reply_error(call_id, *unconvertible(exc))
        return self._with_releases(frame(body))

    def convertible(self, value: Any) -> tuple[str, str] | None:
        """None if value can be a host function's result, else the (name, message) of the
        Error the guest would receive instead (what reply() would send)."""
        try:
            self.codec.pack_frame([H_REPLY, 0, True], value)
        except (ValueError, TypeError, OverflowError) as exc:
            return unconvertible(exc)
        return None

    def reply_error(self, call_id: int, name: str, message: str) -> bytes:
        self.host_calls.discard(call_id)
        return self._with_releases(frame(self.codec.pack_frame([H_REPLY, call_id, False], [name, message])))

    # -- incoming --------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        self._buf += data

    def next_event(self) -> Event | None:
        """The next complete event, or None when more bytes are needed."""
        while True:
            event = self._next_frame()
            if not isinstance(event, _Part):
                return event

    def _next_frame(self) -> Event | _Part | None:
        buf, pos = self._buf, self._pos
        if len(buf) - pos < FRAME_HEADER_BYTES:
            return None
        (length,) = _HEADER.unpack_from(buf, pos)
        if length > self.max_message_bytes:
            raise ProtocolError(f"length {length} exceeds max_message_bytes={self.max_message_bytes}", malformed=True)
        end = pos + FRAME_HEADER_BYTES + length
        if len(buf) < end:
            return None
        with memoryview(buf) as view:
            payload = view[pos + FRAME_HEADER_BYTES : end]
            try:
                carried = self._carried(payload) if self._parts else (0, 0)
                allowance = self.codec.allowance(carried[0] + length) - carried[1]
                try:
                    item, cost = self.codec.unpack_counted(payload, allowance)
                except DecodeRefused as exc:
                    whole = "a result in parts" if carried[0] else f"a frame of {length} bytes"
                    raise ProtocolError(f"{whole} {exc}", malformed=False) from None
                except ValueRefused as exc:
                    raise ProtocolError(str(exc), malformed=True) from None
                except (
                    ValueError,
                    TypeError,
                    OverflowError,
                    RecursionError,
                    msgpack.ExtraData,
                    msgpack.StackError,
                ) as exc:
                    raise ProtocolError(f"{type(exc).__name__}: {exc}", malformed=True) from None
            finally:
                payload.release()
        self._pos = end
        if end > 65536 and end * 2 > len(buf):
            del buf[:end]
            self._pos = 0
        self._charged, self._left = cost, allowance - cost
        return self._event(item, length)

    def _carried(self, payload: memoryview) -> tuple[int, int]:
        """The bytes and decode charge of the parts received so far, if payload is a PART or
        RESULT frame of a result in parts, else (0, 0): read from its first bytes, since the
        allowance is needed before the frame is decoded."""
        if len(payload) < 3 or payload[0] != 0x93 or payload[1] not in (W_PART, W_RESULT):
            return 0, 0
        b = payload[2]
        if b < 0x80:
            rid = b
        elif 0xCC <= b <= 0xCF:
            size = 1 << (b - 0xCC)
            rid = int.from_bytes(payload[3 : 3 + size], "big")
        else:
            return 0, 0
        parts = self._parts.get(rid)
        return (parts[1], parts[2]) if parts is not None else (0, 0)

    def _event(self, item: Any, length: int) -> Event | _Part:
        if not isinstance(item, list) or not item or type(item[0]) is not int:
            raise ProtocolError("a frame is not an array starting with a kind", malformed=False)
        kind, n = item[0], len(item)
        if self.hello is None and kind != W_HELLO:
            raise ProtocolError("the first frame was not a handshake", malformed=False)
        if kind == W_PART and n == 3 and type(item[1]) is int and type(item[2]) is list:
            self._part(item[1], item[2], length)
            return _PART
        if kind == W_RESULT and n == 3 and type(item[1]) is int:
            rid, value = item[1], item[2]
            if rid in self._parts:
                # The RESULT after PARTs carries the last items, under the same budget.
                received, spent, _ = self._parts.pop(rid)
                if type(value) is not list:
                    raise ProtocolError(
                        f"the last part of the answer to request {rid} is not an array", malformed=False
                    )
                self._spend(spent + length)
                self._join(len(value))
                received += value
                value = received
            self._complete(rid, Outcome(value=value))
            return Completed(rid)
        if kind == W_ERROR and n == 6 and _error_shaped(item):
            self._parts.pop(item[1], None)
            name, message, stack = (clean_text(x) for x in item[2:5])
            error = worker_reported(name, message, stack, item[5], max_message_bytes=self.max_message_bytes)
            self._complete(item[1], Outcome(error=error))
            return Completed(item[1])
        if kind == W_HOSTCALL and n == 4 and type(item[1]) is int and type(item[2]) is str and type(item[3]) is list:
            call_id, name = item[1], item[2]
            if name not in self.bound:
                raise ProtocolError(f"host call to {name!r}, which was never bound", malformed=False)
            if call_id in self.host_calls:
                raise ProtocolError(f"host call id {call_id} reused while in flight", malformed=False)
            self.host_calls.add(call_id)
            return HostCall(call_id, name, item[3])
        # type() first: `in` on a frozenset hashes item[1], and a list or dict from the worker
        # would raise TypeError instead of ProtocolError.
        if kind == W_CONSOLE and n == 3 and type(item[1]) is str and item[1] in _LEVELS and type(item[2]) is str:
            return Console(item[1], clean_text(item[2]))
        if kind == W_TERMINATED and n == 1:
            return Terminated()
        if kind == W_HELLO and n == 5 and self.hello is None and type(item[1]) is int:
            if item[1] != PROTOCOL_VERSION:
                raise ProtocolError(f"protocol version {item[1]!r}, expected {PROTOCOL_VERSION}", malformed=False)
            breaches = item[4]
            if (
                type(item[2]) is not str
                or type(item[3]) is not str
                or type(breaches) is not list
                or len(breaches) > MAX_BREACHES
                or not all(type(x) is str for x in breaches)
            ):
                raise ProtocolError("a malformed handshake", malformed=False)
            self.hello = Hello(
                item[1],
                clean_text(item[2])[:64],
                clean_text(item[3])[:64],
                tuple(clean_text(x)[:200] for x in breaches),
            )
            return self.hello
        raise ProtocolError(f"unexpected frame of kind {kind!r} with {n} items", malformed=False)

    def _part(self, rid: int, items: list[Any], length: int) -> None:
        if rid not in self.pending:
            raise ProtocolError(f"part of an answer to request {rid}, which is not pending", malformed=False)
        received, spent, charged = self._parts.get(rid) or ([], 0, 0)
        spent = self._spend(spent + length)
        join = self._join(len(items))
        received += items
        self._parts[rid] = (received, spent, charged + self._charged + join)

    def _join(self, items: int) -> int:
        """What joining a part of ``items`` items to the result costs, refused past what the
        allowance of the parts so far has left."""
        cost = join_cost(items)
        if cost > self._left:
            raise ProtocolError(
                f"a result in parts would take more host memory to decode than its bytes allow "
                f"(max_decode_ratio={self.codec.max_decode_ratio} per byte, plus {DECODE_FLOOR})",
                malformed=False,
            )
        return cost

    def _spend(self, spent: int) -> int:
        """The bytes a result in parts has taken so far, refused past max_message_bytes."""
        if spent > self.max_message_bytes:
            raise ProtocolError(f"a result in parts exceeds max_message_bytes={self.max_message_bytes}", malformed=True)
        return spent

    def _complete(self, rid: int, outcome: Outcome) -> None:
        if rid not in self.pending:
            raise ProtocolError(f"an answer to request {rid}, which is not pending", malformed=False)
        self.pending.discard(rid)
        self.outcomes[rid] = outcome

    def take(self, rid: int) -> Any:
        """The value of a completed request, or raise its error."""
        outcome = self.outcomes.pop(rid)
        if outcome.error is not None:
            raise outcome.error
        return outcome.value


def _error_shaped(item: list[Any]) -> bool:
    """Whether an ERROR frame's items are a request id, three strings, and a thrown value
    of at most one item."""
    thrown = item[5]
    return type(item[1]) is int and all(type(x) is str for x in item[2:5]) and type(thrown) is list and len(thrown) <= 1
