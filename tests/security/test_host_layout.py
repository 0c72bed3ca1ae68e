"""What a guest can learn about where the host keeps its files.

Every reading a guest can make without a permission it lacks (node:process, node:os, the
Deno namespace where it is present, error messages, stack traces, a module's resolution) is taken
in the runtime's own isolate and in a Web Worker the guest starts, under each sandbox mode,
and none of it may name a host path: the deno binary's, pydeno's package directory, the
worker's files, the staging and cache directories under the temporary directory, the user's
home or the host's user id in a staging directory's name. docs/security.md says what the
guest does see.
"""

from __future__ import annotations

import json
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


@pytest.fixture(params=MODES)
def rt(request: pytest.FixtureRequest) -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime(sandbox=request.param) as runtime:
        yield runtime


def host_paths() -> dict[str, str]:
    """Every string that would tell the guest where the host keeps something."""
    deno = staging.find_deno()
    staged = staging.stage(os.path.realpath(deno), staging.worker_entry())
    paths = {
        "the deno binary": deno,
        "the deno binary, resolved": os.path.realpath(deno),
        "the deno binary the worker runs": staged.deno,
        "the worker's source files": str(staging.worker_entry().parent),
        "the worker's files": str(staged.entry.parent),
        "the staging directory": str(staged.base),
        "the transpile cache": str(staged.cache),
        "pydeno's package": os.path.dirname(os.path.realpath(pydeno.__file__)),
        "the Python environment": sys.prefix,
        "the temporary directory": tempfile.gettempdir().rstrip("/") + "/",
        "the staging directory's name, with the host's user id": f"pydeno-{os.getuid()}",
    }
    home = os.path.expanduser("~")
    if home not in ("", "/"):
        paths["the user's home"] = home
    return paths


def assert_names_no_host_path(readings: dict[str, Any]) -> None:
    assert isinstance(readings, dict) and readings, readings
    for channel, reading in readings.items():
        text = reading if isinstance(reading, str) else json.dumps(reading)
        for what, path in host_paths().items():
            assert path not in text, f"{channel} names {what} ({path!r}): {text!r}"


def data_url(code: str) -> str:
    return "data:text/javascript," + urllib.parse.quote(code)


def in_web_worker(code: str) -> str:
    """Guest code that runs ``code`` in a Web Worker it starts and evaluates to what that
    posts back."""
    return (
        "await new Promise((resolve) => {"
        f" const w = new Worker({json.dumps(data_url(code))}, {{type: 'module'}});"
        " w.onmessage = (e) => { resolve(e.data); w.terminate(); };"
        " w.onerror = (e) => { e.preventDefault(); resolve({error: e.message}); w.terminate(); };"
        " })"
    )


# Each reading a guest can make, as text: a value, or the error with its stack.
READINGS: Final = r"""
const out = {};
const read = async (name, f) => {
  try { const v = await f(); out[name] = typeof v === "string" ? v : String(JSON.stringify(v)); }
  catch (e) { out[name] = `${e && e.name}: ${e && e.message}\n${e && e.stack}`; }
};
const P = (await import("node:process")).default;
const os = await import("node:os");
for (const name of ["execPath", "argv", "argv0", "title", "execArgv", "env", "pid", "ppid", "mainModule",
                    "config", "release", "versions", "features"]) await read(`process.${name}`, () => P[name]);
await read("process.env.HOME", () => P.env.HOME);
await read("process.env.DENO_DIR", () => P.env.DENO_DIR);
for (const name of ["cwd", "getuid", "getgid", "umask", "memoryUsage", "resourceUsage", "uptime"]) {
  await read(`process.${name}()`, () => P[name]());
}
await read("process.report", () => P.report.getReport());
for (const name of ["homedir", "tmpdir", "userInfo", "hostname", "cpus", "networkInterfaces", "release", "version",
                    "machine", "loadavg"]) await read(`os.${name}()`, () => os[name]());
await read("path.resolve", async () => (await import("node:path")).resolve("x"));
await read("module paths", async () => (await import("node:module")).createRequire("file:///x.js").resolve.paths("x"));
await read("require", async () => (await import("node:module")).createRequire("file:///x.js")("x"));
await read("child_process", async () => (await import("node:child_process")).spawnSync("node", [], {env: {}}));
await read("node:fs", async () => (await import("node:fs")).readFileSync("x"));
await read("location", () => String(globalThis.location));
await read("navigator", () => [navigator.userAgent, navigator.platform, navigator.hardwareConcurrency]);
await read("performance", () => performance.toJSON());
await read("a stack trace", () => new Error("here").stack);
await read("a relative import", () => import("./missing.js"));
await read("a bare import", () => import("missing"));
await read("an absolute import", () => import("file:///missing.js"));
await read("fetch of a file", () => fetch("file:///missing"));
await read("localStorage", () => localStorage.getItem("x"));
await read("the Cache API", () => caches.open("x"));
await read("caches.has", () => caches.has("x"));
await read("typeof Deno", () => typeof Deno);
await read("Deno.execPath()", () => Deno.execPath());
await read("Deno.mainModule", () => String(Deno.mainModule));
await read("Deno.args", () => Deno.args);
await read("Deno.cwd()", () => Deno.cwd());
await read("Deno.env", () => Deno.env.toObject());
await read("Deno.build", () => Deno.build);
await read("Deno's node bootstrap", () => Deno[Deno.internal].__nodeBootstrapArgs);
await read("a refused command", () => new Deno.Command(Deno.execPath()).outputSync());
await read("a refused read", () => Deno.readTextFileSync("x"));
await read("Deno.realPathSync", () => Deno.realPathSync("."));
"""
WHERE: Final = {
    "the runtime's isolate": READINGS + "out",
    "a Web Worker": in_web_worker(
        READINGS + 'await read("import.meta.url", () => import.meta.url);\nself.postMessage(out);'
    ),
    "a Web Worker's Web Worker": in_web_worker(
        "const w = new Worker("
        + json.dumps(data_url(READINGS + "self.postMessage(out);"))
        + ", {type: 'module'}); w.onmessage = (e) => self.postMessage(e.data);"
    ),
}


