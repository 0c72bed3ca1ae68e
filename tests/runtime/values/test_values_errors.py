"""Values the own-enumerable-keys rule would lose: Error objects cross faithfully, as
JavaScriptError values, and objects whose state lives where reflection cannot read it
(WeakMap, RegExp, URL, class instances with private fields...) are refused, naming what and
where, in results, host-call arguments, tool arguments and both lanes (docs/values.md)."""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator
from typing import Any, ClassVar

import msgpack
import pytest

import pydeno
from pydeno._runtime.json_values import jsonable
from pydeno.host.wire.budget import frame_cost
from pydeno.host.wire.codec import Codec, ValueRefused
from pydeno.host.wire.protocol import EXT_ERROR, EXT_SET

MARK = msgpack.ExtType(EXT_ERROR, b"\x00")


class Box:
    """What the bound host function ``take()`` returns next, and what ``keep()`` was given."""

    value: Any = None
    kept: ClassVar[list[Any]] = []


def keep(*args: Any) -> int:
    Box.kept.append(args)
    return len(args)


@pytest.fixture(scope="module")
def rt() -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime() as runtime:
        runtime.bind_function("take", lambda: Box.value)
        runtime.bind_function("keep", keep)
        yield runtime


@pytest.fixture
def kept() -> Iterator[list[Any]]:
    Box.kept = []
    yield Box.kept
    Box.kept = []


def iife(body: str) -> str:
    """Guest code whose declarations do not leak into the shared runtime's global scope."""
    return f"(() => {{ {body} }})()"


def error_of(value: Any) -> pydeno.JavaScriptError:
    assert isinstance(value, pydeno.JavaScriptError), repr(value)
    return value


def refusal(rt: pydeno.Runtime, code: str) -> str:
    with pytest.raises(pydeno.JavaScriptError) as caught:
        rt.eval(code)
    return caught.value.message


# -- Errors, JavaScript -> Python ----------------------------------------------------------------
def test_an_error_result_arrives_as_a_javascript_error_value_with_its_name_message_and_stack(
    rt: pydeno.Runtime,
) -> None:
    e = error_of(rt.eval("new TypeError('bad input')"))
    assert (e.name, e.message) == ("TypeError", "bad input")
    assert e.stack.startswith("TypeError: bad input\n    at guest:eval:1:")
    # The worker's and Deno's own frames are gone, as from a thrown error's stack.
    assert "ext:core" not in e.stack
    assert str(e) == "JavaScript Error value: TypeError: bad input"
    assert (e.cause, e.has_cause, e.errors, e.properties) == (None, False, None, {})


def test_an_error_nested_in_a_result_arrives_as_a_javascript_error_value(rt: pydeno.Runtime) -> None:
    got = rt.eval("({ok: false, errors: [new RangeError('r'), 1]})")
    assert error_of(got["errors"][0]).name == "RangeError"
    assert got["errors"][1] == 1


def test_an_error_value_keeps_its_cause_converted_even_another_error(rt: pydeno.Runtime) -> None:
    e = error_of(rt.eval("new Error('outer', {cause: new SyntaxError('inner', {cause: {code: 7}})})"))
    inner = error_of(e.cause)
    assert e.has_cause and (inner.name, inner.message) == ("SyntaxError", "inner")
    assert inner.cause == {"code": 7}


@pytest.mark.parametrize(
    ("cause", "expected", "has_cause"),
    [("{cause: undefined}", pydeno.undefined, True), ("{cause: null}", None, True), ("{}", None, False)],
    ids=["undefined", "null", "none"],
)
def test_a_cause_of_undefined_or_null_is_told_from_no_cause(
    rt: pydeno.Runtime, cause: str, expected: Any, has_cause: bool
) -> None:
    e = error_of(rt.eval(f"new Error('e', {cause})"))
    assert e.cause is expected and e.has_cause is has_cause


