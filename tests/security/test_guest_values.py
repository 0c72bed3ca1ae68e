"""Attacks on the value codec and the worker's own plumbing by the guest it serves.

The guest shares the worker's isolate: it can poison any prototype, hand back Proxies whose
traps throw, and make getters that change the value while the worker reads it. Whatever it
does, a result arrives exactly as the guest built it or fails with a clear error, and the
runtime stays usable afterwards.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import sys
import tempfile
import urllib.parse
from collections.abc import Iterator
from typing import Any, Final

import pytest

import pydeno
from pydeno.host.process import staging

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

LINUX_X86_64: Final = sys.platform == "linux" and os.uname().machine == "x86_64"
MODES: Final = [
    pytest.param("require", marks=pytest.mark.skipif(not LINUX_X86_64, reason="the OS layers are Linux x86_64 only")),
    "off",
]
EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

# One value of every kind the codec carries, and what the host must make of it.
EVERY_KIND_JS: Final = (
    "[1, -0, 2n ** 70n, 'é', new Uint8Array([1, 2]), [ , 2], {a: 1, b: [true, null]},"
    " new Map([[1, 'one']]), new Set([3]), new Date(0), undefined, 1.5]"
)
EVERY_KIND: Final = [
    1,
    -0.0,
    2**70,
    "é",
    b"\x01\x02",
    [pydeno.undefined, 2],
    {"a": 1, "b": [True, None]},
    {1: "one"},
    {3},
    EPOCH,
    pydeno.undefined,
    1.5,
]


@pytest.fixture(params=MODES)
def rt(request: pytest.FixtureRequest) -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime(sandbox=request.param) as runtime:
        yield runtime


def same(a: Any, b: Any) -> bool:
    """Equality that also tells -0.0 from 0, an int from a float, and a list from a tuple."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def assert_usable(rt: pydeno.Runtime) -> None:
    assert same(rt.eval("[1, {a: [2, -0]}]"), [1, {"a": [2, -0.0]}])


def assert_js_error(rt: pydeno.Runtime, code: str, match: str) -> None:
    with pytest.raises(pydeno.JavaScriptError, match=match) as caught:
        rt.eval(code)
    assert pydeno.classify_error(caught.value).kind == "js_error"
    assert_usable(rt)


# --- 1. Poisoning in the eval that returns ------------------------------------------------------


@pytest.mark.parametrize("index", [0, 1, 3])
def test_an_accessor_on_an_object_prototype_index_does_not_change_a_result(rt: pydeno.Runtime, index: int) -> None:
    poison = f"Object.defineProperty(Object.prototype, {index}, {{get() {{ return 'evil'; }}, configurable: true}});"
    value = "[1, , 3, , 5, {a: [ , , , , ]}]"
    expected = [1, pydeno.undefined, 3, pydeno.undefined, 5, {"a": [pydeno.undefined] * 4}]
    try:
        got = rt.eval(poison + value)
    except pydeno.JavaScriptError as exc:
        assert "prototype" in str(exc)
    else:
        assert same(got, expected), got
    # A later eval, awaiting or not, reads the same holes as holes.
    assert same(rt.eval(value), expected)
    assert same(rt.eval("await 0; " + value), expected)


def test_an_accessor_on_an_object_prototype_index_does_not_change_a_result_that_awaits(rt: pydeno.Runtime) -> None:
    got = rt.eval(
        "await 0; Object.defineProperty(Object.prototype, 1, {get() { return 'evil'; }, configurable: true}); [0, , 2]"
    )
    assert same(got, [0, pydeno.undefined, 2])


def test_array_prototype_refuses_index_properties(rt: pydeno.Runtime) -> None:
    got = rt.eval(
        "const out = [];"
        " try { Object.defineProperty(Array.prototype, 0, {get() { return 'evil'; }}); }"
        " catch (e) { out.push(e.name); }"
        " Reflect.set(Array.prototype, 2, 'evil');"
        " out.push(Array.prototype.length, [ , 1][0] === undefined);"
        " out"
    )
    assert got == ["TypeError", 0, True]


