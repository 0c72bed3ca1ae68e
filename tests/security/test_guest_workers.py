"""What a Web Worker the guest starts sees: the view of the runtime's own isolate.

The runtime's isolate has no ``Deno``, ``process`` or ``require``; a Web Worker the guest
starts (from a ``data:`` or ``blob:`` URL, a module that imports another, a worker inside a
worker, whatever options it passes and whatever it has poisoned first) has none of them
either, and so none of Deno's internals (``Deno[Deno.internal].core`` and its ops). Its
``node:`` modules work as they do in the runtime's isolate. A ``node:worker_threads``
worker is the exception docs/security.md names: Deno runs no code of pydeno's in it first.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from typing import Final

import pytest

import pydeno

# Real workers: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow


@pytest.fixture
def rt() -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime(sandbox="off", timeout=30.0) as runtime:
        yield runtime


# Every way the guest could name the runtime from inside a worker; each reads its answer.
LOOK: Final = r"""
const look = () => {
  const names = ["Deno", "process", "require"];
  const seen = {};
  for (const name of names) {
    const found = [];
    if (typeof globalThis[name] !== "undefined") found.push("globalThis[name]");
    if (typeof self[name] !== "undefined") found.push("self[name]");
    if (name in globalThis) found.push("in");
    if (Reflect.ownKeys(globalThis).map(String).includes(name)) found.push("Reflect.ownKeys");
    if (Object.getOwnPropertyNames(globalThis).includes(name)) found.push("getOwnPropertyNames");
    for (let o = Object.getPrototypeOf(globalThis); o !== null; o = Object.getPrototypeOf(o)) {
      if (Object.getOwnPropertyNames(o).includes(name)) found.push("a prototype of globalThis");
    }
    try { if (typeof (0, eval)(name) !== "undefined") found.push("indirect eval"); } catch { /* not defined */ }
    try { if (typeof Function(`return ${name}`)() !== "undefined") found.push("Function"); } catch { /* not defined */ }
    seen[name] = found;
  }
  try { seen.core = typeof Deno[Deno.internal].core.ops; } catch (e) { seen.core = e.name; }
  return seen;
};
"""
NOTHING: Final = {"Deno": [], "process": [], "require": [], "core": "ReferenceError"}


def web_worker(body: str, *, options: str = "{type: 'module'}", before: str = "") -> str:
    """Guest code that runs ``before`` in the runtime's isolate, then ``body`` as a Web
    Worker's module, and evaluates to what that posts back (or the error it ends with)."""
    return (
        f"const url = {json.dumps(data_url(LOOK + body))};\n" + before + "\nawait new Promise((resolve) => {"
        f" const w = new Worker(url, {options});"
        " w.onmessage = (e) => { resolve(e.data); w.terminate(); };"
        " w.onerror = (e) => { e.preventDefault(); resolve({error: e.message}); w.terminate(); };"
        " })"
    )


def data_url(code: str) -> str:
    return "data:text/javascript," + urllib.parse.quote(code)


def test_a_web_worker_has_no_deno_process_or_require(rt: pydeno.Runtime) -> None:
    assert rt.eval(web_worker("postMessage(look());")) == NOTHING


def test_a_web_worker_from_a_blob_has_no_deno_process_or_require(rt: pydeno.Runtime) -> None:
    got = rt.eval(
        f"const url = URL.createObjectURL(new Blob([{json.dumps(LOOK + 'postMessage(look());')}],"
        " {type: 'text/javascript'}));"
        " await new Promise((resolve) => { const w = new Worker(url, {type: 'module'});"
        " w.onmessage = (e) => { resolve(e.data); w.terminate(); };"
        " w.onerror = (e) => { e.preventDefault(); resolve({error: e.message}); w.terminate(); }; })"
    )
    assert got == NOTHING


def test_a_worker_a_web_worker_starts_has_no_deno_process_or_require(rt: pydeno.Runtime) -> None:
    inner = LOOK + "postMessage(look());"
    body = (
        f"const w = new Worker({json.dumps(data_url(inner))}, {{type: 'module'}});"
        " w.onmessage = (e) => postMessage(e.data);"
        " w.onerror = (e) => { e.preventDefault(); postMessage({error: e.message}); };"
    )
    assert rt.eval(web_worker(body)) == NOTHING