def test_an_aggregate_errors_list_crosses_as_its_errors(rt: pydeno.Runtime) -> None:
    e = error_of(rt.eval("new AggregateError([new Error('a'), 2], 'several')"))
    assert (e.name, e.message) == ("AggregateError", "several")
    assert isinstance(e.errors, list) and error_of(e.errors[0]).message == "a" and e.errors[1] == 2
    assert e.properties == {}


def test_an_errors_other_own_properties_cross_in_its_properties(rt: pydeno.Runtime) -> None:
    e = error_of(
        rt.eval(
            iife(
                "const e = new Error('m'); e.code = 'E_IO'; e.details = {path: '/x'};"
                "Object.defineProperty(e, 'hidden', {value: 3, enumerable: false}); return e;"
            )
        )
    )
    assert e.properties == {"code": "E_IO", "details": {"path": "/x"}, "hidden": 3}
    # SuppressedError keeps its parts as own properties that are not enumerable.
    suppressed = error_of(rt.eval("new SuppressedError(1, 2, 'while disposing')"))
    assert suppressed.properties == {"error": 1, "suppressed": 2}


def test_a_subclass_and_a_domexception_cross_with_the_name_they_show(rt: pydeno.Runtime) -> None:
    e = error_of(
        rt.eval(iife("class HttpError extends Error { name = 'HttpError'; status = 404 } return new HttpError('nf');"))
    )
    assert (e.name, e.message, e.properties) == ("HttpError", "nf", {"status": 404})
    d = error_of(rt.eval("new DOMException('stopped', 'AbortError')"))
    assert (d.name, d.message) == ("AbortError", "stopped")


def test_each_property_of_an_error_is_read_once(rt: pydeno.Runtime) -> None:
    got = rt.eval(
        iife(
            # The stack is formatted first: its first line reads the message too.
            "let reads = 0; const e = new Error('first'); e.stack;"
            "Object.defineProperty(e, 'message', {get() { reads++; return 'read ' + reads }, enumerable: true});"
            "Object.defineProperty(e, 'code', {get() { reads++; return reads }, enumerable: false});"
            "return {e, reads: () => reads};"
        )
    )
    e = error_of(got["e"])
    assert (e.message, e.properties) == ("read 1", {"code": 2})
    assert got["reads"]() == 2


@pytest.mark.parametrize("part", ["name", "message", "stack"])
def test_an_error_whose_name_message_or_stack_is_not_a_string_is_refused(rt: pydeno.Runtime, part: str) -> None:
    code = iife(f"const e = new Error('x'); Object.defineProperty(e, '{part}', {{value: 42}}); return [e];")
    assert refusal(rt, code) == f"result could not be converted: value[0] is an Error whose {part} is not a string"


def test_an_error_whose_errors_property_is_not_an_array_is_refused(rt: pydeno.Runtime) -> None:
    code = iife("const e = new AggregateError([], 'a'); e.errors = 'many'; return e;")
    assert "is an Error whose errors property is not an Array" in refusal(rt, code)


def test_a_cycle_through_cause_is_refused_like_any_cycle(rt: pydeno.Runtime) -> None:
    code = iife("const e = new Error('loop'); e.cause = {again: e}; return e;")
    assert refusal(rt, code) == "result could not be converted: value.cause.again is a cycle (it contains itself)"


def test_an_error_value_is_a_value_whose_kind_is_js_error_whatever_its_text(rt: pydeno.Runtime) -> None:
    e = error_of(
        rt.eval(iife("const e = new Error('more than 3 host calls in flight'); e.name = 'ToolBudgetError'; return e;"))
    )
    info = pydeno.classify_error(e)
    assert (info.kind, info.retryable) == ("js_error", False)
    assert str(e).startswith(pydeno.JavaScriptError.VALUE_PREFIX)
    # A value carries no note until someone raises and explains it.
    assert not getattr(e, "__notes__", [])
    with pytest.raises(pydeno.JavaScriptError) as caught:
        raise e
    assert pydeno.classify_error(caught.value).kind == "js_error"