@pytest.mark.parametrize("where", list(WHERE))
def test_nothing_a_guest_can_read_names_a_host_path(rt: pydeno.Runtime, where: str) -> None:
    readings = rt.eval(WHERE[where])
    assert "error" not in readings, readings
    assert_names_no_host_path(readings)


PROCESS_FACTS: Final = r"""
const P = (await import("node:process")).default;
const facts = {execPath: P.execPath, argv0: P.argv0, argv: P.argv, title: P.title, cwd: P.cwd()};
if (typeof Deno !== "undefined") Object.assign(facts, {
  denoExecPath: Deno.execPath(), mainModule: String(Deno.mainModule), cwd: Deno.cwd(),
  bootstrapArgv0: Deno[Deno.internal].__nodeBootstrapArgs.argv0,
});
"""


def test_the_guest_sees_deno_named_deno_and_the_root_as_its_working_directory(rt: pydeno.Runtime) -> None:
    facts = rt.eval(PROCESS_FACTS + "facts")
    assert facts == {"execPath": "deno", "argv0": "deno", "argv": ["deno", "main.ts"], "title": "deno", "cwd": "/"}
    # A Web Worker has no Deno namespace either; its node:process loaded from one that said so.
    facts = rt.eval(in_web_worker(PROCESS_FACTS + "self.postMessage(facts);"))
    assert facts == {
        "execPath": "deno",
        "argv0": "deno",
        "argv": ["deno", "/$deno$node.mjs"],
        "title": "deno",
        "cwd": "/",
    }


UNDO: Final = r"""
const out = {};
const I = Deno[Deno.internal];
// Have node:process load, then load again, reading the Deno namespace afresh.
void process.pid;
I.__nodeProcessBootstrapped = false;
const a = I.__nodeBootstrapArgs;
I.__bootstrapNodeProcess(a.argv0, a.denoArgs, a.denoVersion, "", false, false);
out.reloaded = [process.execPath, process.argv[0], process.title];
// Whatever the namespace's prototype chain holds.
out.inherited = [];
for (let o = Object.getPrototypeOf(Deno); o !== null; o = Object.getPrototypeOf(o)) {
  out.inherited.push(String(o.execPath), String(o.mainModule));
}
// The property itself, gone or replaced.
delete Deno.execPath;
out.deleted = [String(Deno.execPath), process.execPath, process.title];
self.postMessage(out);
"""


def test_a_guest_cannot_get_the_deno_binary_s_path_back_in_a_web_worker(rt: pydeno.Runtime) -> None:
    # Having node:process load again needs Deno's internals, which a Web Worker has no way to.
    readings = rt.eval(in_web_worker(UNDO))
    assert readings == {"error": "Uncaught (in promise) ReferenceError: Deno is not defined"}, readings


CATCH_DENO: Final = r"""
globalThis.caught = [];
for (const name of ["__nodeProcessBootstrapped", "nodeDebug", "standalone", "runningOnMainThread"]) {
  Object.defineProperty(Object.prototype, name, {
    get() { if (globalThis.Deno !== undefined && !caught.includes(globalThis.Deno)) caught.push(globalThis.Deno); },
    set(value) { Object.defineProperty(this, name, {value, writable: true, enumerable: true, configurable: true}); },
    configurable: true,
  });
}
1
"""
READ_CAUGHT: Final = r"""
await import("node:path");
caught.map((d) => ({
  mainModule: String(d.mainModule), execPath: d.execPath(), args: d.args, cwd: d.cwd(),
  bootstrap: d[d.internal].__nodeBootstrapArgs,
}))
"""