@pytest.mark.parametrize(
    "junk",
    [
        "{get() { throw new Error('index trap'); }, configurable: true}",
        "{get() { return {then(r) { r(1); }}; }, set(v) {}, configurable: true}",
        "{value: 'junk', writable: false, configurable: true}",
    ],
)
@pytest.mark.parametrize("where", ["Object.prototype", "Array.prototype"])
def test_index_properties_on_a_prototype_do_not_break_the_next_eval(rt: pydeno.Runtime, where: str, junk: str) -> None:
    with contextlib.suppress(pydeno.JavaScriptError):
        rt.eval(f"Object.defineProperty({where}, 0, {junk}); Object.defineProperty({where}, 1, {junk}); 1")
    assert rt.eval("1 + 1") == 2
    assert rt.eval("await new Promise((r) => setTimeout(() => r([ , 'x']), 1))") == [pydeno.undefined, "x"]
    rt.bind_function("echo", lambda *a: list(a))
    assert same(rt.eval("await echo([ , 2], {a: 1})"), [[pydeno.undefined, 2], {"a": 1}])
    assert_usable(rt)


PLANT_INDEX_TRAP: Final = (
    "Object.defineProperty(Object.prototype, 0, {get() { throw new Error('index trap'); }, configurable: true})"
)


@pytest.mark.parametrize(
    "plant",
    {
        "a getter of the result": f"({{get a() {{ {PLANT_INDEX_TRAP}; return 1; }}}})",
        "a getter of a thrown error": f"throw {{get message() {{ {PLANT_INDEX_TRAP}; return 'm'; }}, name: 'E'}}",
        "a then getter read when a host call answers": (
            f"Object.defineProperty(Object.prototype, 'then', {{get() {{ delete Object.prototype.then;"
            f" {PLANT_INDEX_TRAP}; return undefined; }}, configurable: true}}); echo(1)"
        ),
    }.values(),
    ids=["result getter", "error getter", "then getter"],
)
def test_an_index_property_planted_after_the_guest_code_ends_does_not_break_the_next_eval(
    rt: pydeno.Runtime, plant: str
) -> None:
    rt.bind_function("echo", lambda *a: list(a))
    with contextlib.suppress(pydeno.JavaScriptError):
        rt.eval(plant)
    assert rt.eval("await new Promise((r) => setTimeout(() => r([ , 'x']), 1))") == [pydeno.undefined, "x"]
    assert rt.eval("Object.getOwnPropertyDescriptor(Object.prototype, 0)") is pydeno.undefined
    assert_usable(rt)


def test_a_prototype_given_to_array_prototype_is_undone_and_holes_stay_holes(rt: pydeno.Runtime) -> None:
    trap = "{get(t, k) { if (typeof k === 'string' && /^[0-9]+$/.test(k)) throw new Error('index trap');"
    trap += " return Reflect.get(Object.prototype, k); }}"
    with contextlib.suppress(pydeno.JavaScriptError):
        rt.eval(f"Object.setPrototypeOf(Array.prototype, new Proxy({{}}, {trap})); [1, , 3]")
    assert rt.eval("Object.getPrototypeOf(Array.prototype) === Object.prototype") is True
    assert same(rt.eval("[1, , 3]"), [1, pydeno.undefined, 3])
    assert_usable(rt)


def test_an_index_property_on_object_prototype_that_cannot_be_removed_ends_the_runtime_clearly(
    rt: pydeno.Runtime,
) -> None:
    # Deno's evaluation reads index 0 after the code: that eval fails with the trap's error.
    with pytest.raises(pydeno.JavaScriptError, match="index trap"):
        rt.eval("Object.defineProperty(Object.prototype, 0, {get() { throw new Error('index trap'); }}); 1")
    with pytest.raises(pydeno.WorkerCrashed, match=r"made Object\.prototype\[0\] non-configurable"):
        rt.eval("1")


def test_removed_index_properties_are_reported_on_the_console() -> None:
    seen: list[tuple[str, str]] = []
    with pydeno.Runtime(on_console=lambda level, text: seen.append((level, text))) as rt:
        rt.eval("await 0; Object.prototype[7] = 'x'; 1")
        assert rt.eval("Object.prototype[7]") is pydeno.undefined
    assert seen == [
        ("warn", "pydeno: removed Object.prototype[7] (Deno's own code reads missing array items through it)")
    ]