def test_an_error_value_pickles_with_its_parts_and_its_text(rt: pydeno.Runtime) -> None:
    e = error_of(rt.eval("Object.assign(new Error('outer', {cause: new TypeError('inner')}), {code: 5})"))
    back = pickle.loads(pickle.dumps(e))
    assert (str(back), back.name, back.message, back.stack) == (str(e), e.name, e.message, e.stack)
    assert (back.properties, back.has_cause, error_of(back.cause).name) == ({"code": 5}, True, "TypeError")
    assert pydeno.classify_error(back).kind == "js_error"


def test_a_thrown_error_still_raises_with_its_usual_text(rt: pydeno.Runtime) -> None:
    with pytest.raises(pydeno.JavaScriptError) as caught:
        rt.eval("throw new RangeError('out', {cause: 1})")
    assert str(caught.value) == "Evaluation failed: RangeError: out"
    assert (caught.value.cause, caught.value.has_cause) == (None, False)


# -- Errors that are not: fakes -------------------------------------------------------------------
def test_an_object_dressed_as_an_error_stays_a_dict(rt: pydeno.Runtime) -> None:
    got = rt.eval("({name: 'Error', message: 'x', stack: 's', [Symbol.toStringTag]: 'Error'})")
    assert got == {"name": "Error", "message": "x", "stack": "s"}


@pytest.mark.parametrize(
    "code",
    [
        "Object.setPrototypeOf({name: 'Error', message: 'x'}, Error.prototype)",
        "Object.create(TypeError.prototype)",
        "new Proxy(new Error('behind a proxy'), {})",
        iife("function F() {} F.prototype = Object.create(Error.prototype); return new F();"),
    ],
    ids=["setPrototypeOf", "Object.create", "Proxy", "function inheriting"],
)
def test_an_object_that_only_inherits_from_an_error_prototype_is_refused_not_taken_for_an_error(
    rt: pydeno.Runtime, code: str
) -> None:
    assert "prototype but is not an Error; make it with new " in refusal(rt, code)


# -- Errors, Python -> JavaScript ----------------------------------------------------------------
SHOW = """(e) => ({isError: Error.isError(e), error: e instanceof Error, type: e instanceof TypeError,
  aggregate: e instanceof AggregateError, name: e.name, message: e.message, stack: e.stack,
  causeIsError: e.cause instanceof Error, cause: e.cause instanceof Error ? e.cause.message : e.cause,
  hasCause: Object.hasOwn(e, 'cause'), errors: e.errors, keys: Object.keys(e), code: e.code,
  ownName: Object.hasOwn(e, 'name')})"""


@pytest.fixture(scope="module")
def show(rt: pydeno.Runtime) -> pydeno.JsFunction:
    fn = rt.eval(SHOW)
    assert isinstance(fn, pydeno.JsFunction)
    return fn


def test_an_error_value_round_trips_into_the_guest_as_a_real_error(rt: pydeno.Runtime, show: pydeno.JsFunction) -> None:
    e = rt.eval("Object.assign(new TypeError('bad', {cause: new Error('why')}), {code: 'E1'})")
    seen = show(e)
    assert seen["isError"] and seen["error"] and seen["type"] and seen["causeIsError"]
    assert (seen["name"], seen["message"], seen["stack"]) == ("TypeError", "bad", error_of(e).stack)
    assert (seen["cause"], seen["code"], seen["keys"], seen["ownName"]) == ("why", "E1", ["code"], False)


def test_a_javascript_error_made_in_python_becomes_an_error_of_the_class_it_names(show: pydeno.JsFunction) -> None:
    made = pydeno.JavaScriptError(
        "TypeError", "made here", "TypeError: made here\n    at python", cause=None, properties={"code": 3}
    )
    seen = show(made)
    assert seen["type"] and seen["isError"]
    assert (seen["message"], seen["stack"], seen["code"]) == ("made here", "TypeError: made here\n    at python", 3)
    assert (seen["cause"], seen["hasCause"]) == (None, True)
    assert not show(pydeno.JavaScriptError("Error", "no cause"))["hasCause"]


