"""Values that cannot cross, against real deno workers: a result or an argument the codec
cannot convert fails that call alone with an error naming the problem, on whichever side finds
it, and the worker lives on."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest

import pydeno
from tests.runtime.values.value_checks import EPOCH, Box, iife

JS_REFUSALS = [
    ("array cycle", iife("const a = []; a.push(a); return a;"), r"value\[0\] is a cycle"),
    ("object cycle", iife("const o = {x: {}}; o.x.back = o; return o;"), r"value\.x\.back is a cycle"),
    ("Map value cycle", iife("const m = new Map(); m.set('self', [m]); return m;"), r"is a cycle"),
    ("top-level Symbol", "Symbol('s')", r"cannot convert a Symbol \(the value\)"),
    ("nested Symbol", "({a: [1, Symbol('s')]})", r"cannot convert a Symbol \(value\.a\[1\]\)"),
    (
        "Symbol in a long array",
        "Array.from({length: 1000}, (_, i) => i === 999 ? Symbol() : i)",
        r"cannot convert a Symbol \(value\[999\]\)",
    ),
    (
        "Symbol at the end of an array sent in parts",
        "Array.from({length: 5000}, (_, i) => i === 4999 ? Symbol() : i)",
        r"cannot convert a Symbol \(value\[4999\]\)",
    ),
    (
        "Symbol deep in the first part of an array sent in parts",
        "Array.from({length: 5000}, (_, i) => i === 3 ? {a: [Symbol()]} : i)",
        r"cannot convert a Symbol \(value\[3\]\.a\[0\]\)",
    ),
    (
        "array sent in parts that holds itself",
        iife("const a = Array.from({length: 5000}, (_, i) => i); a[4000] = [a]; return a;"),
        r"value\[4000\]\[0\] is a cycle",
    ),
    (
        "200 levels of arrays",
        iife("let d = []; for (let i = 0; i < 200; i++) d = [d]; return d;"),
        r"nested deeper than 128 levels",
    ),
    (
        "129 levels of objects",
        iife("let d = {}; for (let i = 1; i < 129; i++) d = {a: d}; return d;"),
        r"value(\.a)+ is nested deeper than 128 levels",
    ),
    ("Map with an object key", "new Map([[{}, 1]])", r"Map with an object key"),
    ("Map with a function key", "new Map([[() => 1, 1]])", r"Map with an object key"),
    ("Set of objects", "new Set([{a: 1}])", r"Set holding an object"),
    # Distinct in JavaScript, one key in Python: the dict or set would silently keep one.
    (
        "Map keyed by true and 1",
        "new Map([[true, 'a'], [1, 'b']])",
        r"converted: the value is a Map whose keys true and 1 would be one key of a Python dict$",
    ),
    (
        "Map keyed by 0 and false, nested",
        "({m: new Map([[0, 1], [false, 2]])})",
        r"converted: value\.m is a Map whose keys 0 and false would be",
    ),
    ("Map keyed by -0 and false", "new Map([[-0, 1], [false, 2]])", r"keys 0 and false would be one key"),
    ("Map keyed by 1n and 1", "new Map([[1n, 'a'], [1, 'b']])", r"keys 1n and 1 would be one key"),
    (
        "Map keyed by 2**64 and 2n**64n",
        "new Map([[2**64, 'a'], [2n**64n, 'b']])",
        r"keys 18446744073709552000 and 18446744073709551616n",
    ),
    (
        "Map keyed by two Dates of one time",
        "new Map([[new Date(5), 1], [new Date(5), 2]])",
        r"keys Date\(5\) and Date\(5\) would be",
    ),
    (
        "Set of true and 1",
        "new Set([true, 1])",
        r"converted: the value is a Set whose items true and 1 would be one item of a Python set$",
    ),
    (
        "Set of 3 and 3n, in a list",
        "[new Set([3, 3n])]",
        r"converted: value\[0\] is a Set whose items 3 and 3n would be",
    ),
    ("Set of arrays", "new Set([[1]])", r"Set holding an object"),
    ("Invalid Date", "new Date(NaN)", r"cannot convert an Invalid Date"),
    ("Date after year 9999", "new Date(Date.UTC(10000, 0, 1))", r"Date outside the years 1-9999"),
    ("Date before year 1", "new Date(-62135596800001)", r"Date outside the years 1-9999"),
    ("nested Promise", "[Promise.resolve(1)]", r"Promise nested inside value\[0\]; await it first"),
    ("DataView", "new DataView(new ArrayBuffer(2))", r"cannot convert a DataView"),
]


@pytest.mark.parametrize(("code", "message"), [r[1:] for r in JS_REFUSALS], ids=[r[0] for r in JS_REFUSALS])
def test_a_result_that_cannot_be_converted_fails_that_eval_with_a_clear_error_and_the_worker_lives(
    rt: pydeno.Runtime, code: str, message: str
) -> None:
    with pytest.raises(pydeno.JavaScriptError, match="result could not be converted") as info:
        rt.eval(code)
    assert info.value.name == "TypeError"
    assert re.search(message, info.value.message), info.value.message
    assert rt.eval("[1, 'still alive']") == [1, "still alive"]


def test_map_keys_and_set_items_of_mixed_types_that_python_keeps_apart_all_arrive(rt: pydeno.Runtime) -> None:
    value = rt.eval(
        "new Map([[true, 'b'], [2, 2], ['1', 's'], [1.5, 'f'], [2n**70n, 'big'], [new Date(0), 'd0'],"
        " [new Date(1), 'd1'], [null, 'n'], [undefined, 'u']])"
    )
    assert value == {
        True: "b",
        2: 2,
        "1": "s",
        1.5: "f",
        2**70: "big",
        EPOCH: "d0",
        EPOCH + dt.timedelta(milliseconds=1): "d1",
        None: "n",
        pydeno.undefined: "u",
    }
    assert rt.eval("new Set([false, 2, '0', -0.5, 3n, new Date(0)])") == {False, 2, "0", -0.5, 3, EPOCH}


def test_a_refused_value_from_a_jsfunction_call_fails_only_that_call(rt: pydeno.Runtime) -> None:
    fn = rt.eval("(n) => n > 0 ? Symbol() : n")
    with pytest.raises(pydeno.JavaScriptError, match="Symbol"):
        fn(1)
    assert fn(-1) == -1


def _cyclic_list() -> list[Any]:
    value: list[Any] = [1]
    value.append([value])
    return value


def _cyclic_dict() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["self"] = {"again": value}
    return value


def _nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


class Instance:
    """An instance of an arbitrary Python class, which has no JavaScript counterpart."""


PY_REFUSALS = [
    ("list cycle", _cyclic_list(), ValueError, r"is a cycle \(it contains itself\)"),
    ("dict cycle", _cyclic_dict(), ValueError, r"\['self'\]\['again'\] is a cycle"),
    ("object()", object(), TypeError, r"cannot convert builtins\.object to a JavaScript value"),
    ("object() nested in a dict", {"a": [1, object()]}, TypeError, r"cannot convert builtins\.object"),
    ("a class instance", Instance(), TypeError, r"cannot convert [\w.]*Instance to a JavaScript value"),
    ("a complex number", 1j, TypeError, r"cannot convert builtins\.complex"),
    ("naive datetime", dt.datetime(2020, 1, 1), ValueError, r"cannot convert a naive datetime"),
]


@pytest.mark.parametrize(("value", "error", "message"), [r[1:] for r in PY_REFUSALS], ids=[r[0] for r in PY_REFUSALS])
def test_an_argument_that_cannot_be_converted_is_refused_before_sending_and_names_the_problem(
    rt: pydeno.Runtime, ident: pydeno.JsFunction, value: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        ident(value)
    assert ident([1, "still alive"]) == [1, "still alive"]


def test_an_argument_nested_200_levels_deep_is_refused_on_the_host_and_the_worker_lives_on(
    rt: pydeno.Runtime, ident: pydeno.JsFunction
) -> None:
    with pytest.raises(ValueError, match=r"^argument 1(\[0\])+ is nested deeper than 128 levels$"):
        ident(_nested(200))
    Box.value = _nested(200)
    try:
        with pytest.raises(pydeno.JavaScriptError, match="nested deeper than 128 levels"):
            rt.eval("take()")
    finally:
        Box.value = None
    assert ident([1]) == [1]


def test_an_argument_nested_2000_levels_deep_is_refused_on_the_host_naming_the_limit(ident: pydeno.JsFunction) -> None:
    # Deeper than msgpack's own recursion limit, the host's shape check names the problem.
    with pytest.raises(ValueError, match="nested deeper than 128 levels"):
        ident(_nested(2000))
    assert ident([1]) == [1]


def test_a_python_value_whose_map_key_is_a_tuple_is_refused_on_the_way_back(ident: pydeno.JsFunction) -> None:
    with pytest.raises(pydeno.JavaScriptError, match="Map with an object key"):
        ident({(1, 2): "tuple key"})


def test_a_result_larger_than_max_message_bytes_fails_cleanly_and_the_runtime_works_after() -> None:
    with pydeno.Runtime(max_message_bytes=1_000_000) as rt:
        for code in (
            "'x'.repeat(2_000_000)",
            "['x'.repeat(2_000_000)]",
            "['x'.repeat(2_000_000), undefined]",
            "'é'.repeat(600_000)",
            "new Uint8Array(2_000_000)",
            "Array.from({length: 300_000}, (_, i) => i + 0.5)",
            "Array.from({length: 300_000}, (_, i) => -0)",
            "new Map(Array.from({length: 100_000}, (_, i) => [i, 'abcdefghij']))",
        ):
            with pytest.raises(pydeno.JavaScriptError, match="larger than max_message_bytes=1000000") as info:
                rt.eval(code)
            assert info.value.name == "RangeError"
            assert rt.eval("1 + 1") == 2
        ident = rt.eval("(x) => x")
        with pytest.raises(pydeno.JavaScriptError, match="larger than max_message_bytes"):
            ident("y" * 2_000_000)
        assert ident("small") == "small"


def test_a_result_that_fits_max_message_bytes_is_not_refused_for_its_worst_case_utf8_size() -> None:
    # A string is reserved at 3 bytes per UTF-16 unit; that worst case must not count
    # against the limit when the actual encoding fits.
    with pydeno.Runtime(max_message_bytes=1_000_000) as rt:
        assert rt.eval("'x'.repeat(900_000)") == "x" * 900_000
        assert rt.eval("['x'.repeat(900_000)]") == ["x" * 900_000]
        assert rt.eval("['x'.repeat(400_000), undefined]") == ["x" * 400_000, pydeno.undefined]
        assert rt.eval("'é'.repeat(450_000)") == "é" * 450_000
        assert rt.eval("'😀'.repeat(240_000)") == "😀" * 240_000


@pytest.mark.parametrize(
    "make",
    ["new Uint8Array(N)", "'x'.repeat(N)", "['x'.repeat(N)]", "'😀'.repeat(Math.floor(N / 4))"],
    ids=["bytes", "str", "JSON lane", "emoji"],
)
def test_a_result_within_bytes_of_max_message_bytes_is_returned_or_refused_but_never_kills_the_worker(
    make: str,
) -> None:
    limit = 200_000
    accepted = []
    with pydeno.Runtime(max_message_bytes=limit) as rt:
        for n in range(limit - 24, limit + 72, 3):
            try:
                value = rt.eval(make.replace("N", str(n)))
            except pydeno.JavaScriptError as exc:
                assert "larger than max_message_bytes" in str(exc)
            else:
                accepted.append(n)
                assert len(value[0] if isinstance(value, list) else value) in (n, n // 4)
            assert rt.eval("1") == 1
    # The limit is exact to within a frame's own header: values just under it still fit.
    assert accepted
    assert max(accepted) >= limit - 24
