"""The escape battery's harness. In the battery (the test_escape_*.py files of this folder),
guest code tries every way out we know of, under every sandbox mode.

Each test hands the guest a table of *attempts* (JavaScript functions). The guest runs every
attempt three times: in the runtime's own isolate and inside a Web Worker it starts itself,
where ``Deno``, ``process`` and ``require`` are gone, and inside a ``node:worker_threads``
worker, where ``Deno`` is present (Deno runs nothing of pydeno's there first), so that the
``Deno.*`` and ``node:`` APIs really meet the permission checks rather than a missing global.
An attempt that returns is reported as ``"ESCAPED: <what it got>"``; one that throws (or gives
no answer in time) as ``"blocked: <error name>: <message>"``. The tests then check both sides:

* in the guest, every outcome is ``blocked`` and the ones that must meet a permission check
  name it (so an attempt that fails for a silly reason cannot pass for a refusal);
* on the host, nothing happened: no file appeared or changed, the test's TCP and UDP
  listeners saw no packet, no SIGWINCH reached the test process, no secret showed up in any
  outcome or console line, and nothing a runtime stored is visible to a later one.

Files the guest aims at live in a world-writable directory directly under the temporary
directory (and world-readable files in it), so that only the sandbox, never Unix file modes,
stands between a guest (uid 65534 under the OS layers) and them; conftest.py makes them, the
listener and the signal recorder. test_escape_detectors.py shows that each detector does fire
when something gets through.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest

import pydeno

LINUX_X86_64: Final = sys.platform == "linux" and os.uname().machine == "x86_64"
MODES: Final = [
    pytest.param("require", marks=pytest.mark.skipif(not LINUX_X86_64, reason="the OS layers are Linux x86_64 only")),
    "best_effort",
    "off",
]

ATTEMPT_MS: Final = 1500  # one attempt: a refusal is immediate, a hang is cut off here
PLACE_MS: Final = 8000  # a Web Worker / node worker / module running every attempt
EVAL_TIMEOUT: Final = 30.0
ENV_NAME: Final = "PYDENO_ESCAPE_SECRET"
MARKER_GLOBAL: Final = "__pydeno_escape_marker"
# What shows that an attempt reached a permission check: Deno's own refusal, or the sandbox's
# account of it (fetch and WebSocket say "no network access in this sandbox: ..." instead).
PERMISSION_REFUSAL: Final = re.compile(r"NotCapable|Requires \w+ access|\bno [a-zA-Z ]+ in this sandbox\b")
MAX_ACCEPTS: Final = 16
# A worker reports under this name what API internals threw outside any attempt's promise.
STRAY: Final = "(thrown outside the attempts)"

Outcomes = dict[str, str]


# --- The guest's harness ---------------------------------------------------------------------

PRELUDE: Final = (
    r"""
const __fail = (name, message) => { const e = new Error(message); e.name = name; return e; };
const __clip = (text) => {
  const s = String(text).replace(/\s+/g, " ").trim();
  return s.length > 300 ? s.slice(0, 300) + " ..." : s;
};
const __describe = (e) => {
  try {
    // Not instanceof: an error from another realm (node:vm, a worker) is an Error all the same.
    return typeof e === "object" && e !== null && "message" in e
      ? `${e.name}: ${__clip(e.message)}`
      : `a thrown ${typeof e} ${__clip(e)}`;
  } catch { return "an unprintable error"; }
};
const __show = (v) => {
  try { return __clip(typeof v === "string" ? v : (JSON.stringify(v) ?? String(v))); }
  catch { try { return __clip(String(v)); } catch { return "an unprintable value"; } }
};
function __within(work, ms, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(__fail("NoAnswer", `${what} gave no answer within ${ms} ms`)), ms);
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}
// start(resolve, reject) sets up event handlers and returns a cleanup function.
function __event(start, ms, what) {
  let cleanup;
  const work = new Promise((resolve, reject) => { cleanup = start(resolve, reject); });
  return __within(work, ms, what).finally(() => { try { cleanup?.(); } catch { /* already gone */ } });
}
function __deno() {
  if (typeof Deno === "undefined") throw __fail("Absent", "there is no Deno global here");
  return Deno;
}
async function __nodeProcess() { return (await import("node:process")).default; }
// For an API whose refusal comes first: any other failure means it got past the refusal
// (a library loaded but had no entry point, a file opened but was no database, ...).
const __PERMISSION = /NotCapable|Requires \w+ access|\bno [a-zA-Z ]+ in this sandbox\b/;
async function __mustBeRefused(what, run, refusal = __PERMISSION) {
  try { return await run(); } catch (e) {
    if (refusal.test(`${e?.name}: ${e?.message}`)) throw e;
    return `${what} got past the refusal and then failed: ${__describe(e)}`;
  }
}
// SQLite's own refusals: no database may be attached (ATTACH, VACUUM INTO), no extension loaded.
const __SQLITE_REFUSAL =
  /NotCapable|Requires \w+ access|\bno [a-zA-Z ]+ in this sandbox\b|too many attached databases|not authorized/;
