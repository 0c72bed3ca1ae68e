"""Code Mode: tools with schemas, a typed API for a model's program, and a result made for a
model, against real workers."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import anyio
import pydantic
import pytest

import pydeno
from pydeno.host.process.staging import find_deno


class Filter(TypedDict):
    """Which issues to keep."""

    label: str
    state: NotRequired[Literal["open", "closed"]]


@dataclasses.dataclass
class Page:
    size: int = 10
    after: str | None = None


class Owner(pydantic.BaseModel):
    login: str
    id: int


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


SEEN: list[Any] = []


@pydeno.tool(name="github.search_issues", read_only=True)
def search_issues(
    query: str,
    filter: Filter,  # noqa: A002 - the argument's name in the guest
    page: Page | None = None,
    owner: Owner | None = None,
    color: Color = Color.RED,
    limit: Annotated[int, "at most this many"] = 2,
) -> list[dict[str, str]]:
    """Search the issues.

    Args:
        query: what to look for,
            in titles and bodies.
        filter: which issues to keep.
    """
    SEEN.append((page, owner, color))
    return [{"title": f"{query} {i}", "label": filter["label"]} for i in range(limit)]


@pydeno.tool
def add_comment(issue: int, text: str) -> bool:
    """Comment on an issue."""
    return True


@pydeno.tool
async def flaky(reason: str) -> None:
    """Always fails."""
    raise pydeno.ToolError(f"the service said: {reason}")


@pytest.fixture
def cm() -> Iterator[pydeno.CodeMode]:
    SEEN.clear()
    with pydeno.CodeMode([search_issues, add_comment, flaky], max_tool_calls=5, max_output_chars=200) as cm:
        yield cm


# --- schemas from type hints -------------------------------------------------------------------


def test_a_schema_is_made_from_type_hints_and_the_docstring() -> None:
    schema = search_issues.input_schema
    assert schema["required"] == ["query", "filter"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["query"] == {"type": "string", "description": "what to look for, in titles and bodies."}
    assert schema["properties"]["filter"] == {"$ref": "#/$defs/Filter", "description": "which issues to keep."}
    assert schema["properties"]["limit"] == {"type": "integer", "description": "at most this many", "default": 2}
    assert schema["properties"]["color"] == {"$ref": "#/$defs/Color", "default": "red"}
    assert schema["properties"]["page"] == {"anyOf": [{"$ref": "#/$defs/Page"}, {"type": "null"}], "default": None}
    defs = schema["$defs"]
    assert defs["Filter"] == {
        "type": "object",
        "properties": {"label": {"type": "string"}, "state": {"enum": ["open", "closed"]}},
        "additionalProperties": False,
        "required": ["label"],
        "description": "Which issues to keep.",
    }
    assert defs["Page"]["properties"]["size"] == {"type": "integer", "default": 10}
    assert "required" not in defs["Page"]
    assert defs["Owner"]["required"] == ["login", "id"]
    assert defs["Color"] == {"enum": ["red", "blue"]}
    assert search_issues.description == "Search the issues."
    assert search_issues.output_schema == {
        "type": "array",
        "items": {"type": "object", "additionalProperties": {"type": "string"}},
    }


def test_a_decorated_tool_is_still_callable_as_its_function() -> None:
    assert add_comment(issue=1, text="x") is True
    assert repr(search_issues) == "<pydeno.Tool github.search_issues (read-only)>"


@pytest.mark.parametrize(
    ("hint", "schema"),
    [
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (
            tuple[int, str],
            {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False, "minItems": 2},
        ),
        (tuple[float, ...], {"type": "array", "items": {"type": "number"}}),
        (dict[str, bool], {"type": "object", "additionalProperties": {"type": "boolean"}}),
        (Literal["a"], {"const": "a"}),
        (int | str, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        (Any, {}),
    ],
)
def test_each_supported_hint_has_its_schema(hint: Any, schema: dict[str, Any]) -> None:
    def fn(x): ...  # type: ignore[no-untyped-def]

    fn.__annotations__ = {"x": hint}
    assert pydeno.Tool("t", fn).input_schema["properties"]["x"] == schema


@pytest.mark.parametrize(
    ("hint", "message"),
    [
        (bytes, "tool 't': parameter 'x': bytes has no exact JSON Schema"),
        (
            dict[int, str],
            "tool 't': parameter 'x': dict has no JSON Schema: object keys are strings (use dict[str, ...])",
        ),
        (set[int], "tool 't': parameter 'x': set has no exact JSON Schema"),
    ],
)
def test_a_hint_json_cannot_carry_exactly_is_refused_when_the_tool_is_made(hint: Any, message: str) -> None:
    def fn(x): ...  # type: ignore[no-untyped-def]

    fn.__annotations__ = {"x": hint}
    with pytest.raises(TypeError) as exc_info:
        pydeno.Tool("t", fn)
    assert str(exc_info.value).startswith(message)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"input_schema": {"type": "object", "properties": {"a": {"type": "nope"}}}},
            ValueError,
            "tool 't': input_schema is not a valid JSON Schema (draft 2020-12): 'nope' is not valid under any of the "
            "given schemas (at properties/a/type)",
        ),
        (
            {"input_schema": {"type": "string"}},
            ValueError,
            'tool \'t\': input_schema must describe an object ("type": "object"): a tool takes one object of named '
            "arguments",
        ),
        (
            {"input_schema": ["type"]},
            TypeError,
            "tool 't': input_schema must be a JSON Schema object (a dict), got list",
        ),
        (
            {"input_schema": {"type": "object"}, "output_schema": {"minimum": "1"}},
            ValueError,
            "tool 't': output_schema is not a valid JSON Schema (draft 2020-12): "
            "'1' is not of type 'number' (at minimum)",
        ),
        ({"read_only": 1}, TypeError, "tool 't': read_only must be a bool, got int"),
    ],
)
def test_a_bad_tool_definition_is_refused_with_what_is_wrong(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as exc_info:
        pydeno.Tool("t", lambda args: args, **kwargs)
    assert str(exc_info.value) == message


def test_positional_only_parameters_cannot_be_a_tool() -> None:
    def fn(a: int, /) -> None: ...

    with pytest.raises(TypeError) as exc_info:
        pydeno.Tool("t", fn)
    assert "parameter 'a' cannot be named in an arguments object" in str(exc_info.value)


def test_a_tool_name_must_be_identifiers_joined_by_dots() -> None:
    with pytest.raises(ValueError, match="is not a JavaScript identifier"):
        pydeno.Tool("github.search-issues", lambda: None)


# --- executions ----------------------------------------------------------------------------------


def test_a_program_calls_tools_and_its_last_expression_is_the_result(cm: pydeno.CodeMode) -> None:
    result = cm.execute(
        "const found = await tools.github.search_issues({query: 'crash', filter: {label: 'bug'},"
        " page: {size: 3}, owner: {login: 'ann', id: 7}, color: 'blue'});\n"
        "console.log('found', found.length);\n"
        "console.warn('careful');\n"
        "await tools.add_comment({issue: 1, text: 'seen'});\n"
        "found.map((f) => f.title)"
    )
    assert result.ok and result.error is None
    assert result.value == ["crash 0", "crash 1"]
    assert (result.stdout, result.stderr) == ("found 2", "careful")
    assert [(c["name"], c["arguments"], c["outcome"]) for c in result.tool_calls] == [
        (
            "github.search_issues",
            {
                "query": "crash",
                "filter": {"label": "bug"},
                "page": {"size": 3},
                "owner": {"login": "ann", "id": 7},
                "color": "blue",
            },
            "ok",
        ),
        ("add_comment", {"issue": 1, "text": "seen"}, "ok"),
    ]
    assert all(c["duration_s"] >= 0 for c in result.tool_calls)
    # The function received what it declared: a dataclass, a pydantic model, an enum member.
    assert [(Page(size=3), Owner(login="ann", id=7), Color.BLUE)] == SEEN
    assert str(result).splitlines()[0] == 'ok: ["crash 0", "crash 1"]'


def test_a_call_with_a_wrong_field_reaches_the_guest_as_an_error_naming_the_field(cm: pydeno.CodeMode) -> None:
    result = cm.execute(
        "try { await tools.github.search_issues({query: 'x', filter: {label: 'bug', state: 'lost'}}) }"
        " catch (e) { [e.name, e.message] }"
    )
    assert result.value == [
        "ToolError",
        "tools.github.search_issues(): invalid arguments: $.filter.state: 'lost' is not one of ['open', 'closed']",
    ]
    assert result.tool_calls[0]["outcome"] == "error"


def test_an_uncaught_tool_error_fails_the_execution_with_its_kind(cm: pydeno.CodeMode) -> None:
    result = cm.execute("await tools.flaky({reason: 'down'})")
    assert not result.ok
    assert result.error is not None
    assert (result.error["name"], result.error["message"]) == ("ToolError", "the service said: down")
    assert (result.error["kind"], result.error["retryable"]) == ("tool_failed", False)
    assert result.tool_calls[0]["error"] == "ToolError: the service said: down"


def test_a_failed_tool_call_points_at_the_call_in_the_program(cm: pydeno.CodeMode) -> None:
    result = cm.execute(
        "function notify() {\n  return tools.flaky({ reason: 'down' });\n}\nconst k = 1;\n  await notify();"
    )
    assert result.error is not None
    assert (result.error["line"], result.error["column"]) == (2, 16)
    assert result.exception is not None
    assert "at notify (" in str(getattr(result.exception, "stack", ""))
    caught = cm.execute("try { await tools.flaky({ reason: 'x' }) } catch (e) { e.stack.split('\\n')[1].trim() }")
    assert caught.value == "at guest:eval:1:20"


def test_a_result_the_output_schema_refuses_is_a_tool_error() -> None:
    lying = pydeno.Tool(
        "count", lambda args: "three", output_schema={"type": "integer"}, input_schema={"type": "object"}
    )
    with pydeno.CodeMode([lying]) as cm:
        result = cm.execute("await tools.count()")
    assert result.error is not None
    assert (
        result.error["message"]
        == "tools.count() returned a value its output schema refuses: the result: 'three' is not of type 'integer'"
    )


def test_a_raw_schema_tool_receives_the_arguments_object() -> None:
    seen: list[Any] = []
    raw = pydeno.Tool(
        "echo",
        lambda args: seen.append(args) or args["n"] * 2,
        input_schema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    )
    with pydeno.CodeMode([raw]) as cm:
        assert cm.execute("await tools.echo({n: 21})").value == 42
    assert seen == [{"n": 21}]


def test_a_thrown_error_reports_its_line_and_column_in_the_program(cm: pydeno.CodeMode) -> None:
    result = cm.execute("const a = 1;\nconst b = null;\n  b.field")
    assert result.error is not None
    assert (result.error["name"], result.error["line"], result.error["column"]) == ("TypeError", 3, 5)
    assert result.error["kind"] == "js_error"
    assert "line 3, column 5" in str(result)


def test_declarations_stay_in_one_execution_and_globals_carry_over(cm: pydeno.CodeMode) -> None:
    assert cm.execute("const x = 1; globalThis.kept = 5; x").value == 1
    assert cm.execute("const x = 2; x + kept").value == 7


def test_the_tool_budget_is_per_execution(cm: pydeno.CodeMode) -> None:
    result = cm.execute("for (let i = 0; i < 6; i++) await tools.add_comment({issue: i, text: 't'})")
    assert result.error is not None and result.error["kind"] == "tool_budget"
    assert len(result.tool_calls) == 6
    assert cm.execute("await tools.add_comment({issue: 1, text: 't'})").ok


@pytest.mark.slow
def test_a_limit_is_a_failed_result_and_the_next_execution_gets_a_fresh_worker(cm: pydeno.CodeMode) -> None:
    result = cm.execute("while (true) {}", timeout=0.5)
    assert result.error is not None
    assert (result.error["kind"], result.error["name"]) == ("timeout", "RuntimeTimeout")
    # The model is told what the program can change; the option is the operator's.
    assert result.error["hint"].startswith("The program did not finish in time (its limit is 0.5 s per run): ")
    assert "timeout=" not in result.error["hint"] and "raise" not in str(result)
    assert result.exception is not None and "raise timeout= (now 0.5)" in result.exception.__notes__[0]
    assert cm.execute("1 + 1").value == 2


def test_output_over_max_output_chars_is_cut_and_says_so(cm: pydeno.CodeMode) -> None:
    result = cm.execute("for (let i = 0; i < 100; i++) console.log('line ' + i); 'x'.repeat(500)")
    # The text form cut the value too: truncated says so; to_dict() carries it whole.
    assert result.truncated == ("stdout", "value")
    assert result.to_dict()["truncated"] == ["stdout"]
    assert len(result.stdout) <= 200
    assert result.value == "x" * 500  # the value itself is exact
    assert "(cut at 200 characters)" in str(result)
    assert "stdout (cut):" in str(result)


def test_read_only_approval_refuses_every_other_tool() -> None:
    with pydeno.CodeMode([search_issues, add_comment], approve="read_only") as cm:
        result = cm.execute(
            "await tools.github.search_issues({query: 'q', filter: {label: 'l'}});"
            "try { await tools.add_comment({issue: 1, text: 'x'}) } catch (e) { e.message }"
        )
    assert result.value == "tools.add_comment() was refused by the approval policy"
    assert [c["outcome"] for c in result.tool_calls] == ["ok", "refused"]


def test_an_approval_callable_is_asked_once_per_tool_and_execution() -> None:
    asked: list[tuple[str, Any]] = []

    def approve(name: str, arguments: Any) -> bool:
        asked.append((name, arguments))
        return True

    with pydeno.CodeMode([search_issues, add_comment], approve=approve) as cm:
        program = "for (let i = 0; i < 50; i++) await tools.add_comment({issue: i, text: 'x'}); 'done'"
        assert cm.execute(program).value == "done"
        assert cm.execute(program).value == "done"
    assert asked == [("add_comment", {"issue": 0, "text": "x"})] * 2


def test_an_approval_mapping_decides_per_tool_and_refuses_what_it_does_not_name() -> None:
    asked: list[str] = []

    @pydeno.tool
    def archive(issue: int) -> bool:
        """Archive an issue."""
        return True

    policy = {"add_comment": True, "flaky": lambda name, arguments: asked.append(name) or False}
    with pydeno.CodeMode([search_issues, add_comment, flaky, archive], approve=policy) as cm:
        result = cm.execute(
            "const out = [];\n"
            "for (const call of [\n"
            "  () => tools.github.search_issues({ query: 'q', filter: { label: 'l' } }),\n"
            "  () => tools.add_comment({ issue: 1, text: 'x' }),\n"
            "  () => tools.flaky({ reason: 'r' }),\n"
            "  () => tools.flaky({ reason: 'again' }),\n"
            "  () => tools.archive({ issue: 1 }),\n"
            "]) { try { await call(); out.push('ran'); } catch (e) { out.push(e.message); } }\n"
            "out"
        )
    refused = "tools.{}() was refused by the approval policy"
    assert result.value == ["ran", "ran", refused.format("flaky"), refused.format("flaky"), refused.format("archive")]
    assert asked == ["flaky"]
    assert [c["outcome"] for c in result.tool_calls] == ["ok", "ok", "refused", "refused", "refused"]


def test_the_result_as_json_tags_what_json_cannot_hold(cm: pydeno.CodeMode) -> None:
    result = cm.execute("({bytes: new Uint8Array([1, 2]), nothing: undefined, nan: NaN, when: new Date(0)})")
    data = json.loads(result.to_json())
    assert data["value"] == {
        "bytes": {"$type": "bytes", "base64": "AQI="},
        "nothing": {"$type": "undefined"},
        "nan": {"$type": "number", "value": "NaN"},
        "when": {"$type": "date", "iso": "1970-01-01T00:00:00+00:00"},
    }
    assert data["ok"] is True and data["truncated"] == [] and data["error"] is None


def test_a_map_whose_keys_an_object_cannot_hold_keeps_every_entry_in_both_forms(cm: pydeno.CodeMode) -> None:
    # As an object, 1 and "1" (and null and "null") would be one key, and an entry lost.
    result = cm.execute("new Map([[1, 'a'], ['1', 'b'], [null, 'c'], ['null', 'd']])")
    entries = [[1, "a"], ["1", "b"], [None, "c"], ["null", "d"]]
    assert json.loads(result.to_json())["value"] == {"$type": "map", "entries": entries}
    text = 'ok: {"$type": "map", "entries": [[1, "a"], ["1", "b"], [null, "c"], ["null", "d"]]}'
    assert str(result).splitlines()[0] == text
    assert cm.execute("new Map([['a', 1]])").to_dict()["value"] == {"a": 1}


def test_the_text_form_of_a_failure_shows_no_host_path(cm: pydeno.CodeMode) -> None:
    result = cm.execute("function f() { throw new Error('deep') }\nf()")
    text = str(result)
    assert text.splitlines()[:2] == ["error: Error: deep (line 1, column 22)", "kind: js_error (retryable: no)"]
    assert os.path.dirname(pydeno.__file__) not in text + result.to_json()


def test_misuse_raises_and_a_closed_code_mode_refuses_work() -> None:
    cm = pydeno.CodeMode([add_comment])
    with pytest.raises(TypeError, match="timeout must be"):
        cm.execute("1", timeout="soon")  # type: ignore[arg-type]
    cm.close()
    with pytest.raises(RuntimeError, match="the session is closed"):
        cm.execute("1")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"tools": add_comment}, TypeError, "tools must be a list of pydeno.Tool (or functions), got Tool"),
        ({"tools": [add_comment, add_comment]}, ValueError, "two tools are named 'add_comment'"),
        (
            {"tools": [], "approve": "yes"},
            TypeError,
            'approve must be None, "read_only", "ask", a callable (name, arguments) -> bool, or a mapping of '
            "tool names to those, got 'yes'",
        ),
        (
            {"tools": [add_comment], "approve": {"delete": True}},
            ValueError,
            "approve= names 'delete', which is not one of the tools",
        ),
        (
            {"tools": [add_comment], "approve": {"add_comment": "maybe"}},
            TypeError,
            "approve['add_comment'] must be True, False, \"ask\" or a callable (name, arguments) -> bool",
        ),
        ({"tools": [], "max_output_chars": 0}, ValueError, "max_output_chars must be at least 1, got 0"),
    ],
)
def test_bad_code_mode_arguments_are_refused(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error) as exc_info:
        pydeno.CodeMode(**kwargs)
    assert str(exc_info.value) == message


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_async_code_mode_runs_tools_under_both_event_loops(backend: str) -> None:
    async def main() -> pydeno.ExecutionResult:
        async with pydeno.AsyncCodeMode([search_issues, flaky]) as cm:
            ok = await cm.execute(
                "(await tools.github.search_issues({query: 'a', filter: {label: 'b'}, limit: 1})).length"
            )
            assert ok.value == 1
            return await cm.execute("await tools.flaky({reason: 'x'})")

    result = anyio.run(main, backend=backend)
    assert result.error is not None and result.error["kind"] == "tool_failed"


# --- the typed API -------------------------------------------------------------------------------


def deno_check(tmp_path: Path, declarations: str, program: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "tools.d.ts").write_text(declarations)
    (tmp_path / "program.ts").write_text('/// <reference path="./tools.d.ts" />\n' + f"export {{}};\n{program}\n")
    env = {"PATH": os.environ.get("PATH", ""), "DENO_DIR": str(tmp_path / "deno-dir"), "NO_COLOR": "1"}
    return subprocess.run(
        [find_deno(), "check", "--no-config", "--no-lock", "--quiet", str(tmp_path / "program.ts")],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.slow
def test_the_declarations_type_check_with_deno_and_catch_a_wrong_call(tmp_path: Path, cm: pydeno.CodeMode) -> None:
    declarations = cm.typescript()
    assert "interface GithubSearchIssuesInput {" in declarations
    assert "  search_issues(args: GithubSearchIssuesInput): Promise<GithubSearchIssuesOutput>;" in declarations
    good = deno_check(
        tmp_path,
        declarations,
        "const r = await tools.github.search_issues(\n"
        "  { query: 'q', filter: { label: 'l', state: 'open' }, color: 'red' });\n"
        "const t: string | undefined = r[0].title;\nawait tools.add_comment({ issue: 1, text: t ?? '' });",
    )
    assert good.returncode == 0, good.stderr
    bad = deno_check(tmp_path, declarations, "await tools.add_comment({ issue: 'one', text: 'x' });")
    assert bad.returncode != 0
    assert "Type 'string' is not assignable to type 'number'" in bad.stderr


def test_the_prompt_names_every_tool_and_what_is_not_there(cm: pydeno.CodeMode) -> None:
    text = cm.describe()
    assert (
        "- tools.github.search_issues({ query, filter, page?, owner?, color?, limit? }) (read-only): Search the issues."
        in text
    )
    assert "- tools.add_comment({ issue, text }): Comment on an issue." in text
    assert "no network, no file system, no `Deno`" in text
    assert "At most 5 tool calls per run." in text
    assert cm.typescript().rstrip() in text


# --- type checking before running ---------------------------------------------------------------


@pytest.mark.slow
def test_a_program_with_a_type_error_is_refused_before_anything_runs(cm: pydeno.CodeMode) -> None:
    result = cm.execute(
        "await tools.add_comment({ issue: 1, text: 'runs' });\n"
        "const ok: boolean = await tools.add_comment({ issue: 'one', text: 'x' });",
        typecheck=True,
    )
    assert not result.ok and result.tool_calls == ()
    assert result.error is not None
    assert (result.error["name"], result.error["kind"], result.error["retryable"]) == (
        "TypeCheckError",
        "typecheck_failed",
        False,
    )
    assert (result.error["line"], result.error["column"]) == (2, 47)
    assert "TS2322: Type 'string' is not assignable to type 'number'. (line 2, column 47)" in result.error["message"]
    assert isinstance(result.exception, pydeno.TypeCheckError)
    assert result.exception.diagnostics[0]["code"] == "TS2322"
    assert "/tmp" not in str(result) and "file://" not in str(result)


@pytest.mark.slow
def test_a_program_that_type_checks_runs(cm: pydeno.CodeMode) -> None:
    result = cm.execute("const done: boolean = await tools.add_comment({ issue: 1, text: 'x' });\ndone", typecheck=True)
    assert result.ok and result.value is True


@pytest.mark.slow
def test_a_tool_without_arguments_is_declared_so_that_its_programs_type_check() -> None:
    @pydeno.tool
    def now() -> str:
        """The time."""
        return "noon"

    with pydeno.CodeMode([now]) as cm:
        assert "type NowInput = Record<string, never>;" in cm.typescript()
        result = cm.execute("const t: string = await tools.now();\nt", typecheck=True)
        assert result.ok and result.value == "noon"


def test_typecheck_must_be_a_bool(cm: pydeno.CodeMode) -> None:
    with pytest.raises(TypeError, match="typecheck must be a bool, got str"):
        cm.execute("1", typecheck="yes")  # type: ignore[arg-type]


REPORT = """TS2322 [ERROR]: Type 'number' is not assignable to type 'string'.
const r: string = await tools.add({ a: 'x' });
      ^
    at file:///tmp/pydeno-check-abc/program.ts:1:7

