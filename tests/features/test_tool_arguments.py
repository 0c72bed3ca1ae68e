"""Tool arguments sent by real programs in real workers are checked against what their schema
says, exactly: a NaN is refused by bounds before the tool runs, an int parameter receives an exact
int or a refusal, bounds from metadata hold on the host, an integer too long for text is a tool
error naming its field, and a literal or a discriminated union arrives as its declared member.
The validator itself, without a worker, is tests/unit/test_tool_validation.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, Literal

import anyio
import pydantic
import pytest
from pydantic import Field

import pydeno
from tests.support.tool_types import Placed, Range, Sized

SEEN: list[Any] = []


@pydeno.tool
def measure(x: float) -> None:
    """Record x."""
    SEEN.append(x)


@pydeno.tool
def count(n: int, more: list[int] | None = None) -> None:
    """Record n and more, with their types."""
    SEEN.append((type(n).__name__, n, [(type(m).__name__, m) for m in more or []]))


@pydeno.tool
async def count_later(n: int) -> None:
    """Record n, from an async tool."""
    await anyio.sleep(0)
    SEEN.append((type(n).__name__, n))


@pydeno.tool
def rate(pct: Annotated[float, Field(ge=0, le=100)], r: Range, s: Sized) -> None:
    """Record a percentage."""
    SEEN.append((pct, r, s))


@pydeno.tool
def place(p: Placed) -> None:
    """Record a place."""
    SEEN.append(p)


BOUNDED = pydeno.Tool(
    "bounded",
    SEEN.append,
    input_schema={"type": "object", "properties": {"x": {"type": "number", "minimum": 0, "maximum": 10}}},
)


@pytest.fixture
def cm() -> Iterator[pydeno.CodeMode]:
    SEEN.clear()
    with pydeno.CodeMode([measure, count, count_later, rate, place, BOUNDED]) as cm:
        yield cm


def messages(cm: pydeno.CodeMode, calls: str) -> Any:
    """Each call of calls (a JavaScript array of thunks) as its error message, or null."""
    result = cm.execute(
        f"const out = [];\nfor (const f of {calls}) {{\n"
        "  try { await f(); out.push(null) } catch (e) { out.push(e.message) }\n}\nout"
    )
    assert result.ok, str(result)
    return result.value


def test_a_nan_argument_from_a_program_is_refused_by_bounds_and_the_tool_never_runs(cm: pydeno.CodeMode) -> None:
    got = messages(
        cm,
        "[() => tools.bounded({x: NaN}), () => tools.bounded({x: Infinity}), () => tools.measure({x: NaN}),"
        " () => tools.measure({x: -Infinity}), () => tools.rate({pct: NaN, r: {low: 0, tag: 'a'}, s: {count: 1}})]",
    )
    assert got == [
        "tools.bounded(): invalid arguments: $.x: NaN is not a finite number (JSON has no NaN or Infinity)",
        "tools.bounded(): invalid arguments: $.x: Infinity is not a finite number (JSON has no NaN or Infinity)",
        "tools.measure(): invalid arguments: $.x: NaN is not a finite number (JSON has no NaN or Infinity)",
        "tools.measure(): invalid arguments: $.x: -Infinity is not a finite number (JSON has no NaN or Infinity)",
        "tools.rate(): invalid arguments: $.pct: NaN is not a finite number (JSON has no NaN or Infinity)",
    ]
    assert SEEN == []


def test_an_int_parameter_receives_an_exact_int_or_a_refusal(cm: pydeno.CodeMode) -> None:
    got = messages(
        cm,
        "[() => tools.count({n: -0, more: [-0, 2**53 - 1, 3]}), () => tools.count({n: 2n ** 70n}),"
        " () => tools.count({n: 2**53}), () => tools.count({n: 1e300}), () => tools.count({n: 2.5}),"
        " () => tools.count({n: 1, more: [1, -(2**53)]}), () => tools.count({n: NaN})]",
    )
    beyond = (
        "is not an exact integer: it is beyond Number.MAX_SAFE_INTEGER (2**53 - 1), where a JavaScript number "
        "cannot tell neighbouring integers apart; pass a BigInt (e.g. 2n ** 60n) for a larger integer"
    )
    assert got == [
        None,
        None,
        f"tools.count(): invalid arguments: $.n: 9007199254740992 {beyond}",
        f"tools.count(): invalid arguments: $.n: 1e+300 {beyond}",
        "tools.count(): invalid arguments: $.n: 2.5 is not of type 'integer'",
        f"tools.count(): invalid arguments: $.more[1]: -9007199254740992 {beyond}",
        "tools.count(): invalid arguments: $.n: NaN is not a finite number (JSON has no NaN or Infinity)",
    ]
    assert SEEN == [
        ("int", 0, [("int", 0), ("int", 2**53 - 1), ("int", 3)]),
        ("int", 2**70, []),
    ]


def test_an_async_tool_gets_the_same_exact_ints_and_refusals(cm: pydeno.CodeMode) -> None:
    got = messages(cm, "[() => tools.count_later({n: -0}), () => tools.count_later({n: 2**53})]")
    assert got[0] is None
    assert got[1].startswith("tools.count_later(): invalid arguments: $.n: 9007199254740992 is not an exact integer")
    assert SEEN == [("int", 0)]


def test_the_async_code_mode_refuses_a_nan_and_makes_an_exact_int() -> None:
    SEEN.clear()

    async def main() -> Any:
        async with pydeno.AsyncCodeMode([count_later, measure]) as cm:
            return await cm.execute(
                "const out = [];\n"
                "try { await tools.measure({x: NaN}) } catch (e) { out.push(e.message) }\n"
                "await tools.count_later({n: -0});\nout"
            )

    result = anyio.run(main)
    assert result.value == [
        "tools.measure(): invalid arguments: $.x: NaN is not a finite number (JSON has no NaN or Infinity)"
    ], str(result)
    assert SEEN == [("int", 0)]


def test_bounds_from_metadata_are_enforced_on_the_host(cm: pydeno.CodeMode) -> None:
    got = messages(
        cm,
        "[() => tools.rate({pct: 150, r: {low: 0, tag: 'a'}, s: {count: 1}}),"
        " () => tools.rate({pct: 5, r: {low: -1, tag: 'a'}, s: {count: 1}}),"
        " () => tools.rate({pct: 5, r: {low: 0, tag: 'abcd'}, s: {count: 1}}),"
        " () => tools.rate({pct: 5, r: {low: 0, tag: 'a'}, s: {count: 0}}),"
        " () => tools.rate({pct: 5, r: {low: 0, tag: 'a'}, s: {count: 1, names: ['']}}),"
        " () => tools.rate({pct: 99.5, r: {low: 0.5, tag: 'abc'}, s: {count: 9, names: ['a']}})]",
    )
    assert got == [
        "tools.rate(): invalid arguments: $.pct: 150 is greater than the maximum of 100",
        "tools.rate(): invalid arguments: $.r.low: -1 is less than the minimum of 0",
        "tools.rate(): invalid arguments: $.r.tag: 'abcd' is too long",
        "tools.rate(): invalid arguments: $.s.count: 0 is less than or equal to the minimum of 0",
        "tools.rate(): invalid arguments: $.s.names[0]: '' should be non-empty",
        None,
    ]
    assert [(99.5, {"low": 0.5, "tag": "abc"}, Sized(count=9, names=["a"]))] == SEEN


def test_a_pydantic_dataclass_is_checked_by_its_bounds_and_built_by_pydantic(cm: pydeno.CodeMode) -> None:
    got = messages(
        cm,
        "[() => tools.place({p: {row: -1}}), () => tools.place({p: {row: 2, label: 'abc'}}),"
        " () => tools.place({p: {row: -0}})]",
    )
    assert got == [
        "tools.place(): invalid arguments: $.p.row: -1 is less than the minimum of 0",
        "tools.place(): invalid arguments: $.p.label: 'abc' is too long",
        None,
    ]
    assert [Placed(row=0)] == SEEN
    assert type(SEEN[0].row) is int


# --- names that collide --------------------------------------------------------------------------
def test_namespaces_that_share_a_prefix_without_colliding_are_accepted() -> None:
    with pydeno.CodeMode(
        [pydeno.Tool("a.b", lambda: 1), pydeno.Tool("a.c", lambda: 2), pydeno.Tool("ab", lambda: 3)]
    ) as c:
        result = c.execute("[await tools.a.b(), await tools.a.c(), await tools.ab()]")
    assert result.value == [1, 2, 3], str(result)


HUGE = pydeno.Tool(
    "huge",
    SEEN.append,
    input_schema={
        "type": "object",
        "properties": {"n": {"type": "integer", "maximum": 10}, "half": {"multipleOf": 2.5}, "s": {"type": "string"}},
    },
)


def test_an_integer_too_long_for_text_is_a_tool_error_naming_the_field_not_a_host_failure() -> None:
    SEEN.clear()
    with pydeno.CodeMode([HUGE]) as cm:
        got = messages(cm, "[() => tools.huge({n: 10n ** 5000n}), () => tools.huge({s: [1, -(10n ** 4300n)]})]")
    assert got == [
        "tools.huge(): invalid arguments: $.n: an integer of more than 4300 digits is refused",
        "tools.huge(): invalid arguments: $.s[1]: an integer of more than 4300 digits is refused",
    ]
    assert SEEN == []


def test_a_huge_integer_meets_a_fractional_multiple_of_exactly() -> None:
    SEEN.clear()
    with pydeno.CodeMode([HUGE]) as cm:
        got = messages(cm, "[() => tools.huge({half: 10n ** 400n}), () => tools.huge({half: 10n ** 400n + 1n})]")
    assert got[0] is None
    assert got[1] == f"tools.huge(): invalid arguments: $.half: {10**400 + 1} is not a multiple of 2.5"
    assert SEEN == [{"half": 10**400}]


def test_a_literal_parameter_receives_the_declared_member_itself() -> None:
    seen: list[Any] = []

    def level(n: Literal[0, 1, 2], m: Literal[0, 1] | None = None) -> None:
        seen.append((n, type(n).__name__, m, type(m).__name__))

    with pydeno.CodeMode([level]) as cm:
        result = cm.execute("await tools.level({n: -0, m: -0})")
    assert result.ok, str(result)
    assert seen == [(0, "int", 0, "int")]


class Cat(pydantic.BaseModel):
    kind: Literal["cat"]
    lives: int


class Dog(pydantic.BaseModel):
    kind: Literal["dog"]


def test_a_discriminated_union_keeps_its_members_and_is_checked_by_them() -> None:
    seen: list[Any] = []

    def adopt(pet: Annotated[Cat | Dog, Field(discriminator="kind", description="the pet")]) -> None:
        seen.append(pet)

    tool = pydeno.Tool("adopt", adopt)
    assert tool.input_schema["properties"]["pet"] == {
        "anyOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
        "description": "the pet",
    }
    with pydeno.CodeMode([tool]) as cm:
        got = messages(
            cm, "[() => tools.adopt({pet: {kind: 'cat', lives: 9}}), () => tools.adopt({pet: {kind: 'cow'}})]"
        )
    assert got[0] is None
    assert got[1].startswith("tools.adopt(): invalid arguments: $.pet"), got[1]
    assert seen == [Cat(kind="cat", lives=9)]
