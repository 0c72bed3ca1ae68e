"""Code that does not compile: every SyntaxError names its line and column and shows an
excerpt of the code as it was written, in JavaScript and TypeScript, through every surface
(Runtime.eval and eval_module, Code Mode's result, the MCP server's)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import pydeno
from pydeno._runtime.syntax import locate

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rt() -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime() as rt:
        yield rt


@pytest.fixture
def cm() -> Iterator[pydeno.CodeMode]:
    with pydeno.CodeMode([]) as cm:
        yield cm


def failure(rt: pydeno.Runtime, code: str, lang: str = "js") -> pydeno.JavaScriptError:
    with pytest.raises(pydeno.JavaScriptError) as exc_info:
        rt.eval(code, lang=lang)  # type: ignore[arg-type]
    return exc_info.value


def forged_at(place: str) -> str:
    """Code that throws a SyntaxError whose stack looks like a compile error's at place."""
    stack = f"SyntaxError: x\\n    at guest:eval:{place} (did not compile)"
    return f"{{ const e = new SyntaxError('x'); e.stack = '{stack}'; throw e }}"


def notes(exc: BaseException) -> str:
    return "\n".join(getattr(exc, "__notes__", []))


# --- Runtime.eval ---------------------------------------------------------------------------


@pytest.mark.parametrize("lang", ["js", "ts"])
def test_a_syntax_error_names_its_line_and_column_and_shows_its_line_with_a_caret(
    rt: pydeno.Runtime, lang: str
) -> None:
    exc = failure(rt, "let a = 1;\nlet b = ;\na", lang)
    assert exc.name == "SyntaxError"
    assert (exc.line, exc.column) == (2, 9)
    assert str(exc).endswith(" (line 2, column 9)")
    assert "SyntaxError at line 2, column 9:\n2 | let b = ;\n  |         ^" in notes(exc)
    assert "\n" not in exc.message


def test_a_syntax_error_on_the_await_route_is_placed_too(rt: pydeno.Runtime) -> None:
    exc = failure(rt, "let a = 1;\nawait 1; let b = ;\na")
    assert (exc.line, exc.column) == (2, 18)
    assert exc.stack == "SyntaxError: Unexpected token ';'\n    at guest:eval:2:18 (did not compile)"


def test_the_column_counts_characters_after_astral_ones_and_lines_end_as_javascript_ends_them(
    rt: pydeno.Runtime,
) -> None:
    exc = failure(rt, "let s = 1;\u2028let t = '😀😀'; let a b")
    assert (exc.line, exc.column) == (2, 21)
    assert "2 | let t = '😀😀'; let a b\n  | " + " " * 20 + "^" in notes(exc)
    exc = failure(rt, "let s = '😀😀';\r\n  let a b", "ts")
    assert (exc.line, exc.column) == (2, 9)


def test_a_long_line_is_cut_around_the_place(rt: pydeno.Runtime) -> None:
    exc = failure(rt, "let x = [" + "1, " * 400 + ";" + "2, " * 400 + "]")
    excerpt = notes(exc).split("\n")[-2:]
    assert len(excerpt[0]) < 120 and excerpt[0].startswith("1 | …") and excerpt[0].endswith("…")
    assert excerpt[0][len(excerpt[1]) - 1] == ";"


def test_a_syntax_error_thrown_while_running_is_not_given_a_compile_place(rt: pydeno.Runtime) -> None:
    exc = failure(rt, "let t = '{';\nJSON.parse(t)")
    assert exc.line is None and exc.column is None
    assert "SyntaxError at line" not in notes(exc)


def test_a_stack_the_guest_forged_cannot_place_outside_the_code(rt: pydeno.Runtime) -> None:
    code = forged_at("99:99")
    exc = failure(rt, code)
    assert exc.line is None
    assert pydeno.classify_error(exc).kind == "js_error"
    forged = forged_at("1:999999999999")
    assert failure(rt, forged).line is None


def test_a_forged_place_inside_the_code_is_shown_but_changes_no_kind(rt: pydeno.Runtime) -> None:
    code = forged_at("1:3")
    exc = failure(rt, code)
    assert (exc.line, exc.column) == (1, 3)
    assert pydeno.classify_error(exc).kind == "js_error"
    assert exc.message == "x"


