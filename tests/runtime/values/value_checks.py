"""What the value suites of this folder share: the guest's ``kind()`` probe, the host function
``take()``'s box, and equality that tells types, NaN and the sign of zero apart."""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
MAX_SAFE = 2**53 - 1


# Describes a guest value as "tag" or, for numbers and BigInts, "tag:String(value)", so a
# test can check what the guest received, not only what came back.
KIND_JS = r"""
globalThis.kind = (x) => {
  if (x === null) return "null";
  if (typeof x === "number") return Object.is(x, -0) ? "number:-0" : `number:${x}`;
  if (typeof x === "bigint") return `bigint:${x}`;
  if (typeof x !== "object") return typeof x;
  if (x instanceof Map) return "Map";
  if (x instanceof Set) return "Set";
  if (x instanceof Date) return "Date";
  if (x instanceof Uint8Array) return "Uint8Array";
  if (Array.isArray(x)) return "Array";
  return Object.getPrototypeOf(x) === Object.prototype ? "object" : "other object";
};
"""


class Box:
    """What the bound host function ``take()`` returns next."""

    value: Any = None


def same(a: Any, b: Any) -> bool:
    """Deep equality that also compares types, NaN as equal to NaN and the sign of zero."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        if {(type(k), k) for k in a} != {(type(k), k) for k in b}:
            return False
        return all(same(a[k], b[k]) for k in a)
    if isinstance(a, set):
        return {(type(k), k) for k in a} == {(type(k), k) for k in b}
    if isinstance(a, dt.datetime):
        return a == b and a.utcoffset() == b.utcoffset()
    return bool(a == b)


def assert_same(actual: Any, expected: Any) -> None:
    assert same(actual, expected), f"{actual!r:.300} is not {expected!r:.300}"


def js_number(x: float) -> int | float:
    """A JavaScript number as it arrives in Python: an int when integral and safe, except -0."""
    if x.is_integer() and abs(x) <= MAX_SAFE and not (x == 0 and math.copysign(1.0, x) < 0):
        return int(x)
    return x


def iife(body: str) -> str:
    """Guest code whose declarations do not leak into the shared runtime's global scope."""
    return f"(() => {{ {body} }})()"


def _expected(value: Any) -> Any:
    """What a Python value comes back as after a trip through the guest."""
    if isinstance(value, str):
        return re.sub("[\ud800-\udfff]", "\ufffd", value)
    if isinstance(value, float):
        return js_number(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, (list, tuple)):
        return [_expected(v) for v in value]
    if isinstance(value, dict):
        return {_expected(k): _expected(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return {_expected(v) for v in value}
    if isinstance(value, dt.datetime):
        # Millisecond precision: the sub-millisecond part is dropped, also before the epoch.
        return value.astimezone(UTC).replace(microsecond=value.microsecond // 1000 * 1000)
    return value