POISONINGS: Final = {
    "array iteration": "Array.prototype[Symbol.iterator] = function* () { yield 'evil'; };",
    "array iterator next": (
        "{ let n = 0; Object.getPrototypeOf([][Symbol.iterator]()).next ="
        " () => (n++ % 3 === 2 ? {done: true, value: undefined} : {done: false, value: 'evil'}); }"
    ),
    "Array.prototype methods": (
        "for (const m of ['map', 'push', 'slice', 'join', 'forEach', 'concat', 'filter', 'indexOf'])"
        " Array.prototype[m] = function () { return ['evil']; };"
    ),
    "Object statics": (
        "for (const m of ['keys', 'values', 'entries', 'getPrototypeOf', 'defineProperty', 'create', 'is'])"
        " Object[m] = () => ['evil'];"
    ),
    "JSON": "JSON.stringify = () => '\"evil\"'; JSON.parse = () => 'evil';",
    "Map and Set iteration": (
        "Map.prototype.forEach = function (f) { f('evil', 'evil'); };"
        " Set.prototype.forEach = function (f) { f('evil'); };"
        " Map.prototype[Symbol.iterator] = function* () { yield ['evil', 'evil']; };"
        " Set.prototype[Symbol.iterator] = function* () { yield 'evil'; };"
        " Map.prototype.entries = Map.prototype[Symbol.iterator];"
        " Set.prototype.values = Set.prototype[Symbol.iterator];"
    ),
    "toJSON": "Object.prototype.toJSON = () => 'evil'; Array.prototype.toJSON = () => 'evil';",
    "Function.prototype.call and apply": (
        "Function.prototype.call = function () { return 'evil'; };"
        " Function.prototype.apply = function () { return 'evil'; };"
        " Function.prototype.bind = function () { return () => 'evil'; };"
    ),
    "getters for length and size": (
        "Object.defineProperty(Map.prototype, 'size', {get() { return 0; }});"
        " Object.defineProperty(Set.prototype, 'size', {get() { return 0; }});"
        " Object.defineProperty(Object.getPrototypeOf(Uint8Array.prototype), 'length', {get() { return 0; }});"
    ),
    "String and Number methods": (
        "String.prototype.charCodeAt = () => 101; String.prototype.slice = () => 'evil';"
        " String.prototype[Symbol.split] = () => ['evil']; String.prototype.split = () => ['evil'];"
        " BigInt.prototype.toString = () => '0'; Number.prototype.toString = () => '0';"
        " RegExp.prototype.exec = () => null; RegExp.prototype[Symbol.split] = () => ['evil'];"
    ),
    "TextEncoder and DataView": (
        "TextEncoder.prototype.encodeInto = () => ({read: 0, written: 0});"
        " DataView.prototype.setFloat64 = () => {}; DataView.prototype.setUint32 = () => {};"
        " Date.prototype.getTime = () => 0;"
    ),
    "Promise": "Promise.prototype.then = function (a, b) { return 'evil'; };",
}


@pytest.mark.parametrize("poison", list(POISONINGS))
def test_poisoned_intrinsics_do_not_change_a_result_of_the_same_eval(rt: pydeno.Runtime, poison: str) -> None:
    try:
        got = rt.eval(POISONINGS[poison] + EVERY_KIND_JS)
    except pydeno.JavaScriptError as exc:
        # Refused, never garbled: the worker says what it could not trust.
        assert pydeno.classify_error(exc).kind == "js_error"
    else:
        assert same(got, EVERY_KIND), got
    # Later evals see the poisoned intrinsics too, and still answer exactly.
    try:
        later = rt.eval(EVERY_KIND_JS)
    except pydeno.JavaScriptError as exc:
        assert pydeno.classify_error(exc).kind == "js_error"
    else:
        assert same(later, EVERY_KIND), later
    assert rt.eval("'still ' + 'here'") == "still here"


