"""The worker's JSON lane check (codec.ts jsonCopy) at every level, against real deno workers: a
value that JSON cannot carry exactly, anywhere in a result or a host call's arguments, makes the
value take the msgpack lane, and one level past the depth limit is refused."""

from __future__ import annotations

import math
from typing import Any

import pytest

import pydeno
from pydeno.host.wire.protocol import EXT_JSON
from tests.runtime.values.value_checks import EPOCH, assert_same, iife

# jsonCopy checks an object's children in the same call and recurses only every second level,
# so each of its rules is tried with the value one to four levels down, after good siblings.
LEAVES = [
    # (JavaScript leaf, what Python receives, whether the value takes the JSON lane)
    ("'s'", "s", True),
    ("1.5", 1.5, True),
    ("-7", -7, True),
    ("0", 0, True),
    ("2**31", 2**31, True),
    ("-(2**53 - 1)", -(2**53 - 1), True),
    ("true", True, True),
    ("null", None, True),
    ("[]", [], True),
    ("Object.create(null)", {}, True),
    ("({get g() { return 2 }})", {"g": 2}, True),
    ("-0", -0.0, False),
    ("NaN", math.nan, False),
    ("-Infinity", -math.inf, False),
    ("2**53", float(2**53), False),
    ("-(2**53) - 2", float(-(2**53) - 2), False),
    ("2**31 + 0.5", 2**31 + 0.5, True),
    ("undefined", pydeno.undefined, False),
    ("10n", 10, False),
    ("new Date(0)", EPOCH, False),
    ("new Map([[1, 2]])", {1: 2}, False),
    ("new Uint8Array([1])", b"\x01", False),
    ("new (class { constructor() { this.a = 1 } })()", {"a": 1}, False),
    # JSON.stringify sees a copy: an own toJSON that is not a function is plain data there.
    ("({a: 1, toJSON: null})", {"a": 1, "toJSON": None}, True),
    ("Object.assign([1], {toJSON: null})", [1], True),
    ("[1, , 3]", [1, pydeno.undefined, 3], False),
]


@pytest.mark.parametrize("levels", [1, 2, 3, 4])
@pytest.mark.parametrize("container", ["arrays", "objects"])
@pytest.mark.parametrize(("leaf", "expected", "is_json"), LEAVES, ids=[leaf[0] for leaf in LEAVES])
def test_each_json_lane_rule_holds_at_every_level(
    rt: pydeno.Runtime, ext_codes: list[int], leaf: str, expected: Any, is_json: bool, container: str, levels: int
) -> None:
    code, value = leaf, expected
    for _ in range(levels):
        if container == "arrays":
            code, value = f"[1, 's', {code}]", [1, "s", value]
        else:
            code, value = f"({{n: 1, s: 's', v: {code}}})", {"n": 1, "s": "s", "v": value}
    ext_codes.clear()
    assert_same(rt.eval(code), value)
    assert (EXT_JSON in ext_codes) == is_json


@pytest.mark.parametrize("container", ["arrays", "objects"])
def test_a_result_nested_to_the_limit_takes_the_json_lane_and_one_level_more_is_refused(
    rt: pydeno.Runtime, ext_codes: list[int], container: str
) -> None:
    wrap = "d = [d, 1]" if container == "arrays" else "d = {d, n: 1}"
    for levels in (127, 128):
        ext_codes.clear()
        value = rt.eval(iife(f"let d = 'x'; for (let i = 0; i < {levels}; i++) {wrap}; return d;"))
        assert EXT_JSON in ext_codes
        for _ in range(levels):
            value = value[0] if container == "arrays" else value["d"]
        assert value == "x"
    with pytest.raises(pydeno.JavaScriptError, match="nested deeper than 128 levels"):
        rt.eval(iife(f"let d = 'x'; for (let i = 0; i < 129; i++) {wrap}; return d;"))


def test_a_host_call_argument_nested_to_the_limit_arrives_and_one_level_more_is_refused(rt: pydeno.Runtime) -> None:
    got: list[Any] = []
    rt.bind_function("keep", got.append)
    rt.eval(iife("let d = 1; for (let i = 0; i < 128; i++) d = [d]; return keep(d);"))
    expected: Any = 1
    for _ in range(128):
        expected = [expected]
    assert got == [expected]
    with pytest.raises(pydeno.JavaScriptError, match=r"arguments to keep\(\) could not be converted: .*nested deeper"):
        rt.eval(iife("let d = 1; for (let i = 0; i < 129; i++) d = [d]; return keep(d);"))
