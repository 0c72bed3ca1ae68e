"""The escape battery, files: the guest reads and writes no host file, by any API, under every
sandbox mode; the target files sit where only the sandbox, never Unix file modes, stands between
the guest and them."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Final

import pytest

from tests.security.escapes.harness import (
    MARKER_GLOBAL,
    MODES,
    Exposed,
    assert_blocked,
    assert_never_mentions,
    assert_refused_by_permissions,
    attempt,
    collect,
    guest_program,
    open_runtime,
)

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow


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