def test_a_javascript_error_of_another_name_becomes_an_error_with_that_name(show: pydeno.JsFunction) -> None:
    seen = show(pydeno.JavaScriptError("HttpError", "not found"))
    assert seen["error"] and not seen["type"] and (seen["name"], seen["ownName"]) == ("HttpError", True)


def test_an_aggregate_error_goes_back_with_its_errors(rt: pydeno.Runtime, show: pydeno.JsFunction) -> None:
    seen = show(rt.eval("new AggregateError([1, new Error('two')], 'agg')"))
    assert seen["aggregate"] and seen["errors"][0] == 1 and error_of(seen["errors"][1]).message == "two"


def test_an_error_returned_by_a_host_function_reaches_the_guest_as_an_error_value(rt: pydeno.Runtime) -> None:
    Box.value = {"failure": pydeno.JavaScriptError("RangeError", "too far", properties={"limit": 3})}
    try:
        got = rt.eval("take().then((v) => [v.failure instanceof RangeError, v.failure.message, v.failure.limit])")
    finally:
        Box.value = None
    assert got == [True, "too far", 3]


def test_an_error_passed_to_a_host_function_arrives_as_a_javascript_error_value(
    rt: pydeno.Runtime, kept: list[Any]
) -> None:
    assert rt.eval("keep(new URIError('bad uri'), {nested: [new Error('n')]})") == 2
    first, second = kept[0]
    assert error_of(first).name == "URIError" and error_of(second["nested"][0]).message == "n"


def test_a_cycle_through_a_javascript_errors_cause_is_refused_on_the_host(show: pydeno.JsFunction) -> None:
    e = pydeno.JavaScriptError("Error", "loop")
    e.cause, e.has_cause = [e], True
    with pytest.raises(ValueRefused, match=r"^argument 1\.cause\[0\] is a cycle \(it contains itself\)$"):
        show(e)


def test_a_chain_of_causes_deeper_than_the_limit_is_refused_on_the_host(show: pydeno.JsFunction) -> None:
    e = pydeno.JavaScriptError("Error", "bottom")
    for _ in range(200):
        e = pydeno.JavaScriptError("Error", "up", cause=e)
    with pytest.raises(ValueRefused, match=r"is nested deeper than 128 levels$"):
        show(e)


def test_a_javascript_error_may_not_name_its_parts_among_its_properties() -> None:
    with pytest.raises(ValueError, match="may not name 'cause'"):
        pydeno.JavaScriptError("Error", "m", properties={"cause": 1})
    with pytest.raises(TypeError, match="str keys"):
        pydeno.JavaScriptError("Error", "m", properties={1: 1})  # type: ignore[dict-item]


def test_a_javascript_error_whose_name_is_not_a_string_is_refused_as_an_argument(show: pydeno.JsFunction) -> None:
    with pytest.raises(TypeError, match="name, message and stack must be str"):
        show(pydeno.JavaScriptError(None, "m"))  # type: ignore[arg-type]


def test_a_lone_surrogate_in_a_javascript_error_becomes_a_replacement_character(show: pydeno.JsFunction) -> None:
    assert show(pydeno.JavaScriptError("Error", "a\ud800b"))["message"] == "a\ufffdb"


