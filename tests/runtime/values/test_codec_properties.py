"""The codec, property by property: random values built in the guest arrive exactly as
docs/values.md says, or are refused with the documented error.

Each example is a JavaScript expression built together with the Python value it must become
(or the fact that it must be refused), evaluated in one real runtime.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pydeno

MAX_SAFE: Final = 2**53 - 1
EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
MIN_DATE_MS: Final = -62135596800000
MAX_DATE_MS: Final = 253402300799999


@dataclass(frozen=True)
class Case:
    """A JavaScript expression, and what the host must make of it."""

    js: str
    expected: Any = None
    refused: bool = False


class Hole:
    """An array hole: no element at all, which reads as undefined."""


HOLE: Final = Hole()


def js_string(s: str) -> str:
    """s as a JavaScript string literal, one UTF-16 unit at a time (lone surrogates too)."""
    units = s.encode("utf-16-le", "surrogatepass")
    return '"' + "".join(f"\\u{int.from_bytes(units[i : i + 2], 'little'):04x}" for i in range(0, len(units), 2)) + '"'


def as_python(s: str) -> str:
    """What the host makes of that string: pairs joined, lone surrogates as U+FFFD."""
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def js_number(x: float) -> Case:
    if math.isnan(x):
        return Case("NaN", math.nan)
    if math.isinf(x):
        return Case("Infinity" if x > 0 else "-Infinity", x)
    if x == 0 and math.copysign(1, x) < 0:
        return Case("-0", -0.0)
    if x.is_integer() and abs(x) <= MAX_SAFE:
        return Case(repr(x), int(x))
    return Case(repr(x), x)


def date(ms: int) -> Case:
    if MIN_DATE_MS <= ms <= MAX_DATE_MS:
        return Case(f"new Date({ms})", EPOCH + dt.timedelta(milliseconds=ms))
    return Case(f"new Date({ms})", refused=True)


# A primitive that can be a Map key or a Set item: (JavaScript identity, literal, Python value).
KEYS: Final = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=4).map(lambda s: (("s", s), js_string(s), s)),
    st.integers(-3, 3).map(lambda n: (("n", n), str(n), n)),
    st.integers(-3, 3).map(lambda n: (("b", n), f"{n}n", n)),
    st.booleans().map(lambda b: (("t", b), "true" if b else "false", b)),
    st.just((("null",), "null", None)),
)


def distinct_in_python(keys: list[tuple[Any, str, Any]]) -> list[tuple[Any, str, Any]] | None:
    """The keys JavaScript keeps (first of each identity), or None when two of them would be
    one key in Python (true and 1, 1 and 1n)."""
    kept: list[tuple[Any, str, Any]] = []
    for key in keys:
        if any(key[0] == k[0] for k in kept):
            continue
        if any(key[2] == k[2] and hash(key[2]) == hash(k[2]) for k in kept):
            return None
        kept.append(key)
    return kept


def refused_if_any(*cases: Case) -> bool:
    return any(c.refused for c in cases)


LEAVES: Final = st.one_of(
    st.just(Case("null", None)),
    st.just(Case("undefined", pydeno.undefined)),
    st.booleans().map(lambda b: Case("true" if b else "false", b)),
    st.integers(-MAX_SAFE, MAX_SAFE).map(lambda n: Case(str(n), n)),
    st.one_of(st.integers(max_value=-MAX_SAFE - 1), st.integers(min_value=MAX_SAFE + 1)).map(
        lambda n: Case(f"{n}n", n)
    ),
    st.integers(-(2**80), 2**80).map(lambda n: Case(f"{n}n", n)),
    st.floats(allow_nan=True, allow_infinity=True).map(js_number),
    st.sampled_from([0.0, -0.0, 0.5, -1e-300, 2.0**53, 1e21, 5e-324]).map(js_number),
    st.text(max_size=8).map(lambda s: Case(js_string(s), as_python(s))),
    st.binary(max_size=8).map(lambda b: Case(f"new Uint8Array([{', '.join(map(str, b))}])", b)),
    st.integers(MIN_DATE_MS - 10**6, MAX_DATE_MS + 10**6).map(date),
    st.just(Case("new Date(NaN)", refused=True)),
)


def arrays(children: st.SearchStrategy[Case]) -> st.SearchStrategy[Case]:
    def build(items: list[Case | Hole]) -> Case:
        parts = ["" if isinstance(c, Hole) else c.js for c in items]
        # A trailing comma ends the literal without adding a hole: one more keeps the last.
        js = "[" + ", ".join(parts) + ("," if parts and parts[-1] == "" else "") + "]"
        expected = [pydeno.undefined if isinstance(c, Hole) else c.expected for c in items]
        return Case(js, expected, refused_if_any(*(c for c in items if isinstance(c, Case))))

    return st.lists(st.one_of(children, st.just(HOLE)), max_size=5).map(build)


def objects(children: st.SearchStrategy[Case]) -> st.SearchStrategy[Case]:
    def build(entries: dict[str, Case]) -> Case:
        js = "({" + ", ".join(f"{js_string(k)}: {c.js}" for k, c in entries.items()) + "})"
        return Case(js, {k: c.expected for k, c in entries.items()}, refused_if_any(*entries.values()))

    # A "__proto__" key in a literal sets the prototype; a lone surrogate in a key becomes
    # U+FFFD, and two such keys would be one: neither is what this property is about.
    names = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=5).filter(lambda k: k != "__proto__")
    return st.dictionaries(names, children, max_size=4).map(build)


def maps(children: st.SearchStrategy[Case]) -> st.SearchStrategy[Case]:
    def build(entries: list[tuple[tuple[Any, str, Any], Case]]) -> Case:
        js = "new Map([" + ", ".join(f"[{k[1]}, {v.js}]" for k, v in entries) + "])"
        kept = distinct_in_python([k for k, _ in entries])
        if kept is None:
            return Case(js, refused=True)
        # A repeated key keeps its first place and takes its last value, as in JavaScript.
        last = {k[0]: v for k, v in entries}
        return Case(js, {k[2]: last[k[0]].expected for k in kept}, refused_if_any(*last.values()))

    return st.lists(st.tuples(KEYS, children), max_size=4).map(build)


def sets() -> st.SearchStrategy[Case]:
    def build(items: list[tuple[Any, str, Any]]) -> Case:
        js = "new Set([" + ", ".join(k[1] for k in items) + "])"
        kept = distinct_in_python(items)
        return Case(js, refused=True) if kept is None else Case(js, {k[2] for k in kept})

    return st.lists(KEYS, max_size=5).map(build)


VALUES: Final = st.recursive(
    st.one_of(LEAVES, sets()),
    lambda children: st.one_of(arrays(children), objects(children), maps(children)),
    max_leaves=12,
)


def exactly(got: Any, expected: Any) -> bool:
    """Equal, and of the same type all the way down: -0.0 is not 0, 1 is not 1.0 or True."""
    if type(got) is not type(expected):
        return False
    if isinstance(got, float):
        if math.isnan(expected):
            return math.isnan(got)
        return got == expected and math.copysign(1, got) == math.copysign(1, expected)
    if isinstance(got, list):
        return len(got) == len(expected) and all(exactly(a, b) for a, b in zip(got, expected, strict=True))
    if isinstance(got, dict):
        return got.keys() == expected.keys() and all(exactly(got[k], expected[k]) for k in got)
    if isinstance(got, set):
        return got == expected and {(type(v), v) for v in got} == {(type(v), v) for v in expected}
    return bool(got == expected)


@pytest.fixture(scope="module")
def runtime() -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime() as rt:
        yield rt


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=VALUES)
def test_a_value_built_in_the_guest_arrives_exactly_or_is_refused(runtime: pydeno.Runtime, case: Case) -> None:
    if case.refused:
        with pytest.raises(pydeno.JavaScriptError, match="could not be converted"):
            runtime.eval(case.js)
        return
    got = runtime.eval(case.js)
    assert exactly(got, case.expected), f"{case.js} gave {got!r}, expected {case.expected!r}"


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=VALUES)
def test_a_value_a_guest_passes_to_a_host_function_arrives_exactly_or_is_refused(
    runtime: pydeno.Runtime, case: Case
) -> None:
    received: list[Any] = []
    runtime.bind_function("take", received.append)
    outcome = runtime.eval(f"try {{ await take({case.js}); 'taken' }} catch (e) {{ e.message }}")
    if case.refused:
        assert "could not be converted" in outcome
        assert received == []
        return
    assert outcome == "taken"
    (got,) = received
    assert exactly(got, case.expected), f"{case.js} gave {got!r}, expected {case.expected!r}"
