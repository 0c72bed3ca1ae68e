"""Values: every type in docs/values.md crosses the wire and back, against real deno workers:
JavaScript to Python, Python to JavaScript and back (alone and inside a large argument), function
handles, and arbitrary values round-tripping. Most tests share the folder's module-scoped runtime
(conftest.py); long arrays, refusals, prototype poisoning and the worker's JSON lane check have
files of their own beside this one."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pydeno
from pydeno.host.wire.protocol import EXT_JSON
from tests.runtime.values.value_checks import EPOCH, MAX_SAFE, UTC, Box, _expected, assert_same, iife, js_number

# -- JavaScript -> Python ----------------------------------------------------------------------
JS_TO_PY = [
    ("null", "null", None),
    ("undefined", "undefined", pydeno.undefined),
    ("true", "true", True),
    ("false", "false", False),
    ("zero", "0", 0),
    ("minus one", "-1", -1),
    ("max safe integer", "2**53 - 1", MAX_SAFE),
    ("min safe integer", "-(2**53 - 1)", -MAX_SAFE),
    ("integral float is an int", "5.0", 5),
    ("2**53 is not safe so a float", "2**53", 2.0**53),
    ("half", "0.5", 0.5),
    ("negative float", "-1.25", -1.25),
    ("NaN", "NaN", math.nan),
    ("Infinity", "Infinity", math.inf),
    ("-Infinity", "-Infinity", -math.inf),
    ("negative zero", "-0", -0.0),
    ("1e21 stays a float", "1e21", 1e21),
    ("smallest subnormal", "5e-324", 5e-324),
    ("small BigInt", "5n", 5),
    ("zero BigInt", "0n", 0),
    ("BigInt 2**64", "2n**64n", 2**64),
    ("negative BigInt 2**100", "-(2n**100n)", -(2**100)),
    ("ascii string", "'hello'", "hello"),
    ("unicode string", "'héllo wörld ☃ λ 日本'", "héllo wörld ☃ λ 日本"),
    ("emoji (a surrogate pair)", "'😀 👍🏽'", "😀 👍🏽"),
    ("empty string", "''", ""),
    ("100k string", "'ab'.repeat(50000)", "ab" * 50000),
    ("lone high surrogate", r"'\ud800'", "\ufffd"),
    ("lone low surrogate inside text", r"'a\udc00b'", "a\ufffdb"),
    ("reversed surrogate pair", r"'\ude00\ud83d'", "\ufffd\ufffd"),
    ("Uint8Array", "new Uint8Array([0, 1, 127, 128, 255])", b"\x00\x01\x7f\x80\xff"),
    ("empty Uint8Array", "new Uint8Array(0)", b""),
    ("Uint8Array view of part of a buffer", "new Uint8Array([1, 2, 3, 4]).subarray(1, 3)", b"\x02\x03"),
    ("Uint8ClampedArray", "new Uint8ClampedArray([300, -5, 7])", b"\xff\x00\x07"),
    ("ArrayBuffer", "new Uint8Array([9, 8, 7]).buffer", b"\x09\x08\x07"),
    ("Float64Array", "new Float64Array([1.5, -0.25, 2])", [1.5, -0.25, 2]),
    ("Int32Array", "new Int32Array([-1, 2**31 - 1])", [-1, 2**31 - 1]),
    ("BigInt64Array", "new BigInt64Array([1n, -(2n**63n)])", [1, -(2**63)]),
    ("empty array", "[]", []),
    ("nested arrays", "[1, [2, [3, []]], 'x']", [1, [2, [3, []]], "x"]),
    ("sparse array holes", "[1, , 3]", [1, pydeno.undefined, 3]),
    ("array of only holes", "new Array(3)", [pydeno.undefined] * 3),
    (
        "plain object",
        "({a: 1, b: 'x', c: [true, null], d: {e: {}}})",
        {"a": 1, "b": "x", "c": [True, None], "d": {"e": {}}},
    ),
    ("integer-like keys are str keys", "({1: 'one', b: 2})", {"1": "one", "b": 2}),
    (
        "__proto__ own key via JSON.parse",
        """JSON.parse('{"__proto__": {"x": 1}, "y": 2}')""",
        {"__proto__": {"x": 1}, "y": 2},
    ),
    ("null-prototype object", "Object.assign(Object.create(null), {a: 1})", {"a": 1}),
    (
        "class instance: own enumerable properties only",
        iife("class P { constructor() { this.x = 1; this.y = 'two'; } get z() { return 3 } m() {} } return new P();"),
        {"x": 1, "y": "two"},
    ),
    (
        "non-enumerable and symbol keys are skipped",
        iife("const o = {a: 1, [Symbol('s')]: 2}; Object.defineProperty(o, 'h', {value: 3}); return o;"),
        {"a": 1},
    ),
    ("Map with string keys", "new Map([['a', 1], ['b', [2]]])", {"a": 1, "b": [2]}),
    (
        "Map with number keys",
        "new Map([[1, 'one'], [2.5, 'two and a half'], [-3, 'minus three']])",
        {1: "one", 2.5: "two and a half", -3: "minus three"},
    ),
    (
        "Map with mixed primitive keys",
        "new Map([['1', 'str'], [1, 'num'], [null, 'null'], [2n**70n, 'big']])",
        {"1": "str", 1: "num", None: "null", 2**70: "big"},
    ),
    ("empty Map", "new Map()", {}),
    ("Set", "new Set([1, 'a', null, 2.5])", {1, "a", None, 2.5}),
    ("empty Set", "new Set()", set()),
    ("Date at the epoch", "new Date(0)", EPOCH),
    (
        "Date with milliseconds",
        "new Date(Date.UTC(2024, 1, 29, 12, 34, 56, 789))",
        dt.datetime(2024, 2, 29, 12, 34, 56, 789000, tzinfo=UTC),
    ),
    ("Date before the epoch", "new Date(-1)", dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)),
    (
        "latest Date Python can hold",
        "new Date(253402300799999)",
        dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
    ),
    ("earliest Date Python can hold", "new Date(-62135596800000)", dt.datetime(1, 1, 1, tzinfo=UTC)),
]


@pytest.mark.parametrize(("code", "expected"), [p[1:] for p in JS_TO_PY], ids=[p[0] for p in JS_TO_PY])
def test_a_javascript_value_arrives_as_the_documented_python_value_and_type(
    rt: pydeno.Runtime, code: str, expected: Any
) -> None:
    assert_same(rt.eval(code), expected)


def test_undefined_arrives_as_the_falsy_undefined_singleton(rt: pydeno.Runtime) -> None:
    value = rt.eval("undefined")
    assert value is pydeno.undefined
    assert not value
    assert repr(value) == "pydeno.undefined"


def test_negative_zero_keeps_its_sign(rt: pydeno.Runtime) -> None:
    value = rt.eval("-0")
    assert isinstance(value, float)
    assert math.copysign(1.0, value) == -1.0


def test_a_date_arrives_as_an_aware_utc_datetime(rt: pydeno.Runtime) -> None:
    value = rt.eval("new Date(Date.UTC(2001, 2, 3, 4, 5, 6, 7))")
    assert value.tzinfo is UTC
    assert value == dt.datetime(2001, 3, 3, 4, 5, 6, 7000, tzinfo=UTC)


def test_a_function_arrives_as_a_callable_jsfunction(rt: pydeno.Runtime) -> None:
    fn = rt.eval("(a, b) => a + b")
    assert isinstance(fn, pydeno.JsFunction)
    assert fn(1, 2) == 3
    nested = rt.eval("({f: () => 'inner', list: [(x) => x * 2]})")
    assert nested["f"]() == "inner"
    assert nested["list"][0](21) == 42


# Each shape is one element, as (JS expression of i, Python value of i, whether JSON.stringify
# carries it exactly). Every shape is checked as a short and a 1000-element array, and through
# both lanes: as is (the JSON lane when the shape is JSON-exact) and with a trailing undefined,
# which JSON cannot carry, forcing the msgpack path.
SHAPES: list[tuple[str, str, Callable[[int], Any], bool]] = [
    ("small ints", "i", lambda i: i, True),
    ("negative ints", "-(i + 1) * 1000", lambda i: -(i + 1) * 1000, True),
    ("safe integer extremes", "i % 2 ? 2**53 - 1 : -(2**53 - 1)", lambda i: MAX_SAFE if i % 2 else -MAX_SAFE, True),
    ("floats", "i + 0.5", lambda i: i + 0.5, True),
    ("float fractions", "i / 7", lambda i: js_number(i / 7), True),
    ("integral floats", "i * 1.0", lambda i: i, True),
    (
        "tiny and huge floats",
        "[5e-324 * (i + 1), 1.2345e-300 * (i + 1), 0.1 + i, 1e15 + i / 8]",
        lambda i: [5e-324 * (i + 1), 1.2345e-300 * (i + 1), 0.1 + i, js_number(1e15 + i / 8)],
        True,
    ),
    ("ascii strings", "'s' + i", lambda i: f"s{i}", True),
    ("unicode strings", "'é☃😀' + i", lambda i: f"é☃😀{i}", True),
    ("strings needing JSON escapes", r"'q\"\\\n\t\u0001\u2028' + i", lambda i: f'q"\\\n\t\x01\u2028{i}', True),
    ("booleans and nulls", "[i % 2 === 0, null]", lambda i: [i % 2 == 0, None], True),
    (
        "objects",
        "({id: i, name: 'n' + i, tags: ['a', 'b'], ok: true, none: null, sub: {x: i / 4}})",
        lambda i: {
            "id": i,
            "name": f"n{i}",
            "tags": ["a", "b"],
            "ok": True,
            "none": None,
            "sub": {"x": js_number(i / 4)},
        },
        True,
    ),
    ("objects with a __proto__ key", """JSON.parse('{"__proto__": 1}')""", lambda i: {"__proto__": 1}, True),
    ("empty containers", "[[], {}]", lambda i: [[], {}], True),
    ("unsafe integers", "2**53 + i * 2", lambda i: float(2**53 + i * 2), False),
    ("negative zero", "-0", lambda i: -0.0, False),
    ("NaN and infinities", "[NaN, Infinity, -Infinity]", lambda i: [math.nan, math.inf, -math.inf], False),
    # The JSON lane carries lone surrogates as \udXXX escapes; the host makes them U+FFFD.
    ("lone surrogates", r"'\ud800' + i", lambda i: f"\ufffd{i}", True),
    ("BigInts", "BigInt(i) * 2n**64n", lambda i: i * 2**64, False),
    ("Maps", "new Map([[i, 's' + i]])", lambda i: {i: f"s{i}"}, False),
    ("Sets", "new Set([i, 'x'])", lambda i: {i, "x"}, False),
    ("bytes", "new Uint8Array([i % 256, 7])", lambda i: bytes([i % 256, 7]), False),
    ("Dates", "new Date(i * 1000)", lambda i: EPOCH + dt.timedelta(seconds=i), False),
    ("class instances", "new (class { constructor(i) { this.i = i } })(i)", lambda i: {"i": i}, False),
    # JSON.stringify sees a copy: an own toJSON that is not a function is plain data there.
    ("objects with toJSON", "({i, toJSON: null})", lambda i: {"i": i, "toJSON": None}, True),
]


@pytest.mark.parametrize("n", [3, 1000], ids=["short", "1000 elements"])
@pytest.mark.parametrize(("item", "expect", "is_json"), [s[1:] for s in SHAPES], ids=[s[0] for s in SHAPES])
def test_the_json_lane_and_the_msgpack_lane_give_identical_python_values(
    rt: pydeno.Runtime, ext_codes: list[int], *, item: str, expect: Callable[[int], Any], is_json: bool, n: int
) -> None:
    expected = [expect(i) for i in range(n)]
    build = f"Array.from({{length: {n}}}, (_, i) => {item})"

    ext_codes.clear()
    as_is = rt.eval(build)
    json_lane = EXT_JSON in ext_codes
    ext_codes.clear()
    forced = rt.eval(f"[...{build}, undefined]")
    assert EXT_JSON not in ext_codes, "a trailing undefined must force the msgpack path"

    assert forced[-1] is pydeno.undefined
    assert_same(as_is, expected)
    assert_same(forced[:-1], expected)
    assert json_lane == is_json, "JSON-shaped data takes the JSON lane, anything else does not"


@pytest.mark.parametrize("n", [3, 1000], ids=["short", "1000 keys"])
def test_an_object_with_many_keys_is_the_same_through_both_lanes(rt: pydeno.Runtime, n: int) -> None:
    build = f"Object.fromEntries(Array.from({{length: {n}}}, (_, i) => ['k' + i, [i, 'v' + i, i / 3]]))"
    expected = {f"k{i}": [i, f"v{i}", js_number(i / 3)] for i in range(n)}
    assert_same(rt.eval(build), expected)
    forced = rt.eval(f"Object.assign({build}, {{zzz: undefined}})")
    assert forced.pop("zzz") is pydeno.undefined
    assert_same(forced, expected)


@pytest.mark.parametrize("inherited", ["1", "() => 1", "undefined"], ids=["number", "function", "undefined"])
def test_an_enumerable_key_inherited_from_object_prototype_never_joins_a_result(inherited: str) -> None:
    # The exactness check visits inherited enumerable keys too (for-in); JSON.stringify and
    # the msgpack lane take own keys only, so whichever lane the value takes, it is the same.
    with pydeno.Runtime() as rt:
        rt.eval(f"Object.defineProperty(Object.prototype, 'extra', {{value: {inherited}, enumerable: true}})")
        value = rt.eval("Array.from({length: 3}, (_, i) => ({id: i, sub: {x: [i]}}))")
        assert value == [{"id": i, "sub": {"x": [i]}} for i in range(3)]


def test_a_value_nested_exactly_128_levels_deep_arrives_through_both_lanes(rt: pydeno.Runtime) -> None:
    for tail in ("", ", undefined"):
        value = rt.eval(iife(f"let d = []; for (let i = 1; i < 128; i++) d = [d{tail}]; return d;"))
        depth = 0
        while isinstance(value, list):
            depth += 1
            value = value[0] if value else None
        assert depth == 128


# -- Python -> JavaScript -> Python ------------------------------------------------------------
NINE = dt.timezone(dt.timedelta(hours=9))
PY_TO_JS: list[tuple[str, Any, Any, str]] = [
    # (id, value sent, value expected back, kind() in the guest)
    ("None", None, None, "null"),
    ("undefined", pydeno.undefined, pydeno.undefined, "undefined"),
    ("True", True, True, "boolean"),
    ("False", False, False, "boolean"),
    ("zero", 0, 0, "number:0"),
    ("small int", 42, 42, "number:42"),
    ("negative int", -7, -7, "number:-7"),
    ("max safe int", MAX_SAFE, MAX_SAFE, f"number:{MAX_SAFE}"),
    ("min safe int", -MAX_SAFE, -MAX_SAFE, f"number:{-MAX_SAFE}"),
    ("2**53 becomes a BigInt", 2**53, 2**53, f"bigint:{2**53}"),
    ("-(2**53) becomes a BigInt", -(2**53), -(2**53), f"bigint:{-(2**53)}"),
    ("2**63", 2**63, 2**63, f"bigint:{2**63}"),
    ("2**64", 2**64, 2**64, f"bigint:{2**64}"),
    ("2**70", 2**70, 2**70, f"bigint:{2**70}"),
    ("-(2**63)", -(2**63), -(2**63), f"bigint:{-(2**63)}"),
    ("-(2**63) - 1", -(2**63) - 1, -(2**63) - 1, f"bigint:{-(2**63) - 1}"),
    ("negative big int", -(3**90), -(3**90), f"bigint:{-(3**90)}"),
    ("float", 1.5, 1.5, "number:1.5"),
    ("integral float comes back an int", 2.0, 2, "number:2"),
    ("huge float", 1e300, 1e300, "number:1e+300"),
    ("NaN", math.nan, math.nan, "number:NaN"),
    ("inf", math.inf, math.inf, "number:Infinity"),
    ("-inf", -math.inf, -math.inf, "number:-Infinity"),
    ("-0.0", -0.0, -0.0, "number:-0"),
    ("str", "hello", "hello", "string"),
    ("empty str", "", "", "string"),
    ("unicode str", "héllo ☃ 😀 日本", "héllo ☃ 😀 日本", "string"),
    ("long str", "xy" * 50000, "xy" * 50000, "string"),
    ("lone surrogate becomes U+FFFD", "a\ud800b", "a\ufffdb", "string"),
    ("surrogates inside containers", {"k\udfff": ["\ud83d"]}, {"k\ufffd": ["\ufffd"]}, "object"),
    ("bytes", b"\x00\x01\xff", b"\x00\x01\xff", "Uint8Array"),
    ("empty bytes", b"", b"", "Uint8Array"),
    ("bytearray", bytearray(b"ab"), b"ab", "Uint8Array"),
    ("memoryview", memoryview(b"cd"), b"cd", "Uint8Array"),
    ("list", [1, "a", None, [2.5, [True]]], [1, "a", None, [2.5, [True]]], "Array"),
    ("empty list", [], [], "Array"),
    ("tuple comes back a list", (1, (2, 3)), [1, [2, 3]], "Array"),
    ("dict with str keys", {"a": 1, "b": [1, {"c": None}]}, {"a": 1, "b": [1, {"c": None}]}, "object"),
    ("empty dict", {}, {}, "object"),
    ("dict with a __proto__ key", {"__proto__": {"x": 1}}, {"__proto__": {"x": 1}}, "object"),
    ("dict with int keys is a Map", {1: "a", 2: "b"}, {1: "a", 2: "b"}, "Map"),
    (
        "dict with mixed keys is a Map",
        {1: "a", "b": 2, None: 3, 2**70: 4, 1.5: 5},
        {1: "a", "b": 2, None: 3, 2**70: 4, 1.5: 5},
        "Map",
    ),
    ("set", {1, "a", None}, {1, "a", None}, "Set"),
    ("empty set", set(), set(), "Set"),
    ("frozenset comes back a set", frozenset({1, 2}), {1, 2}, "Set"),
    (
        "aware UTC datetime",
        dt.datetime(2024, 2, 29, 12, 34, 56, 789000, tzinfo=UTC),
        dt.datetime(2024, 2, 29, 12, 34, 56, 789000, tzinfo=UTC),
        "Date",
    ),
    (
        "non-UTC datetime is the same instant in UTC",
        dt.datetime(2024, 1, 1, 9, 0, tzinfo=NINE),
        dt.datetime(2024, 1, 1, 0, 0, tzinfo=UTC),
        "Date",
    ),
    (
        "microseconds are truncated to milliseconds",
        dt.datetime(2020, 5, 6, 7, 8, 9, 123999, tzinfo=UTC),
        dt.datetime(2020, 5, 6, 7, 8, 9, 123000, tzinfo=UTC),
        "Date",
    ),
    (
        "datetime before the epoch",
        dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
        "Date",
    ),
    (
        "sub-millisecond part before the epoch is dropped, not rounded toward 1970",
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
        "Date",
    ),
    ("datetime.min", dt.datetime.min.replace(tzinfo=UTC), dt.datetime.min.replace(tzinfo=UTC), "Date"),
    (
        "datetime.max",
        dt.datetime.max.replace(tzinfo=UTC),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
        "Date",
    ),
]
PY_TO_JS_IDS = [p[0] for p in PY_TO_JS]
PY_TO_JS_PARAMS = [p[1:] for p in PY_TO_JS]


@pytest.mark.parametrize(("value", "expected", "js_kind"), PY_TO_JS_PARAMS, ids=PY_TO_JS_IDS)
def test_a_python_argument_reaches_the_guest_as_the_documented_type_and_comes_back(
    rt: pydeno.Runtime, ident: pydeno.JsFunction, value: Any, expected: Any, js_kind: str
) -> None:
    assert rt.eval("kind")(value) == js_kind
    assert_same(ident(value), expected)


@pytest.mark.parametrize(("value", "expected", "js_kind"), PY_TO_JS_PARAMS, ids=PY_TO_JS_IDS)
def test_a_host_function_result_reaches_the_guest_as_the_documented_type_and_comes_back(
    rt: pydeno.Runtime, value: Any, expected: Any, js_kind: str
) -> None:
    Box.value = value
    try:
        assert rt.eval("take().then(kind)") == js_kind
        assert_same(rt.eval("take()"), expected)
    finally:
        Box.value = None


def test_a_dict_with_int_keys_is_a_map_keyed_by_numbers_in_the_guest(rt: pydeno.Runtime) -> None:
    probe = rt.eval("(m) => [m.get(1), m.get('1'), m.size, [...m.keys()].map((k) => typeof k)]")
    assert probe({1: "one", 2**64: "big"}) == ["one", pydeno.undefined, 2, ["number", "bigint"]]


def test_a_dict_with_str_keys_is_a_plain_object_whose_keys_no_setter_can_intercept(rt: pydeno.Runtime) -> None:
    probe = rt.eval("(o) => [Object.getPrototypeOf(o) === Object.prototype, Object.keys(o), o.__proto__]")
    assert probe({"__proto__": 5, "a": 1}) == [True, ["__proto__", "a"], 5]


def test_a_set_is_a_javascript_set_and_bytes_a_uint8array_in_the_guest(rt: pydeno.Runtime) -> None:
    probe = rt.eval("(s, b) => [s.has(2), s.has('2'), b.length, b[2], b instanceof Uint8Array]")
    assert probe({1, 2}, bytearray(b"\x00\x01\xfe")) == [True, False, 3, 254, True]


def test_a_datetime_is_a_date_at_the_same_instant_in_the_guest(rt: pydeno.Runtime) -> None:
    probe = rt.eval("(d) => d.toISOString()")
    assert probe(dt.datetime(2024, 1, 1, 9, 30, tzinfo=NINE)) == "2024-01-01T00:30:00.000Z"


def test_a_naive_datetime_argument_is_refused_with_a_clear_error(ident: pydeno.JsFunction) -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        ident(dt.datetime(2020, 1, 1))
    with pytest.raises(ValueError, match="naive datetime"):
        ident([{"when": dt.datetime(2020, 1, 1)}])
    assert ident(1) == 1


def test_a_naive_datetime_from_a_host_function_rejects_in_the_guest(rt: pydeno.Runtime) -> None:
    Box.value = dt.datetime(2020, 1, 1)
    try:
        with pytest.raises(
            pydeno.JavaScriptError, match="result could not be converted: cannot convert a naive datetime"
        ):
            rt.eval("take()")
    finally:
        Box.value = None
    assert rt.eval("1 + 1") == 2


def test_a_jsfunction_passed_back_is_the_same_guest_function(rt: pydeno.Runtime, ident: pydeno.JsFunction) -> None:
    fn, is_it = rt.eval(iife("const f = (x) => x * 2; return [f, (g) => g === f];"))
    assert is_it(fn) is True
    assert rt.eval("kind")(fn) == "function"
    again = ident(fn)
    assert isinstance(again, pydeno.JsFunction)
    assert again(21) == 42
    assert ident([{"f": fn}])[0]["f"](5) == 10


# -- JsFunction handles ---------------------------------------------------------------------------
def test_a_closed_jsfunction_raises_when_called_and_close_is_idempotent(rt: pydeno.Runtime) -> None:
    fn = rt.eval("() => 'called'")
    assert fn() == "called"
    fn.close()
    fn.close()
    assert fn.closed
    with pytest.raises(RuntimeError, match=r"^Function has been closed\nKind: closed "):
        fn()
    assert rt.eval("1 + 1") == 2


def test_a_closed_jsfunction_is_refused_as_an_argument(rt: pydeno.Runtime, ident: pydeno.JsFunction) -> None:
    fn = rt.eval("() => 1")
    fn.close()
    with pytest.raises(RuntimeError, match="Function has been closed"):
        ident(fn)
    with pytest.raises(RuntimeError, match="Function has been closed"):
        ident([{"nested": fn}])
    assert ident(2) == 2


def test_a_jsfunction_cannot_be_called_after_its_runtime_closes() -> None:
    with pydeno.Runtime() as rt:
        fn = rt.eval("(a, b) => a * b")
        assert fn(6, 7) == 42
    assert fn.closed
    with pytest.raises(RuntimeError, match="closed"):
        fn(1, 2)


def test_a_jsfunction_from_another_runtime_is_refused_as_an_argument(ident: pydeno.JsFunction) -> None:
    with pydeno.Runtime() as other:
        foreign = other.eval("() => 1")
        with pytest.raises(ValueError, match="only be passed back to the runtime it came from"):
            ident(foreign)


# -- hypothesis: arbitrary values round-trip modulo the documented mapping -------------------------
TEXT = st.text(st.characters(exclude_categories=()), max_size=12)
SCALARS = (
    st.none()
    | st.just(pydeno.undefined)
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.sampled_from([MAX_SAFE, -MAX_SAFE, 2**53, -(2**53), 2**63, 2**64, -(2**64)])
    | st.floats()
    | TEXT
    | st.binary(max_size=12)
    | st.datetimes(timezones=st.just(UTC))
)
HASHABLE = st.integers() | TEXT | st.none() | st.booleans()
VALUES = st.recursive(
    SCALARS | st.frozensets(HASHABLE, max_size=4),
    lambda children: (
        st.lists(children, max_size=5)
        | st.tuples(children, children)
        | st.dictionaries(TEXT, children, max_size=5)
        | st.dictionaries(st.integers(), children, max_size=3)
    ),
    max_leaves=25,
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=VALUES)
def test_any_supported_python_value_round_trips_through_an_identity_function(
    ident: pydeno.JsFunction, value: Any
) -> None:
    assert_same(ident(value), _expected(value))


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.lists(VALUES, min_size=17, max_size=40))
def test_any_long_list_of_supported_values_round_trips_through_an_identity_function(
    ident: pydeno.JsFunction, value: Any
) -> None:
    assert_same(ident(value), _expected(value))


# A frame over JSON_LANE_BYTES goes as JSON when its value is plain JSON: every documented
# value must still reach the guest as the same type, inside a large value as well.
PADDING = ["x" * 100] * 1000


@pytest.mark.parametrize(("value", "expected", "js_kind"), PY_TO_JS_PARAMS, ids=PY_TO_JS_IDS)
def test_a_value_inside_a_large_argument_reaches_the_guest_as_it_would_alone(
    rt: pydeno.Runtime, ident: pydeno.JsFunction, value: Any, expected: Any, js_kind: str
) -> None:
    first = rt.eval("(v) => kind(v[0])")
    assert first([value, *PADDING]) == js_kind
    back = ident([value, *PADDING])
    assert_same(back[0], expected)
    assert back[1:] == PADDING


@pytest.mark.parametrize(
    ("value", "lane"),
    [
        pytest.param([{"id": i, "name": f"n{i}", "ok": True, "x": i / 3} for i in range(5000)], True, id="plain"),
        pytest.param([{1: "int key"}, *PADDING], False, id="int keys"),
        pytest.param([2**53, *PADDING], False, id="unsafe int"),
        pytest.param([float("nan"), *PADDING], False, id="nan"),
        pytest.param(["\ud800", *PADDING], False, id="lone surrogate"),
        pytest.param([b"bytes", *PADDING], False, id="bytes"),
        pytest.param([pydeno.undefined, *PADDING], False, id="undefined"),
    ],
)
def test_only_plain_json_values_take_the_json_lane(
    rt: pydeno.Runtime, ident: pydeno.JsFunction, monkeypatch: pytest.MonkeyPatch, value: Any, lane: bool
) -> None:
    taken: list[bool] = []
    codec = rt._sup.core.codec
    real = codec._pack_json_lane

    def spy(head: list[Any], item: Any, limit: int) -> bytes | None:
        data = real(head, item, limit)
        taken.append(data is not None)
        return data

    monkeypatch.setattr(codec, "_pack_json_lane", spy)
    back = ident(value)
    assert taken == [lane]
    assert len(back) == len(value)