TS2345 [ERROR]: Argument of type 'string' is not assignable to parameter of type 'number'.
  Types of property 'a' are incompatible.
tools.add({ a: 'x' })
           ~~~~~~
    at file:///tmp/pydeno-check-abc/program.ts:3:12

    The expected type comes from property 'a' which is declared here on type '{ a: number; }'
    declare const tools: { add(args: { a: number }): Promise<number> };
                                       ^
        at file:///tmp/pydeno-check-abc/tools.d.ts:1:36

TS1005 [ERROR]: ';' expected.
interface {
    at file:///tmp/pydeno-check-abc/tools.d.ts:4:2

Found 3 errors.

error: Type checking failed.
"""


def test_the_checkers_report_is_read_into_diagnostics_without_paths() -> None:
    from pydeno.host.process.typecheck import diagnostics

    found = diagnostics(REPORT)
    assert [(d.code, d.file, d.line, d.column) for d in found] == [
        ("TS2322", "program.ts", 1, 7),
        ("TS2345", "program.ts", 3, 12),
        ("TS1005", "tools.d.ts", 4, 2),
    ]
    assert found[1].text() == (
        "TS2345: Argument of type 'string' is not assignable to parameter of type 'number'. (line 3, column 12)\n"
        "    Types of property 'a' are incompatible.\n  tools.add({ a: 'x' })\n             ~~~~~~"
    )
    assert found[2].text().startswith("TS1005: ';' expected. (line 4, column 2 in tools.d.ts)")


# --- pausing for approval -----------------------------------------------------------------------

PAUSING = (
    "const found = await tools.github.search_issues({ query: 'q', filter: { label: 'l' }, limit: 3 });\n"
    "const out = [];\n"
    "for (const [i, f] of found.entries()) {\n"
    "  try { out.push(await tools.add_comment({ issue: i, text: f.title })); } catch (e) { out.push(e.message); }\n"
    "}\n"
    "out"
)


def test_start_pauses_at_each_call_that_asks_and_the_caller_approves_refuses_or_answers() -> None:
    with pydeno.CodeMode([search_issues, add_comment], approve="ask") as cm:
        step = cm.start(PAUSING)
        seen = []
        for answer in ("approve", "refuse", "answer"):
            assert isinstance(step, pydeno.PausedToolCall)
            seen.append((step.name, step.args))
            if answer == "approve":
                step = step.resume()
            elif answer == "refuse":
                step = step.resume(error="not this one")
            else:
                step = step.resume(value="answered by the caller")
    assert isinstance(step, pydeno.ExecutionResult) and step.ok
    assert step.value == [True, "not this one", "answered by the caller"]
    assert seen == [("add_comment", [{"issue": i, "text": f"q {i}"}]) for i in range(3)]
    assert [c["outcome"] for c in step.tool_calls] == ["ok", "ok", "refused", "answered"]


def test_execute_refuses_a_call_that_asks_and_names_start() -> None:
    with pydeno.CodeMode([add_comment], approve={"add_comment": "ask"}) as cm:
        result = cm.execute("await tools.add_comment({ issue: 1, text: 'x' })")
    assert result.error is not None
    assert result.error["message"] == "tools.add_comment() needs approval: run the program with start() to approve it"
    assert result.tool_calls[0]["outcome"] == "refused"


def test_a_paused_code_mode_refuses_other_work_and_a_second_answer() -> None:
    with pydeno.CodeMode([add_comment], approve="ask") as cm:
        paused = cm.start("await tools.add_comment({ issue: 1, text: 'x' })")
        assert isinstance(paused, pydeno.PausedToolCall)
        with pytest.raises(RuntimeError, match="a program is paused at a tool call: resume it first"):
            cm.execute("1")
        with pytest.raises(TypeError, match="resume\\(\\) takes a value or an error, not both"):
            paused.resume(value=1, error="x")
        assert paused.resume().value is True  # type: ignore[union-attr]
        with pytest.raises(RuntimeError, match="this tool call was already answered, or its program ended"):
            paused.resume()
        assert cm.execute("1 + 1").value == 2


def test_a_program_without_calls_that_ask_finishes_in_start() -> None:
    with pydeno.CodeMode([search_issues, add_comment], approve={"add_comment": "ask"}) as cm:
        result = cm.start("(await tools.github.search_issues({ query: 'q', filter: { label: 'l' } })).length")
    assert isinstance(result, pydeno.ExecutionResult) and result.value == 2


@pytest.mark.slow
def test_a_limit_reached_after_a_resume_is_a_failed_result_and_the_worker_is_replaced() -> None:
    with pydeno.CodeMode([add_comment], approve="ask") as cm:
        paused = cm.start("await tools.add_comment({ issue: 1, text: 'x' }); while (true) {}", timeout=1)
        assert isinstance(paused, pydeno.PausedToolCall)
        result = paused.resume()
        assert isinstance(result, pydeno.ExecutionResult)
        assert result.error is not None and result.error["kind"] == "timeout"
        assert cm.execute("2 * 3").value == 6


def test_the_async_code_mode_pauses_and_resumes() -> None:
    async def main() -> Any:
        async with pydeno.AsyncCodeMode([add_comment], approve="ask") as cm:
            paused = await cm.start("await tools.add_comment({ issue: 1, text: 'x' })")
            assert isinstance(paused, pydeno.PausedToolCall)
            return await paused.resume()

    result = anyio.run(main)
    assert isinstance(result, pydeno.ExecutionResult) and result.value is True
