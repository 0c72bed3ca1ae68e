"""Python <-> JavaScript value conversion: the host's half of the codec.

The mapping (docs/values.md has the full table):

============================  ===============================  ==========================
JavaScript                    Python                           back to JavaScript
============================  ===============================  ==========================
null / undefined              None / ``pydeno.undefined``      null / undefined
boolean, string               bool, str                        same
number (integral, safe)       int                              number
number (other, NaN, -0, ±inf) float                            number
BigInt                        int                              number if safe, else BigInt
Uint8Array, ArrayBuffer       bytes                            Uint8Array
other typed arrays            list of numbers                  Array
Array                         list (tuples go as arrays too)   Array
plain object                  dict with str keys               object
Map                           dict                             object if all keys are str, else Map
Set                           set                              Set (also from frozenset)
Date                          aware datetime (UTC)             Date
function                      ``JsFunction`` handle            the same function
Error (any with V8's brand)   ``JavaScriptError`` value        Error of the same class
============================  ===============================  ==========================

Lone UTF-16 surrogates become U+FFFD in both directions. Cycles, symbols, over-deep values
and values larger than ``max_message_bytes`` are refused with an error naming the problem,
and so, by the worker, are objects whose state it cannot read (a WeakMap, a class instance
with private fields...).

An Error travels as a map whose first key is the EXT_ERROR mark and whose value is
[name, message, stack]; "cause", "errors" and its other properties are the map's other
keys. The host decodes such maps as dicts, then, only in a frame that held a mark, turns them
into JavaScriptError values (see _with_errors).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import json
import math
import re
import struct
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from itertools import chain
from typing import Any, Final

import msgpack

from ..._base.errors import JavaScriptError
from ..._base.values import undefined
from .budget import DecodeRefused, frame_cost, join_cost, json_cost, json_shape, json_text
from .protocol import (
    DECODE_FLOOR,
    DEFAULT_DECODE_RATIO,
    EXT_BIGINT,
    EXT_DATE,
    EXT_ERROR,
    EXT_FUNCTION,
    EXT_JSON,
    EXT_SET,
    EXT_UNDEFINED,
    MAX_COST_PER_BYTE,
)

__all__ = ["MAX_DEPTH", "Codec", "ValueRefused"]

MAX_DEPTH: Final = 128

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_MS = _dt.timedelta(milliseconds=1)
_F64 = struct.Struct(">d")
_U32 = struct.Struct(">I")
# The first key of an Error's map: as sent, and as the decoder returns it (a sentinel that
# no other value decodes to, so only the mark makes a dict an Error).
_ERROR_KEY: Final = msgpack.ExtType(EXT_ERROR, b"\x00")
_ERROR_MARK: Final = object()


class ValueRefused(ValueError):
    """A value cannot cross the wire; the message names what and where."""


def _path(root: str, path: str) -> str:
    return f"{root}{path}" if path else root


# A Python str cannot hold a surrogate pair, so every surrogate code point in one is lone.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _scrub_surrogates(value: Any) -> Any:
    """A copy of value with lone surrogates in every str replaced by U+FFFD (slow path)."""
    if isinstance(value, str):
        # Not str.encode(..., "replace"): its replacement character on encoding is "?".
        return _SURROGATE.sub("\ufffd", value) if _has_surrogate(value) else value
    if isinstance(value, dict):
        return {_scrub_surrogates(k): _scrub_surrogates(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub_surrogates(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return {_scrub_surrogates(v) for v in value}
    return value


def _has_surrogate(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_shape(value: Any, max_depth: int = MAX_DEPTH, root: str = "the value") -> None:
    """Refuse cycles and nesting deeper than max_depth, naming where (``root[0]['k']...``)."""
    if isinstance(value, _WALKED):
        _check(value, max_depth, 0, [], root, "")


_CONTAINERS: Final = (list, tuple, dict, set, frozenset)
# A JavaScriptError nests like the dict it is sent as: its cause, errors and properties.
_WALKED: Final = (*_CONTAINERS, JavaScriptError)


def _error_parts(exc: JavaScriptError) -> Iterator[tuple[str, Any]]:
    """The parts of exc that are values, each with its path."""
    if exc.has_cause:
        yield ".cause", exc.cause
    if exc.errors is not None:
        yield ".errors", exc.errors
    for k, v in exc.properties.items():
        yield f".properties[{k!r}]", v


def _check(value: Any, max_depth: int, depth: int, ancestors: list[int], root: str, path: str) -> None:
    # An Error's [name, message, stack] is a level below it on the wire.
    if depth >= max_depth or (depth + 1 >= max_depth and isinstance(value, JavaScriptError)):
        raise ValueRefused(f"{_path(root, path)} is nested deeper than {max_depth} levels")
    if id(value) in ancestors:
        raise ValueRefused(f"{_path(root, path)} is a cycle (it contains itself)")
    ancestors.append(id(value))
    # Only containers recurse; scalars, the bulk of any value, cost one type check.
    if type(value) is dict:
        for k, v in value.items():
            if isinstance(v, _WALKED):
                _check(v, max_depth, depth + 1, ancestors, root, f"{path}[{k!r}]")
    elif isinstance(value, JavaScriptError):
        for where, v in _error_parts(value):
            if isinstance(v, _WALKED):
                _check(v, max_depth, depth + 1, ancestors, root, f"{path}{where}")
    else:
        for i, v in enumerate(value):
            if isinstance(v, _WALKED):
                _check(v, max_depth, depth + 1, ancestors, root, f"{path}[{i}]")
    ancestors.pop()


def _children(level: list[Any], kinds: set[type]) -> Iterator[Any]:
    """Every child of the containers in level (a dict's children are its values), iterated
    at C speed where level is all dicts or all lists."""
    if kinds == {dict}:
        return chain.from_iterable(map(dict.values, level))
    if kinds == {list}:
        return chain.from_iterable(level)
    return chain.from_iterable([x.values() if isinstance(x, dict) else x for x in level])


_JSON_LEAVES: Final = frozenset({str, int, float, bool, type(None), dict, list, tuple})
_JSON_CONTAINERS: Final = (dict, list, tuple)
# Above this, a frame's value goes as JSON when it can (Codec.pack_frame).
JSON_LANE_BYTES: Final = 1024
_SAFE_INT: Final = 2**53 - 1
# Strict RFC 8259 JSON, valid UTF-8 only; 1.5-2 times as fast as json.loads on large payloads.


@functools.cache
def _json_decoder() -> tuple[Callable[[bytes], Any], type[Exception]]:
    """The JSON lane's decoder and its error, loaded with the first frame that uses the lane
    (a large plain value), not with the package."""
    import msgspec

    return msgspec.json.Decoder().decode, msgspec.DecodeError


def json_exact(value: Any, limit: int) -> bool:
    """Whether value is a dict or list that JSON carries to JavaScript exactly: only the types
    above (exactly those, not subclasses), string keys, integers JavaScript holds exactly,
    nested at most ``limit`` levels. Non-finite floats and lone surrogates are caught by
    json.dumps itself. A level at a time, with the type checks done in C, like fits_depth."""
    if type(value) not in _JSON_CONTAINERS:
        return False
    level = [value]
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return False
        dicts = [x for x in level if type(x) is dict]
        if dicts and set(map(type, chain.from_iterable(dicts))) - {str}:
            return False
        children = list(
            chain(chain.from_iterable(d.values() for d in dicts), *(x for x in level if type(x) is not dict))
        )
        kinds = set(map(type, children))
        if not kinds <= _JSON_LEAVES:
            return False
        if int in kinds and any(type(c) is int and not -_SAFE_INT <= c <= _SAFE_INT for c in children):
            return False
        level = [c for c in children if type(c) in _JSON_CONTAINERS] if kinds & {dict, list, tuple} else []
    return True


def fits_depth(
    value: Any,
    limit: int,
    containers: tuple[type, ...] = (list, dict),
    measured: Mapping[int, tuple[Any, int]] | None = None,
) -> bool:
    """True if value nests no more than limit levels of containers.

    A level at a time, with no paths and no cycle tracking: callers use it only on values
    known to be acyclic (decoded, or already packed by msgpack, which refuses cycles). Within
    a level only the set of child types is looked at first (map and set run in C), so a wide,
    shallow value, the common case, is checked without building a list of its leaves.

    ``measured`` maps the id of a subtree whose depth is already known to (the subtree, its
    depth): such a subtree is counted where it sits instead of walked. The mapping holds the
    subtree itself so that its id cannot be reused by another object meanwhile.
    """
    if measured and id(value) in measured:
        return measured[id(value)][1] <= limit
    if not isinstance(value, containers):
        # A leaf is one level. Not walked: a str would be iterated a character at a time.
        return limit >= 1
    level = [value]
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return False
        kinds = set(map(type, level))
        child_kinds = set(map(type, _children(level, kinds)))
        found = {kind for kind in child_kinds if issubclass(kind, containers)}
        if not found:
            return True
        if child_kinds == found:
            level = list(_children(level, kinds))
        else:
            level = [c for c in _children(level, kinds) if isinstance(c, containers)]
        if measured:
            unmeasured = []
            for child in level:
                known = measured.get(id(child))
                if known is None:
                    unmeasured.append(child)
                elif depth + known[1] > limit:
                    return False
            level = unmeasured
    return True


def json_depth(text: bytes) -> int:
    """How many levels of arrays and objects valid JSON text nests (a scalar 0, ``[{}]`` 2),
    from a scan of the raw bytes in C, several times faster than walking the decoded value."""
    return json_shape(text)[2]


class Codec:
    """Packs and unpacks values for one runtime (function handles belong to it)."""

    def __init__(
        self,
        make_function: Callable[[int], Any],
        function_id: Callable[[Any], int | None],
        max_message_bytes: int,
        max_depth: int = MAX_DEPTH,
        max_decode_ratio: int = DEFAULT_DECODE_RATIO,
    ) -> None:
        self._make_function = make_function
        self._function_id = function_id
        self.max_message_bytes = max_message_bytes
        self.max_depth = max_depth
        self.max_decode_ratio = max_decode_ratio
        # The frame being decoded: what it may still build, and the depths of its JSON
        # payloads (see unpack_counted). One bound hook for all frames, made once.
        self._spare = _Budget(0, deque())
        self._decoding: tuple[_Budget, dict[int, tuple[Any, int]]] = (self._spare, {})
        self._frame_ext_hook = self._frame_hook
        self._packer = msgpack.Packer(default=self._default, use_bin_type=True, autoreset=True)
        # The JavaScriptErrors packed into the frame being packed (their nesting is checked by
        # check_shape, which fits_depth does not see into), and whether its strings are being
        # scrubbed of lone surrogates.
        self._errors_packed = 0
        self._scrubbing = False
        self._limits = {
            "max_str_len": max_message_bytes,
            "max_bin_len": max_message_bytes,
            "max_array_len": max_message_bytes,
            "max_map_len": max_message_bytes // 2,
            "max_ext_len": max_message_bytes,
        }

    # -- Python -> JavaScript ------------------------------------------------------------
    def pack_frame(self, head: list[Any], value: Any, *, items: bool = False) -> bytes:
        """Pack ``[*head, value]``. value (with items=True: each item of the list value, as
        for an argument list) may nest max_depth levels; deeper values and cycles are refused
        with ValueRefused naming where, anything unconvertible with TypeError."""
        self._errors_packed = 0
        try:
            data = self._pack([*head, value])
        except ValueError as exc:
            if "recursion limit" not in str(exc):
                raise
            data = b""
        # A value cannot nest deeper than its size in bytes, so small frames skip the walk.
        limit = self.max_depth + (1 if items else 0)
        if len(data) >= JSON_LANE_BYTES:
            # Large and plain: JSON.parse in the worker is many times faster than decoding
            # msgpack in jitless JavaScript (a 2 MB value: ~15 ms against ~350 ms).
            lane = self._pack_json_lane(head, value, limit)
            if lane is not None:
                return lane
        if not data or self._errors_packed or (len(data) > limit and not fits_depth(value, limit, _CONTAINERS)):
            if items:
                for i, item in enumerate(value):
                    check_shape(item, self.max_depth, f"argument {i + 1}")
            else:
                check_shape(value, self.max_depth)
        assert data, "check_shape finds what made msgpack give up"
        return data

    def _pack_json_lane(self, head: list[Any], value: Any, limit: int) -> bytes | None:
        """``[*head, value]`` with value as an EXT_JSON payload, if value is plain JSON that
        JavaScript will read back exactly (string keys, safe integers, finite floats, no
        lone surrogates) and nests at most ``limit`` levels; else None."""
        if not json_exact(value, limit):
            return None
        try:
            text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
            payload = text.encode("utf-8")
        except (ValueError, UnicodeEncodeError, RecursionError):
            return None
        return self._pack([*head, msgpack.ExtType(EXT_JSON, payload)])

    def _pack(self, value: Any) -> bytes:
        try:
            data: bytes = self._packer.pack(value)
        except UnicodeEncodeError:
            self._scrubbing = True
            try:
                data = self._packer.pack(_scrub_surrogates(value))
            finally:
                self._scrubbing = False
        return data

    def _default(self, obj: Any) -> Any:
        if obj is undefined:
            return msgpack.ExtType(EXT_UNDEFINED, b"\x00")
        if isinstance(obj, int) and not isinstance(obj, bool):
            sign = b"\x01" if obj < 0 else b"\x00"
            return msgpack.ExtType(EXT_BIGINT, sign + format(abs(obj), "x").encode("ascii"))
        if isinstance(obj, _dt.datetime):
            if obj.tzinfo is None or obj.utcoffset() is None:
                raise ValueRefused(
                    "cannot convert a naive datetime to a JavaScript Date: attach a timezone, "
                    "for example dt.replace(tzinfo=datetime.timezone.utc)"
                )
            # Whole milliseconds, rounded down like dropping the microseconds: a float
            # quotient would round datetime.max up into year 10000, and JavaScript's Date
            # truncates toward zero, moving a time before 1970 forward.
            ms = (obj - _EPOCH) // _MS
            return msgpack.ExtType(EXT_DATE, _F64.pack(ms))
        # The id of a function handle (None for anything else); a handle that may not go
        # (another runtime's, or closed) raises.
        function_id = self._function_id(obj)
        if function_id is not None:
            return msgpack.ExtType(EXT_FUNCTION, _U32.pack(function_id))
        if isinstance(obj, (set, frozenset)):
            inner = msgpack.packb(list(obj), default=self._default, use_bin_type=True)
            return msgpack.ExtType(EXT_SET, inner)
        if isinstance(obj, (bytearray, memoryview)):
            return bytes(obj)
        if isinstance(obj, JavaScriptError):
            return self._error_map(obj)
        raise TypeError(
            f"cannot convert {type(obj).__module__}.{type(obj).__qualname__} to a JavaScript "
            "value: pass None, bool, int, float, str, bytes, list, tuple, dict, set, an aware "
            "datetime, pydeno.undefined or a JsFunction"
        )

    def _error_map(self, exc: JavaScriptError) -> dict[Any, Any]:
        """What exc is sent as: the map that the worker makes a real Error of."""
        parts = [exc.name, exc.message, exc.stack]
        if any(type(p) is not str for p in parts):
            raise TypeError("a JavaScriptError's name, message and stack must be str to send it to JavaScript")
        self._errors_packed += 1
        wire: dict[Any, Any] = {_ERROR_KEY: parts}
        if exc.has_cause:
            wire["cause"] = exc.cause
        if exc.errors is not None:
            wire["errors"] = exc.errors
        # Checked at construction, but a dict attribute can be changed after it.
        for k in exc.properties:
            if type(k) is not str or k in JavaScriptError.RESERVED:
                raise TypeError(f"a JavaScriptError's properties may not have the key {k!r}")
        wire.update(exc.properties)
        # The packer met a lone surrogate: the error's strings are scrubbed too (its cause
        # when it is packed in turn).
        if self._scrubbing:
            # Not the mark: an ExtType is a tuple, which the scrub would make a list.
            return {k if k is _ERROR_KEY else _scrub_surrogates(k): _scrub_surrogates(v) for k, v in wire.items()}
        return wire

    # -- JavaScript -> Python ------------------------------------------------------------
    def allowance(self, n: int) -> int:
        """The host memory the objects decoded from n bytes may take (pydeno/host/wire/budget.py)."""
        return self.max_decode_ratio * n + DECODE_FLOOR

    def unpack(self, data: memoryview | bytes) -> Any:
        """Decode one value from the worker. Raises ValueError for anything malformed."""
        return self.unpack_counted(data, self.allowance(len(data)))[0]

    def unpack_counted(self, data: memoryview | bytes, allowance: int) -> tuple[Any, int]:
        """Decode one value whose objects may take ``allowance`` bytes of host memory, and
        what they were charged. Over the allowance raises DecodeRefused, before decoding."""
        # A frame that cannot cost its allowance is charged its most without being read: its
        # most, and the most it can add joining a result in parts (an item takes a byte).
        cost = len(data) * MAX_COST_PER_BYTE
        if cost + join_cost(len(data)) > allowance:
            shapes: list[tuple[int, int]] = []
            # Read only until the charge is over the allowance: a refusal needs no more.
            cost = frame_cost(data, self.max_message_bytes, shapes, allowance)
            if cost > allowance:
                raise DecodeRefused(
                    f"would take about {cost} bytes or more of host memory to decode, over the {allowance} its "
                    f"{len(data)} bytes allow (max_decode_ratio={self.max_decode_ratio} per byte, "
                    f"plus {DECODE_FLOOR})"
                )
            budget = _Budget(allowance - cost, deque(shapes))
        else:
            # No shapes were read, so none is left over: the spare budget serves every such frame.
            budget = self._spare
            budget.left = allowance - cost
            budget.errors = 0
        # The depths of JSON-lane payloads, measured as they are decoded (see _json_value),
        # so that the depth check below does not walk them again.
        measured: dict[int, tuple[Any, int]] = {}
        self._decoding = budget, measured
        value = msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=False,
            ext_hook=self._frame_ext_hook,
            timestamp=1,
            **self._limits,
        )
        # A value cannot nest deeper than its size in bytes, so small frames skip the walk.
        # + 2: the frame's own array, and the argument list of a host call.
        if (
            len(data) > self.max_depth
            and type(value) in (list, dict)
            and not fits_depth(value, self.max_depth + 2, measured=measured)
        ):
            raise ValueRefused(f"a value is nested deeper than {self.max_depth} levels")
        if budget.errors:
            value = _with_errors(value, measured)
        return value, allowance - budget.left

    def _frame_hook(self, code: int, data: bytes) -> Any:
        return self._ext_hook(code, data, *self._decoding)

    def _ext_hook(
        self, code: int, data: bytes, budget: _Budget, measured: dict[int, tuple[Any, int]] | None = None
    ) -> Any:
        if code == EXT_UNDEFINED:
            return undefined
        if code == EXT_BIGINT:
            digits = data[1:]
            if data[:1] not in (b"\x00", b"\x01") or not digits or not digits.isalnum():
                raise ValueError("malformed BigInt")
            n = int(digits, 16)
            return -n if data[:1] == b"\x01" else n
        if code == EXT_DATE:
            if len(data) != 8:
                raise ValueError("malformed Date")
            (ms,) = _F64.unpack(data)
            if not math.isfinite(ms):
                raise ValueError("malformed Date")
            try:
                return _EPOCH + _dt.timedelta(milliseconds=ms)
            except OverflowError:
                raise ValueError("Date outside the range of datetime") from None
        if code == EXT_FUNCTION:
            if len(data) != 4:
                raise ValueError("malformed function handle")
            return self._make_function(_U32.unpack(data)[0])
        if code == EXT_SET:
            # Decoded by a nested unpackb, which costs C stack per level: a Set inside a Set is
            # refused before it is decoded (a Python set cannot hold one anyway), so a forged
            # frame cannot nest them until the host's stack overflows.
            def item_ext_hook(code: int, data: bytes) -> Any:
                if code == EXT_SET:
                    raise ValueError("a Set nested inside a Set")
                if code == EXT_ERROR:
                    raise ValueError("an Error inside a Set")
                return self._ext_hook(code, data, budget)

            items = msgpack.unpackb(
                data, raw=False, strict_map_key=False, ext_hook=item_ext_hook, timestamp=1, **self._limits
            )
            if not isinstance(items, list):
                raise ValueError("malformed Set")
            return set(items)
        if code == EXT_JSON:
            return self._json_value(data, budget, measured)
        if code == EXT_ERROR:
            if data != b"\x00":
                raise ValueError("malformed Error mark")
            budget.errors += 1
            return _ERROR_MARK
        raise ValueError(f"unknown extension type {code}")

    def _json_value(self, data: bytes, budget: _Budget, measured: dict[int, tuple[Any, int]] | None) -> Any:
        """The worker's fast lane for plain JSON-shaped data; any JSON is a valid value.

        msgspec decodes the usual payload, what JSON.stringify writes; its depth was read from
        the bytes when the frame was charged (or is read now, for a frame too small to be).
        Lone surrogates, escaped, it takes as U+FFFD. It refuses some JSON that json.loads
        takes (NaN, 1e400, other encodings): those go to json.loads, the reference, so that
        they decode or fail as they always have, charged what json.loads builds besides (its
        copy of the text, its memo of keys). msgspec gives what json.loads would for the rest,
        big integers included. A payload deeper than any frame may nest is refused before it
        is decoded.
        """
        shape = budget.shapes.popleft() if budget.shapes else None
        known = shape[1] if shape is not None and shape[0] == len(data) else None
        # Deeper than unpack's limit, it is refused wherever it sits in the frame.
        limit = self.max_depth + 2
        decode, undecodable = _json_decoder()
        try:
            value = decode(data)
        except (undecodable, RecursionError):
            value = _REFUSED
            # JSON.stringify escapes a lone surrogate as \udXXX, which msgspec refuses: as
            # U+FFFD, which the host makes of it anyway, the text decodes with msgspec still,
            # at the length and in the shape charged.
            if b"\\ud" in data or b"\\uD" in data:
                with contextlib.suppress(undecodable, RecursionError):
                    value = decode(_LONE_SURROGATE.sub(_replacement, data))
        if value is not _REFUSED:
            if type(value) not in (list, dict):
                return value
            depth = json_depth(data) if known is None else known
            if depth > limit:
                raise ValueRefused(f"a value is nested deeper than {self.max_depth} levels")
            if measured is not None:
                measured[id(value)] = (value, depth)
            return value
        text = json_text(data)
        if text is not None:
            lists, dicts, depth = json_shape(text)
            if depth > limit:
                raise ValueRefused(f"a value is nested deeper than {self.max_depth} levels")
            # json.loads builds what msgspec would, and besides a copy of the text (of up to
            # four bytes a character) and a memo of the keys.
            budget.charge(json_cost(lists, dicts, len(text)) + 4 * len(text), self.max_decode_ratio)
        try:
            value = json.loads(data)
        except RecursionError:
            raise ValueError("JSON payload nested too deeply") from None
        # json.loads turns an escaped lone surrogate back into one: the slow walk runs only
        # when such an escape may be present.
        return _scrub_surrogates(value) if b"\\ud" in data or b"\\uD" in data else value


_REFUSED: Final = object()
# An escape in JSON text: a surrogate pair, a lone surrogate, or any other (an escaped
# backslash among them, so that the "u" after it is not read as an escape).
_LONE_SURROGATE: Final = re.compile(
    rb"\\(?:u[dD][89abAB][0-9a-fA-F]{2}(?:\\u[dD][c-fC-F][0-9a-fA-F]{2})?|u[dD][c-fC-F][0-9a-fA-F]{2}|.)", re.DOTALL
)


def _replacement(match: re.Match[bytes]) -> bytes:
    # Only a lone surrogate's escape is six bytes: a pair's is twelve, any other two.
    escape = match.group()
    return b"\\ufffd" if len(escape) == 6 else escape


def _with_errors(value: Any, measured: Mapping[int, tuple[Any, int]]) -> Any:
    """value with each dict that holds the Error mark turned into a JavaScriptError, inner
    ones first (a cause is one before the error it is the cause of). The dicts and lists are
    changed in place: the decoder made them for this value alone. A mark anywhere but as a
    key is malformed. JSON payloads (``measured``) cannot hold one and are not walked. The
    frame's nesting was checked before, so the recursion is bounded."""
    kind = type(value)
    if (kind is not list and kind is not dict) or id(value) in measured:
        return value
    if kind is list:
        for i, item in enumerate(value):
            if item is _ERROR_MARK:
                raise ValueError("an Error mark outside a map's keys")
            if type(item) is list or type(item) is dict:
                value[i] = _with_errors(item, measured)
        return value
    for k, item in value.items():
        if item is _ERROR_MARK:
            raise ValueError("an Error mark outside a map's keys")
        if type(item) is list or type(item) is dict:
            value[k] = _with_errors(item, measured)
    if _ERROR_MARK not in value:
        return value
    head = value.pop(_ERROR_MARK)
    if type(head) is not list or len(head) != 3 or any(type(p) is not str for p in head):
        raise ValueError("malformed Error: its mark is not followed by [name, message, stack]")
    has_cause = "cause" in value
    cause = value.pop("cause", None)
    errors = value.pop("errors", None)
    if errors is not None and type(errors) is not list:
        raise ValueError("malformed Error: its errors are not a list")
    for k in value:
        if type(k) is not str or k in JavaScriptError.RESERVED:
            raise ValueError(f"malformed Error: a property named {k!r}")
    return JavaScriptError._value(head[0], head[1], head[2], cause, has_cause, errors, value)


class _Budget:
    """What one frame may still build while it is decoded, the JSON shapes read from it, in
    the order its payloads come, and how many Error marks it held."""

    __slots__ = ("errors", "left", "shapes")

    def __init__(self, left: int, shapes: deque[tuple[int, int]]) -> None:
        self.left = left
        self.shapes = shapes
        self.errors = 0

    def charge(self, cost: int, ratio: int) -> None:
        self.left -= cost
        if self.left < 0:
            raise DecodeRefused(
                f"would take more host memory to decode than its size allows (max_decode_ratio={ratio} "
                f"per byte, plus {DECODE_FLOOR})"
            )