# -- refusals ----------------------------------------------------------------------------------------
REFUSED = {
    "WeakMap": ("new WeakMap()", "is a WeakMap, whose entries cannot be listed"),
    "WeakSet": ("new WeakSet()", "is a WeakSet, whose items cannot be listed"),
    "WeakRef": ("new WeakRef({})", "is a WeakRef; send what its deref() returns"),
    "FinalizationRegistry": ("new FinalizationRegistry(() => {})", "is a FinalizationRegistry"),
    "RegExp": ("/a+/g", "is a RegExp; send its source and flags as strings"),
    "String wrapper": ("new String('s')", "is a String object (a wrapper); send the primitive string"),
    "Number wrapper": ("new Number(1)", "is a Number object (a wrapper)"),
    "Boolean wrapper": ("new Boolean(false)", "is a Boolean object (a wrapper)"),
    "BigInt wrapper": ("Object(1n)", "is a BigInt object (a wrapper)"),
    "Symbol wrapper": ("Object(Symbol('s'))", "is a Symbol object, and symbols cannot be converted"),
    "generator": ("(function* () { yield 1 })()", "is a generator; collect its items into an Array first"),
    "async generator": ("(async function* () {})()", "is a generator"),
    "Map iterator": ("new Map([[1, 2]]).entries()", "is an iterator; collect its items into an Array first"),
    "Array iterator": ("[1, 2].values()", "is an iterator"),
    "iterator helper": ("[1].values().map((x) => x)", "is an iterator"),
    "URL": ("new URL('https://example.com/')", "is an instance of URL, a built-in class whose state cannot be read"),
    "URLSearchParams": ("new URLSearchParams('a=1')", "is an instance of URLSearchParams"),
    "Headers": ("new Headers({a: '1'})", "is an instance of Headers"),
    "Request": ("new Request('https://example.com/')", "is an instance of Request"),
    "Response": ("new Response('body')", "is an instance of Response"),
    "Blob": ("new Blob(['x'])", "is an instance of Blob"),
    "File": ("new File(['x'], 'f.txt')", "is an instance of File"),
    "TextEncoder": ("new TextEncoder()", "is an instance of TextEncoder"),
    "AbortController": ("new AbortController()", "is an instance of AbortController"),
    "EventTarget": ("new EventTarget()", "is an instance of EventTarget"),
    "Intl.DateTimeFormat": ("new Intl.DateTimeFormat('en')", "is an instance of Intl.DateTimeFormat"),
    "Intl.Locale": ("new Intl.Locale('en')", "is an instance of Intl.Locale"),
    "Temporal.Instant": ("Temporal.Now.instant()", "is an instance of Instant, a built-in class whose state cannot"),
    "Temporal.PlainDate": ("Temporal.PlainDate.from('2020-01-01')", "is an instance of PlainDate, a built-in class"),
    "Temporal.Duration": ("Temporal.Duration.from({hours: 1})", "is an instance of Duration, a built-in class"),
    "subclass of a built-in": (iife("class H extends Headers {} return new H();"), "is an instance of Headers"),
    "Object.create(Map.prototype)": ("Object.create(Map.prototype)", "is an instance of Map"),
    "private field": (
        iife("class A { #x = 1; y = 2 } return new A();"),
        "is an instance of class A, which has private fields that cannot cross; return a plain object",
    ),
    "private method": (iife("class B { #m() {} } return new B();"), "is an instance of class B, which has private"),
    "private accessor": (iife("class C { get #g() { return 1 } } return new C();"), "is an instance of class C"),
    "static private": (iife("class D { static #count = 0; v = 1 } return new D();"), "is an instance of class D"),
    "subclass of a private class": (
        iife("class E { #x } class F extends E { z = 1 } return new F();"),
        "is an instance of class E, which has private",
    ),
}


@pytest.mark.parametrize(("code", "fragment"), list(REFUSED.values()), ids=list(REFUSED))
def test_a_value_whose_state_cannot_be_read_is_refused_as_a_result_naming_what(
    rt: pydeno.Runtime, code: str, fragment: str
) -> None:
    assert refusal(rt, code).startswith(f"result could not be converted: the value {fragment}")


@pytest.mark.parametrize(("code", "fragment"), list(REFUSED.values()), ids=list(REFUSED))
def test_a_value_whose_state_cannot_be_read_is_refused_as_a_host_call_argument(
    rt: pydeno.Runtime, kept: list[Any], code: str, fragment: str
) -> None:
    got = rt.eval(f"keep({{inner: [{code}]}}).then(() => 'sent', (e) => [e.name, e.message])")
    assert got[0] == "TypeError"
    assert got[1].startswith(f"arguments to keep() could not be converted: value.inner[0] {fragment}")
    assert kept == []