def test_a_module_a_web_worker_imports_statically_runs_after_the_runtime_is_hidden(rt: pydeno.Runtime) -> None:
    # A module's static imports are evaluated before its own body: the one it imports first
    # is where code would run before anything the worker's own module did.
    first = LOOK + "export const seen = look();"
    body = f"import {{ seen }} from {json.dumps(data_url(first))};\npostMessage(seen);"
    assert rt.eval(web_worker(body)) == NOTHING


@pytest.mark.parametrize(
    "option",
    [
        "{namespace: true}",
        "{permissions: 'inherit'}",
        "{namespace: true, permissions: {read: true, env: true, run: true}}",
    ],
)
def test_a_deno_option_planted_on_object_prototype_does_not_reach_deno(rt: pydeno.Runtime, option: str) -> None:
    # Deno reads the options it is handed through their prototype; an unstable one there ends
    # the whole process. The guest passes none of its own, which the guard would look at.
    got = rt.eval(web_worker("postMessage(look());", options="undefined", before=f"Object.prototype.deno = {option};"))
    assert got == NOTHING
    assert rt.eval("delete Object.prototype.deno; 1 + 1") == 2


def test_a_classic_web_worker_is_refused_without_reaching_deno(rt: pydeno.Runtime) -> None:
    got = rt.eval(
        "try { new Worker('data:text/javascript,postMessage(typeof Deno)', {type: 'classic'}); 'started' }"
        " catch (e) { `${e.name}: ${e.message}` }"
    )
    assert got == "NotSupportedError: Classic workers are not supported."
    assert rt.eval("1 + 1") == 2


def test_a_web_worker_started_after_the_guest_poisoned_intrinsics_has_no_deno(rt: pydeno.Runtime) -> None:
    poison = (
        "Object.defineProperty(Object.prototype, 'type', {get() { return 'classic'; }, configurable: true});"
        " Object.defineProperty(Object.prototype, 'name', {get() { return 'x'; }, configurable: true});"
        " const boom = () => { throw new Error('poisoned'); };"
        " for (const [o, k] of [[JSON, 'stringify'], [globalThis, 'encodeURIComponent'], [Reflect, 'apply'],"
        " [Reflect, 'deleteProperty'], [Object, 'defineProperty'], [Object, 'getOwnPropertyDescriptor'],"
        " [Function.prototype, 'bind'], [Object, 'freeze'], [Promise, 'reject']])"
        " o[k] = boom;"
    )
    assert rt.eval(web_worker("postMessage(look());", options="undefined", before=poison)) == NOTHING


def test_a_web_worker_s_globals_are_the_runtime_s_but_for_a_worker_scope_s_own() -> None:
    names = "Reflect.ownKeys(globalThis).map(String).filter((n) => !n.startsWith('__pydeno_stash_'))"
    with pydeno.Runtime(sandbox="off") as rt:
        here = set(rt.eval(names))
        there = set(rt.eval(web_worker(f"postMessage({names});")))
    worker_scope = {"DedicatedWorkerGlobalScope", "WorkerGlobalScope", "WorkerLocation", "WorkerNavigator"}
    assert there - here == worker_scope | {"onmessage", "postMessage"}


# What the guest's node: modules answer; each must answer in a worker as in the runtime's
# isolate, where those that reach for the Deno global fail (docs/security.md).
NODE_READINGS: Final = r"""
const readings = async () => {
  const out = {};
  const read = async (name, f) => {
    try { out[name] = JSON.stringify(await f()); }
    catch (e) { out[name] = `${e.name}: ${String(e.message).split("\n")[0]}`; }
  };
  const P = (await import("node:process")).default;
  await read("process", () => [P.execPath, P.argv0, P.title, P.platform, typeof P.pid, typeof P.nextTick]);
  await read("process.env", () => P.env.HOME);
  await read("node:fs", async () => (await import("node:fs")).readFileSync("/etc/hostname", "utf8"));
  await read("node:os", async () => (await import("node:os")).hostname());
  await read("node:crypto", async () => (await import("node:crypto")).createHash("sha256").update("x").digest("hex"));
  await read("node:path", async () => (await import("node:path")).join("a", "..", "b"));
  await read("node:buffer", async () => (await import("node:buffer")).Buffer.from("hi").toString("base64"));
  await read("node:util", async () => (await import("node:util")).format("%s=%d", "a", 1));
  await read("node:events", async () => typeof (await import("node:events")).EventEmitter);
  return out;
};
"""