# What Object.defineProperty reads from a descriptor, inherited when a descriptor is a plain
# object: the worker's own descriptors must not pick up a guest's.
DESCRIPTOR_KEYS: Final = ["get", "set", "value", "writable", "enumerable", "configurable"]


def refuse(_: Any) -> None:
    raise pydeno.ToolError("no")


@pytest.mark.parametrize("key", DESCRIPTOR_KEYS)
def test_descriptor_keys_on_object_prototype_leave_host_calls_and_bindings_working(key: str) -> None:
    with pydeno.Runtime(timeout=10.0) as rt:
        rt.bind_function("echo", lambda value: value)
        rt.bind_function("refuse", refuse)
        # The transpiler loads with the first TypeScript eval, through Deno's own node:module,
        # whose code a guest's descriptor keys break: that is its own js_error, and loaded
        # first here, as it is for every Code Mode program, the worker's part is what is tested.
        assert rt.eval("1 as number", lang="ts") == 1
        rt.eval(f"Object.prototype[{key!r}] = () => 'evil'")
        assert rt.eval("await echo({a: [1, {b: 'c'}], d: 2})") == {"a": [1, {"b": "c"}], "d": 2}
        assert rt.eval("try { await refuse(1) } catch (e) { [e.name, e.message] }") == ["ToolError", "no"]
        rt.bind_function("later", lambda: "bound after")
        assert rt.eval("await later()") == "bound after"
        assert rt.eval("const n: number = 41; n + 1", lang="ts") == 42
        with pytest.raises(pydeno.JavaScriptError, match="SyntaxError"):
            rt.eval("const = ;", lang="ts")


def test_poisoned_array_iteration_in_the_same_eval_is_refused_not_garbled(rt: pydeno.Runtime) -> None:
    with pytest.raises(pydeno.JavaScriptError, match="iteration"):
        rt.eval("Array.prototype[Symbol.iterator] = function* () { yield 'evil'; }; [1, 2]")
    assert same(rt.eval("[1, 2]"), [1, 2])


# --- 2. Proxies ---------------------------------------------------------------------------------

THROWING_PROXIES: Final = {
    "getPrototypeOf": "new Proxy({}, {getPrototypeOf() { throw new Error('trap getPrototypeOf'); }})",
    "revoked": "(() => { const r = Proxy.revocable({}, {}); r.revoke(); return r.proxy; })()",
    "revoked array": "(() => { const r = Proxy.revocable([1], {}); r.revoke(); return r.proxy; })()",
    "ownKeys": "new Proxy({a: 1}, {ownKeys() { throw new Error('trap ownKeys'); }})",
    "get": "new Proxy({a: 1}, {get() { throw new Error('trap get'); }})",
    "has": (
        "new Proxy({a: 1}, {has() { throw new Error('trap has'); }, ownKeys() { throw new Error('trap ownKeys'); }})"
    ),
    "getOwnPropertyDescriptor": (
        "new Proxy({a: 1}, {getOwnPropertyDescriptor() { throw new Error('trap getOwnPropertyDescriptor'); }})"
    ),
    "array get": "new Proxy([1, 2], {get(t, k) { if (k === '0') throw new Error('trap get'); return t[k]; }})",
    "array length": "new Proxy([1, 2], {get(t, k) { if (k === 'length') throw new Error('trap get'); return t[k]; }})",
}


@pytest.mark.parametrize("proxy", list(THROWING_PROXIES))
def test_a_proxy_result_whose_trap_throws_is_a_js_error(rt: pydeno.Runtime, proxy: str) -> None:
    assert_js_error(rt, THROWING_PROXIES[proxy], "could not be converted")


@pytest.mark.parametrize("proxy", list(THROWING_PROXIES))
def test_a_proxy_nested_in_a_result_whose_trap_throws_is_a_js_error(rt: pydeno.Runtime, proxy: str) -> None:
    assert_js_error(rt, f"[1, {{a: [{THROWING_PROXIES[proxy]}]}}, new Map([[1, 2]])]", "could not be converted")
    assert_js_error(rt, f"await 0; new Map([['k', {THROWING_PROXIES[proxy]}]])", "could not be converted")


