"""Tool arguments are checked against what their schema says, exactly: no NaN or Infinity
where a number is declared, an int or a refusal where an integer is, every bound that
pydantic or Annotated metadata declares, and a tool set whose names cannot collide: the
validator without a worker. The same values sent by real programs in real workers are
tests/features/test_tool_arguments.py."""

from __future__ import annotations

import dataclasses
import math
import sys
import warnings
from typing import Annotated, Any

import annotated_types as at
import pydantic
import pytest
from pydantic import Field

import pydeno
from tests.support.tool_types import Model, Placed, Range, Sized

NON_FINITE = [math.nan, math.inf, -math.inf]


def raw(schema: dict[str, Any]) -> pydeno.Tool:
    """A tool taking one argument x under schema."""
    return pydeno.Tool("t", lambda args: args, input_schema={"type": "object", "properties": {"x": schema}})


def refusal(tool: pydeno.Tool, arguments: dict[str, Any]) -> str:
    with pytest.raises(pydeno.ToolError) as exc_info:
        tool.validate(arguments)
    return str(exc_info.value)


# --- non-finite numbers ------------------------------------------------------------------------


@pytest.mark.parametrize("value", NON_FINITE, ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize(
    "schema",
    [
        {"type": "number"},
        {"type": "integer"},
        {"type": ["number", "null"]},
        {"anyOf": [{"type": "number"}, {"type": "string"}]},
        {"minimum": 0},
        {"maximum": 0},
        {"exclusiveMinimum": 0},
        {"exclusiveMaximum": 0},
        {"multipleOf": 1},
        {"type": "number", "minimum": -1e308, "maximum": 1e308},
    ],
)
def test_a_non_finite_number_satisfies_no_numeric_schema(schema: dict[str, Any], value: float) -> None:
    shown = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[repr(value)]
    assert refusal(raw(schema), {"x": value}) == (
        f"tools.t(): invalid arguments: $.x: {shown} is not a finite number (JSON has no NaN or Infinity)"
    )


def test_a_nan_argument_is_refused_by_a_minimum_with_its_javascript_name() -> None:
    assert refusal(raw({"type": "number", "minimum": 0}), {"x": math.nan}) == (
        "tools.t(): invalid arguments: $.x: NaN is not a finite number (JSON has no NaN or Infinity)"
    )
    assert refusal(raw({"maximum": 0}), {"x": -math.inf}) == (
        "tools.t(): invalid arguments: $.x: -Infinity is not a finite number (JSON has no NaN or Infinity)"
    )


def test_a_schema_that_says_nothing_about_numbers_still_takes_any_value() -> None:
    raw({}).validate({"x": math.nan})
    raw({"not": {"type": "string"}}).validate({"x": math.inf})


def test_finite_numbers_still_meet_their_bounds_as_before() -> None:
    tool = raw({"type": "number", "minimum": 0, "exclusiveMaximum": 1})
    tool.validate({"x": 0})
    tool.validate({"x": 0.5})
    assert (
        refusal(tool, {"x": 1}) == "tools.t(): invalid arguments: $.x: 1 is greater than or equal to the maximum of 1"
    )


def test_an_output_schema_refuses_a_non_finite_result() -> None:
    tool = pydeno.Tool("t", lambda args: math.nan, input_schema={"type": "object"}, output_schema={"type": "number"})
    with pytest.raises(pydeno.ToolError) as exc_info:
        tool.finish(math.nan)
    assert str(exc_info.value) == (
        "tools.t() returned a value its output schema refuses: the result: NaN is not a finite number "
        "(JSON has no NaN or Infinity)"
    )


# --- integers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 7, -(2**53) + 1, 2**53 - 1, 2**70, 3.0, -0.0, float(2**53 - 1)])
def test_an_integer_schema_takes_ints_and_integral_floats_javascript_counts_exactly(value: Any) -> None:
    raw({"type": "integer"}).validate({"x": value})


def test_an_integral_float_beyond_the_safe_range_is_refused_with_why() -> None:
    tool = raw({"type": "integer"})
    for value, shown in [(2.0**53, "9007199254740992"), (-(2.0**53), "-9007199254740992"), (1e300, "1e+300")]:
        assert refusal(tool, {"x": value}) == (
            f"tools.t(): invalid arguments: $.x: {shown} is not an exact integer: it is beyond "
            "Number.MAX_SAFE_INTEGER (2**53 - 1), where a JavaScript number cannot tell neighbouring integers "
            "apart; pass a BigInt (e.g. 2n ** 60n) for a larger integer"
        )
    assert refusal(tool, {"x": 2.5}) == "tools.t(): invalid arguments: $.x: 2.5 is not of type 'integer'"
    assert refusal(tool, {"x": True}) == "tools.t(): invalid arguments: $.x: True is not of type 'integer'"


# --- bounds from pydantic and annotated_types metadata -------------------------------------------


@pytest.mark.parametrize(
    ("hint", "schema"),
    [
        (Annotated[float, Field(ge=0, le=100)], {"type": "number", "minimum": 0, "maximum": 100}),
        (Annotated[float, Field(gt=0, lt=1)], {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}),
        (Annotated[int, Field(multiple_of=5)], {"type": "integer", "multipleOf": 5}),
        (Annotated[str, Field(min_length=1, max_length=3)], {"type": "string", "minLength": 1, "maxLength": 3}),
        (Annotated[str, Field(pattern=r"^[a-z]+$")], {"type": "string", "pattern": r"^[a-z]+$"}),
        (Annotated[int, at.Ge(1)], {"type": "integer", "minimum": 1}),
        (Annotated[int, at.Gt(1)], {"type": "integer", "exclusiveMinimum": 1}),
        (Annotated[float, at.Le(1.5)], {"type": "number", "maximum": 1.5}),
        (Annotated[float, at.Lt(2)], {"type": "number", "exclusiveMaximum": 2}),
        (Annotated[float, at.MultipleOf(0.5)], {"type": "number", "multipleOf": 0.5}),
        (Annotated[str, at.MinLen(2), at.MaxLen(4)], {"type": "string", "minLength": 2, "maxLength": 4}),
        (Annotated[list[int], at.MinLen(1)], {"type": "array", "items": {"type": "integer"}, "minItems": 1}),
        (
            Annotated[dict[str, int], at.MaxLen(2)],
            {"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 2},
        ),
        (Annotated[int, at.Interval(ge=0, lt=10)], {"type": "integer", "minimum": 0, "exclusiveMaximum": 10}),
        (list[Annotated[int, Field(ge=0)]], {"type": "array", "items": {"type": "integer", "minimum": 0}}),
        (
            Annotated[int, Field(ge=0)] | None,
            {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]},
        ),
        (
            Annotated[float, "a share", Field(ge=0, le=1, examples=[0.5])],
            {"type": "number", "description": "a share", "minimum": 0, "maximum": 1, "examples": [0.5]},
        ),
        (Annotated[int, Field(description="how many")], {"type": "integer", "description": "how many"}),
    ],
)
def test_every_bound_the_metadata_declares_reaches_the_schema(hint: Any, schema: dict[str, Any]) -> None:
    def fn(x): ...  # type: ignore[no-untyped-def]

    fn.__annotations__ = {"x": hint}
    assert pydeno.Tool("t", fn).input_schema["properties"]["x"] == schema


def test_bounds_on_typeddict_dataclass_and_model_fields_reach_their_definitions() -> None:
    def fn(r: Range, s: Sized, m: Model, p: Placed) -> None: ...

    defs = pydeno.Tool("t", fn).input_schema["$defs"]
    assert defs["Range"]["properties"] == {
        "low": {"type": "number", "minimum": 0},
        "tag": {"type": "string", "maxLength": 3},
    }
    assert defs["Sized"]["properties"] == {
        "count": {"type": "integer", "exclusiveMinimum": 0, "maximum": 9},
        "names": {"type": "array", "items": {"type": "string", "minLength": 1}},
    }
    assert defs["Model"]["properties"]["share"] == {"type": "number", "minimum": 0, "maximum": 1, "title": "Share"}
    # A pydantic dataclass keeps its bounds in Field defaults, which pydantic's generator reads.
    assert defs["Placed"]["properties"]["row"] == {"type": "integer", "minimum": 0, "title": "Row"}
    assert defs["Placed"]["properties"]["label"]["maxLength"] == 2


def test_a_pydantic_field_as_a_plain_dataclass_default_is_refused() -> None:
    @dataclasses.dataclass
    class Plain:
        row: int = Field(ge=0)  # type: ignore[assignment]

    def fn(p: Plain) -> None: ...

    with pytest.raises(TypeError) as exc_info:
        pydeno.Tool("t", fn)
    assert str(exc_info.value) == (
        "tool 't': parameter 'p': Plain.row: a pydantic Field as a dataclass default is not applied by the "
        "dataclass; write row: Annotated[<type>, Field(...)] = <default>"
    )


@pytest.mark.parametrize(
    ("hint", "message"),
    [
        (Annotated[str, Field(ge=0)], "Annotated metadata gives 'ge', which does not apply to a string"),
        (
            Annotated[int | None, Field(ge=0)],
            "Annotated metadata that bounds a value must be on the union's member it bounds "
            "(e.g. Annotated[int, Field(ge=0)] | None), not on the whole union",
        ),
        (Annotated[int, Field(default=3)], "a default inside Annotated is not applied to a call"),
        (Annotated[int, Field(alias="y")], "alias='y' in Annotated is not applied to a tool's arguments"),
        (Annotated[float, Field(allow_inf_nan=True)], "allow_inf_nan=True cannot hold"),
        (
            Annotated[int, pydantic.AfterValidator(abs)],
            "AfterValidator in Annotated is not run when the tool is called: check the value in the function",
        ),
    ],
)
def test_metadata_the_schema_cannot_state_is_refused_when_the_tool_is_made(hint: Any, message: str) -> None:
    def fn(x): ...  # type: ignore[no-untyped-def]

    fn.__annotations__ = {"x": hint}
    with pytest.raises(TypeError) as exc_info:
        pydeno.Tool("t", fn)
    assert str(exc_info.value).startswith(f"tool 't': parameter 'x': {message}"), str(exc_info.value)


def test_a_pydantic_field_as_a_parameters_default_is_refused_with_the_annotated_spelling() -> None:
    def fn(x: int = Field(3, ge=0)) -> None: ...

    with pytest.raises(TypeError) as exc_info:
        pydeno.Tool("t", fn)
    assert str(exc_info.value) == (
        "tool 't': parameter 'x': a pydantic Field as a default is not applied when the tool is called; "
        "write x: Annotated[<type>, Field(...)] = <default>"
    )


# --- names that collide --------------------------------------------------------------------------


def noop() -> None: ...


@pytest.mark.parametrize("names", [["a", "a.b"], ["a.b", "a"], ["x.a.b", "x.a"], ["x.a", "x.a.b.c"]])
def test_a_tool_set_whose_names_collide_is_refused_at_creation_as_the_bridge_refuses_it(names: list[str]) -> None:
    tools = [pydeno.Tool(name, noop) for name in names]
    with pytest.raises(ValueError) as code_mode:
        pydeno.CodeMode(tools)
    with pytest.raises(ValueError) as bridge:
        pydeno.ToolBridge({name: noop for name in names})
    assert str(code_mode.value) == str(bridge.value)
    assert str(code_mode.value).startswith("tool name "), str(code_mode.value)
    assert "is both a tool and the namespace of" in str(code_mode.value)


def test_the_async_code_mode_refuses_colliding_names_too() -> None:
    with pytest.raises(ValueError, match=r"^tool name 'a' is both a tool and the namespace of 'a\.b'$"):
        pydeno.AsyncCodeMode([pydeno.Tool("a.b", noop), pydeno.Tool("a", noop)])


def test_the_declarations_show_every_bound_the_metadata_declares() -> None:
    @pydeno.tool
    def pick(
        pct: Annotated[float, Field(ge=0, le=100)],
        step: Annotated[int, Field(multiple_of=5)],
        tags: Annotated[dict[str, str], at.MaxLen(2)],
    ) -> None:
        """Pick."""

    with pydeno.CodeMode([pick]) as cm:
        declarations = cm.typescript()
    assert "/**\n   * @minimum 0\n   * @maximum 100\n   */\n  pct: number;" in declarations, declarations
    assert "/** @multipleOf 5 */\n  step: number;" in declarations, declarations
    assert "/** @maxProperties 2 */\n  tags: Record<string, string>;" in declarations, declarations


def test_annotated_types_bounds_without_pydantic_are_refused_not_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    # As if pydantic were not installed: importing it fails.
    monkeypatch.setitem(sys.modules, "pydantic", None)

    def fn(x): ...  # type: ignore[no-untyped-def]

    fn.__annotations__ = {"x": Annotated[int, at.Ge(0)]}
    with pytest.raises(TypeError) as exc_info:
        pydeno.Tool("t", fn)
    assert str(exc_info.value) == (
        "tool 't': parameter 'x': Annotated metadata Ge(ge=0) needs pydantic to be stated in the schema "
        "(pip install pydantic)"
    )
    fn.__annotations__ = {"x": Annotated[int, "a count", object()]}
    assert pydeno.Tool("t", fn).input_schema["properties"]["x"] == {"type": "integer", "description": "a count"}


def test_field_only_attributes_become_keywords_without_a_warning() -> None:
    def fn(x: Annotated[int, Field(deprecated=True, title="Count")]) -> None: ...

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        schema = pydeno.Tool("t", fn).input_schema
    assert schema["properties"]["x"] == {"type": "integer", "deprecated": True, "title": "Count"}


def test_an_optional_number_says_why_a_non_finite_or_inexact_value_fits_no_member() -> None:
    def fn(n: int | None = None, x: float | str = 0) -> None: ...

    tool = pydeno.Tool("t", fn)
    assert refusal(tool, {"n": 2.0**53}) == (
        "tools.t(): invalid arguments: $.n: 9007199254740992 is not an exact integer: it is beyond "
        "Number.MAX_SAFE_INTEGER (2**53 - 1), where a JavaScript number cannot tell neighbouring integers apart; "
        "pass a BigInt (e.g. 2n ** 60n) for a larger integer"
    )
    assert refusal(tool, {"n": math.nan}) == (
        "tools.t(): invalid arguments: $.n: NaN is not a finite number (JSON has no NaN or Infinity)"
    )
    assert refusal(tool, {"x": -math.inf}) == (
        "tools.t(): invalid arguments: $.x: -Infinity is not a finite number (JSON has no NaN or Infinity)"
    )
    assert (
        refusal(tool, {"n": "a"})
        == "tools.t(): invalid arguments: $.n: 'a' is not valid under any of the given schemas"
    )
