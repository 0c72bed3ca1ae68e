"""ES modules from the host: added modules resolve by their specifier, statically and with
import(); nothing else does, and frames in module code point at what was written."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

import pydeno

UTILS = (
    "export const twice = (n: number): number => n * 2;\n"
    "export function boom(): never {\n  throw new Error('boom');\n}\n"
)
MATH = "import { twice } from 'utils';\nexport const quad = (n: number) => twice(twice(n));\nexport default 7;\n"


@pytest.fixture
def rt() -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime() as rt:
        rt.add_module("utils", UTILS)
        rt.add_module("./math.ts", MATH)
        yield rt


def js_error(run: object, *args: object) -> pydeno.JavaScriptError:
    with pytest.raises(pydeno.JavaScriptError) as exc_info:
        run(*args)  # type: ignore[operator]
    return exc_info.value


def test_a_module_program_imports_added_modules_and_returns_its_exports(rt: pydeno.Runtime) -> None:
    exports = rt.eval_module(
        "import { quad } from './math.ts';\nimport seven from \"./math.ts\";\n"
        "export const a: number = quad(2);\nexport const b = seven;\nexport function c() { return 'c'; }"
    )
    assert set(exports) == {"a", "b", "c"}
    assert (exports["a"], exports["b"]) == (8, 7)
    assert exports["c"]() == "c"


def test_evals_import_added_modules_with_import(rt: pydeno.Runtime) -> None:
    assert rt.eval("const m = await import('utils'); m.twice(21)") == 42
    assert rt.eval("const m2: any = await import('./math.ts'); m2.quad(1)", lang="ts") == 4
    assert rt.eval_module("export const d = (await import('utils')).twice(5);") == {"d": 10}


@pytest.mark.slow
@pytest.mark.parametrize(
    "source",
    [
        "import { x } from 'lodash';\nexport const y = 1;",
        "export { x } from 'lodash';",
        "import 'lodash';",
        "export const m = await import('lodash');",
        "const name = 'lod' + 'ash';\nexport const m = await import(name);",
    ],
)
def test_a_module_that_was_not_added_is_refused_and_the_operator_is_told_add_module(
    rt: pydeno.Runtime, source: str
) -> None:
    exc = js_error(rt.eval_module, source)
    assert (exc.name, exc.message) == (
        "TypeError",
        'module "lodash" cannot be imported in this sandbox: it was not added; only added modules, '
        "packages the host provided (packages=) and node: built-ins can be imported",
    )
    assert exc.kind == "import_refused"
    assert 'rt.add_module("lodash", source)' in exc.hint


NOT_ADDED = 'module "lodash" cannot be imported in this sandbox: it was not added'


def test_an_eval_importing_what_was_not_added_gets_the_same_answer(rt: pydeno.Runtime) -> None:
    assert js_error(rt.eval, "await import('lodash')").message.startswith(NOT_ADDED)
    assert js_error(rt.eval, "const n = 'lodash'; await import(n)").message.startswith(NOT_ADDED)


def test_a_remote_module_is_refused_and_the_operator_is_told_to_add_its_source(rt: pydeno.Runtime) -> None:
    exc = js_error(rt.eval_module, "import { x } from 'https://example.com/x.js';")
    assert exc.message == (
        'module "https://example.com/x.js" cannot be imported in this sandbox: remote modules are not available'
    )
    assert exc.kind == "import_refused"
    assert 'rt.add_module("https://example.com/x.js", source)' in exc.hint


def test_specifiers_in_strings_comments_templates_and_regexes_are_left_alone(rt: pydeno.Runtime) -> None:
    source = (
        "const s = \"import 'lodash'\"; // import { a } from 'lodash'\n"
        "/* from 'lodash' */ const r = /from \"lodash\"/.source;\n"
        "const t = `${'import(\"lodash\")'} and ${`nested ${1 + 1}`}`;\n"
        "const half = 4 / 2; const again = half / 1;\n"
        "export const out = [s, r, t, again];\n"
    )
    assert rt.eval_module(source)["out"] == [
        "import 'lodash'",
        'from "lodash"',
        'import("lodash") and nested 2',
        2,
    ]


def test_modules_that_import_each_other_in_a_circle_are_refused() -> None:
    with pydeno.Runtime() as rt:
        rt.add_module("a", "import { b } from 'b'; export const a = 1;")
        rt.add_module("b", "import { a } from 'a'; export const b = 2;")
        exc = js_error(rt.eval_module, "import { a } from 'a';")
    assert exc.message.startswith('modules import each other in a circle ("a")')


def test_adding_a_specifier_again_replaces_it_for_later_imports(rt: pydeno.Runtime) -> None:
    assert rt.eval_module("import { quad } from './math.ts'; export const v = quad(1);") == {"v": 4}
    rt.add_module("utils", "export const twice = (n: number) => n * 3;")
    assert rt.eval_module("import { quad } from './math.ts'; export const v = quad(1);") == {"v": 9}


def test_adding_another_module_keeps_one_instance_of_each_unchanged_module() -> None:
    with pydeno.Runtime() as rt:
        rt.add_module("counter", "let n = 0;\nexport const bump = () => ++n;")
        assert rt.eval("(await import('counter')).bump()") == 1
        rt.add_module("other", "export const x = 1;")
        assert rt.eval("(await import('counter')).bump()") == 2
        assert rt.eval_module("import { bump } from 'counter'; export const n = bump();") == {"n": 3}


def test_frames_in_module_code_name_the_module_at_its_positions_as_written(rt: pydeno.Runtime) -> None:
    exc = js_error(rt.eval_module, "import { boom } from 'utils'; const k = 1; boom();")
    assert exc.stack.splitlines()[1:] == ["    at boom (utils:3:9)", "    at guest:module:1:44"]
    exc = js_error(rt.eval, "const mm = await import('utils');\n  mm.boom()")
    assert exc.stack.splitlines()[1:] == ["    at Module.boom (utils:3:9)", "    at guest:eval:2:6"]


def test_a_module_that_does_not_parse_is_a_syntax_error_at_its_position(rt: pydeno.Runtime) -> None:
    exc = js_error(rt.eval_module, "export const q: = 1;")
    assert exc.name == "SyntaxError"
    assert exc.message.startswith("guest:module: Unexpected token `=`.")
    assert exc.stack.endswith("\n    at guest:module:1:17 (did not compile)")
    rt.add_module("broken", "export let = ;")
    exc = js_error(rt.eval_module, "import 'broken';")
    assert exc.message.startswith("broken: ")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("specifier", "error", "message"),
    [
        (
            "https://example.com/x.js",
            ValueError,
            "a module specifier is a name like 'utils' or './utils.ts', not a URL: got 'https://example.com/x.js'",
        ),
        ("node:fs", ValueError, "a module specifier is a name like 'utils' or './utils.ts', not a URL: got 'node:fs'"),
        ("", ValueError, "a module specifier must be a non-empty name without surrounding spaces, got ''"),
        (7, TypeError, "a module specifier must be a str, got int"),
    ],
)
def test_a_bad_specifier_is_refused_on_the_host(
    rt: pydeno.Runtime, specifier: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as exc_info:
        rt.add_module(specifier, "export {}")  # type: ignore[arg-type]
    assert str(exc_info.value) == message


def test_a_module_source_must_be_text(rt: pydeno.Runtime) -> None:
    with pytest.raises(TypeError, match="a module's source must be a str, got bytes"):
        rt.eval_module(b"export {}")  # type: ignore[arg-type]


def test_the_async_runtime_adds_and_runs_modules() -> None:
    async def main() -> dict[str, object]:
        async with pydeno.AsyncRuntime() as rt:
            await rt.add_module("utils", UTILS)
            return await rt.eval_module("import { twice } from 'utils'; export const x = twice(4);")

    assert anyio.run(main) == {"x": 8}