def test_a_refused_value_deep_in_a_large_json_shaped_result_is_refused_not_sent_as_a_dict(rt: pydeno.Runtime) -> None:
    # Large enough for the JSON lane and for a result in parts; the odd item is in the last part.
    message = refusal(rt, "Array.from({length: 6000}, (_, i) => ({i, v: i === 5999 ? new WeakMap() : 'x'}))")
    assert message.startswith("result could not be converted: value[5999].v is a WeakMap")
    small = refusal(rt, "({a: {b: [1, {c: new WeakSet()}]}})")
    assert small.startswith("result could not be converted: value.a.b[1].c is a WeakSet")


def test_a_class_instance_without_private_fields_still_converts_by_its_own_keys(rt: pydeno.Runtime) -> None:
    code = iife(
        "class P { constructor() { this.x = 1 } get y() { return 2 } } class Q extends P { z = 3 } return new Q();"
    )
    assert rt.eval(code) == {"x": 1, "z": 3}
    assert rt.eval(iife("function F() { this.a = 'f' } return new F();")) == {"a": "f"}


def test_a_hash_in_a_class_body_string_is_a_false_positive_that_only_refuses(rt: pydeno.Runtime) -> None:
    code = iife("class S { tag = '#1' } return new S();")
    assert "is an instance of class S, which has private fields" in refusal(rt, code)


def test_a_plain_object_a_null_prototype_object_and_a_module_namespace_still_convert(rt: pydeno.Runtime) -> None:
    assert rt.eval("({a: 1})") == {"a": 1}
    assert rt.eval("Object.assign(Object.create(null), {b: 2})") == {"b": 2}
    assert rt.eval("(function () { return arguments })(1, 2)") == {"0": 1, "1": 2}


def test_a_tool_argument_of_each_kind_is_converted_or_refused_as_a_host_calls(rt: pydeno.Runtime) -> None:
    seen: list[Any] = []

    def note(x: Any) -> str:
        seen.append(x)
        return "ok"

    with pydeno.Runtime() as own:
        pydeno.ToolBridge({"note": note}).attach(own)
        assert own.eval("tools.note(new Error('e', {cause: 1}))") == "ok"
        assert error_of(seen[0]).cause == 1
        got = own.eval("tools.note(new WeakMap()).then(() => 'sent', (e) => e.message)")
        assert " could not be converted: value[0] is a WeakMap" in got and len(seen) == 1


def test_code_mode_refuses_a_weakmap_tool_argument_and_returns_an_error_value() -> None:
    def echo(x: Any) -> Any:
        return x

    cm = pydeno.CodeMode([echo])
    try:
        refused = cm.execute("await tools.echo({x: new WeakMap()})")
        assert not refused.ok and refused.error is not None
        assert "is a WeakMap" in str(refused.error["message"])
        returned = cm.execute("new Error('as a value')")
        assert returned.ok and error_of(returned.value).message == "as a value"
    finally:
        cm.close()


def test_an_agent_sandbox_journals_error_values_and_replays_them() -> None:
    key = bytes(range(32))
    seen: list[Any] = []

    def note(x: Any) -> Any:
        seen.append(x)
        return pydeno.JavaScriptError("RangeError", "back", properties={"n": 1})

    code = (
        "const r = await tools.note(new TypeError('t', {cause: 2})); [r instanceof RangeError, r.n, new Error('out')]"
    )
    with pydeno.AgentSandbox(tools={"note": note}) as sb:
        got = sb.run(code)
        journal = sb.dump(key)
    assert got[:2] == [True, 1] and error_of(got[2]).message == "out"
    assert (error_of(seen[0]).name, error_of(seen[0]).cause) == ("TypeError", 2)
    with pydeno.AgentSandbox.load(journal, key=key, tools={"note": note}) as restored:
        assert restored.tool_calls_made == 1
    # The replay's call compared equal to the recorded one and was answered from the journal.
    assert len(seen) == 1


