"""The signed journal format of an agent session: its canonical value codec and its HMAC.

Journal format (version 1): a msgpack array ``["pydeno-journal", 1, kind, body, mac]``,
``kind`` being ``"journal"`` or ``"snapshot"`` (a session dumped while a run was paused),
``body`` the canonical msgpack encoding of the session (maps with their keys sorted by
encoding, sets sorted, the journal's own extension types for undefined, big integers, dates,
sets, functions and Error values) and ``mac`` its HMAC-SHA256 under the caller's key, over a domain tag,
the format version, the kind and the body. A Code Mode session's body has one more field,
``code_mode`` (true): its runs are Code Mode programs (TypeScript, run as a REPL's inputs),
so an agent sandbox never replays them as its own JavaScript, nor a Code Mode an agent's.
A journal is refused (:class:`JournalError`) unless every byte checks; a snapshot whose MAC
fails raises :class:`SnapshotAuthenticationError`.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import math
import struct
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import msgpack

from .._base.errors import JavaScriptError, JournalError, SnapshotAuthenticationError
from .._base.values import Undefined, undefined
from .._runtime.function import JsFunction

__all__ = [
    "DEFAULT_MAX_JOURNAL_BYTES",
    "CallRecord",
    "Journal",
    "RunRecord",
    "check_key",
    "check_mode",
    "decode",
    "decode_journal",
    "encode",
    "seal_journal",
    "snapshot",
]

MAGIC: Final = "pydeno-journal"
VERSION: Final = 1
DEFAULT_MAX_JOURNAL_BYTES: Final = 64 * 2**20
MIN_KEY_BYTES: Final = 16
# The journal's own msgpack extension types, not the wire's (pydeno/host/wire/protocol.py): the
# codes coincide for the same kinds of value, the payloads do not (a big integer in decimal,
# undefined and a function mark with none, a Set as its items' canonical encodings end to
# end), and neither decoder ever reads the other's. Fixed by VERSION: a journal reads back.
_JOURNAL_UNDEFINED: Final = 0
_JOURNAL_BIGINT: Final = 1
_JOURNAL_DATE: Final = 2
_JOURNAL_FUNCTION_MARK: Final = 3
_JOURNAL_SET: Final = 4
# A JavaScriptError value: the canonical encoding of [name, message, stack, has_cause, cause,
# errors, properties].
_JOURNAL_ERROR: Final = 5


# --- canonical values -----------------------------------------------------------------------


def _canonical(value: Any, depth: int = 0) -> Any:
    """value as msgpack-ready data with one encoding only; JournalError if it has none."""
    if depth > 128:
        raise JournalError("a value in the session is nested too deeply to be journaled")
    if value is None or isinstance(value, (bool, str, bytes, float)):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)  # the guest received a Uint8Array either way
    if isinstance(value, int):
        if -(2**63) <= value < 2**64:
            return value
        return msgpack.ExtType(_JOURNAL_BIGINT, str(value).encode())
    if isinstance(value, Undefined):
        return msgpack.ExtType(_JOURNAL_UNDEFINED, b"")
    if isinstance(value, datetime.datetime):
        return msgpack.ExtType(_JOURNAL_DATE, struct.pack(">d", value.timestamp() * 1000))
    if isinstance(value, (list, tuple)):
        return [_canonical(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        items = sorted(_pack(_canonical(v, depth + 1)) for v in value)
        return msgpack.ExtType(_JOURNAL_SET, b"".join(items))
    if isinstance(value, dict):
        pairs = sorted((_pack(_canonical(k, depth + 1)), _canonical(v, depth + 1)) for k, v in value.items())
        return _SortedMap(pairs)
    if isinstance(value, JavaScriptError):
        parts = [value.name, value.message, value.stack, value.has_cause, value.cause, value.errors, value.properties]
        return msgpack.ExtType(_JOURNAL_ERROR, _pack(_canonical(parts, depth + 1)))
    if isinstance(value, (JsFunction, FunctionMark)):
        # A handle into one worker means nothing in another: journaled as "a function was
        # here", which a replay compares but cannot call.
        return msgpack.ExtType(_JOURNAL_FUNCTION_MARK, b"")
    raise JournalError(f"a value of type {type(value).__name__} cannot be journaled")


class FunctionMark:
    """Where a journaled value held a JavaScript function."""

    def __repr__(self) -> str:
        return "<a JavaScript function>"


FUNCTION_MARK: Final = FunctionMark()


def snapshot(value: Any) -> Any:
    """A copy of value as the journal will hold it: later changes to value do not reach it."""
    return decode(encode(value))


class _SortedMap(list[tuple[bytes, Any]]):
    """A map already in canonical order: (packed key, value) pairs."""


def _default(value: Any) -> Any:
    raise TypeError(f"cannot encode {type(value).__name__}")


def _pack(value: Any) -> bytes:
    packer = msgpack.Packer(use_bin_type=True, default=_default)
    return _pack_with(packer, value)


def _pack_with(packer: Any, value: Any) -> bytes:
    if isinstance(value, _SortedMap):
        out = [bytes(packer.pack_map_header(len(value)))]
        for key, item in value:
            out.append(key)
            out.append(_pack_with(packer, item))
        return b"".join(out)
    if isinstance(value, list):
        return bytes(packer.pack_array_header(len(value))) + b"".join(_pack_with(packer, v) for v in value)
    return bytes(packer.pack(value))


def encode(value: Any) -> bytes:
    """The canonical encoding of a session value (JournalError if it has none)."""
    return _pack(_canonical(value))


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _JOURNAL_UNDEFINED and not data:
        return undefined
    if code == _JOURNAL_BIGINT:
        return int(data.decode("ascii"))
    if code == _JOURNAL_DATE and len(data) == 8:
        (ms,) = struct.unpack(">d", data)
        if not math.isfinite(ms):
            raise ValueError("a date that is not finite")
        return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    if code == _JOURNAL_FUNCTION_MARK and not data:
        return FUNCTION_MARK
    if code == _JOURNAL_SET:
        unpacker = _unpacker()
        unpacker.feed(data)
        return set(unpacker)
    if code == _JOURNAL_ERROR:
        unpacker = _unpacker()
        unpacker.feed(data)
        parts = unpacker.unpack()
        if not isinstance(parts, list) or len(parts) != 7 or not isinstance(parts[6], dict):
            raise ValueError("a malformed JavaScriptError")
        name, message, stack, has_cause, cause, errors, properties = parts
        return JavaScriptError._value(name, message, stack, cause, bool(has_cause), errors, properties)
    raise ValueError(f"unknown extension type {code}")


def _unpacker(max_buffer_size: int = DEFAULT_MAX_JOURNAL_BYTES) -> Any:
    return msgpack.Unpacker(
        raw=False,
        ext_hook=_ext_hook,
        strict_map_key=False,
        max_buffer_size=max_buffer_size,
        use_list=True,
    )


def decode(data: bytes, max_bytes: int = DEFAULT_MAX_JOURNAL_BYTES) -> Any:
    unpacker = _unpacker(max(max_bytes, len(data)))
    unpacker.feed(data)
    value = unpacker.unpack()
    if unpacker.tell() != len(data):
        raise ValueError("trailing bytes")
    return value


# --- the journal ----------------------------------------------------------------------------


@dataclass
class CallRecord:
    name: str
    args: list[Any]
    ok: bool
    # The tool's result, or (error name, message) for a failure.
    payload: Any

    def to_data(self) -> list[Any]:
        return [self.name, self.args, self.ok, self.payload]


@dataclass
class RunRecord:
    code: str
    calls: list[CallRecord] = field(default_factory=list)
    complete: bool = False
    ok: bool = True
    # The run's value, or (error name, message) for a JavaScriptError.
    result: Any = None

    def to_data(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "calls": [c.to_data() for c in self.calls],
            "complete": self.complete,
            "ok": self.ok,
            "result": self.result,
        }


def _mac(key: bytes, kind: str, body: bytes) -> bytes:
    message = b"pydeno-agent-journal\0%d\0%s\0" % (VERSION, kind.encode()) + body
    return hmac.new(key, message, hashlib.sha256).digest()


def check_key(key: Any) -> bytes:
    if not isinstance(key, (bytes, bytearray)):
        raise TypeError(f"key must be bytes, got {type(key).__name__}")
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"key must be at least {MIN_KEY_BYTES} bytes (use secrets.token_bytes(32)), got {len(key)}")
    return bytes(key)


def seal_journal(key: bytes, kind: Literal["journal", "snapshot"], body: bytes) -> bytes:
    """The signed outer array around an encoded body: what ``decode_journal`` reads back."""
    return bytes(msgpack.packb([MAGIC, VERSION, kind, body, _mac(key, kind, body)], use_bin_type=True))


@dataclass
class Journal:
    """A decoded, authenticated session."""

    kind: Literal["journal", "snapshot"]
    seed: int
    clock_ms: int
    max_tool_calls: int | None
    spent: int
    runs: list[RunRecord]
    # For a snapshot: the paused call, (name, args).
    pending: tuple[str, list[Any]] | None
    # Whether the runs are a Code Mode session's programs rather than an agent's code.
    code_mode: bool = False


def check_mode(journal: Journal, *, code_mode: bool) -> None:
    """JournalError unless the journal is of the kind of session that is replaying it."""
    if journal.code_mode == code_mode:
        return
    if journal.code_mode:
        raise JournalError(
            "journal is a Code Mode session's: restore it with a SessionPool(code_mode=True), not as an agent session"
        )
    raise JournalError(
        "journal is an agent session's: restore it with AgentSandbox.load or a SessionPool without code_mode="
    )


def decode_journal(data: Any, key: Any, max_bytes: int = DEFAULT_MAX_JOURNAL_BYTES) -> Journal:
    """Authenticate and decode a journal; JournalError (or, for a snapshot whose MAC fails,
    SnapshotAuthenticationError) on anything that does not check."""
    key = check_key(key)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"journal must be bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) > max_bytes:
        raise JournalError(f"journal is {len(data)} bytes, over the limit of {max_bytes}")
    try:
        outer = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # noqa: BLE001 - msgpack raises many types for bad input
        raise JournalError(f"journal is malformed or truncated ({type(exc).__name__})") from None
    if not (isinstance(outer, list) and len(outer) == 5 and outer[0] == MAGIC):
        raise JournalError("journal is malformed: not a pydeno journal")
    _, version, kind, body, mac = outer
    if version != VERSION:
        raise JournalError(f"journal format version {version!r} is not supported (this pydeno reads {VERSION})")
    if kind not in ("journal", "snapshot") or not isinstance(body, bytes) or not isinstance(mac, bytes):
        raise JournalError("journal is malformed: bad header")
    if not hmac.compare_digest(_mac(key, kind, body), mac):
        if kind == "snapshot":
            raise SnapshotAuthenticationError("snapshot is not authentic: wrong key, or altered since it was signed")
        raise JournalError("journal is not authentic: wrong key, or altered since it was signed")
    try:
        return _parse_body(kind, decode(body, max_bytes))
    except JournalError:
        raise
    except Exception as exc:  # noqa: BLE001 - a signed but malformed body: refuse it whole
        raise JournalError(f"journal is malformed ({type(exc).__name__}: {exc})") from None


def _parse_body(kind: Literal["journal", "snapshot"], body: Any) -> Journal:
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise JournalError(f"journal is malformed: {what}")

    need(isinstance(body, dict), "the body is not a map")
    fields = {"seed", "clock_ms", "max_tool_calls", "spent", "runs", "pending"}
    need(set(body) in (fields, fields | {"code_mode"}), "unexpected fields")
    # Only ever written as true: an agent's journal has no such field, so it encodes as before.
    need("code_mode" not in body or body["code_mode"] is True, "code_mode")
    code_mode = "code_mode" in body
    seed, clock, limit, spent = body["seed"], body["clock_ms"], body["max_tool_calls"], body["spent"]
    need(type(seed) is int and 0 <= seed < 2**128, "seed")
    need(type(clock) is int, "clock_ms")
    need(limit is None or (type(limit) is int and limit >= 0), "max_tool_calls")
    need(type(spent) is int and spent >= 0 and (limit is None or spent <= limit), "spent")
    need(isinstance(body["runs"], list), "runs")
    runs = []
    for item in body["runs"]:
        need(isinstance(item, dict) and set(item) == {"code", "calls", "complete", "ok", "result"}, "a run")
        need(isinstance(item["code"], str) and type(item["complete"]) is bool and type(item["ok"]) is bool, "a run")
        need(isinstance(item["calls"], list), "a run's calls")
        calls = []
        for call in item["calls"]:
            need(isinstance(call, list) and len(call) == 4, "a call")
            name, args, ok, payload = call
            need(isinstance(name, str) and isinstance(args, list) and type(ok) is bool, "a call")
            if not ok:
                need(_is_error_pair(payload), "a call's error")
            calls.append(CallRecord(name, args, ok, payload))
        if item["complete"] and not item["ok"]:
            need(_is_error_pair(item["result"]), "a run's error")
        runs.append(RunRecord(item["code"], calls, item["complete"], item["ok"], item["result"]))
    need(all(r.complete for r in runs[:-1]), "an unfinished run before the last")
    pending = body["pending"]
    if kind == "snapshot":
        need(bool(runs) and not runs[-1].complete, "a snapshot without a paused run")
        need(isinstance(pending, list) and len(pending) == 2, "the paused call")
        need(isinstance(pending[0], str) and isinstance(pending[1], list), "the paused call")
        paused: tuple[str, list[Any]] | None = (pending[0], pending[1])
    else:
        need(pending is None and all(r.complete for r in runs), "a journal with a paused run")
        paused = None
    return Journal(kind, seed, clock, limit, spent, runs, paused, code_mode)


def _is_error_pair(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(x, str) for x in value)