async function __runAll(attempts, ms) {
  const names = Object.keys(attempts);
  const outcomes = await Promise.all(names.map(async (name) => {
    try { return "ESCAPED: " + __show(await __within((async () => attempts[name]())(), ms, name)); }
    catch (e) { return "blocked: " + __describe(e); }
  }));
  return Object.fromEntries(names.map((name, i) => [name, outcomes[i]]));
}
function __inWebWorker(url, ms, options) {
  return __event((resolve, reject) => {
    const worker = new Worker(url, { type: "module", ...(options ?? {}) });
    worker.onmessage = (event) => resolve(event.data);
    worker.onerror = (event) => { event.preventDefault(); reject(__fail("WorkerError", event.message)); };
    return () => worker.terminate();
  }, ms, "the Web Worker");
}
// In a worker, an error that some API's internals throw later, outside the attempt's own
// promise, would end the worker and lose every outcome: keep the worker alive, and report
// what was thrown with the outcomes, under __STRAY.
const __stray = [];
function __keepAlive() {
  globalThis.addEventListener("error", (event) => { event.preventDefault(); __stray.push(__describe(event.error)); });
  globalThis.addEventListener("unhandledrejection", (event) => {
    event.preventDefault();
    __stray.push(__describe(event.reason));
  });
}
function __withStray(outcomes) {
  return __stray.length === 0 ? outcomes : { ...outcomes, [__STRAY]: "blocked: " + __stray.join(" | ") };
}
async function __inNodeWorker(source, ms) {
  const { Worker } = await import("node:worker_threads");
  return await __event((resolve, reject) => {
    const worker = new Worker(source, { eval: true });
    worker.on("message", resolve);
    worker.on("error", reject);
    worker.on("exit", (code) => reject(__fail("WorkerExited", `the node worker exited with code ${code}`)));
    return () => worker.terminate();
  }, ms, "the node worker");
}
"""
    + f"const __STRAY = {json.dumps(STRAY)};\n"
)

POST_RESULTS: Final = (
    "__keepAlive();\n"
    f"__runAll(__attempts, {ATTEMPT_MS}).then((r) => postMessage(__withStray(r)),"
    ' (e) => postMessage({ "(the harness)": "broken: " + __describe(e) }));\n'
)


# A node:worker_threads worker answers its parent through parentPort.
POST_TO_PARENT: Final = (
    "__keepAlive();\n"
    "const __parent = require('node:worker_threads').parentPort;\n"
    f"__runAll(__attempts, {ATTEMPT_MS}).then((r) => __parent.postMessage(__withStray(r)),"
    " (e) => __parent.postMessage({ '(the harness)': 'broken: ' + __describe(e) }));\n"
)


def runner(attempts: str, settings: Mapping[str, Any], place: str) -> str:
    """The prelude, the settings and the attempt table, for one place."""
    return (
        PRELUDE
        + f"const __cfg = {json.dumps(dict(settings))};\n"
        + f"const __place = {json.dumps(place)};\n"
        + f"const __attempts = {attempts};\n"
    )


def guest_program(attempts: str, settings: Mapping[str, Any], *, in_worker: bool, postlude: str = "") -> str:
    """Runs the attempts in the guest's isolate and (concurrently) in a Web Worker and a
    ``node:worker_threads`` worker it starts.

    The value is ``{names, places: {place: {attempt: outcome}}}``. ``postlude`` runs in the
    guest's isolate after the attempts, with ``__result`` holding that value.
    """
    worker = ""
    if in_worker:
        source = runner(attempts, settings, "worker") + POST_RESULTS
        node_source = runner(attempts, settings, "node worker") + POST_TO_PARENT
        worker = (
            f"const __there = __inWebWorker('data:text/javascript,' + encodeURIComponent({json.dumps(source)}),"
            f" {PLACE_MS}).catch((e) => ({{ '(the worker itself)': 'blocked: ' + __describe(e) }}));\n"
            f"const __inNode = __inNodeWorker({json.dumps(node_source)}, {PLACE_MS})"
            ".catch((e) => ({ '(the node worker itself)': 'blocked: ' + __describe(e) }));\n"
        )
    return (
        runner(attempts, settings, "main")
        + worker
        + f"const __here = await __runAll(__attempts, {ATTEMPT_MS});\n"
        + "const __result = { names: Object.keys(__attempts), places: { main: __here"
        + (', worker: await __there, "node worker": await __inNode' if in_worker else "")
        + " } };\n"
        + postlude
        + "\n__result\n"
    )


@dataclass
class Guest:
    """What one runtime's guest reported: each outcome keyed ``"<place> / <attempt>"``."""

    outcomes: Outcomes
    console: list[str] = field(default_factory=list)


