"""Checking values against a JSON Schema as JSON means it, for tools' arguments and results.

``Validator`` is draft 2020-12 where no NaN or Infinity satisfies a numeric schema and an
integer is one a JavaScript number states exactly; ``reason`` names why a union refused a
number; ``overlong_integer`` finds an int too long for any message to show.
"""

from __future__ import annotations

import fractions
import functools
import math
import sys
from collections.abc import Iterator
from typing import Any, Final

import jsonschema.validators
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

__all__ = ["MAX_SAFE_INTEGER", "Validator", "js_number", "overlong_integer", "reason"]

# Number.MAX_SAFE_INTEGER: past it a JavaScript number stands for several integers at once.
MAX_SAFE_INTEGER: Final = 2**53 - 1
_NOT_FINITE: Final = "is not a finite number (JSON has no NaN or Infinity)"
_BEYOND_SAFE: Final = (
    "is not an exact integer: it is beyond Number.MAX_SAFE_INTEGER (2**53 - 1), where a JavaScript number "
    "cannot tell neighbouring integers apart; pass a BigInt (e.g. 2n ** 60n) for a larger integer"
)


def js_number(value: float) -> str:
    """A float as JavaScript writes it, for messages a program's author reads."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return repr(value)


def _is_number(checker: Any, instance: Any) -> bool:
    if isinstance(instance, float):
        return math.isfinite(instance)
    return isinstance(instance, int) and not isinstance(instance, bool)


def _is_integer(checker: Any, instance: Any) -> bool:
    # An int is exact whatever its size (a BigInt arrives as one); a float only when it is a
    # whole number a JavaScript number cannot confuse with its neighbours.
    if isinstance(instance, float):
        return instance.is_integer() and abs(instance) <= MAX_SAFE_INTEGER
    return isinstance(instance, int) and not isinstance(instance, bool)


def _finite_first(keyword: str) -> Any:
    """A numeric keyword that refuses NaN and Infinity, which jsonschema's own skips or lets
    through (NaN compares false with every bound)."""
    original = Draft202012Validator.VALIDATORS[keyword]

    def check(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
        if isinstance(instance, float) and not math.isfinite(instance):
            yield ValidationError(f"{js_number(instance)} {_NOT_FINITE}")
            return
        yield from original(validator, value, instance, schema)

    return check


def _multiple_of(validator: Any, step: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    # jsonschema divides an int by a float step before it guards against overflow: a BigInt
    # past the float range would raise OverflowError instead of being checked. Exactly, then.
    if isinstance(instance, int) and not isinstance(instance, bool) and isinstance(step, float) and step:
        try:
            instance / step
        except OverflowError:
            if (fractions.Fraction(instance) / fractions.Fraction(step)).denominator != 1:
                yield ValidationError(f"{instance!r} is not a multiple of {step}")
            return
    yield from _finite_multiple_of(validator, step, instance, schema)


def overlong_integer(value: Any) -> str | None:
    """The JSON path of the first int in value with more digits than Python turns into text
    (``sys.get_int_max_str_digits()``), which no message or JSON could show: None if none."""
    limit = sys.get_int_max_str_digits()
    if not limit:
        return None
    stack: list[tuple[str, Any]] = [("$", value)]
    while stack:
        path, item = stack.pop()
        if type(item) is int:
            if item.bit_length() > limit * 3 and abs(item) >= _power_of_ten(limit):
                return path
        elif isinstance(item, dict):
            stack.extend((f"{path}.{k}", v) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(item))))
    return None


@functools.cache
def _power_of_ten(digits: int) -> int:
    power: int = 10**digits
    return power


_finite_multiple_of: Final = _finite_first("multipleOf")


def _type(validator: Any, expected: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    names = [expected] if isinstance(expected, str) else expected
    if (
        isinstance(instance, float)
        and isinstance(names, list)
        and not any(validator.is_type(instance, n) for n in names)
    ):
        if not math.isfinite(instance) and ("number" in names or "integer" in names):
            yield ValidationError(f"{js_number(instance)} {_NOT_FINITE}")
            return
        if "integer" in names and instance.is_integer():
            yield ValidationError(f"{js_number(instance)} {_BEYOND_SAFE}")
            return
    yield from Draft202012Validator.VALIDATORS["type"](validator, expected, instance, schema)


Validator: Final[Any] = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    validators={
        "type": _type,
        **{k: _finite_first(k) for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")},
        "multipleOf": _multiple_of,
    },
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine_many({"number": _is_number, "integer": _is_integer}),
)
"""Draft 2020-12 as JSON means it: NaN and Infinity satisfy no numeric schema (no schema form
opts in), and ``integer`` is an int, or a whole float within Number.MAX_SAFE_INTEGER."""


def reason(error: ValidationError) -> str:
    """error's message, or, for a union no member of which takes a non-finite number or an
    inexact integer, the member's reason that says why (jsonschema's own says only that none
    matched)."""
    if error.validator in ("anyOf", "oneOf") and isinstance(error.instance, float):
        for sub in error.context or ():
            if not sub.relative_path and sub.message.endswith((_NOT_FINITE, _BEYOND_SAFE)):
                return sub.message
    return error.message