@pytest.mark.parametrize("proxy", list(THROWING_PROXIES))
def test_a_proxy_argument_to_a_host_call_whose_trap_throws_is_a_js_error(rt: pydeno.Runtime, proxy: str) -> None:
    calls: list[Any] = []
    rt.bind_function("f", lambda *a: calls.append(a))
    proxy_js = THROWING_PROXIES[proxy]
    got = rt.eval(f"try {{ await f(1, {{p: {proxy_js}}}); 'called' }} catch (e) {{ e.name + ': ' + e.message }}")
    assert got.startswith("TypeError: arguments to f() could not be converted"), got
    assert calls == []
    assert_js_error(rt, f"await f({THROWING_PROXIES[proxy]})", "could not be converted")
    assert_usable(rt)


@pytest.mark.parametrize("proxy", list(THROWING_PROXIES))
def test_a_proxy_logged_to_the_console_whose_trap_throws_does_not_end_the_eval(proxy: str) -> None:
    seen: list[str] = []
    with pydeno.Runtime(on_console=lambda level, text: seen.append(text)) as rt:
        assert rt.eval(f"console.log('p', {THROWING_PROXIES[proxy]}, [{THROWING_PROXIES[proxy]}]); 7") == 7
        assert_usable(rt)
    assert len(seen) == 1 and seen[0].startswith("p ")


def test_a_consistent_proxy_result_arrives_as_what_its_traps_show(rt: pydeno.Runtime) -> None:
    got = rt.eval("[new Proxy({a: 1, b: [2]}, {}), new Proxy([1, 2], {})]")
    assert same(got, [{"a": 1, "b": [2]}, [1, 2]])


# --- 3. Values that change while they are checked ----------------------------------------------

# Each builds a value with a getter that, when the worker reads it, changes another part of
# the value or plants a toJSON; then returns the value. The host must get one consistent
# reading: each allowed outcome is what a single read in order, or a reading after the
# getter ran, gives; never the JSON text of a value the exactness check did not see.
CHANGING: Final = {
    "plants Array.prototype.toJSON": (
        "({list: [1, 2], get a() { Array.prototype.toJSON = () => 'evil'; return 1; }})",
        [{"list": [1, 2], "a": 1}],
    ),
    "plants Object.prototype.toJSON": (
        "({o: {x: 1}, get a() { Object.prototype.toJSON = function () { return 'evil'; }; return 1; }})",
        [{"o": {"x": 1}, "a": 1}],
    ),
    "plants toJSON on a nested object": (
        "(() => { const inner = {c: 2}; return {inner, get a() { inner.toJSON = () => 'evil'; return 1; }}; })()",
        [{"inner": {"c": 2}, "a": 1}, {"inner": {"c": 2, "toJSON": "function"}, "a": 1}],
    ),
    "turns an earlier sibling into NaN": (
        "(() => { const o = {n: 1, get a() { o.n = NaN; return 1; }}; return o; })()",
        [{"n": 1, "a": 1}, {"n": math.nan, "a": 1}],
    ),
    "turns an earlier sibling into -0": (
        "(() => { const o = {n: 1, get a() { o.n = -0; return 1; }}; return o; })()",
        [{"n": 1, "a": 1}, {"n": -0.0, "a": 1}],
    ),
    "returns another number when read again": (
        "(() => { let k = 0; return {get a() { return k++ === 0 ? 1 : -0; }}; })()",
        [{"a": 1}, {"a": -0.0}],
    ),
    "turns into undefined when read again": (
        "(() => { let k = 0; return [{get a() { return k++ === 0 ? 1 : undefined; }}, 2]; })()",
        [[{"a": 1}, 2], [{"a": pydeno.undefined}, 2]],
    ),
    "adds a Map to an earlier array": (
        "(() => { const list = [1]; return {list, get a() { list[0] = new Map([[1, 2]]); return 1; }}; })()",
        [{"list": [1], "a": 1}, {"list": [{1: 2}], "a": 1}],
    ),
}


def _normalise(value: Any) -> Any:
    # A JsFunction handle (a toJSON the guest planted) is compared by kind only.
    if isinstance(value, pydeno.JsFunction):
        value.close()
        return "function"
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


