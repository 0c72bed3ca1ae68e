"""An eval with ``await`` is rewritten by the worker (worker/repl.ts) and its declarations made by
scripts of the worker's: what the guest poisons before must not change what that does."""

from __future__ import annotations

from typing import Final

import pytest

import pydeno

# Names the worker's own objects use, put on Object.prototype with junk behind them: its
# rewrite, its cache of functions, the edits and the object it hands values over through.
FIELDS: Final = [
    "rw", "fn", "functions", "name", "error", "body", "edits", "lexical", "vars", "start", "end", "to",
    "line", "column", "now", "longer", "shown", "f", "t", "s", "r", "text", "outcome",
]  # fmt: skip

POISONINGS: Final = {
    "fields on Object.prototype": "".join(f"Object.prototype[{f!r}] = 'evil';" for f in FIELDS),
    "getters that throw on Object.prototype": "".join(
        f"Object.defineProperty(Object.prototype, {f!r}, {{get() {{ throw new Error('got {f}') }}, set() {{}},"
        " configurable: true});"
        for f in FIELDS
    ),
    "array iteration": "Array.prototype[Symbol.iterator] = function* () { yield 'evil' };",
    "array methods": "for (const m of ['push', 'slice', 'join', 'map', 'indexOf']) Array.prototype[m] = () => 'evil';",
    "string methods": (
        "String.prototype.charCodeAt = () => 59; String.prototype.slice = () => '}';"
        " String.prototype.indexOf = () => -1; String.prototype.includes = () => false;"
    ),
    "RegExp exec": "RegExp.prototype.exec = () => null; RegExp.prototype.test = () => false;",
    "Function call, apply and bind": (
        "Function.prototype.call = () => 'evil'; Function.prototype.apply = () => 'evil';"
        " Function.prototype.bind = () => () => 'evil';"
    ),
    "Reflect and Object statics": (
        "Reflect.apply = () => 'evil'; Object.defineProperty = () => ({}); Object.create = () => ({});"
        " Object.hasOwn = () => true;"
    ),
    "the stack trace limit made fixed": "Object.defineProperty(Error, 'stackTraceLimit', {value: 1, writable: false});",
}


@pytest.mark.parametrize("poison", list(POISONINGS))
def test_evals_that_await_mean_the_same_after_a_poisoning(poison: str) -> None:
    with pydeno.Runtime() as rt:
        try:
            rt.eval(f"{{ {POISONINGS[poison]} }} 1")
        except pydeno.JavaScriptError as exc:
            assert "value of this eval was lost" in exc.message  # the poisoning eval's own
        assert rt.eval("let a = await Promise.resolve(1); const {b, c: {d}} = {b: 2, c: {d: 3}}; a + b + d") == 6
        assert rt.eval("let a = await 10; a") == 10
        assert rt.eval("var v = await 4; function f() { return v } if (true) { f() }") == 4
        assert rt.eval("await 0; [a, b, d, v, f()]") == [10, 2, 3, 4, 4]
        with pytest.raises(pydeno.JavaScriptError) as caught:
            rt.eval("await 0;\n  missing")
        assert (caught.value.name, caught.value.stack.splitlines()[1:]) == ("ReferenceError", ["    at guest:eval:2:3"])
        with pytest.raises(pydeno.JavaScriptError) as caught:
            rt.eval("await 0; let = ;")
        assert caught.value.name == "SyntaxError"


def test_a_guest_that_finds_the_names_in_its_rewritten_function_changes_only_its_own_eval() -> None:
    # A sloppy frame's function (Error.prepareStackTrace's CallSite) shows the rewritten text,
    # and with it the parameters through which the worker hands the eval its declarations:
    # called with junk, they fail that eval, and the next is as before.
    with pydeno.Runtime() as rt:
        text = rt.eval(
            "await 0; const prep = Error.prepareStackTrace;"
            " Error.prepareStackTrace = (_, sites) => sites;"
            " const fn = new Error().stack[0].getFunction(); Error.prepareStackTrace = prep;"
            " String(fn)"
        )
        _completion, bound, declare, functions = text[text.index("(") + 1 : text.index(")")].split(",")
        for junk in [f"{declare}('__proto__')", f"{declare}(-1)", f"{functions}(1)", f"{bound}.x = 1; {declare}(0)"]:
            try:
                rt.eval(f"let x = await 1; {junk}")
            except pydeno.JavaScriptError as exc:
                assert exc.name in ("TypeError", "ReferenceError")
        assert rt.eval("let after = await 5; after") == 5
        assert rt.eval("after + 1") == 6
        assert rt.eval("x") in (1, pydeno.undefined)
