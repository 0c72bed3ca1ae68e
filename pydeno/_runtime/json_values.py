"""The one JSON dialect for values outside Python: what the CLI prints, what Code Mode's
``ExecutionResult.to_dict()``/``to_json()`` and the MCP server return, and how a paused tool
call shows its arguments. docs/values.md ("Values as JSON") documents it for users; keep the
two in step (tests/unit/test_json_values.py checks that every tag made here is listed there).

A value JSON can hold is itself; anything else is an object with a ``"$type"`` tag, so that a
reader can tell bytes from a list of numbers and a Map's key ``1`` from ``"1"``. The dialect
lives here, in the runtime drivers' layer, because it names :class:`JsFunction`, and the CLI,
Code Mode and the agents all sit above it.
"""

from __future__ import annotations

import base64
import datetime
import json
import math
from typing import Any, Final

from .._base.errors import JavaScriptError, error_fields
from .._base.values import Undefined
from .function import JsFunction

__all__ = ["TAGS", "dumps", "jsonable", "value_json"]

#: Every ``$type`` this module writes, with the fields beside the tag. Code Mode adds
#: ``truncated`` (a value cut to fit a bound), which is not a value's form but a cut's.
TAGS: Final = {
    "bytes": ("base64",),
    "undefined": (),
    "number": ("value",),
    "date": ("iso",),
    "map": ("entries",),
    "set": ("values",),
    "function": (),
    "error": ("name", "message", "stack", "cause", "errors", "properties"),
}


def dumps(data: Any) -> str:
    """Strict JSON text of data that is already in the dialect (UTF-8 characters kept)."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False)


def jsonable(value: Any) -> Any:
    """value (as an eval returns it) with what JSON cannot hold as tagged objects."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"$type": "number", "value": "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        if all(type(k) is str for k in value):
            return {k: jsonable(v) for k, v in value.items()}
        # A Map with keys JSON objects cannot hold (1, null, true, ...): every entry kept,
        # each key as the value it is, where an object would turn 1 and "1" into one key.
        return {"$type": "map", "entries": [[jsonable(k), jsonable(v)] for k, v in value.items()]}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$type": "bytes", "base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Undefined):
        return {"$type": "undefined"}
    if isinstance(value, datetime.datetime):
        return {"$type": "date", "iso": value.isoformat()}
    if isinstance(value, (set, frozenset)):
        # Python sets keep no order: sorted by each item's JSON text, so one Set always
        # prints the same.
        return {"$type": "set", "values": sorted((jsonable(item) for item in value), key=dumps)}
    if isinstance(value, JsFunction):
        return {"$type": "function"}
    if isinstance(value, JavaScriptError):
        return {"$type": "error", **{key: jsonable(part) for key, part in error_fields(value).items()}}
    # No other type comes back from an eval; never fail on output all the same.
    return {"$type": type(value).__name__}


def value_json(value: Any) -> str:
    """``dumps(jsonable(value))``, without first building the copy that jsonable makes of a
    value JSON can hold as it is (most values): the encoder asks jsonable only for what it
    cannot write. A dict with a key that is not a str must become a ``map``, which the
    encoder would not ask about, so such a value takes the copying path."""
    if _string_keys(value):
        try:
            return json.dumps(value, ensure_ascii=False, allow_nan=False, default=jsonable)
        except (TypeError, ValueError):  # a non-finite number
            pass
    return dumps(jsonable(value))


def _string_keys(value: Any) -> bool:
    """Whether every dict in value (lists and tuples walked) has only str keys."""
    stack = [value]
    pop, push = stack.pop, stack.append
    while stack:
        item = pop()
        kind = type(item)
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    return False
            children = item.values()
        elif kind is list or kind is tuple:
            children = item
        else:
            continue
        for child in children:
            kind = type(child)
            if kind is dict or kind is list or kind is tuple:
                push(child)
    return True