# -- poisoning ------------------------------------------------------------------------------------
# Values the guest builds before it poisons (their stacks formatted: V8 formats a stack when it
# is first read, through the name and message getters, as the guest would see them then), and
# a look at an Error the host sends that reads it through intrinsics captured before too: each
# must come out as it did unpoisoned.
PROBES = """globalThis.probes = {
  error: Object.assign(new TypeError('t', {cause: new Error('c')}), {code: 1}),
  bare: new RangeError(),
  plainClass: new (class P { a = 1 })(),
  privateClass: new (class Q { #x = 1 })(),
  weak: new WeakMap(),
  url: new URL('https://example.com/'),
  fake: Object.setPrototypeOf({message: 'x'}, Error.prototype),
};
probes.error.stack; probes.error.cause.stack; probes.bare.stack;
globalThis.look = ((gopd, isError, proto, T, own) => (e) => [isError(e), proto(e) === T.prototype,
  gopd(e, 'message').value, gopd(e, 'stack').value, gopd(gopd(e, 'cause').value, 'message').value, own(e, 'name')])(
  Object.getOwnPropertyDescriptor, Error.isError, Object.getPrototypeOf, TypeError, Object.hasOwn);
1"""
POISONS = {
    "Error.prototype getters": (
        "for (const C of [Error, TypeError, RangeError]) for (const k of ['name', 'message', 'stack'])"
        " Object.defineProperty(C.prototype, k, {get: bad, configurable: true})"
    ),
    "Error.prototype data": (
        "Error.prototype.name = 'Hacked'; TypeError.prototype.name = 'Hacked'; RangeError.prototype.message = 'Hacked'"
    ),
    "Error.isError": "Error.isError = () => true",
    "Function.prototype.toString": "Function.prototype.toString = () => 'class X {}'",
    "Object.getOwnPropertyDescriptor": "Object.getOwnPropertyDescriptor = bad",
    "Object.getOwnPropertyNames": "Object.getOwnPropertyNames = () => []",
    "Reflect.apply and construct": "Reflect.apply = bad; Reflect.construct = bad",
    "String.prototype.indexOf and endsWith": (
        "String.prototype.indexOf = () => -1; String.prototype.endsWith = () => false"
    ),
    "WeakMap.prototype and toStringTag": (
        "WeakMap.prototype.has = bad; Object.defineProperty(WeakMap.prototype, Symbol.toStringTag, {value: 'Object'})"
    ),
    "Object.prototype.value getter": "Object.defineProperty(Object.prototype, 'value', {get: bad, configurable: true})",
}


def _outcomes(rt: pydeno.Runtime, look: pydeno.JsFunction) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("error", "bare", "plainClass", "privateClass", "weak", "url", "fake"):
        try:
            value = rt.eval(f"probes.{name}")
        except pydeno.JavaScriptError as exc:
            out[name] = ("refused", exc.message)
            continue
        if isinstance(value, pydeno.JavaScriptError):
            cause = error_of(value.cause).message if value.has_cause else None
            out[name] = (value.name, value.message, value.stack, cause, value.properties)
        else:
            out[name] = value
    out["back"] = look(pydeno.JavaScriptError("TypeError", "back", "s", cause=pydeno.JavaScriptError("Error", "c")))
    return out


@contextlib.contextmanager
def _probing() -> Iterator[tuple[pydeno.Runtime, pydeno.JsFunction]]:
    with pydeno.Runtime(timeout=10) as own:
        own.eval(PROBES)
        look = own.eval("look")
        assert isinstance(look, pydeno.JsFunction)
        yield own, look


@pytest.fixture(scope="module")
def unpoisoned() -> dict[str, Any]:
    with _probing() as (own, look):
        return _outcomes(own, look)


def test_the_poisoning_probes_give_the_documented_outcomes(unpoisoned: dict[str, Any]) -> None:
    assert unpoisoned["error"][:2] == ("TypeError", "t") and unpoisoned["error"][3:] == ("c", {"code": 1})
    assert unpoisoned["bare"][:2] == ("RangeError", "")
    assert unpoisoned["plainClass"] == {"a": 1}
    assert unpoisoned["privateClass"][0] == unpoisoned["weak"][0] == unpoisoned["url"][0] == "refused"
    assert unpoisoned["fake"][0] == "refused"
    assert unpoisoned["back"] == [True, True, "back", "s", "c", False]


