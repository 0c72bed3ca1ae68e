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
    # Every declaration form, where it stands.
    "var with await": (["var v1 = await 5", "v1"], 5),
    "a var without an initialiser is undefined": (["var v2; await 0; typeof v2"], "undefined"),
    "var declarators of every form": (
        ["await 0; var v3 = 1, v4, {v5} = {v5: 5}; [v3, v4 === undefined, v5]"],
        [1, True, 5],
    ),
    "a var in a for head": (["await 0; for (var i3 = 0; i3 < 3; i3++) {} i3"], 3),
    "a var in a for-in head": (["await 0; for (var k3 in {a: 1, b: 2}) {} k3"], "b"),
    "a var pattern in a for-of head": (["await 0; for (var [x3, y3] of [[1, 2]]) {} [x3, y3]"], [1, 2]),
    "a function called before its declaration": (["f1(); function f1() { return 'hoisted' } await 0; f1()"], "hoisted"),
    "an async generator and for await": (
        [
            "await 0; async function* g1() { yield 1; yield 2 }"
            " const r1 = []; for await (const x of g1()) r1.push(x); r1"
        ],
        [1, 2],
    ),
    "object rest": (["let {a: aa1, ...rest1} = await {a: 1, b: 2, c: 3}; [aa1, rest1]"], [1, {"b": 2, "c": 3}]),
    "array holes, defaults and rest": (
        ["const [p1, , p2 = 9, ...pr] = await [1, 2, undefined, 4, 5]; [p1, p2, pr]"],
        [1, 9, [4, 5]],
    ),
    "a computed key in a pattern": (["await 0; const {['comp' + 'uted']: cv} = {computed: 4}; cv"], 4),
    "a let without an initialiser": (["let u1; await 0; u1 === undefined"], True),
    "a declarator sees the one before it": (["let m1 = 1, m2 = m1 + 1; await 0; [m1, m2]"], [1, 2]),
    "a pattern's initialiser sees the declarator before it": (["await 0; let [d1] = [1], {d2} = {d2: d1 + 1}; d2"], 2),
    "classes that extend each other": (
        ["class A1 { static x = 1 } class B1 extends A1 { y() { return 2 } } await 0; [B1.x, new B1().y()]"],
        [1, 2],
    ),
    "closures over a loop's let": (
        ["let arr = []; for (let i = 0; i < 3; i++) { arr.push(() => i) } await 0; arr.map(f => f())"],
        [0, 1, 2],
    ),
    "a let declared again is assigned": (["let w1 = await 1", "w1 = 5; w1"], 5),
    "a class declared by an await can be assigned": (["class CC { } await 0", "CC = 3"], 3),
    "let on a line of its own": (["await 0; let\nlt = 3; lt"], 3),
    "let as a name": (["await 0; let = 5"], 5),
    # Where statements end without semicolons, as written.
    "a line that starts with a bracket goes on the line before": (
        ["await 0\nconst s1 = 'a'\n;[1, 2].map(x => x * 2)"],
        [2, 4],
    ),
    "an operator on the next line goes on": (["const t1 = await 1\nconst t2 = t1\n  + 1\nt2"], 2),
    "an arrow's body ends its line": (["const fn1 = () => {}\nawait 0\n;(1)"], 1),
    "++ on its own line is a prefix": (["let x9 = 1\nx9\n++x9\nawait 0; x9"], 2),
    "template literals in template literals": (["await 0; `a${1 + 1}b${`c${2}`}`"], "a2bc2"),
    "a brace in a regular expression": (["await 0; const re1 = /a}b/g; 'a}b'.replace(re1, 'x')"], "x"),
    "division is not a regular expression": (["await 0; const div = 10 / 2 / 5; div"], 1),
    "a regular expression after an if's condition": (
        ["await 0; let r = 0; if (true) /[{(]/.test('{') && (r = 1); r"],
        1,
    ),
    "keywords as property names": (
        ["await 0; const obj1 = { await: 1, class: 2, function: 3 }; obj1.await + obj1.class + obj1.function"],
        6,
    ),
    "a trailing line comment": (["await 0\n// trailing comment"], 0),
    # More completion values.
    "a labelled block": (["await 0; label1: { 1; break label1; 2 }"], 1),
    "do while": (["await 0; do { 5 } while (false)"], 5),
    "an if that runs nothing is undefined": (["await 0; 1; if (false) 2"], UNDEFINED),
    "a loop that runs nothing is undefined": (["await 0; 7; for (const z of []) z"], UNDEFINED),
    "catch": (["await 0; try { throw 1 } catch { 8 }"], 8),
    "try, not its finally": (["await 0; try { 9 } catch (e) { 10 } finally { 11 }"], 9),
    "switch falls through": (["await 0; switch (2) { case 1: 'a'; case 2: 'b'; case 3: 'c' }"], "c"),
    "a case with a conditional": (["await 0; switch (3) { case 1 ? 3 : 4: 'x'; default: 'd' }"], "d"),
    "with": (["await 0; with ({wx: 1}) { wx }"], 1),
    "debugger gives no value": (["await 0; 3; debugger"], 3),
    "a thenable is awaited": (["await 0; ({ then(r) { r(42) } })"], 42),
    "use strict stays a directive": (["'use strict'; await 0; (function () { return this })() === undefined"], True),
    "sloppy otherwise": (["await 0; (function () { return this })() === globalThis"], True),
    "eval's var is global": (["await 0; eval('var ev1 = 1'); typeof ev1"], "number"),
    "an import declaration": (["const {default: dd} = await import('data:text/javascript,export default 6'); dd"], 6),
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
    "a name declared twice in one eval": (
        "await 0; let q = 1; let q = 2",
        "SyntaxError",
        "Identifier 'q' has already been declared",
        1,
        25,
    ),
    "return at the top level": ("await 0; return 5", "SyntaxError", "Illegal return statement", 1, 10),
    "new.target at the top level": (
        "await 0; new.target",
        "SyntaxError",
        "new.target expression is not allowed here",
        1,
        14,
    ),
    "a closing brace with no opening one": ("await 0; }", "SyntaxError", "Unexpected token '}'", 1, 10),
    "input that ends inside a block": ("await 0; if (x) {", "SyntaxError", "Unexpected end of input", 1, 18),
    "input that ends inside a template": ("await 0; `unterminated", "SyntaxError", "Unexpected end of input", 1, 23),
    "two names with no operator": ("await 0; let a b", "SyntaxError", "Unexpected identifier 'b'", 1, 16),
    "a const with no value": ("await 0; const z", "SyntaxError", "Missing initializer in const declaration", 1, 16),
    "a call left open": ("await 0;\n  foo(1,\n  2", "SyntaxError", "missing ) after argument list", 3, 3),
    "an error in a declarator": (
        "var a1 = await 1, b1 = a1.q.r",
        "TypeError",
        "Cannot read properties of undefined (reading 'r')",
        1,
        29,
    ),
    "an error in a function declared beside an await": (
        "const k = await 1;\nfunction f() { return k.x.y }\n  f()",
        "TypeError",
        "Cannot read properties of undefined (reading 'y')",
        2,
        27,
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


# (the eval that declared it first, the one that declares it again): refused, as a script would.
REDECLARED: Final = {
    "a plain eval's let": ("let taken = 1", "let taken = await 2"),
    "a plain eval's const": ("const taken = 1", "let taken = await 2"),
    "a plain eval's class": ("class taken {}", "let taken = await 2"),
    "a plain eval's var": ("var taken = 1", "let taken = await 2"),
    "a plain eval's function": ("function taken() {}", "let taken = await 2"),
    "a let an await declared, as a var": ("let taken = await 1", "var taken = 2"),
}


@pytest.mark.parametrize("name", list(REDECLARED))
def test_a_name_declared_is_not_declared_again_where_a_script_could_not(name: str) -> None:
    first, again = REDECLARED[name]
    with pydeno.Runtime() as rt, pytest.raises(pydeno.JavaScriptError) as caught:
        rt.eval(first)
        rt.eval(again)
    assert (caught.value.name, caught.value.message) == ("SyntaxError", "Identifier 'taken' has already been declared")


def test_a_const_an_await_declared_can_be_declared_again_so_it_stays_assignable() -> None:
    # The price of declaring again (docs/architecture.md): such a const is a let underneath.
    with pydeno.Runtime() as rt:
        rt.eval("const w2 = await 1")
        assert rt.eval("w2 = 5; w2") == 5


def test_a_use_before_its_let_is_a_reference_error() -> None:
    with pydeno.Runtime() as rt, pytest.raises(pydeno.JavaScriptError) as caught:
        rt.eval("await 0; tz; let tz = 1")
    assert caught.value.name == "ReferenceError"