def test_node_modules_answer_in_a_web_worker_as_in_the_runtime_s_isolate(rt: pydeno.Runtime) -> None:
    here = rt.eval(NODE_READINGS + "await readings()")
    there = rt.eval(web_worker(NODE_READINGS + "postMessage(await readings());"))
    assert there == here
    assert here["node:path"] == json.dumps("b") and here["node:util"] == json.dumps("a=1"), here


def console_lines(runtime_code: str) -> tuple[object, list[tuple[str, str]]]:
    """What ``runtime_code`` evaluates to, and what the runtime's console said meanwhile."""
    lines: list[tuple[str, str]] = []
    with pydeno.Runtime(sandbox="off", timeout=30.0, on_console=lambda level, text: lines.append((level, text))) as rt:
        value = rt.eval(runtime_code)
        assert rt.eval("1 + 1") == 2  # the runtime lives on
    return value, lines


def test_a_web_worker_s_console_is_the_runtime_s_console_in_order_with_what_it_posts() -> None:
    # Deno's own console in a worker writes to the process's stdout, where the host reads
    # frames: the first console.log ended the runtime as a malformed frame.
    body = "console.log('one', {a: 1}); console.warn('two'); console.error('three'); postMessage('posted');"
    value, lines = console_lines(web_worker(body) + ".then((got) => { console.log('after', got); return got; })")
    assert value == "posted"
    assert lines == [("log", "one { a: 1 }"), ("warn", "two"), ("error", "three"), ("log", "after posted")]


def test_a_nested_web_worker_s_console_reaches_the_runtime_s_console() -> None:
    inner = "console.log('from the inner worker'); postMessage('inner');"
    body = (
        "console.log('from the outer worker');"
        f" const w = new Worker({json.dumps(data_url(inner))}, {{type: 'module'}});"
        " w.onmessage = (e) => postMessage(e.data);"
    )
    value, lines = console_lines(web_worker(body))
    assert value == "inner"
    assert lines == [("log", "from the outer worker"), ("log", "from the inner worker")]


def test_a_web_worker_s_console_holds_against_poisoned_intrinsics_and_a_guest_s_own_listener() -> None:
    # The guest poisons what the parent's wrapper takes a console message off with, and
    # listens with addEventListener as well as onmessage: it still sees only what was posted.
    before = (
        "Event.prototype.stopImmediatePropagation = () => {};"
        " Array.isArray = () => false;"
        " Reflect.apply = () => { throw new Error('poisoned'); };"
        " Object.getOwnPropertyDescriptor = () => ({value: ['poisoned']});"
    )
    body = "console.log('logged'); postMessage('posted');"
    code = (
        before
        + f" const url = {json.dumps(data_url(body))};"
        + " const seen = []; await new Promise((resolve) => { const w = new Worker(url, {type: 'module'});"
        + " w.addEventListener('message', (e) => seen.push(['listener', e.data]));"
        + " w.onmessage = (e) => { seen.push(['onmessage', e.data]); resolve(); }; }); seen"
    )
    value, lines = console_lines(code)
    assert value == [["listener", "posted"], ["onmessage", "posted"]]
    assert lines == [("log", "logged")]


def test_a_web_worker_that_forges_a_console_message_prints_no_more_than_console_log_would() -> None:
    # The mark is no secret: a worker that posts it gets a console line, as console.log would
    # give it, and one whose level is not a console level is logged as "log".
    forged = (
        "postMessage(['\\u0000pydeno:console', 'error', 'forged']);"
        " postMessage(['\\u0000pydeno:console', 'fatal', 'odd level']);"
        " postMessage(['\\u0000pydeno:console', 'log', {not: 'text'}]);"
        " postMessage('done');"
    )
    value, lines = console_lines(web_worker(forged))
    assert value == "done"
    assert lines == [("error", "forged"), ("log", "odd level")]
