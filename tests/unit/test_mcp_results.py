"""Results bounded for the model that reads them: ``ExecutionResult``'s text form, its
``to_dict(max_chars=)`` / ``to_json(max_chars=)``, and what the MCP server sends, made without
a worker. The results of real programs are tests/features/test_mcp_program_results.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import pydeno
from pydeno._code_mode.api import CodeModeTools
from pydeno._code_mode.core import Execution
from pydeno._code_mode.result import MIN_RESULT_CHARS, ExecutionResult


def result_of(value: Any = None, *, stdout: str = "", error: BaseException | None = None) -> ExecutionResult:
    execution = Execution(CodeModeTools([], max_tool_calls=None, approve=None), 20_000)
    for line in stdout.splitlines():
        execution.console("log", line)
    return execution.result(value=value, error=error)


def test_truncated_says_when_the_text_form_cut_the_value() -> None:
    result = result_of("x" * 30_000)
    assert "value" in result.truncated
    assert str(result).endswith("... (cut at 20000 characters)")
    assert result.value == "x" * 30_000


def test_a_value_the_text_form_shows_whole_is_not_named_in_truncated() -> None:
    assert result_of("x" * 100).truncated == ()


def test_to_dict_without_a_bound_carries_the_whole_value_and_says_only_what_it_cut() -> None:
    result = result_of("x" * 30_000, stdout="y" * 30_000)
    data = result.to_dict()
    assert data["value"] == "x" * 30_000
    assert data["truncated"] == ["stdout"]
    assert result.truncated == ("stdout", "value")


def test_to_json_max_chars_replaces_a_long_value_with_a_marker_and_names_it() -> None:
    result = result_of(["é" * 1000] * 100)
    text = result.to_json(max_chars=5000)
    assert len(text) <= 5000
    data = json.loads(text)
    whole = json.dumps(result.to_dict()["value"], ensure_ascii=False)
    assert data["value"]["$type"] == "truncated"
    assert data["value"]["chars"] == len(whole)
    assert whole.startswith(data["value"]["preview"])
    assert len(data["value"]["preview"]) > 3000  # what room there is goes to the preview
    assert data["truncated"] == ["value"]
    assert result.value == ["é" * 1000] * 100  # the host still has all of it


def test_a_result_that_fits_is_the_same_under_max_chars() -> None:
    result = result_of({"a": [1, 2, 3]}, stdout="hello")
    assert result.to_dict(max_chars=10_000) == result.to_dict()


def test_a_max_chars_below_the_minimum_is_refused_saying_the_minimum() -> None:
    with pytest.raises(ValueError, match=f"max_chars must be at least {MIN_RESULT_CHARS}"):
        result_of(1).to_dict(max_chars=10)


def test_a_long_error_message_and_stdout_share_the_bound() -> None:
    error = pydeno.JavaScriptError("Error", "e" * 15_000, "")
    result = result_of(stdout="o" * 15_000, error=error)
    text = result.to_json(max_chars=4000)
    assert len(text) <= 4000
    data = json.loads(text)
    assert data["error"]["kind"] == "js_error"
    assert data["error"]["message"].startswith("eee")
    assert data["stdout"].startswith("ooo")
    assert set(data["truncated"]) == {"error", "stdout"}


@settings(max_examples=60, deadline=None)
@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3000) | st.binary(max_size=500),
        lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(max_size=20), inner, max_size=20),
        max_leaves=200,
    ),
    stdout=st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=6000),
    limit=st.integers(MIN_RESULT_CHARS, 20_000),
)
def test_to_json_is_never_longer_than_max_chars_whatever_the_result(value: Any, stdout: str, limit: int) -> None:
    result = result_of(value, stdout=stdout)
    text = result.to_json(max_chars=limit)
    assert len(text) <= limit
    data = json.loads(text)
    if "value" not in data["truncated"]:
        assert data["value"] == result.to_dict()["value"]


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=8)
    | st.just(pydeno.undefined)
)
_KEYS = st.text(max_size=5) | st.booleans() | st.none() | st.integers() | st.floats(allow_nan=False)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_VALUES)
@example({None: None, "null": None})
@example({1: "a", "1": "b"})
def test_the_value_text_is_exactly_the_json_of_its_tagged_form(value: Any) -> None:
    from pydeno._runtime.json_values import dumps as _dumps
    from pydeno._runtime.json_values import jsonable, value_json

    assert value_json(value) == _dumps(jsonable(value))