def assert_one_reading(got: Any, allowed: list[Any]) -> None:
    got = _normalise(got)
    assert any(same(got, a) for a in allowed), f"{got!r} is none of {allowed!r}"


@pytest.mark.parametrize("shape", list(CHANGING))
def test_a_value_that_changes_while_it_is_checked_arrives_as_one_reading(rt: pydeno.Runtime, shape: str) -> None:
    code, allowed = CHANGING[shape]
    assert_one_reading(rt.eval(code), allowed)


@pytest.mark.parametrize("shape", list(CHANGING))
def test_a_long_array_that_changes_while_its_parts_are_checked_arrives_as_one_reading(
    rt: pydeno.Runtime, shape: str
) -> None:
    code, allowed = CHANGING[shape]
    # The changing value sits early in the first of the parts a 5000-item array travels in.
    got = rt.eval(f"(() => {{ const v = {code}; return Array.from({{length: 5000}}, (_, i) => i === 3 ? v : i); }})()")
    assert isinstance(got, list) and len(got) == 5000
    assert got[:3] == [0, 1, 2] and got[4:] == list(range(4, 5000))
    assert_one_reading(got[3], allowed)


def test_a_long_array_whose_getter_changes_an_earlier_item_arrives_as_one_reading(rt: pydeno.Runtime) -> None:
    got = rt.eval(
        "const arr = Array.from({length: 5000}, (_, i) => i);"
        " Object.defineProperty(arr, 1, {get() { arr[0] = NaN; return 1; }, enumerable: true, configurable: true});"
        " arr"
    )
    assert isinstance(got, list) and len(got) == 5000
    assert got[1:] == list(range(1, 5000))
    assert got[0] == 0 or math.isnan(got[0]), got[0]


@pytest.mark.parametrize("shape", list(CHANGING))
def test_a_host_call_argument_that_changes_while_it_is_checked_arrives_as_one_reading(
    rt: pydeno.Runtime, shape: str
) -> None:
    code, allowed = CHANGING[shape]
    received: list[Any] = []
    rt.bind_function("f", received.append)
    rt.eval(f"await f({code})")
    (arg,) = received
    assert_one_reading(arg, allowed)


# --- 4. and 5. Web Workers the guest starts ----------------------------------------------------

RUN_WORKER: Final = r"""
function run(url) {
  return new Promise((resolve) => {
    const w = new Worker(url, {type: 'module'});
    w.onmessage = (e) => { resolve(e.data); w.terminate(); };
    w.onerror = (e) => { e.preventDefault(); resolve(`error: ${e.message}`); w.terminate(); };
  });
}
"""
UNSTABLE: Final = "{permissions: 'none'}"


def data_url(code: str) -> str:
    return "data:text/javascript," + urllib.parse.quote(code)


def relay(url: str) -> str:
    """A worker's code that starts a worker at url and passes on its first message."""
    return (
        f"const w = new Worker({json.dumps(url)}, {{type: 'module'}}); w.onmessage = (e) => self.postMessage(e.data);"
    )


def test_a_worker_with_a_deno_option_is_a_type_error_and_the_runtime_carries_on(rt: pydeno.Runtime) -> None:
    got = rt.eval(
        f"let out; try {{ new Worker('data:text/javascript,1', {{type: 'module', deno: {UNSTABLE}}}); }}"
        " catch (e) { out = e.name + ': ' + e.message; } out"
    )
    assert got.startswith("TypeError: Failed to construct 'Worker': the deno option is not supported"), got
    assert_usable(rt)


def test_a_nested_worker_with_a_deno_option_is_a_type_error_and_the_runtime_carries_on(rt: pydeno.Runtime) -> None:
    nested = (
        f"try {{ new Worker('data:text/javascript,1', {{type: 'module', deno: {UNSTABLE}}});"
        " self.postMessage('made'); } catch (e) { self.postMessage(e.name); }"
    )
    assert rt.eval(RUN_WORKER + f"await run({json.dumps(data_url(nested))})") == "TypeError"
    assert rt.eval(RUN_WORKER + f"await run({json.dumps(data_url(relay(data_url(nested))))})") == "TypeError"
    assert_usable(rt)