def collect(value: Any, console: list[str]) -> Guest:
    """Flatten the guest's report, checking every place ran every attempt."""
    assert isinstance(value, dict), value
    names, places = value["names"], value["places"]
    assert isinstance(names, list) and names, value
    outcomes: Outcomes = {}
    for place, results in places.items():
        assert isinstance(results, dict), (place, results)
        # A place that could not run its attempts would otherwise pass for a refusal.
        assert sorted(set(results) - {STRAY}) == sorted(names), f"{place} did not run every attempt: {results}"
        for name, outcome in results.items():
            assert isinstance(outcome, str), (place, name, outcome)
            outcomes[f"{place} / {name}"] = outcome
    return Guest(outcomes, console)


def open_runtime(mode: str, console: list[str] | None = None) -> pydeno.Runtime:
    """A runtime in ``mode`` whose console lines (``"<level>: <text>"``) go to ``console``."""

    def on_console(level: str, text: str) -> None:
        if console is not None:
            console.append(f"{level}: {text}")

    return pydeno.Runtime(sandbox=mode, timeout=EVAL_TIMEOUT, on_console=on_console)  # type: ignore[arg-type]


def run_guest(mode: str, program: str) -> Guest:
    """Evaluate ``program`` in a fresh runtime; collect its report and its console output."""
    console: list[str] = []
    with open_runtime(mode, console) as rt:
        value = rt.eval(program)
    return collect(value, console)


def attempt(
    mode: str, attempts: str, settings: Mapping[str, Any], *, in_worker: bool = True, postlude: str = ""
) -> Guest:
    return run_guest(mode, guest_program(attempts, settings, in_worker=in_worker, postlude=postlude))


def assert_blocked(outcomes: Mapping[str, str]) -> None:
    """Every attempt must have been blocked; anything else is a way out."""
    got_out = {where: what for where, what in outcomes.items() if not what.startswith("blocked: ")}
    assert not got_out, "the guest got out:\n" + "\n".join(f"  {k}: {v}" for k, v in sorted(got_out.items()))


def assert_refused_by_permissions(outcomes: Mapping[str, str], *where: str) -> None:
    """These attempts must have met Deno's permission check, not failed on something else."""
    missing = [w for w in where if w not in outcomes]
    assert not missing, f"no such attempts: {missing}"
    weak = {w: outcomes[w] for w in where if not PERMISSION_REFUSAL.search(outcomes[w])}
    assert not weak, "refused, but not by a permission check:\n" + "\n".join(
        f"  {k}: {v}" for k, v in sorted(weak.items())
    )


def assert_never_mentions(guest: Guest, *secrets_: str) -> None:
    for secret in secrets_:
        leaked = [k for k, v in guest.outcomes.items() if secret in v]
        assert not leaked, f"the secret reached the guest through {leaked}"
        assert not [line for line in guest.console if secret in line], "the secret reached the console"


# --- Host-side targets and a listener (their fixtures are in conftest.py) -----------------------


@dataclass
class Exposed:
    """A directory every user may enter and write, holding world-readable secrets."""

    root: Path
    secret: str

    @property
    def secret_file(self) -> Path:
        return self.root / "secret.txt"

    def entries(self) -> set[str]:
        return {p.name for p in self.root.iterdir()}

    def settings(self) -> dict[str, Any]:
        return {
            "drop": str(self.root),
            "secretFile": str(self.secret_file),
            "moduleJs": str(self.root / "secret_module.js"),
            "moduleTs": str(self.root / "secret_module.ts"),
            "moduleJson": str(self.root / "secret_module.json"),
            "moduleCjs": str(self.root / "secret_module.cjs"),
            "libc": "/lib/x86_64-linux-gnu/libc.so.6",
            "touch": shutil.which("touch") or "/usr/bin/touch",
        }


@dataclass
class Listener:
    """A TCP and a UDP socket on 127.0.0.1 in the test process, never serviced."""

    tcp: socket.socket
    udp: socket.socket

    @property
    def port(self) -> int:
        return int(self.tcp.getsockname()[1])

    @property
    def udp_port(self) -> int:
        return int(self.udp.getsockname()[1])

    def visits(self) -> list[str]:
        """Connections waiting to be accepted and datagrams received (a bounded look)."""
        seen: list[str] = []
        for _ in range(MAX_ACCEPTS):
            try:
                conn, peer = self.tcp.accept()
            except BlockingIOError:
                break
            conn.close()
            seen.append(f"a TCP connection from {peer}")
        for _ in range(MAX_ACCEPTS):
            try:
                data, peer = self.udp.recvfrom(2048)
            except BlockingIOError:
                break
            seen.append(f"a datagram {data[:40]!r} from {peer}")
        return seen
