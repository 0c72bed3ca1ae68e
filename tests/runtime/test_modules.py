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


def js_error(run: object, *args: object, **kwargs: object) -> pydeno.JavaScriptError:
    with pytest.raises(pydeno.JavaScriptError) as exc_info:
        run(*args, **kwargs)  # type: ignore[operator]
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


# -- import declarations in evals ------------------------------------------------------------
# An eval is a script; each top-level import declaration in it becomes a const from import()
# (worker/imports.ts), which later evals see like any top-level const.
NAMES = "export const a = 1;\nexport const b = 2;\nconst xy = 3;\nexport { xy as 'x-y' };\nexport default 'd';\n"


@pytest.fixture
def names() -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime() as rt:
        rt.add_module("m", NAMES)
        yield rt


@pytest.mark.parametrize(
    ("code", "value"),
    [
        ('import d from "m"; d', "d"),
        ('import * as ns from "m"; [ns.a, ns.default, ns["x-y"]]', [1, "d", 3]),
        ('import { a, b as c, "x-y" as z, default as e, } from "m"; [a, c, z, e]', [1, 2, 3, "d"]),
        ("import d, { a } from 'm'; [d, a]", ["d", 1]),
        ('import d, * as ns from "m"; [d, ns.b]', ["d", 2]),
        ('import {\n  a,\n  b as bee\n} from "m"\n[a, bee]', [1, 2]),
        ('import { join } from "node:path"; join("a", "b")', "a/b"),
        ('import {} from "m"; 5', 5),
    ],
)
def test_each_form_of_import_declaration_works_in_an_eval(names: pydeno.Runtime, code: str, value: object) -> None:
    assert names.eval(code) == value


def test_an_import_declaration_is_a_declaration_the_next_evals_see(names: pydeno.Runtime) -> None:
    assert names.eval('import { a } from "m"') is pydeno.undefined
    assert names.eval("a + 1") == 2
    assert names.eval('7; import { b } from "m"') == 7  # a declaration has no value, as const has none
    assert names.eval('import "m"') is pydeno.undefined


def test_a_side_effect_import_runs_the_module_once() -> None:
    with pydeno.Runtime() as rt:
        rt.add_module("side", "globalThis.runs = (globalThis.runs ?? 0) + 1;")
        rt.eval("import 'side'")
        rt.eval("import 'side'")
        assert rt.eval("runs") == 1


def test_importing_a_name_again_redeclares_it_but_not_over_a_plain_const(names: pydeno.Runtime) -> None:
    names.eval('import { a as x } from "m"')
    assert names.eval('import { b as x } from "m"; x') == 2
    names.eval("const kept = 1")
    exc = js_error(names.eval, 'import { a as kept } from "m"')
    assert (exc.name, exc.message) == ("SyntaxError", "Identifier 'kept' has already been declared")


def test_errors_after_an_import_are_placed_where_they_were_written(names: pydeno.Runtime) -> None:
    exc = js_error(names.eval, 'import d, { a } from "m"\nconst q = a;\n  q.x.y')
    assert exc.stack.splitlines()[1:] == ["    at guest:eval:3:7"]
    # On the import's own line, after it: its columns moved and are moved back.
    exc = js_error(names.eval, 'import { a as a2 } from "m"; const q2 = a2; q2.x.y')
    assert exc.stack.splitlines()[1:] == ["    at guest:eval:1:50"]
    exc = js_error(names.eval, 'import {\n  a as a3\n} from "m"; a3.foo.bar')
    assert exc.stack.splitlines()[1:] == ["    at guest:eval:3:20"]
    exc = js_error(names.eval, 'import * as n4 from "m"; let = ;')
    assert (exc.name, exc.line, exc.column) == ("SyntaxError", 1, 32)


def test_a_typescript_eval_imports_and_strips_its_type_only_imports(names: pydeno.Runtime) -> None:
    code = (
        'import type { T } from "m";\nimport type * as N from "m";\nimport type { "x-y" as XY } from "m";\n'
        'import { type U, a as ta, type V as W } from "m";\nconst v: number = ta; v'
    )
    assert names.eval(code, lang="ts") == 1
    assert names.eval("ta", lang="ts") == 1
    exc = js_error(names.eval, 'import { b as tb } from "m"; const w: any = tb; w.x.y', lang="ts")
    assert exc.stack.splitlines()[1:] == ["    at guest:eval:1:53"]


def test_a_typescript_eval_the_transpiler_transforms_keeps_an_import_it_does_not_use() -> None:
    # The transform drops an import whose names the code does not use; converted first, the
    # import stays for the evals that use it, and runs the module.
    with pydeno.Runtime() as rt:
        rt.add_module("m", "export const a = 1; globalThis.loaded = true;")
        assert rt.eval('enum E { A }\nimport { a } from "m"; E.A', lang="ts") == 0
        assert rt.eval("[a, loaded]") == [1, True]
        exc = js_error(rt.eval, 'enum F { A }\nimport { a as x } from "m"; const w: any = x; w.x.y', lang="ts")
        assert exc.stack.splitlines()[1:] == ["    at guest:eval:2:51"]
        exc = js_error(rt.eval, 'enum G { A }\nimport { a as y } from "m"; const w: = y;', lang="ts")
        assert (exc.name, exc.line, exc.column) == ("SyntaxError", 2, 38)