# What a guest's Web Worker sees: what its own isolate does, no Deno, process or require
# (tests/security/test_guest_workers.py tries every way to reach them).
WORKER_SEES: Final = "self.postMessage({deno: typeof Deno, process: typeof process, require: typeof require});"


def test_a_guest_web_worker_sees_no_deno_process_or_require(rt: pydeno.Runtime) -> None:
    expected = {"deno": "undefined", "process": "undefined", "require": "undefined"}
    places = {
        "data:": json.dumps(data_url(WORKER_SEES)),
        "blob:": f"URL.createObjectURL(new Blob([{json.dumps(WORKER_SEES)}], {{type: 'text/javascript'}}))",
        "nested": json.dumps(data_url(relay(data_url(WORKER_SEES)))),
    }
    for place, url in places.items():
        assert rt.eval(RUN_WORKER + f"await run({url})") == expected, place
    # The runtime's own isolate has none of them either.
    assert rt.eval("[typeof Deno, typeof process, typeof require]") == ["undefined"] * 3


# A node:worker_threads worker, which Deno starts with nothing of pydeno's run first, has
# Deno's worker globals: every permission is refused there.
NODE_WORKER_SEES: Final = r"""
const { Worker } = await import('node:worker_threads');
await new Promise((resolve) => {
  const w = new Worker(`const names = ['read', 'write', 'net', 'env', 'run', 'ffi', 'sys', 'import'];
    require('worker_threads').parentPort.postMessage({deno: typeof Deno, process: typeof process,
      granted: names.filter((n) => Deno.permissions.querySync({name: n}).state === 'granted'),
      requested: Deno.permissions.requestSync({name: 'read'}).state === 'granted'});`, {eval: true});
  w.on('message', (m) => { resolve(m); w.terminate(); });
  w.on('error', (e) => resolve('error: ' + e.message));
})
"""


def test_a_node_worker_sees_deno_and_process_with_every_permission_refused(rt: pydeno.Runtime) -> None:
    assert rt.eval(NODE_WORKER_SEES) == {"deno": "object", "process": "object", "granted": [], "requested": False}


NODE_WORKER_STARTS: Final = r"""
const { Worker } = await import('node:worker_threads');
await new Promise((resolve) => {
  const source = `const { parentPort } = require('worker_threads');
    try {
      const w = new globalThis.Worker('data:text/javascript,self.postMessage(1)',
        {type: 'module', deno: {permissions: PERMISSIONS}});
      w.onmessage = () => { parentPort.postMessage('started'); w.terminate(); };
    } catch (e) { parentPort.postMessage(e.name + ': ' + e.message); }`;
  const w = new Worker(source, {eval: true});
  w.on('message', (m) => { resolve(m); w.terminate(); });
  w.on('error', (e) => resolve('error: ' + e.message));
})
"""


@pytest.mark.parametrize(
    ("permissions", "outcome"),
    [
        ("'none'", "started"),
        ("'inherit'", "started"),
        ("{read: true}", "NotCapable: Can't escalate parent thread permissions"),
        ("{net: true, run: true, env: true, ffi: true}", "NotCapable: Can't escalate parent thread permissions"),
    ],
)
def test_a_worker_inside_a_node_worker_may_narrow_permissions_but_never_widen_them(
    rt: pydeno.Runtime, permissions: str, outcome: str
) -> None:
    # A node:worker_threads worker's own Worker is Deno's, unguarded: Deno itself checks the
    # option there, and refuses to widen what the guest has.
    assert rt.eval(NODE_WORKER_STARTS.replace("PERMISSIONS", permissions)) == outcome
    assert_usable(rt)


# --- 6. Stack traces that cross the worker's own code ------------------------------------------