@pytest.mark.slow
@pytest.mark.parametrize("poison", list(POISONS.values()), ids=list(POISONS))
def test_poisoning_a_builtin_does_not_change_how_errors_and_refusals_cross(
    unpoisoned: dict[str, Any], poison: str
) -> None:
    with _probing() as (own, look):
        own.eval(f"{{ const bad = function () {{ throw new Error('poisoned') }}; {poison}; }} 1")
        assert _outcomes(own, look) == unpoisoned


def test_an_aggregate_error_from_the_host_is_built_without_iterating_its_errors() -> None:
    with pydeno.Runtime() as own:
        own.bind_function("take", lambda: pydeno.JavaScriptError("AggregateError", "agg", errors=[1, 2]))
        got = own.eval(
            "(async () => { const it = Array.prototype[Symbol.iterator];"
            " Array.prototype[Symbol.iterator] = function () { throw new Error('iterated') };"
            " try { const e = await take(); return [e instanceof AggregateError, e.errors.length, e.errors[1]] }"
            " finally { Array.prototype[Symbol.iterator] = it } })()"
        )
    assert got == [True, 2, 2]


# -- the host's decoder ------------------------------------------------------------------------------
def _codec() -> Codec:
    return Codec(make_function=lambda _id: None, function_id=lambda _obj: None, max_message_bytes=1 << 20)


def test_the_host_decodes_an_error_map_into_a_javascript_error_value() -> None:
    data = msgpack.packb([{MARK: ["E", "m", "s"], "cause": None, "errors": [1], "code": 2}], use_bin_type=True)
    (e,) = _codec().unpack(data)
    assert (e.name, e.message, e.stack, e.has_cause, e.errors, e.properties) == ("E", "m", "s", True, [1], {"code": 2})


@pytest.mark.parametrize(
    "value",
    [
        [MARK],
        {"k": MARK},
        {MARK: ["E", "m"]},
        {MARK: ["E", "m", 3]},
        {MARK: ["E", "m", "s"], "errors": "many"},
        {MARK: ["E", "m", "s"], "message": "twice"},
        {MARK: ["E", "m", "s"], 1: "not a str key"},
        msgpack.ExtType(EXT_SET, msgpack.packb([MARK])),
        {msgpack.ExtType(EXT_ERROR, b"\x01"): ["E", "m", "s"]},
    ],
    ids=[
        "in a list",
        "as a value",
        "short head",
        "head not strings",
        "errors not a list",
        "a part twice",
        "a key not a str",
        "in a Set",
        "bad mark",
    ],
)
def test_the_host_refuses_a_malformed_error_from_the_worker(value: Any) -> None:
    with pytest.raises(ValueError, match="Error"):
        _codec().unpack(msgpack.packb(value, use_bin_type=True))


def test_the_host_charges_an_error_mark_for_the_javascript_error_it_becomes() -> None:
    assert frame_cost(msgpack.packb(MARK), 1 << 20, []) == 1024


def test_code_mode_shows_an_error_value_to_the_model_with_its_name_message_stack_and_cause() -> None:
    with pydeno.CodeMode([]) as cm:
        result = cm.execute("new Error('outer', {cause: new TypeError('inner')})")
    value = result.to_dict()["value"]
    assert value["$type"] == "error" and value["name"] == "Error" and value["message"] == "outer"
    assert value["stack"].startswith("Error: outer\n")
    assert value["cause"]["$type"] == "error" and value["cause"]["name"] == "TypeError"
    assert value["cause"]["message"] == "inner"


def test_the_command_line_prints_an_error_value_as_an_error_object() -> None:
    assert jsonable(pydeno.JavaScriptError("RangeError", "r", "RangeError: r", properties={"code": 7})) == {
        "$type": "error",
        "name": "RangeError",
        "message": "r",
        "stack": "RangeError: r",
        "properties": {"code": 7},
    }