def test_a_declaration_that_clashes_as_the_code_starts_is_not_taken_for_a_compile_error(rt: pydeno.Runtime) -> None:
    rt.eval("let clashing = 1")
    exc = failure(rt, "function clashing() {}")
    assert exc.message == "Identifier 'clashing' has already been declared"
    assert exc.line is None
    assert str(exc) == "Evaluation failed: SyntaxError: Identifier 'clashing' has already been declared"


def test_the_place_survives_pickling(rt: pydeno.Runtime) -> None:
    exc = pickle.loads(pickle.dumps(failure(rt, "let b = ;")))
    assert (exc.line, exc.column) == (1, 9)
    assert str(exc).endswith("(line 1, column 9)")


def test_a_working_eval_after_a_syntax_error_is_unaffected(rt: pydeno.Runtime) -> None:
    failure(rt, "let = ;")
    assert rt.eval("1 + 1") == 2


def test_the_async_runtime_places_a_syntax_error() -> None:
    async def main() -> pydeno.JavaScriptError:
        async with pydeno.AsyncRuntime() as rt:
            with pytest.raises(pydeno.JavaScriptError) as exc_info:
                await rt.eval("1 +\n+ * 2")
            return exc_info.value

    exc = anyio.run(main)
    assert (exc.line, exc.column) == (2, 3)


# --- TypeScript given as JavaScript ---------------------------------------------------------


@pytest.mark.parametrize(
    "code", ["const n: number = 1", "let s: string = 'x';\ns", "const v: number = await Promise.resolve(1)"]
)
def test_typescript_evaluated_as_javascript_gets_a_note_naming_lang_ts(rt: pydeno.Runtime, code: str) -> None:
    exc = failure(rt, code)
    assert 'evaluate it with lang="ts"' in notes(exc)
    assert exc.line == 1


def test_javascript_that_is_simply_wrong_gets_no_typescript_note(rt: pydeno.Runtime) -> None:
    assert "lang=" not in notes(failure(rt, "let b = ;"))
    assert "lang=" not in notes(failure(rt, "return 5"))
    assert "lang=" not in notes(failure(rt, "const n: number = ;", "ts"))


def test_a_top_level_return_in_an_eval_gets_a_note_saying_what_its_value_is(rt: pydeno.Runtime) -> None:
    exc = failure(rt, "const r = 5;\nreturn r")
    assert (exc.line, exc.column) == (2, 1)
    assert "An eval's value is its last expression: end the code with the value instead of returning it." in notes(exc)
    assert "instead of returning" not in notes(failure(rt, "eval('return 1')"))


# --- eval_module ----------------------------------------------------------------------------


def test_a_module_that_does_not_parse_is_placed_in_its_source(rt: pydeno.Runtime) -> None:
    with pytest.raises(pydeno.JavaScriptError) as exc_info:
        rt.eval_module("export const a: number = 1;\nlet b = ;")
    exc = exc_info.value
    assert (exc.line, exc.column) == (2, 9)
    assert "2 | let b = ;\n  |         ^" in notes(exc)


def test_a_module_v8_refuses_to_compile_is_placed_and_names_no_data_url(rt: pydeno.Runtime) -> None:
    for _ in range(2):  # Deno names it by its data: URL the first time, by its sourceURL after
        with pytest.raises(pydeno.JavaScriptError) as exc_info:
            rt.eval_module("export const a = 1;\n  return 5;")
        exc = exc_info.value
        assert exc.message == "Illegal return statement"
        assert exc.stack == "SyntaxError: Illegal return statement\n    at guest:module:2:3 (did not compile)"
        assert (exc.line, exc.column) == (2, 3)
        assert "data:" not in str(exc)


# --- lang= spellings ------------------------------------------------------------------------


@pytest.mark.parametrize("lang", ["ts", "typescript", "TypeScript", "TS"])
def test_typescript_is_asked_for_by_its_usual_names(rt: pydeno.Runtime, lang: str) -> None:
    assert rt.eval("{ const n: number = 2; n * 21 }", lang=lang) == 42  # type: ignore[arg-type]


@pytest.mark.parametrize("lang", ["js", "javascript", "JavaScript", "JS"])
def test_javascript_is_asked_for_by_its_usual_names(rt: pydeno.Runtime, lang: str) -> None:
    assert rt.eval("6 * 7", lang=lang) == 42  # type: ignore[arg-type]


@pytest.mark.parametrize("lang", ["py", "tsx", "", None, 1, b"ts"])
def test_any_other_lang_is_refused_naming_the_accepted_ones(rt: pydeno.Runtime, lang: object) -> None:
    with pytest.raises((ValueError, TypeError)) as exc_info:
        rt.eval("1", lang=lang)  # type: ignore[arg-type]
    assert '"js", "javascript", "ts" or "typescript"' in str(exc_info.value)
    assert repr(lang) in str(exc_info.value)


