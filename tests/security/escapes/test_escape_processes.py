"""The escape battery, processes: the guest can neither start a process, nor load native code,
nor signal the host, under every sandbox mode."""

from __future__ import annotations

import os
import time
from typing import Final

import pytest

from tests.security.escapes.harness import (
    MODES,
    Exposed,
    assert_blocked,
    assert_never_mentions,
    assert_refused_by_permissions,
    attempt,
)

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow


# --- Processes ----------------------------------------------------------------------------

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


# --- Native code (FFI) --------------------------------------------------------------------

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


# --- Signals to the host ------------------------------------------------------------------

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