FILE_NAMES: Final = "Error.prepareStackTrace = (e, sites) => sites.map((s) => String(s.getFileName()));"
STACKS_THROUGH_THE_WORKER: Final = {
    "a getter the codec reads, with prepareStackTrace": FILE_NAMES + "({get a() { return new Error().stack; }})",
    "a getter the codec reads": "({get a() { return new Error().stack; }})",
    "a getter in a host call's argument": "await f({get a() { return new Error().stack; }})",
    "a Proxy trap the codec runs": "new Proxy({k: 1}, {get() { return new Error().stack; }})",
    "an error the worker makes for a host call": "try { await f(Symbol()); } catch (e) { e.stack }",
    "an error the worker makes, with prepareStackTrace": FILE_NAMES
    + "try { await f(Symbol()); } catch (e) { e.stack }",
    "a host call's error": "try { await g(); } catch (e) { e.stack }",
    "captureStackTrace in a getter": "({get a() { const o = {}; Error.captureStackTrace(o); return o.stack; }})",
}


@pytest.mark.parametrize("where", list(STACKS_THROUGH_THE_WORKER))
def test_stack_traces_through_the_worker_show_no_host_path(rt: pydeno.Runtime, where: str) -> None:
    def fail() -> None:
        raise ValueError("from the host")

    rt.bind_function("f", lambda *a: a[0] if a else None)
    rt.bind_function("g", fail)
    got = str(rt.eval(STACKS_THROUGH_THE_WORKER[where]))
    assert "    at " in got or "ext:" in got or "guest:" in got, got
    worker_dir = str(staging.worker_entry().parent)
    for leak in (worker_dir, "file://", tempfile.gettempdir() + "/", "pydeno-", "worker-", "main.ts", "codec.ts"):
        assert leak not in got, f"{leak!r} in {got!r}"


# The worker takes a frame's methods from the first stack it writes, which comes after guest
# code has run: what it takes them with must be the language's own still.
POISON_BEFORE_THE_FIRST_STACK: Final = (
    "Function.prototype.bind = () => () => 'evil'; Function.prototype.call = () => 'evil';"
    " Function.prototype.apply = () => 'evil'; Reflect.apply = () => 'evil'; 1"
)


def test_a_guest_that_poisons_functions_before_its_first_stack_still_gets_true_frames() -> None:
    with pydeno.Runtime() as fresh:
        assert fresh.eval(POISON_BEFORE_THE_FIRST_STACK) == 1
        got = str(fresh.eval("({get a() { return new Error().stack; }})"))
        assert "evil" not in got and "    at get a (guest:eval:1:" in got, got
        for leak in (str(staging.worker_entry().parent), "file://", "worker-", "main.ts"):
            assert leak not in got, f"{leak!r} in {got!r}"
        with pytest.raises(pydeno.JavaScriptError) as raised:
            fresh.eval("function thrower() { throw new Error('x'); }\nthrower()")
        assert "at thrower (guest:eval:1:" in raised.value.stack, raised.value.stack


READ_BACK: Final = {
    "node:process argv": "await 0; (await import('node:process')).default.argv",
    "node:process argv in a Web Worker": RUN_WORKER
    + "await run("
    + json.dumps(data_url("self.postMessage((await import('node:process')).default.argv)"))
    + ")",
    "Deno.args and process.argv in a node worker": (
        "const { Worker } = await import('node:worker_threads');"
        " await new Promise((resolve) => { const w = new Worker(`require('worker_threads').parentPort.postMessage("
        "[...Deno.args, ...process.argv])`, {eval: true}); w.on('message', (m) => { resolve(m); w.terminate(); }); })"
    ),
}


@pytest.mark.parametrize("where", list(READ_BACK))
def test_the_command_line_the_guest_can_read_back_names_no_host_path(rt: pydeno.Runtime, where: str) -> None:
    got = rt.eval(READ_BACK[where])
    assert isinstance(got, list) and got, got
    # A node worker's argv[0] is the deno binary's path (docs/security.md says why); nothing else
    # of the host is there, and elsewhere not even that (tests/security/test_host_layout.py).
    deno = staging.staged().deno
    text = json.dumps([item for item in got if not str(item).startswith(deno)])
    worker_dir = str(staging.worker_entry().parent)
    for leak in (worker_dir, "max_message_bytes", "selftest", "mailbox", sys.executable, "pydeno-"):
        assert leak not in text, f"{leak!r} in {text}"