# --- Code Mode ------------------------------------------------------------------------------


def test_a_code_mode_syntax_error_is_placed_in_the_program_as_written(cm: pydeno.CodeMode) -> None:
    result = cm.execute("let a = ;")
    assert result.error is not None
    assert (result.error["name"], result.error["line"], result.error["column"]) == ("SyntaxError", 1, 9)
    assert result.error["excerpt"] == "1 | let a = ;\n  |         ^"
    text = str(result)
    assert "{" not in text
    assert "error: SyntaxError: Expression expected (line 1, column 9)\n1 | let a = ;\n  |         ^\n" in text


def test_a_code_mode_program_cut_short_points_at_its_end_not_at_the_wrapper(cm: pydeno.CodeMode) -> None:
    result = cm.execute("const x = 1;\nfoo(x,")
    assert result.error is not None
    assert (result.error["line"], result.error["column"]) == (2, 7)
    assert "}" not in str(result)


def test_a_runtime_error_in_code_mode_gets_no_excerpt(cm: pydeno.CodeMode) -> None:
    result = cm.execute("null.x")
    assert result.error is not None
    assert result.error["excerpt"] is None


# --- a top-level return in Code Mode --------------------------------------------------------


def test_a_top_level_return_is_the_programs_value(cm: pydeno.CodeMode) -> None:
    result = cm.execute("const r = await Promise.resolve(21);\nreturn r * 2;")
    assert result.ok, result
    assert result.value == 42


def test_a_top_level_return_in_typescript_with_an_early_exit(cm: pydeno.CodeMode) -> None:
    code = "const n: number = 3;\nif (n > 2) {\n  return 'big';\n}\nreturn 'small';"
    assert cm.execute(code).value == "big"


def test_a_program_with_a_return_runs_once(cm: pydeno.CodeMode) -> None:
    result = cm.execute("console.log('ran'); return 1")
    assert (result.value, result.stdout) == (1, "ran")


def test_a_program_with_a_return_and_another_syntax_error_reports_that_error_in_place(cm: pydeno.CodeMode) -> None:
    result = cm.execute("const a = 1;\nlet b = ;\nreturn a")
    assert result.error is not None
    assert (result.error["line"], result.error["column"]) == (2, 9)
    assert result.error["excerpt"] == "2 | let b = ;\n  |         ^"


def test_a_return_inside_a_function_is_not_affected(cm: pydeno.CodeMode) -> None:
    assert cm.execute("function f() { return 5 }\nf() + 1").value == 6


def test_a_runtime_error_after_a_return_rewrite_points_into_the_program(cm: pydeno.CodeMode) -> None:
    result = cm.execute("const o = null;\nif (o === null) return o.x;")
    assert result.error is not None
    assert (result.error["name"], result.error["line"], result.error["column"]) == ("TypeError", 2, 26)


def test_a_top_level_return_works_through_start_and_its_approvals() -> None:
    @pydeno.tool
    def double(n: int) -> int:
        """Twice n."""
        return n * 2

    with pydeno.CodeMode([double], approve="ask") as cm:
        paused = cm.start("const d = await tools.double({ n: 21 });\nreturn d;")
        assert isinstance(paused, pydeno.PausedToolCall)
        result = paused.resume()
    assert isinstance(result, pydeno.ExecutionResult)
    assert result.value == 42


def test_a_program_that_forges_a_compile_failure_after_running_is_not_run_again(cm: pydeno.CodeMode) -> None:
    code = (
        "/*return*/ console.log('once');\n"
        "const e = new SyntaxError('Illegal return statement');\n"
        "e.stack = 'SyntaxError: Illegal return statement\\n    at guest:eval:1:4 (did not compile)';\n"
        "throw e"
    )
    result = cm.execute(code)
    assert result.stdout == "once"
    assert result.error is not None and result.error["message"] == "Illegal return statement"


def test_a_program_whose_eval_fails_for_a_return_is_not_run_again(cm: pydeno.CodeMode) -> None:
    result = cm.execute("globalThis.runs = (globalThis.runs ?? 0) + 1;\neval('return 1')")
    assert result.error is not None and result.error["message"] == "Illegal return statement"
    assert cm.execute("runs").value == 1


