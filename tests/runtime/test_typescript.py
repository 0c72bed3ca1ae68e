"""TypeScript evals: types stripped by deno's own transpiler in the worker, an eval's meaning
kept, and every position in an error pointing into the code as written."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

import pydeno


@pytest.fixture(scope="module")
def rt() -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime() as rt:
        yield rt


def error_of(rt: pydeno.Runtime, code: str) -> pydeno.JavaScriptError:
    with pytest.raises(pydeno.JavaScriptError) as exc_info:
        rt.eval(code, lang="ts")
    return exc_info.value


def test_types_are_stripped_and_the_last_expression_is_the_value(rt: pydeno.Runtime) -> None:
    code = (
        "interface Point { x: number; y: number }\n"
        "type Pair<T> = [T, T];\n"
        "enum Color { Red, Green = 5 }\n"
        "class Box<T> { constructor(private readonly value: T) {} get(): T { return this.value; } }\n"
        "const p: Point = { x: 1, y: 2 } satisfies Point;\n"
        "const pair: Pair<number> = [p.x, p.y!];\n"
        "[new Box<string>('boxed').get(), pair, Color.Green, Color[0], <number>(p.x as unknown) + 1]"
    )
    assert rt.eval(code, lang="ts") == ["boxed", [1, 2], 5, "Red", 2]


def test_declarations_stay_for_the_next_eval_in_either_language(rt: pydeno.Runtime) -> None:
    rt.eval("let counted: number = 40;\nfunction bump(by: number): number { return counted += by; }", lang="ts")
    assert rt.eval("bump(1)") == 41
    assert rt.eval("bump(1 as number)", lang="ts") == 42


def test_top_level_await_works_in_typescript(rt: pydeno.Runtime) -> None:
    assert rt.eval("const v: number = await Promise.resolve(20);\nv * 2", lang="ts") == 40


def test_a_thrown_error_points_at_the_line_and_column_as_written(rt: pydeno.Runtime) -> None:
    code = "interface Q {\n  a: number;\n}\nconst q: Q | null = null as Q | null;\n  q!.a.toFixed()"
    exc = error_of(rt, code)
    assert exc.name == "TypeError"
    assert exc.stack.splitlines()[1:] == ["    at guest:eval:5:6"]


def test_frames_of_a_function_point_into_the_eval_that_declared_it(rt: pydeno.Runtime) -> None:
    rt.eval("type T = {\n a: 1\n};\nfunction deep(p: T): number {\n  return (p as any).nope.x;\n}", lang="ts")
    exc = error_of(rt, "const t: number = 1;\ndeep({ a: 1 })")
    assert exc.stack.splitlines()[1:] == ["    at deep (guest:eval:5:26)", "    at guest:eval:2:1"]


def test_positions_are_mapped_on_the_await_route_too(rt: pydeno.Runtime) -> None:
    exc = error_of(rt, "const w: string = await Promise.resolve('s');\n  (w as any).nope.x")
    assert exc.stack.splitlines()[1:] == ["    at guest:eval:2:19"]
    exc = error_of(rt, "enum E { A }\nconst w: string = await Promise.resolve('s');\n  (w as any).nope.x")
    assert exc.stack.splitlines()[1:] == ["    at guest:eval:3:19"]


def test_typescript_that_does_not_parse_is_a_syntax_error_at_its_position(rt: pydeno.Runtime) -> None:
    exc = error_of(rt, "const ok: number = 1;\nlet z y = 1")
    assert exc.name == "SyntaxError"
    assert exc.message == "Unexpected identifier 'y'"
    assert (exc.line, exc.column) == (2, 7)
    assert exc.stack.endswith("\n    at guest:eval:2:7 (did not compile)")
    assert "stripTypeScriptTypes" not in exc.stack
    assert error_of(rt, "let a b").stack.endswith("\n    at guest:eval:1:7 (did not compile)")
    assert error_of(rt, "await 1;\n let a b").stack.endswith("\n    at guest:eval:2:8 (did not compile)")
    assert error_of(rt, "enum E { A }\nlet a: = 2").stack.endswith("\n    at guest:eval:2:8 (did not compile)")


def test_a_syntax_error_thrown_while_running_keeps_its_own_frames(rt: pydeno.Runtime) -> None:
    exc = error_of(rt, "const text: string = '{';\nJSON.parse(text)")
    assert exc.name == "SyntaxError"
    assert "at JSON.parse" in exc.stack and "guest:eval:2:6" in exc.stack


def test_a_syntax_error_is_classified_as_the_guests_error(rt: pydeno.Runtime) -> None:
    assert pydeno.classify_error(error_of(rt, "let (")).kind == "js_error"
    assert rt.eval("1 + 1", lang="ts") == 2


def test_a_guest_that_replaced_function_to_string_still_gets_its_own_program(rt: pydeno.Runtime) -> None:
    rt.eval("globalThis.__saved = Function.prototype.toString; Function.prototype.toString = () => '{ 666 }'")
    try:
        assert rt.eval("const n: number = 7;\nn * 6", lang="ts") == 42
    finally:
        rt.eval("Function.prototype.toString = globalThis.__saved")


@pytest.mark.parametrize("lang", ["py", "mjs"])
def test_an_unknown_language_is_refused(rt: pydeno.Runtime, lang: object) -> None:
    with pytest.raises(ValueError) as exc_info:
        rt.eval("1", lang=lang)  # type: ignore[arg-type]
    assert str(exc_info.value) == f'lang must be "js", "javascript", "ts" or "typescript" (in any case), got {lang!r}'


@pytest.mark.parametrize("lang", [None, 1])
def test_a_language_that_is_not_a_str_is_a_type_error(rt: pydeno.Runtime, lang: object) -> None:
    with pytest.raises(TypeError) as exc_info:
        rt.eval("1", lang=lang)  # type: ignore[arg-type]
    assert str(exc_info.value) == f'lang must be a str, one of "js", "javascript", "ts" or "typescript", got {lang!r}'


def test_the_async_runtime_evaluates_typescript() -> None:
    async def main() -> object:
        async with pydeno.AsyncRuntime() as rt:
            return await rt.eval("const s: string = 'ts';\ns.toUpperCase()", lang="ts")

    assert anyio.run(main) == "TS"
