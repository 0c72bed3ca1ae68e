"""Long arrays against real deno workers: an array result of 4096 items or more leaves the worker
in parts (runs of items), which the host joins; each run takes the JSON or the msgpack lane on its
own."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

import pydeno
from tests.runtime.values.value_checks import EPOCH, assert_same, iife, js_number

LONG = 5000


@pytest.fixture
def part_frames(rt: pydeno.Runtime, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many items each PART frame the host receives carries."""
    connection = rt._sup.core.connection
    seen: list[int] = []
    real = connection._part

    def spy(rid: int, items: list[Any], length: int) -> None:
        seen.append(len(items))
        real(rid, items, length)

    monkeypatch.setattr(connection, "_part", spy)
    return seen


LONG_SHAPES = [
    (
        "JSON-shaped objects",
        "({id: i, name: 'x' + i, sub: [i / 4, null]})",
        lambda i: {"id": i, "name": f"x{i}", "sub": [js_number(i / 4), None]},
    ),
    (
        "an undefined in some runs",
        "i % 1500 === 7 ? undefined : 'v' + i",
        lambda i: pydeno.undefined if i % 1500 == 7 else f"v{i}",
    ),
    (
        "Dates and BigInts",
        "i % 2 ? new Date(i) : BigInt(i) ** 3n",
        lambda i: EPOCH + dt.timedelta(milliseconds=i) if i % 2 else i**3,
    ),
    ("holes", "i % 1000 === 0 ? [] : [i]", lambda i: [] if i % 1000 == 0 else [i]),
]


@pytest.mark.parametrize(("item", "expect"), [s[1:] for s in LONG_SHAPES], ids=[s[0] for s in LONG_SHAPES])
def test_a_long_array_result_arrives_whole_and_in_order_from_its_parts(
    rt: pydeno.Runtime, part_frames: list[int], item: str, expect: Callable[[int], Any]
) -> None:
    value = rt.eval(f"Array.from({{length: {LONG}}}, (_, i) => {item})")
    assert_same(value, [expect(i) for i in range(LONG)])
    # Eight runs of 625 items: seven PART frames, and the RESULT frame with the last run.
    assert part_frames == [LONG // 8] * 7


def test_a_sparse_long_array_keeps_its_holes_as_undefined(rt: pydeno.Runtime, part_frames: list[int]) -> None:
    value = rt.eval(iife(f"const a = new Array({LONG}); a[10] = 'x'; a[{LONG - 1}] = 'y'; return a;"))
    assert part_frames
    assert value[10] == "x" and value[-1] == "y"
    assert all(v is pydeno.undefined for i, v in enumerate(value) if i not in (10, LONG - 1))


def test_function_handles_in_a_long_array_stay_callable(rt: pydeno.Runtime, part_frames: list[int]) -> None:
    value = rt.eval(f"Array.from({{length: {LONG}}}, (_, i) => i % 1000 === 0 ? () => i : i)")
    assert part_frames
    assert [value[i]() for i in range(0, LONG, 1000)] == list(range(0, LONG, 1000))
    assert value[1] == 1


@pytest.mark.parametrize(
    "code",
    [
        pytest.param("Array.from({length: 4095}, (_, i) => i)", id="4095 items"),
        pytest.param(
            f"new (class extends Array {{}})(...Array.from({{length: {LONG}}}, (_, i) => i))", id="Array subclass"
        ),
    ],
)
def test_an_array_whose_copies_the_guest_could_shape_goes_in_one_frame(
    rt: pydeno.Runtime, part_frames: list[int], code: str
) -> None:
    # Only an array whose prototype is Array.prototype is cut into runs. Short ones gain
    # nothing from parts.
    value = rt.eval(code)
    assert value == list(range(len(value)))
    assert len(value) in (4095, LONG)
    assert part_frames == []


def test_an_array_with_its_own_constructor_arrives_exactly_in_parts(rt: pydeno.Runtime, part_frames: list[int]) -> None:
    # The runs are copied item by item, never built by the species the constructor names.
    value = rt.eval(iife(f"const a = Array.from({{length: {LONG}}}, (_, i) => i); a.constructor = Object; return a;"))
    assert part_frames
    assert value == list(range(LONG))


def test_a_getter_that_gives_arrays_a_tojson_during_the_check_leaves_a_result_in_parts_whole() -> None:
    # The getter runs inside the exactness check of the first run, after its toJSON test:
    # JSON.stringify would then write that toJSON's string instead of the run.
    with pydeno.Runtime() as rt:
        value = rt.eval(
            iife(
                f"const a = Array.from({{length: {LONG}}}, (_, i) => i);"
                "a[10] = {get x() { Array.prototype.toJSON = function () { return 'gotcha'; }; return 1; }};"
                "return a;"
            )
        )
        assert value == [{"x": 1} if i == 10 else i for i in range(LONG)]
        assert rt.eval("delete Array.prototype.toJSON; [1, 2]") == [1, 2]


def test_a_getter_that_gives_arrays_a_tojson_during_the_check_leaves_host_call_arguments_whole() -> None:
    # The argument list must reach the host as an array: a string there is a broken frame.
    with pydeno.Runtime() as rt:
        rt.bind_function("echo", lambda *args: list(args))
        # The getter comes last, so that no array is checked after it ran.
        value = rt.eval("echo([2], {get x() { Array.prototype.toJSON = function () { return 'gotcha'; }; return 1; }})")
        assert value == [[2], {"x": 1}]
        assert rt.eval("delete Array.prototype.toJSON; [1, 2]") == [1, 2]


def test_max_message_bytes_bounds_a_result_in_parts_as_a_whole() -> None:
    # 8192 strings of 40 characters: each part is ~45 KB, well under the limit; all are not.
    with pydeno.Runtime(max_message_bytes=200_000) as rt:
        with pytest.raises(pydeno.JavaScriptError, match="larger than max_message_bytes=200000") as info:
            rt.eval("Array.from({length: 8192}, (_, i) => 'x'.repeat(40))")
        assert info.value.name == "RangeError"
        assert rt.eval("1 + 1") == 2
        assert rt.eval("Array.from({length: 4096}, (_, i) => 'x'.repeat(40))") == ["x" * 40] * 4096