def test_a_module_that_fails_to_load_is_not_taken_for_the_program_failing_to_compile(cm: pydeno.CodeMode) -> None:
    code = "globalThis.loads = (globalThis.loads ?? 0) + 1;\nawait import('data:text/javascript,return 1')"
    result = cm.execute(code)
    assert result.error is not None and result.error["excerpt"] is None
    assert cm.execute("loads").value == 1


def test_a_top_level_return_in_a_session_program_does_not_keep_its_declarations() -> None:
    with pydeno.CodeMode([]) as cm:
        cm._repl = True
        assert cm.execute("const kept = 1; kept").value == 1
        assert cm.execute("const inner = 2; return inner + kept").value == 3
        result = cm.execute("inner")
    assert result.error is not None and result.error["name"] == "ReferenceError"


# --- pure placement ---------------------------------------------------------------------------


def test_locate_refuses_a_place_outside_the_code() -> None:
    assert locate("abc", 3, 1) is None
    assert locate("abc", 1, 6) is None
    assert locate("abc", 0, 1) is None
    place = locate("abc", 2, 1)
    assert place is not None and (place.line, place.column) == (1, 4)


def test_locate_takes_the_wrapper_off_the_first_line() -> None:
    place = locate("let a = ;", 1, 10, shift=1)
    assert place is not None and (place.line, place.column) == (1, 9)
    place = locate("\tx y", 1, 4)
    assert place is not None and place.excerpt == "1 | \tx y\n  | \t  ^"


# --- the MCP server -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("session", [False, True])
def test_over_mcp_a_syntax_error_is_placed_in_the_program_and_a_return_is_its_value(session: bool) -> None:
    from mcp import Client, StdioServerParameters

    async def main() -> tuple[object, ...]:
        flags = ["-m", "pydeno", "mcp", *(["--session"] if session else [])]
        async with Client(StdioServerParameters(command=sys.executable, args=flags)) as client:
            broken = await client.call_tool("run_javascript", {"code": "const n: number = 1;\nlet b = ;"})
            returned = await client.call_tool("run_javascript", {"code": "const n: number = 20;\nreturn n + 1;"})
        return broken.structured_content, broken.content[0].text, returned.structured_content  # type: ignore[union-attr]

    broken, text, returned = anyio.run(main)
    assert isinstance(broken, dict) and isinstance(returned, dict)
    error = broken["error"]
    assert (error["name"], error["line"], error["column"]) == ("SyntaxError", 2, 9)
    assert error["excerpt"] == "2 | let b = ;\n  |         ^"
    assert isinstance(text, str) and "{" not in text and "2 | let b = ;" in text
    assert returned["value"] == 21


# --- the pydeno command ---------------------------------------------------------------------


def command(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pydeno", *args],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
        check=False,
    )
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


@pytest.mark.parametrize("lang", ["ts", "typescript", "TS"])
def test_the_command_evaluates_typescript_with_lang_ts(lang: str) -> None:
    done = command("--lang", lang, "const n: number = 2; n * 21")
    assert (done.returncode, done.stdout, done.stderr) == (0, "42\n", "")


def test_the_command_reads_typescript_from_stdin() -> None:
    done = command("--lang", "ts", "-", stdin=b"interface P { x: number }\nconst p: P = { x: 4 };\np.x * 2\n")
    assert (done.returncode, done.stdout) == (0, "8\n")


def test_the_command_refuses_another_lang() -> None:
    done = command("--lang", "py", "1")
    assert done.returncode == 2
    assert "argument --lang" in done.stderr and '"js", "javascript", "ts" or "typescript"' in done.stderr


def test_the_command_shows_where_code_did_not_compile() -> None:
    done = command("let a = 1;\nlet b = ;")
    assert done.returncode == 1
    assert done.stderr == (
        "Evaluation failed: SyntaxError: Unexpected token ';' (line 2, column 9)\n"
        "    at guest:eval:2:9 (did not compile)\n"
        "2 | let b = ;\n"
        "  |         ^\n"
    )


def test_the_command_names_lang_ts_for_typescript_given_as_javascript() -> None:
    done = command("const n: number = 1")
    assert done.returncode == 1
    assert "evaluate it with --lang ts" in done.stderr
    assert 'lang="ts"' not in done.stderr


def test_the_commands_json_names_the_place() -> None:
    done = command("--json", "1 +\n+ * 2")
    error = json.loads(done.stdout)["error"]
    assert (error["name"], error["line"], error["column"]) == ("SyntaxError", 2, 3)
