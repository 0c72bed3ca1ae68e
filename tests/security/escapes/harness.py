"""The escape battery: guest code tries every way out we know of, under every sandbox mode.

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
stands between a guest (uid 65534 under the OS layers) and them. The last test shows that
each detector does fire when something gets through.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Final

import pytest

import pydeno

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

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


# --- Host-side fixtures: targets, a listener, a signal recorder --------------------------------


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


@pytest.fixture
def exposed() -> Iterator[Exposed]:
    root = Path(tempfile.mkdtemp(prefix="pydeno-escape-"))
    try:
        root.chmod(0o777)
        secret = "pydeno-secret-" + secrets.token_hex(12)
        quoted = json.dumps(secret)
        files = {
            "secret.txt": secret + "\n",
            "secret_module.js": f"globalThis.{MARKER_GLOBAL} = {quoted};\nexport default {quoted};\n",
            "secret_module.ts": (
                f"const secret: string = {quoted};\n"
                f"(globalThis as any).{MARKER_GLOBAL} = secret;\nexport default secret;\n"
            ),
            "secret_module.json": json.dumps({"secret": secret}),
            "secret_module.cjs": f"globalThis.{MARKER_GLOBAL} = {quoted};\nmodule.exports = {quoted};\n",
        }
        for name, text in files.items():
            (root / name).write_text(text)
            (root / name).chmod(0o644)
        yield Exposed(root, secret)
    finally:
        shutil.rmtree(root, ignore_errors=True)


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


@pytest.fixture
def listener() -> Iterator[Listener]:
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(MAX_ACCEPTS)
        tcp.setblocking(False)
        udp.bind(("127.0.0.1", 0))
        udp.setblocking(False)
        yield Listener(tcp, udp)
    finally:
        tcp.close()
        udp.close()


@pytest.fixture
def sigwinch() -> Iterator[list[int]]:
    """Records every SIGWINCH the test process receives while the test runs."""
    received: list[int] = []

    def record(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = signal.signal(signal.SIGWINCH, record)
    try:
        yield received
    finally:
        signal.signal(signal.SIGWINCH, previous)


# --- 1. Files ----------------------------------------------------------------------------------

READ_ATTEMPTS: Final = r"""{
  "node:fs readFileSync": async () => (await import("node:fs")).readFileSync(__cfg.secretFile, "utf8"),
  "node:fs openSync": async () => `fd ${(await import("node:fs")).openSync(__cfg.secretFile, "r")}`,
  "node:fs readdirSync": async () => (await import("node:fs")).readdirSync(__cfg.drop),
  "node:fs existsSync": async () => {
    if ((await import("node:fs")).existsSync(__cfg.secretFile)) return "saw that the file exists";
    throw __fail("NotSeen", "existsSync answered false");
  },
  "node:fs/promises readFile": async () => (await import("node:fs/promises")).readFile(__cfg.secretFile, "utf8"),
  "node:fs /etc/passwd": async () => (await import("node:fs")).readFileSync("/etc/passwd", "utf8"),
  "node:fs /proc/self/environ": async () => (await import("node:fs")).readFileSync("/proc/self/environ", "utf8"),
  "node:module require() of a .json": async () => (await import("node:module")).createRequire("file:///")(__cfg.moduleJson),
  "node:module require() of a .cjs": async () => (await import("node:module")).createRequire("file:///")(__cfg.moduleCjs),
  "node:sqlite open the file": async () => {
    const { DatabaseSync } = await import("node:sqlite");
    new DatabaseSync(__cfg.secretFile, { readOnly: true });
    return "opened the file";
  },
  "node:sqlite ATTACH the file": async () => {
    const { DatabaseSync } = await import("node:sqlite");
    return await __mustBeRefused("ATTACH", () => {
      new DatabaseSync(":memory:").exec(`ATTACH DATABASE '${__cfg.secretFile}' AS s`);
      return "attached the file";
    }, __SQLITE_REFUSAL);
  },
  "typeof Deno": () => {
    // A worker has a Deno namespace of its own (with the guest's permissions): the Deno.*
    // attempts below use it. Only the guest's own isolate must have none.
    if (__place !== "main") throw __fail("NotApplicable", `a worker's own Deno namespace is ${typeof Deno}`);
    return typeof __deno();
  },
  "Deno.readTextFileSync": () => __deno().readTextFileSync(__cfg.secretFile),
  "Deno.readFile": async () => new TextDecoder().decode(await __deno().readFile(__cfg.secretFile)),
  "Deno.readDirSync": () => [...__deno().readDirSync(__cfg.drop)].map((e) => e.name),
  "Deno.statSync": () => `size ${__deno().statSync(__cfg.secretFile).size}`,
  "fetch file:": async () => (await fetch("file://" + __cfg.secretFile)).text(),
  "fetch file:///etc/passwd": async () => (await fetch("file:///etc/passwd")).text(),
  "import() of a .js module": async () => (await import("file://" + __cfg.moduleJs)).default,
  "import() of a .ts module": async () => (await import("file://" + __cfg.moduleTs)).default,
  "import() of a .json module": async () =>
    (await import("file://" + __cfg.moduleJson, { with: { type: "json" } })).default,
  "import() of a file as text": async () =>
    (await import("file://" + __cfg.secretFile, { with: { type: "text" } })).default,
  "import() of /proc/self/environ": () =>
    // Read but not valid JavaScript would fail too: only the permission check counts.
    __mustBeRefused("import()", async () => (await import("file:///proc/self/environ")).default),
  "import() of /etc/passwd as text": async () =>
    (await import("file:///etc/passwd", { with: { type: "text" } })).default,
}"""


@pytest.mark.parametrize("mode", MODES)
def test_the_guest_cannot_read_host_files(mode: str, exposed: Exposed) -> None:
    before = exposed.entries()
    program = guest_program(READ_ATTEMPTS, exposed.settings(), in_worker=True)
    console: list[str] = []
    with open_runtime(mode, console) as rt:
        guest = collect(rt.eval(program), console)
        # An imported module would have run: its side effect would be on the guest's global.
        marker = rt.eval(f"typeof globalThis.{MARKER_GLOBAL}")
    assert_blocked(guest.outcomes)
    assert_never_mentions(guest, exposed.secret, "root:x:0:0")
    assert marker == "undefined"
    assert_refused_by_permissions(
        guest.outcomes,
        *(
            f"{place} / {name}"
            for place in ("main", "worker")
            for name in (
                "fetch file:",
                "import() of a .js module",
                "import() of a .ts module",
                "import() of a .json module",
                "import() of a file as text",
                "import() of /proc/self/environ",
                "node:module require() of a .json",
                "node:sqlite open the file",
            )
        ),
        "node worker / node:fs readFileSync",
        "node worker / node:fs/promises readFile",
        "node worker / Deno.readTextFileSync",
        "node worker / Deno.readDirSync",
    )
    assert exposed.entries() == before
    assert exposed.secret_file.read_text() == exposed.secret + "\n"


WRITE_ATTEMPTS: Final = r"""(() => {
  const target = (what) => `${__cfg.drop}/written-${__place}-${what}`;
  const wrote = (path) => `wrote ${path}`;
  return {
    "node:fs writeFileSync": async () => {
      (await import("node:fs")).writeFileSync(target("writeFileSync"), "x"); return wrote(target("writeFileSync"));
    },
    "node:fs writeFileSync into tmp_path": async () => {
      const path = `${__cfg.tmpPath}/written-${__place}`;
      (await import("node:fs")).writeFileSync(path, "x"); return wrote(path);
    },
    "node:fs writeFileSync into /tmp": async () => {
      const path = `${__cfg.tmpPrefix}-${__place}`;
      (await import("node:fs")).writeFileSync(path, "x"); return wrote(path);
    },
    "node:fs mkdirSync": async () => {
      (await import("node:fs")).mkdirSync(target("mkdirSync")); return wrote(target("mkdirSync"));
    },
    "node:fs mkdirSync in /tmp": async () => {
      const path = `${__cfg.tmpPrefix}-dir-${__place}`;
      (await import("node:fs")).mkdirSync(path); return wrote(path);
    },
    "node:fs appendFileSync to the secret": async () => {
      (await import("node:fs")).appendFileSync(__cfg.secretFile, "appended"); return "appended to the secret";
    },
    "node:fs unlinkSync of the secret": async () => {
      (await import("node:fs")).unlinkSync(__cfg.secretFile); return "deleted the secret";
    },
    "node:fs symlinkSync": async () => {
      (await import("node:fs")).symlinkSync(__cfg.secretFile, target("symlink")); return wrote(target("symlink"));
    },
    "node:fs/promises writeFile": async () => {
      await (await import("node:fs/promises")).writeFile(target("promises"), "x"); return wrote(target("promises"));
    },
    "node:sqlite create a database": async () => {
      const { DatabaseSync } = await import("node:sqlite");
      new DatabaseSync(target("sqlite")).exec("CREATE TABLE t (x)"); return wrote(target("sqlite"));
    },
    "node:sqlite VACUUM INTO": async () => {
      const { DatabaseSync } = await import("node:sqlite");
      return await __mustBeRefused("VACUUM INTO", () => {
        new DatabaseSync(":memory:").exec(`VACUUM INTO '${target("vacuum")}'`);
        return wrote(target("vacuum"));
      }, __SQLITE_REFUSAL);
    },
    "Deno.writeTextFileSync": () => {
      __deno().writeTextFileSync(target("Deno.writeTextFileSync"), "x"); return wrote(target("Deno.writeTextFileSync"));
    },
    "Deno.mkdirSync": () => { __deno().mkdirSync(target("Deno.mkdirSync")); return wrote(target("Deno.mkdirSync")); },
    "Deno.removeSync of the secret": () => { __deno().removeSync(__cfg.secretFile); return "deleted the secret"; },
  };
})()"""


@pytest.mark.parametrize("mode", MODES)
def test_the_guest_cannot_write_host_files(mode: str, exposed: Exposed, tmp_path: Path) -> None:
    prefix = f"{tempfile.gettempdir()}/pydeno-escape-{secrets.token_hex(8)}"
    before, before_tmp = exposed.entries(), set(os.listdir(tmp_path))
    settings = {**exposed.settings(), "tmpPath": str(tmp_path), "tmpPrefix": prefix}
    guest = attempt(mode, WRITE_ATTEMPTS, settings)
    # Whatever got into the shared temporary directory is noted and removed before asserting.
    in_tmp = sorted(p for p in os.listdir(tempfile.gettempdir()) if p.startswith(os.path.basename(prefix)))
    for name in in_tmp:
        path = Path(tempfile.gettempdir(), name)
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    assert_blocked(guest.outcomes)
    assert_refused_by_permissions(
        guest.outcomes,
        "node worker / node:fs writeFileSync",
        "node worker / node:fs writeFileSync into /tmp",
        "node worker / node:fs mkdirSync",
        "node worker / node:fs unlinkSync of the secret",
        "node worker / node:fs/promises writeFile",
        "worker / node:sqlite create a database",
        "node worker / node:sqlite create a database",
        "node worker / Deno.writeTextFileSync",
        "node worker / Deno.removeSync of the secret",
    )
    assert exposed.entries() == before
    assert set(os.listdir(tmp_path)) == before_tmp
    assert not in_tmp, f"the guest wrote into {tempfile.gettempdir()}: {in_tmp}"
    assert exposed.secret_file.read_text() == exposed.secret + "\n"


# --- 2. Network --------------------------------------------------------------------------------

NETWORK_ATTEMPTS: Final = r"""(() => {
  const http = `http://127.0.0.1:${__cfg.port}/`;
  return {
    "fetch http://127.0.0.1": async () => `status ${(await fetch(http)).status}`,
    "fetch http://localhost": async () => `status ${(await fetch(`http://localhost:${__cfg.port}/`)).status}`,
    "WebSocket": () => __event((resolve, reject) => {
      const ws = new WebSocket(`ws://127.0.0.1:${__cfg.port}/`);
      ws.onopen = () => resolve("opened a WebSocket");
      ws.onerror = (event) => reject(__fail("WebSocketError", event.message ?? "an error event"));
      ws.onclose = (event) => reject(__fail("WebSocketClosed", `closed with code ${event.code}`));
      return () => ws.close();
    }, 1200, "the WebSocket"),
    "EventSource": () => __event((resolve, reject) => {
      const es = new EventSource(http);
      es.onopen = () => resolve("opened an EventSource");
      es.onerror = (event) => reject(__fail("EventSourceError", event.message ?? "an error event"));
      return () => es.close();
    }, 1200, "the EventSource"),
    "node:net createConnection": async () => {
      const net = await import("node:net");
      return await __event((resolve, reject) => {
        const s = net.createConnection({ host: "127.0.0.1", port: __cfg.port });
        s.on("connect", () => resolve("connected"));
        s.on("error", reject);
        return () => s.destroy();
      }, 1200, "node:net");
    },
    "node:http request": async () => {
      const nodeHttp = await import("node:http");
      return await __event((resolve, reject) => {
        const req = nodeHttp.request(http, (res) => resolve(`status ${res.statusCode}`));
        req.on("error", reject);
        req.end();
        return () => req.destroy();
      }, 1200, "node:http");
    },
    "node:http listen": async () => {
      const nodeHttp = await import("node:http");
      return await __event((resolve, reject) => {
        const server = nodeHttp.createServer();
        server.on("error", reject);
        server.listen(0, "127.0.0.1", () => resolve(`listening on ${server.address().port}`));
        return () => server.close();
      }, 1200, "node:http listen");
    },
    "node:dgram send": async () => {
      const dgram = await import("node:dgram");
      return await __event((resolve, reject) => {
        const s = dgram.createSocket("udp4");
        s.on("error", reject);
        s.send("pydeno", __cfg.udpPort, "127.0.0.1", (e) => (e ? reject(e) : resolve("sent a datagram")));
        return () => s.close();
      }, 1200, "node:dgram");
    },
    "node:dns lookup": async () => {
      const dns = await import("node:dns");
      return await __event((resolve, reject) => {
        dns.lookup("localhost", (e, address) => (e ? reject(e) : resolve(`resolved ${address}`)));
        return undefined;
      }, 1200, "node:dns");
    },
    "import() over http": async () => (await import(`${http}module.js`)).default,
    "Worker from http": () => __inWebWorker(`${http}worker.js`, 1200),
    "Deno.connect": async () => {
      const conn = await __deno().connect({ hostname: "127.0.0.1", port: __cfg.port });
      conn.close();
      return "connected";
    },
    "Deno.listen": () => {
      __deno().listen({ hostname: "127.0.0.1", port: 0 }).close();
      return "listened";
    },
  };
})()"""


@pytest.mark.parametrize("mode", MODES)
def test_the_guest_cannot_reach_the_network(mode: str, listener: Listener) -> None:
    settings = {"port": listener.port, "udpPort": listener.udp_port}
    guest = attempt(mode, NETWORK_ATTEMPTS, settings)
    visits = listener.visits()
    assert_blocked(guest.outcomes)
    assert not visits, f"the listener was reached: {visits}"
    assert_refused_by_permissions(
        guest.outcomes,
        *(
            f"{place} / {name}"
            for place in ("main", "worker")
            for name in ("fetch http://127.0.0.1", "WebSocket", "node:net createConnection", "node:http request")
        ),
        "main / import() over http",
        "node worker / Deno.connect",
        "node worker / Deno.listen",
    )


# --- 3. Processes ------------------------------------------------------------------------------

PROCESS_ATTEMPTS: Final = r"""(() => {
  const target = (what) => `${__cfg.drop}/spawned-${__place}-${what}`;
  const cp = () => import("node:child_process");
  return {
    "node:child_process execSync": async () => {
      (await cp()).execSync(`${__cfg.touch} ${target("execSync")}`); return "ran a shell";
    },
    "node:child_process execFileSync": async () => {
      (await cp()).execFileSync(__cfg.touch, [target("execFileSync")]); return "ran touch";
    },
    "node:child_process spawnSync": async () => {
      const r = (await cp()).spawnSync(__cfg.touch, [target("spawnSync")]);
      if (r.error) throw r.error;
      return `exit status ${r.status}`;
    },
    "node:child_process exec": async () => {
      const { exec } = await cp();
      return await __event((resolve, reject) => {
        const child = exec(`${__cfg.touch} ${target("exec")}`, (e) => (e ? reject(e) : resolve("ran a shell")));
        return () => child.kill();
      }, 1200, "exec");
    },
    "node:child_process spawn": async () => {
      const { spawn } = await cp();
      return await __event((resolve, reject) => {
        const child = spawn(__cfg.touch, [target("spawn")]);
        child.on("spawn", () => resolve("spawned"));
        child.on("error", reject);
        return () => child.kill();
      }, 1200, "spawn");
    },
    "process.binding('spawn_sync')": async () => {
      const b = (await __nodeProcess()).binding("spawn_sync");
      if (typeof b?.spawn !== "function") {
        throw __fail("Absent", `process.binding("spawn_sync") has no spawn (${Object.keys(b ?? {}).length} members)`);
      }
      return __show(b.spawn({ file: __cfg.touch, args: [__cfg.touch, target("binding")] }));
    },
    "Deno.Command outputSync": () => {
      const out = new (__deno().Command)(__cfg.touch, { args: [target("Command")] }).outputSync();
      return `exit code ${out.code}`;
    },
    "Deno.Command spawn": async () => {
      const child = new (__deno().Command)(__cfg.touch, { args: [target("CommandSpawn")] }).spawn();
      return `exit code ${(await child.status).code}`;
    },
    "Deno.run": () => {
      const d = __deno();
      if (typeof d.run !== "function") throw __fail("Absent", "Deno.run is gone");
      return `started pid ${d.run({ cmd: [__cfg.touch, target("run")] }).pid}`;
    },
  };
})()"""


@pytest.mark.parametrize("mode", MODES)
def test_the_guest_cannot_start_a_process(mode: str, exposed: Exposed) -> None:
    before = exposed.entries()
    guest = attempt(mode, PROCESS_ATTEMPTS, exposed.settings())
    spawned = exposed.entries() - before
    assert_blocked(guest.outcomes)
    assert not spawned, f"a process ran: {spawned}"
    assert_refused_by_permissions(
        guest.outcomes,
        "node worker / node:child_process execSync",
        "node worker / node:child_process spawnSync",
        "node worker / Deno.Command outputSync",
        "node worker / Deno.Command spawn",
    )


# --- 4. Native code (FFI) ----------------------------------------------------------------------

FFI_ATTEMPTS: Final = r"""{
  "Deno.dlopen": () => {
    const lib = __deno().dlopen(__cfg.libc, { getpid: { parameters: [], result: "i32" } });
    return `called getpid() = ${lib.symbols.getpid()}`;
  },
  "Deno.UnsafePointer.of": () => {
    const { UnsafePointer } = __deno();
    return `the address ${UnsafePointer.value(UnsafePointer.of(new Uint8Array(8)))}`;
  },
  "import('node:ffi')": async () => Object.keys(await import("node:ffi")),
  "import('ext:deno_ffi/00_ffi.js')": async () => Object.keys(await import("ext:deno_ffi/00_ffi.js")),
  "process.dlopen": async () => {
    const p = await __nodeProcess();
    return await __mustBeRefused("process.dlopen", () => {
      const m = { exports: {} };
      p.dlopen(m, __cfg.libc);
      return `loaded ${Object.keys(m.exports)}`;
    });
  },
  "process.binding('fs')": async () => {
    const b = (await __nodeProcess()).binding("fs");
    const read = b?.readFileUtf8 ?? b?.readFileSync ?? b?.open;
    if (typeof read !== "function") {
      throw __fail("Absent", `process.binding("fs") has ${Object.keys(b ?? {}).length} members and no file access`);
    }
    return __show(read(__cfg.secretFile, 0));
  },
  "node:sqlite loadExtension": async () => {
    const { DatabaseSync } = await import("node:sqlite");
    return await __mustBeRefused("loadExtension", () => {
      new DatabaseSync(":memory:", { allowExtension: true }).loadExtension(__cfg.libc);
      return "loaded a shared library";
    });
  },
  "node:sqlite load_extension()": async () => {
    const { DatabaseSync } = await import("node:sqlite");
    return await __mustBeRefused("load_extension()", () =>
      new DatabaseSync(":memory:").prepare("SELECT load_extension(?)").get(__cfg.libc), __SQLITE_REFUSAL);
  },
  "node:vm fresh context": async () => {
    const vm = await import("node:vm");
    const code = `(() => {
      const here = [typeof Deno, typeof process, typeof require].join("/");
      const outer = this.constructor.constructor("return globalThis")();
      const found = typeof Deno !== "undefined" ? Deno : outer.Deno;
      if (found === undefined) {
        const e = new Error("the fresh context has Deno/process/require " + here + ", and so has its Function's realm");
        e.name = "Absent";
        throw e;
      }
      return found.dlopen(${JSON.stringify(__cfg.libc)}, {});
    })()`;
    return vm.runInNewContext(code);
  },
  "node:worker_threads Worker": async () => {
    const text = await __inNodeWorker(`
      const { parentPort } = require("node:worker_threads");
      let text;
      try {
        const lib = Deno.dlopen(${JSON.stringify(__cfg.libc)}, { getpid: { parameters: [], result: "i32" } });
        text = "ESCAPED: getpid() = " + lib.symbols.getpid();
      } catch (e) { text = e.name + ": " + e.message; }
      parentPort.postMessage(text);`, 3000);
    if (String(text).startsWith("ESCAPED")) return text;
    throw __fail("RefusedInTheNodeWorker", text);
  },
  "Deno internals: op_napi_open": () => {
    const d = __deno();
    const open = d[d.internal]?.core?.ops?.op_napi_open;
    if (typeof open !== "function") throw __fail("Absent", "no Deno internals here");
    const f = function () {};
    return __mustBeRefused("op_napi_open", () =>
      String(open(__cfg.libc, globalThis, ...Array.from({ length: Math.max(2, open.length - 2) }, () => f))));
  },
  "globalThis.__bootstrap": () => {
    if (globalThis.__bootstrap === undefined) throw __fail("Absent", "there is no __bootstrap global");
    return Object.keys(globalThis.__bootstrap);
  },
}"""


@pytest.mark.parametrize("mode", MODES)
def test_the_guest_cannot_load_native_code(mode: str, exposed: Exposed) -> None:
    guest = attempt(mode, FFI_ATTEMPTS, exposed.settings())
    assert_blocked(guest.outcomes)
    assert_never_mentions(guest, exposed.secret)
    assert_refused_by_permissions(
        guest.outcomes,
        "main / process.dlopen",
        "main / node:sqlite loadExtension",
        "main / node:worker_threads Worker",
        "node worker / Deno.dlopen",
        "node worker / Deno.UnsafePointer.of",
        "worker / process.dlopen",
        "node worker / process.dlopen",
        "worker / node:sqlite loadExtension",
        "node worker / node:sqlite loadExtension",
        "node worker / node:vm fresh context",
        "node worker / Deno internals: op_napi_open",
    )


# --- 5. Environment ----------------------------------------------------------------------------

ENV_ATTEMPTS: Final = r"""(() => {
  const environ = `/proc/${__cfg.hostPid}/environ`;
  return {
    "node:process env": async () => JSON.stringify((await __nodeProcess()).env),
    "node:process env[name]": async () => `read ${(await __nodeProcess()).env[__cfg.envName] ?? "nothing (unset)"}`,
    "node:process env keys": async () => Object.keys((await __nodeProcess()).env),
    "globalThis.process.env": () => {
      if (globalThis.process === undefined) throw __fail("Absent", "there is no process global");
      return JSON.stringify(globalThis.process.env);
    },
    "node:os userInfo": async () => (await import("node:os")).userInfo(),
    "node:os hostname": async () => (await import("node:os")).hostname(),
    "node:os homedir": async () => (await import("node:os")).homedir(),
    "node:os networkInterfaces": async () => (await import("node:os")).networkInterfaces(),
    "Deno.env.get": () => `read ${__deno().env.get(__cfg.envName) ?? "nothing (unset)"}`,
    "Deno.env.toObject": () => __deno().env.toObject(),
    "Deno.hostname": () => __deno().hostname(),
    "node:fs /proc/self/environ": async () => (await import("node:fs")).readFileSync("/proc/self/environ", "utf8"),
    "fetch /proc/self/environ": async () => (await fetch("file:///proc/self/environ")).text(),
    "node:fs the host's environ": async () => (await import("node:fs")).readFileSync(environ, "utf8"),
    "fetch the host's environ": async () => (await fetch("file://" + environ)).text(),
    "import() of the host's environ as text": async () =>
      (await import("file://" + environ, { with: { type: "text" } })).default,
  };
})()"""

ENV_POSTLUDE: Final = r"""
console.log("outcomes:", JSON.stringify(__result));
try { console.log("process.env:", (await __nodeProcess()).env); }
catch (e) { console.log("process.env refused:", __describe(e)); }
try { console.log("env name:", (await __nodeProcess()).env[__cfg.envName]); }
catch (e) { console.log("env name refused:", __describe(e)); }
"""


@pytest.mark.parametrize("mode", MODES)
def test_the_guest_cannot_see_the_host_environment(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    token = "pydeno-env-" + secrets.token_hex(16)
    monkeypatch.setenv(ENV_NAME, token)
    settings = {"envName": ENV_NAME, "hostPid": os.getpid()}
    guest = attempt(mode, ENV_ATTEMPTS, settings, postlude=ENV_POSTLUDE)
    assert_blocked(guest.outcomes)
    assert_never_mentions(guest, token)
    # The console channel was exercised (the guest logged its outcomes), not just quiet.
    assert any(line.startswith("log: outcomes:") for line in guest.console), guest.console
    assert_refused_by_permissions(
        guest.outcomes,
        "main / fetch /proc/self/environ",
        "main / fetch the host's environ",
        "main / import() of the host's environ as text",
        "node worker / node:process env",
        "node worker / node:process env[name]",
        "node worker / node:os userInfo",
        "node worker / Deno.env.get",
        "node worker / Deno.env.toObject",
        "node worker / node:fs /proc/self/environ",
    )


# --- 6. Permission requests --------------------------------------------------------------------

PERMISSION_ATTEMPTS: Final = r"""(() => {
  const granted = (state, what) => {
    if (state === "granted") return `${what} granted`;
    throw __fail("NotGranted", `${what}: ${state}`);
  };
  const attempts = {};
  for (const name of ["read", "write", "net", "env", "run", "ffi", "sys", "import"]) {
    attempts[`navigator.permissions.query ${name}`] = async () => {
      const permissions = globalThis.navigator?.permissions;
      if (permissions === undefined) throw __fail("Absent", "navigator.permissions is not available");
      return granted((await permissions.query({ name })).state, name);
    };
    attempts[`Deno.permissions.request ${name}`] = async () =>
      granted((await __deno().permissions.request({ name })).state, name);
    attempts[`Deno.permissions.requestSync ${name}`] = () =>
      granted(__deno().permissions.requestSync({ name }).state, name);
  }
  attempts["request read of the secret, then read it"] = async () => {
    const d = __deno();
    await d.permissions.request({ name: "read", path: __cfg.secretFile });
    return d.readTextFileSync(__cfg.secretFile);
  };
  attempts["node:inspector Session.connect"] = async () => {
    const { Session } = await import("node:inspector");
    const session = new Session();
    session.connect();
    session.disconnect();
    return "connected an inspector session";
  };
  attempts["node:inspector open"] = async () => {
    const inspector = await import("node:inspector");
    inspector.open(0, "127.0.0.1");
    const url = inspector.url();
    inspector.close();
    return `opened an inspector at ${url}`;
  };
  return attempts;
})()"""


@pytest.mark.parametrize("mode", MODES)
def test_the_guest_cannot_obtain_a_permission(mode: str, exposed: Exposed) -> None:
    guest = attempt(mode, PERMISSION_ATTEMPTS, exposed.settings())
    assert_blocked(guest.outcomes)
    assert_never_mentions(guest, exposed.secret)
    assert_refused_by_permissions(
        guest.outcomes,
        "main / node:inspector Session.connect",
        "worker / node:inspector Session.connect",
        "node worker / node:inspector Session.connect",
        "node worker / request read of the secret, then read it",
    )
    # In the node worker each request was really made and answered: not granted.
    for name in ("read", "write", "net", "env", "run", "ffi", "sys", "import"):
        outcome = guest.outcomes[f"node worker / Deno.permissions.requestSync {name}"]
        assert outcome.startswith("blocked: NotGranted"), name


ESCALATION_WORKER: Final = (
    r"""
