"""The escape battery, permissions: the guest sees none of the host's environment and obtains
no permission, neither by asking nor through a worker it starts, under every sandbox mode."""

from __future__ import annotations

import json
import os
import secrets
from typing import Final

import pytest

from tests.security.escapes.harness import (
    ENV_NAME,
    MODES,
    PLACE_MS,
    POST_RESULTS,
    PRELUDE,
    Exposed,
    Listener,
    Outcomes,
    assert_blocked,
    assert_never_mentions,
    assert_refused_by_permissions,
    attempt,
    open_runtime,
)

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow


# --- Environment --------------------------------------------------------------------------

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


# --- Permission requests ------------------------------------------------------------------

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