@pytest.mark.parametrize(
    "code",
    [
        "const s = \"import x from 'lodash'\"; s",
        "// import x from 'lodash'\n'c'",
        "`${'x'} import x from 'lodash'`",
        "/import x from 'lodash'/.source",
        "({ import: 1 }).import",
    ],
)
def test_import_words_in_strings_comments_templates_regexes_and_properties_are_left_alone(
    names: pydeno.Runtime, code: str
) -> None:
    assert isinstance(names.eval(code), (str, int))


@pytest.mark.parametrize(
    ("code", "message", "column"),
    [
        ('{ import { a } from "m" }', "Cannot use import statement outside a module", 3),
        ('function f() { import { a } from "m" }', "Cannot use import statement outside a module", 16),
        ('import { a b } from "m"', "Unexpected identifier 'b'", 12),
        ('import { "x-y" } from "m"', "Unexpected token '}'", 16),
        ('import j from "m" with { type: "json" }', "import attributes (with { ... }) are not supported", 19),
    ],
)
def test_an_import_declaration_that_is_not_at_the_top_level_or_does_not_parse_is_a_syntax_error(
    names: pydeno.Runtime, code: str, message: str, column: int
) -> None:
    exc = js_error(names.eval, code)
    assert exc.name == "SyntaxError"
    assert exc.message.startswith(message)
    assert (exc.line, exc.column) == (1, column)


def test_an_import_declaration_of_what_was_not_added_is_refused_before_the_eval_runs(names: pydeno.Runtime) -> None:
    exc = js_error(names.eval, "globalThis.ran = true;\nimport { x } from 'lodash';")
    assert exc.message.startswith(NOT_ADDED)
    assert exc.kind == "import_refused"
    assert names.eval("typeof ran") == "undefined"
    with pydeno.Runtime() as bare:  # no module added at all
        assert js_error(bare.eval, "import x from 'lodash'").message.startswith(NOT_ADDED)
        assert js_error(bare.eval, "import x from 'https://example.com/x.js'").kind == "import_refused"


def test_code_mode_programs_import_and_their_imports_stay_in_the_execution() -> None:
    with pydeno.CodeMode([]) as cm:
        result = cm.execute(
            'import { join } from "node:path";\nimport * as path from "node:path";\njoin("a", path.sep)'
        )
        assert (result.ok, result.value) == (True, "a/")
        returned = cm.execute('import { basename } from "node:path";\nreturn basename("/x/y")')
        assert (returned.ok, returned.value) == (True, "y")
        leaked = cm.execute("typeof join")
        assert leaked.value == "undefined"
        failed = cm.execute('import { join } from "node:path"; const w: any = join; w.x.y')
        assert failed.error is not None and (failed.error["line"], failed.error["column"]) == (1, 60)
        refused = cm.execute("import x from 'lodash'; 1")
        assert refused.error is not None and refused.error["kind"] == "import_refused"
        nested = cm.execute('if (true) { import { join } from "node:path"; }')
        assert nested.error is not None and nested.error["name"] == "SyntaxError"


IMPORT_POISONS = {
    "string methods": (
        "String.prototype.slice = String.prototype.indexOf = String.prototype.charCodeAt = "
        "String.prototype.startsWith = String.prototype.includes = bad"
    ),
    "RegExp exec": "RegExp.prototype.exec = bad; RegExp.prototype[Symbol.match] = bad",
    "JSON and Object": "JSON.stringify = JSON.parse = Object.defineProperty = Object.create = Object.keys = bad",
    "array methods": "Array.prototype.push = Array.prototype.join = Array.prototype.slice = bad",
    "typed array length and set": (
        "Object.defineProperty(Object.getPrototypeOf(Int32Array.prototype), 'length', {get: () => 1e9});"
        "Int32Array.prototype.set = bad"
    ),
}


@pytest.mark.parametrize("poison", list(IMPORT_POISONS.values()), ids=list(IMPORT_POISONS))
def test_poisoned_builtins_do_not_change_how_imports_are_converted(poison: str) -> None:
    many = "".join(f"const v{i} = {i};\n" for i in range(40))  # past the lexer's first token arrays
    with pydeno.Runtime() as rt:
        rt.add_module("m", NAMES)
        rt.eval(f"{{ const bad = function () {{ throw new Error('poisoned') }}; {poison}; }} 1")
        assert rt.eval(many + 'import d, { a, b as c } from "m"; [d, a, c]') == ["d", 1, 2]
        assert rt.eval('import * as tsns from "m"; const n: number = tsns.a; n', lang="ts") == 1
        exc = js_error(rt.eval, 'import { a as p } from "m"; const q = p; q.x.y')
        assert exc.stack.splitlines()[1:] == ["    at guest:eval:1:46"]
        assert js_error(rt.eval, "import x from 'lodash'").message.startswith(NOT_ADDED)
        exc = js_error(rt.eval, many + 'enum E { A }\nimport { a as r } from "m"; const w: any = r; w.x.y', lang="ts")
        assert exc.stack.splitlines()[1:] == ["    at guest:eval:42:51"]
