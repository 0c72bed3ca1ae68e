"""What an eval means, as a table: the REPL behaviours users rely on, whichever way the worker
gets them (top-level ``await``, declarations that persist from one eval to the next,
completion values, errors at their place as written).

Each row is evals run in order on one runtime and what the last one gives. The table is the
contract a change of the worker's evaluation must keep; every row holds for an eval with
``await`` in it, and most for one without.
"""

from __future__ import annotations

import re
from typing import Any, Final

import pytest

import pydeno

UNDEFINED: Final = pydeno.undefined

# name: (evals in order, the last one's value)
VALUES: Final[dict[str, tuple[list[str], Any]]] = {
    # Declarations of every kind persist, to the next eval, with await or without.
    "const from an await": (["const a = await Promise.resolve(1)", "a"], 1),
    "let, class, function and var": (
        [
            "let l = await 1; class C { v() { return 2 } } function f() { return 3 } var v = 4",
            "[l, new C().v(), f(), v, typeof globalThis.v, typeof globalThis.f, typeof globalThis.l]",
        ],
        [1, 2, 3, 4, "number", "function", "undefined"],
    ),
    "destructuring": (["const {m, n: [o]} = await Promise.resolve({m: 1, n: [2]})", "[m, o]"], [1, 2]),
    "a plain eval's let seen after an await": (["let p = 7", "await 0; p"], 7),
    "an await's let seen by a plain eval": (["let q = await 8", "q"], 8),
    "var and function become globals": (
        [
            "await 0; var gv = 1; function gf() {}",
            "[Object.getOwnPropertyDescriptor(globalThis, 'gv')?.configurable, typeof gf]",
        ],
        [False, "function"],
    ),
    # Redeclaration across evals, with await, is allowed (the later one wins).
    "let redeclared": (["let x = await 1", "let x = await 2", "x"], 2),
    "const redeclared": (["const z = await 1", "const z = await 2; z"], 2),
    "class redeclared": (["class R { } await 0", "class R { x() { return 1 } } await 0; new R().x()"], 1),
    # Completion values of every statement form.
    "an expression after an await": (["await 1; 2"], 2),
    "if": (["if (true) { await 1; 3 }"], 3),
    "a declaration": (["let d = await 1"], UNDEFINED),
    "for of": (["let s = 0; for (const i of [1,2,3]) { s += await i; s }"], 6),
    "try with finally": (["try { await 1; 4 } finally { 5 }"], 4),
    "a function declaration keeps the last value": (["await 1; function g() {}"], 1),
    "a class declaration keeps the last value": (["await 1; class K {}"], 1),
    "a block": (["{ await 1; 6 }"], 6),
    "switch": (["switch (await 1) { case 1: 'one'; break; default: 'other' }"], "one"),
    "while": (["let n = 0; while (n < 3) { n = n + await 1 }"], 3),
    "an empty statement keeps the last value": (["await 1;;"], 1),
    "a labelled break": (["await 0; out: for (;;) { break out; }"], UNDEFINED),
    "a brace at the start is a block": (["await 0; {a: 1}"], 1),
    "a parenthesised object literal": (["await 0; ({a: 1})"], {"a": 1}),
    "a parenthesised object literal without await": (["({a: 1})"], {"a": 1}),
    # await inside functions and loops.
    "await in a nested async function": (["async function h() { return await 2 }; await h()"], 2),
    "an async arrow": (["const aa = async () => await 3; await aa()"], 3),
    "for await": (["let t = 0; for await (const v of [1, Promise.resolve(2)]) t += v; t"], 3),
    "a generator beside an await": (["function* gen() { yield 1 } await 0; [...gen()]"], [1]),
    "a default parameter beside an await": (["await 0; function dd(a = 1) { return a } dd()"], 1),
    # await as an identifier where the language allows it, and in text.
    "await as a parameter name": (["function w(await) { return await } w(3)"], 3),
    "await in a string": (["'await' + 1"], "await1"),
    # this and arguments at the top level.
    "this is the global object": (["await 0; this === globalThis"], True),
    "this without await": (["this === globalThis"], True),
    "no arguments at the top level": (["await 0; typeof arguments"], "undefined"),
    "no arguments without await": (["typeof arguments"], "undefined"),
    # A value that is a promise is awaited.
    "a promise": (["Promise.resolve(5)"], 5),
    "a promise after an await": (["await 0; Promise.resolve(6)"], 6),
}

# name: (code, error name, message, line, column): where the error is, as the code is written.
ERRORS: Final[dict[str, tuple[str, str, str, int, int]]] = {
    "a throw on line 2": ("await 0;\nthrow new Error('boom')", "Error", "boom", 2, 7),
    "a reference error on line 2": ("await 0;\nnotDefined", "ReferenceError", "notDefined is not defined", 2, 1),
    "a syntax error on line 2": ("await 0;\nlet = ;", "SyntaxError", "Unexpected token ';'", 2, 7),
    "a syntax error without await": ("1 +", "SyntaxError", "Unexpected end of input", 1, 4),
    "await in a function that is not async": (
        "function bad() { await 1 }",
        "SyntaxError",
        "await is only valid in async functions and the top level bodies of modules",
        1,
        18,
    ),
}
_PLACE: Final = re.compile(r":(\d+):(\d+)\)?(?: \(did not compile\))?$", re.MULTILINE)


@pytest.mark.parametrize("name", list(VALUES))
def test_each_eval_of_a_row_gives_what_the_table_says(name: str) -> None:
    evals, expected = VALUES[name]
    with pydeno.Runtime() as rt:
        for code in evals[:-1]:
            rt.eval(code)
        assert rt.eval(evals[-1]) == expected


@pytest.mark.parametrize("name", list(ERRORS))
def test_an_error_is_reported_where_the_code_has_it(name: str) -> None:
    code, error, message, line, column = ERRORS[name]
    with pydeno.Runtime() as rt, pytest.raises(pydeno.JavaScriptError) as caught:
        rt.eval(code)
    assert (caught.value.name, caught.value.message) == (error, message)
    frames = (caught.value.stack or "").split("\n")[1:]
    found = _PLACE.search(frames[0]) if frames else None
    assert found is not None and (int(found.group(1)), int(found.group(2))) == (line, column)


def test_a_thrown_value_that_is_not_an_error_arrives_as_thrown() -> None:
    with pydeno.Runtime() as rt, pytest.raises(pydeno.JavaScriptError) as caught:
        rt.eval("await 0; throw 42")
    assert caught.value.has_value and caught.value.value == 42


def test_a_use_before_its_let_is_a_reference_error() -> None:
    with pydeno.Runtime() as rt, pytest.raises(pydeno.JavaScriptError) as caught:
        rt.eval("await 0; tz; let tz = 1")
    assert caught.value.name == "ReferenceError"