def test_a_guest_that_catches_the_deno_namespace_while_node_process_loads_reads_no_host_path_in_it(
    rt: pydeno.Runtime,
) -> None:
    # The runtime's isolate has node:process load on its first eval that imports a node:
    # module, with the Deno global back for that moment; getters the guest planted on
    # Object.prototype see it.
    rt.eval(CATCH_DENO)
    caught = rt.eval(READ_CAUGHT)
    assert caught, "the getters never saw the Deno namespace"
    assert caught[0]["execPath"] == "deno" and caught[0]["mainModule"] == "undefined", caught
    assert_names_no_host_path({f"Deno namespace {i}": c for i, c in enumerate(caught)})


HEAP_SNAPSHOT: Final = r"""
const v8 = await import("node:v8");
const chunks = [];
await new Promise((resolve, reject) => {
  const stream = v8.getHeapSnapshot();
  stream.on("data", (chunk) => chunks.push(String(chunk)));
  stream.on("end", resolve);
  stream.on("error", reject);
});
"""


@pytest.mark.parametrize("where", ["the runtime's isolate", "a Web Worker"])
def test_a_heap_snapshot_holds_no_host_path(rt: pydeno.Runtime, where: str) -> None:
    # node:v8 hands the guest every string alive in its isolate, the worker's own among them:
    # its modules' URLs, its settings (the self-test's targets, the mailbox's path).
    code = HEAP_SNAPSHOT + (
        "chunks.join('')" if where == "the runtime's isolate" else "self.postMessage(chunks.join(''));"
    )
    snapshot = json.loads(rt.eval(code if where == "the runtime's isolate" else in_web_worker(code)))
    strings = snapshot["strings"]
    assert len(strings) > 1000, len(strings)
    for what, path in host_paths().items():
        found = [text[:200] for text in strings if path in text]
        assert not found, f"{what} ({path!r}) in {found[:5]}"


def test_the_cache_api_fails_without_naming_the_cache_directory(rt: pydeno.Runtime) -> None:
    code = (
        "const tries = [() => caches.open('x'), () => caches.has('x'), () => caches.delete('x'), () => caches.keys(),"
        " () => caches.match('https://pydeno.invalid/')];"
        " const out = []; for (const t of tries) {"
        " try { await t(); out.push('opened'); } catch (e) { out.push(`${e.name}: ${e.message}`); } }"
    )
    expected = ["SecurityError: the Cache API is not available: nothing is kept"] * 5
    assert rt.eval(code + " out") == expected
    assert rt.eval(in_web_worker(code + " self.postMessage(out);")) == expected


def test_a_guest_cannot_confirm_a_guess_at_where_the_worker_s_files_are_by_importing_them(rt: pydeno.Runtime) -> None:
    # A module already loaded imports without a read permission: the worker's own modules,
    # loaded in the guest's isolate, would answer for a right guess at where they are. They
    # are loaded through a descriptor, under URLs that name no host directory.
    staged = staging.stage(os.path.realpath(staging.find_deno()), staging.worker_entry())
    folders = [staging.worker_entry().parent, staged.entry.parent]
    guesses = [(folder / name).as_uri() for folder in folders for name in ("main.ts", "codec.ts", staging.JOINED)]
    got = rt.eval(
        f"const out = []; for (const url of {json.dumps(guesses)}) {{"
        " try { await import(url); out.push('imported'); } catch (e) { out.push(e.name); } } out"
    )
    assert got == ["TypeError"] * len(guesses), dict(zip(guesses, got, strict=True))


NODE_WORKER: Final = r"""
const { Worker } = await import("node:worker_threads");
await new Promise((resolve) => {
  const w = new Worker(`const { parentPort } = require("worker_threads");
    parentPort.postMessage({execPath: process.execPath, argv: process.argv, argv0: process.argv0, title: process.title,
      denoExecPath: Deno.execPath(), mainModule: String(Deno.mainModule), cwd: process.cwd()});`, {eval: true});
  w.on("message", (m) => { resolve(m); w.terminate(); });
  w.on("error", (e) => resolve({error: String(e)}));
})
"""


def test_a_node_worker_names_the_deno_binary_and_nothing_else_of_the_host(rt: pydeno.Runtime) -> None:
    # A node:worker_threads worker is an isolate the worker cannot prepare before the guest's
    # code runs in it: Deno's own answer for the binary's path stands there (docs/security.md).
    got = rt.eval(NODE_WORKER)
    deno = staging.stage(os.path.realpath(staging.find_deno()), staging.worker_entry()).deno
    assert got["denoExecPath"] == deno, got
    assert got["argv0"] == "deno", got
    assert_names_no_host_path({k: v for k, v in got.items() if k not in ("execPath", "argv", "title", "denoExecPath")})
    assert got["execPath"] == got["title"] == got["argv"][0] == deno, got