const __attempts = {
  "read the secret": () => Deno.readTextFileSync(__cfg.secretFile),
  "fetch the listener": async () => `status ${(await fetch(`http://127.0.0.1:${__cfg.port}/`)).status}`,
};
"""
    + POST_RESULTS
)


@pytest.mark.parametrize("permissions", ['"inherit"', "{ read: true, net: true, run: true, env: true, ffi: true }"])
@pytest.mark.parametrize("mode", MODES)
def test_a_worker_cannot_be_granted_more_than_the_guest_has(
    mode: str, permissions: str, exposed: Exposed, listener: Listener
) -> None:
    settings = {**exposed.settings(), "port": listener.port}
    source = PRELUDE + f"const __cfg = {json.dumps(settings)};\n" + ESCALATION_WORKER
    program = (
        PRELUDE
        + f"const __source = {json.dumps(source)};\n"
        + "let __outcome;\n"
        + "try {\n"
        + "  __outcome = await __inWebWorker('data:text/javascript,' + encodeURIComponent(__source),"
        + f" {PLACE_MS}, {{ deno: {{ permissions: {permissions} }} }});\n"
        + "} catch (e) { __outcome = { '(the worker itself)': 'blocked: ' + __describe(e) }; }\n"
        + "__outcome\n"
    )
    with open_runtime(mode) as rt:
        value = rt.eval(program)
        # The worker's guarded Worker refuses the option; Deno would end the whole process.
        assert rt.eval("1 + 1") == 2
    assert isinstance(value, dict), value
    outcomes: Outcomes = {str(k): str(v) for k, v in value.items()}
    visits = listener.visits()
    assert_blocked(outcomes)
    assert not [k for k, v in outcomes.items() if exposed.secret in v]
    assert not visits, f"the listener was reached: {visits}"
    # Refused before Deno sees the option, not merely by an OS layer behind a permission Deno
    # granted.
    assert outcomes == {
        "(the worker itself)": "blocked: TypeError: Failed to construct 'Worker': the deno option is not supported;"
        " a Worker runs with the permissions of the code that starts it"
    }


# --- 7. Signals to the host --------------------------------------------------------------------

SIGNAL_ATTEMPTS: Final = r"""{
  "node:process kill(host pid, SIGWINCH)": async () => (await __nodeProcess()).kill(__cfg.hostPid, "SIGWINCH"),
  "node:process kill(ppid, SIGWINCH)": async () => {
    const p = await __nodeProcess();
    return `${p.kill(p.ppid, "SIGWINCH")} (ppid ${p.ppid})`;
  },
  "node:process kill(ppid, 0)": async () => { const p = await __nodeProcess(); return p.kill(p.ppid, 0); },
  "node:process kill(host group, SIGWINCH)": async () =>
    (await __nodeProcess()).kill(-__cfg.hostPgid, "SIGWINCH"),
  "globalThis.process.kill": () => {
    if (globalThis.process === undefined) throw __fail("Absent", "there is no process global");
    return globalThis.process.kill(__cfg.hostPid, "SIGWINCH");
  },
  "Deno.kill(host pid, SIGWINCH)": () => { __deno().kill(__cfg.hostPid, "SIGWINCH"); return "sent SIGWINCH"; },
  "Deno.kill(Deno.ppid, SIGWINCH)": () => {
    const d = __deno();
    d.kill(d.ppid, "SIGWINCH");
    return `sent SIGWINCH to ${d.ppid}`;
  },
  "Deno.kill(host group, SIGWINCH)": () => { __deno().kill(-__cfg.hostPgid, "SIGWINCH"); return "sent SIGWINCH"; },
}"""


@pytest.mark.parametrize("mode", MODES)
def test_the_guest_cannot_signal_the_host(mode: str, sigwinch: list[int]) -> None:
    settings = {"hostPid": os.getpid(), "hostPgid": os.getpgrp()}
    guest = attempt(mode, SIGNAL_ATTEMPTS, settings)
    time.sleep(0.1)  # a signal in flight is handled at the next bytecode boundary
    assert_blocked(guest.outcomes)
    assert sigwinch == [], "the guest signalled the test process"
    assert_refused_by_permissions(
        guest.outcomes,
        "main / node:process kill(host pid, SIGWINCH)",
        "main / node:process kill(host group, SIGWINCH)",
        "worker / node:process kill(host pid, SIGWINCH)",
        "node worker / node:process kill(host pid, SIGWINCH)",
        "node worker / node:process kill(ppid, SIGWINCH)",
        "node worker / node:process kill(ppid, 0)",
        "node worker / Deno.kill(host pid, SIGWINCH)",
        "node worker / Deno.kill(Deno.ppid, SIGWINCH)",
        "node worker / Deno.kill(host group, SIGWINCH)",
    )


# --- 8. Web Workers, node workers, data: and blob: modules -------------------------------------

PAYLOAD_ATTEMPTS: Final = r"""{
  "node:fs readFileSync": async () => (await import("node:fs")).readFileSync(__cfg.secretFile, "utf8"),
  "Deno.readTextFileSync": () => __deno().readTextFileSync(__cfg.secretFile),
  "fetch file:": async () => (await fetch("file://" + __cfg.secretFile)).text(),
  "import() of a .js module": async () => (await import("file://" + __cfg.moduleJs)).default,
  "static import of a .json module": async () => (await import("data:text/javascript," + encodeURIComponent(
    `import s from ${JSON.stringify("file://" + __cfg.moduleJson)} with { type: "json" }; export default s;`))).default,
  "fetch the listener": async () => `status ${(await fetch(`http://127.0.0.1:${__cfg.port}/`)).status}`,
  "WebSocket to the listener": () => __event((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${__cfg.port}/`);
    ws.onopen = () => resolve("opened a WebSocket");
    ws.onerror = (event) => reject(__fail("WebSocketError", event.message ?? "an error event"));
    ws.onclose = (event) => reject(__fail("WebSocketClosed", `closed with code ${event.code}`));
    return () => ws.close();
  }, 1200, "the WebSocket"),
  "node:net to the listener": async () => {
    const net = await import("node:net");
    return await __event((resolve, reject) => {
      const s = net.createConnection({ host: "127.0.0.1", port: __cfg.port });
      s.on("connect", () => resolve("connected"));
      s.on("error", reject);
      return () => s.destroy();
    }, 1200, "node:net");
  },
  "Deno.connect to the listener": async () => {
    (await __deno().connect({ hostname: "127.0.0.1", port: __cfg.port })).close();
    return "connected";
  },
}"""

PLACES_PROGRAM: Final = r"""
const __post = __sources.post;
const __places = {
  "Web Worker from a data: URL": () =>
    __inWebWorker("data:text/javascript," + encodeURIComponent(__sources.webData + __post), __placeMs),
  "Web Worker from a blob: URL": () => {
    const url = URL.createObjectURL(new Blob([__sources.webBlob + __post], { type: "text/javascript" }));
    return __inWebWorker(url, __placeMs).finally(() => URL.revokeObjectURL(url));
  },
  "node:worker_threads Worker": () => __inNodeWorker(__sources.node +
    `__keepAlive(); __runAll(__attempts, ${__attemptMs})
      .then((r) => require("node:worker_threads").parentPort.postMessage(__withStray(r)));`,
    __placeMs),
  "import() of a data: module": async () => (await __within(import("data:text/javascript," +
    encodeURIComponent(__sources.dataModule + `export default await __runAll(__attempts, ${__attemptMs});`)),
    __placeMs, "the data: module")).default,
  "import() of a blob: module": async () => {
    const url = URL.createObjectURL(new Blob(
      [__sources.blobModule + `export default await __runAll(__attempts, ${__attemptMs});`],
      { type: "text/javascript" }));
    try { return (await __within(import(url), __placeMs, "the blob: module")).default; }
    finally { URL.revokeObjectURL(url); }
  },
};
const __results = {};
await Promise.all(Object.entries(__places).map(async ([place, run]) => {
  try { __results[place] = await run(); }
  catch (e) { __results[place] = { "(the place itself)": "blocked: " + __describe(e) }; }
}));
({ names: Object.keys(__attempts), places: __results })
"""


@pytest.mark.parametrize("mode", MODES)
def test_workers_and_data_or_blob_modules_meet_the_same_barriers(
    mode: str, exposed: Exposed, listener: Listener
) -> None:
    settings = {**exposed.settings(), "port": listener.port}
    sources = {
        "webData": runner(PAYLOAD_ATTEMPTS, settings, "Web Worker (data:)"),
        "webBlob": runner(PAYLOAD_ATTEMPTS, settings, "Web Worker (blob:)"),
        "node": runner(PAYLOAD_ATTEMPTS, settings, "node worker"),
        "dataModule": runner(PAYLOAD_ATTEMPTS, settings, "data: module"),
        "blobModule": runner(PAYLOAD_ATTEMPTS, settings, "blob: module"),
        "post": POST_RESULTS,
    }
    program = (
        runner(PAYLOAD_ATTEMPTS, settings, "main")
        + f"const __sources = {json.dumps(sources)};\n"
        + f"const __placeMs = {PLACE_MS}, __attemptMs = {ATTEMPT_MS};\n"
        + PLACES_PROGRAM
    )
    console: list[str] = []
    with open_runtime(mode, console) as rt:
        guest = collect(rt.eval(program), console)
        marker = rt.eval(f"typeof globalThis.{MARKER_GLOBAL}")
    visits = listener.visits()
    assert_blocked(guest.outcomes)
    assert_never_mentions(guest, exposed.secret)
    assert marker == "undefined"
    assert not visits, f"the listener was reached: {visits}"
    places = (
        "Web Worker from a data: URL",
        "Web Worker from a blob: URL",
        "node:worker_threads Worker",
        "import() of a data: module",
        "import() of a blob: module",
    )
    assert_refused_by_permissions(
        guest.outcomes,
        *(
            f"{place} / {name}"
            for place in places
            for name in (
                "fetch file:",
                "import() of a .js module",
                "static import of a .json module",
                "fetch the listener",
                "WebSocket to the listener",
                "node:net to the listener",
            )
        ),
        *(
            f"{place} / {name}"
            for place in places[2:3]
            for name in ("node:fs readFileSync", "Deno.readTextFileSync", "Deno.connect to the listener")
        ),
    )


# --- Storage that outlives a runtime ------------------------------------------------------------

STORE_PROGRAM: Final = r"""
const __stored = {};
try { localStorage.setItem(__cfg.key, __cfg.token); __stored.localStorage = "stored"; }
catch (e) { __stored.localStorage = "refused: " + __describe(e); }
try { sessionStorage.setItem(__cfg.key, __cfg.token); __stored.sessionStorage = "stored"; }
catch (e) { __stored.sessionStorage = "refused: " + __describe(e); }
try {
  await (await caches.open(__cfg.key)).put(`https://pydeno.invalid/${__cfg.key}`, new Response(__cfg.token));
  __stored.caches = "stored";
} catch (e) { __stored.caches = "refused: " + __describe(e); }
__stored
"""

RETRIEVE_ATTEMPTS: Final = r"""{
  "localStorage left by an earlier runtime": () => {
    const v = localStorage.getItem(__cfg.key);
    if (v === null) throw __fail("NotFound", "nothing was left");
    return `read ${v}`;
  },
  "sessionStorage left by an earlier runtime": () => {
    const v = sessionStorage.getItem(__cfg.key);
    if (v === null) throw __fail("NotFound", "nothing was left");
    return `read ${v}`;
  },
  "Cache API entry left by an earlier runtime": async () => {
    if (!(await caches.has(__cfg.key))) throw __fail("NotFound", "no such cache");
    const hit = await (await caches.open(__cfg.key)).match(`https://pydeno.invalid/${__cfg.key}`);
    if (hit === undefined) throw __fail("NotFound", "the cache holds no entry");
    return `read ${await hit.text()}`;
  },
}"""

# Whatever a guest managed to store goes again, so that a failing run leaves nothing behind.
FORGET_POSTLUDE: Final = r"""
try { localStorage.removeItem(__cfg.key); } catch { /* never stored */ }
try { await caches.delete(__cfg.key); } catch { /* never stored */ }
"""


@pytest.mark.parametrize("mode", MODES)
def test_a_runtime_cannot_leave_data_for_a_later_runtime(mode: str) -> None:
    """Web storage that persists (localStorage, the Cache API) would be a channel from one
    guest to the next, and a write to the host's disk that no write permission covers."""
    token = "pydeno-stored-" + secrets.token_hex(12)
    settings = {"key": "pydeno-escape-" + secrets.token_hex(8), "token": token}
    with open_runtime(mode) as rt:
        stored = rt.eval(PRELUDE + f"const __cfg = {json.dumps(settings)};\n" + STORE_PROGRAM)
    assert isinstance(stored, dict), stored  # storing alone is fine: it must not outlive the runtime
    later = run_guest(mode, guest_program(RETRIEVE_ATTEMPTS, settings, in_worker=False, postlude=FORGET_POSTLUDE))
    assert_blocked(later.outcomes)
    assert_never_mentions(later, token)


# --- The detectors themselves --------------------------------------------------------------------


def test_the_battery_would_notice_a_way_out(listener: Listener, sigwinch: list[int]) -> None:
    # An attempt that returns is reported as an escape, in the guest's isolate and its workers.
    guest = attempt("off", '{ "succeeds": () => 6 * 7, "throws": () => { throw new RangeError("no"); } }', {})
    assert guest.outcomes == {
        "main / succeeds": "ESCAPED: 42",
        "main / throws": "blocked: RangeError: no",
        "worker / succeeds": "ESCAPED: 42",
        "worker / throws": "blocked: RangeError: no",
        "node worker / succeeds": "ESCAPED: 42",
        "node worker / throws": "blocked: RangeError: no",
    }
    with pytest.raises(AssertionError, match="got out"):
        assert_blocked(guest.outcomes)
    with pytest.raises(AssertionError, match="not by a permission check"):
        assert_refused_by_permissions(guest.outcomes, "main / throws")
    with pytest.raises(AssertionError, match="reached the guest"):
        assert_never_mentions(Guest({"main / x": "blocked: Error: s3cret"}), "s3cret")
    with pytest.raises(AssertionError, match="reached the console"):
        assert_never_mentions(Guest({}, ["log: s3cret"]), "s3cret")
    # A connection or a datagram that reached the listener is seen.
    with (
        socket.create_connection(("127.0.0.1", listener.port)) as conn,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
    ):
        udp.sendto(b"probe", ("127.0.0.1", listener.udp_port))
        time.sleep(0.05)
        visits = listener.visits()
        conn.close()
    assert len(visits) == 2, visits
    # A SIGWINCH that reached this process is recorded.
    os.kill(os.getpid(), signal.SIGWINCH)
    time.sleep(0.05)
    assert sigwinch == [signal.SIGWINCH]
