"""The error-kind table, produced for real: every kind of ``pydeno.KINDS`` that has a feature
behind it is produced end to end (real deno workers; host-side conditions for the host-side
kinds) and checked against the catalog, the exception's ``.kind``/``.hint``/``.docs`` and its
PEP 678 note. A guest's attempts to steer the table are tests/security/test_error_forgery.py;
how a start failure's cause is read, tests/runtime/test_error_evidence.py."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
import trio

import pydeno
from pydeno.host.process import monitor as _monitor
from tests.packages_cache import packages
from tests.support.error_checks import FakeWorker, Launcher, assert_explained, eval_failure, failure

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

MiB = 2**20
DIED = "worker process died ("


@dataclass(frozen=True)
class Env:
    """What a scenario may use besides the public API."""

    monkeypatch: pytest.MonkeyPatch
    fake_worker: FakeWorker
    launch: Launcher


@dataclass(frozen=True)
class Case:
    kind: str
    error: type[BaseException]
    scenario: Callable[[Env], BaseException]
    message: str  # re.fullmatch against str(exc)
    via_agent: bool = False


def bound_failure(fn: Callable[..., Any], code: str, **options: Any) -> Exception:
    """Bind fn as the guest global ``tool`` and evaluate code."""
    with pydeno.Runtime(**options) as rt:
        rt.bind_function("tool", fn)
        return failure(lambda: rt.eval(code))


def sleeper(seconds: float) -> Callable[[], str]:
    def sleep() -> str:
        time.sleep(seconds)
        return "late"

    return sleep


def counter() -> Callable[[], int]:
    calls: list[int] = []

    def count() -> int:
        calls.append(1)
        return len(calls)

    return count


# -- scenarios ---------------------------------------------------------------------------------
def terminated_during(code: str) -> Callable[[Env], BaseException]:
    def scenario(env: Env) -> BaseException:
        with pydeno.Runtime(terminate_grace=0.3, timeout=10) as rt:
            timer = threading.Timer(0.3, rt.terminate)
            timer.start()
            try:
                return failure(lambda: rt.eval(code))
            finally:
                timer.join()

    return scenario


def killed_from_outside(env: Env) -> BaseException:
    with pydeno.Runtime() as rt:
        assert rt.eval("1") == 1
        process = rt._sup.process
        assert process is not None
        process.popen.kill()
        process.popen.wait()
        return failure(lambda: rt.eval("1"))


def tool_raising(error: pydeno.ToolError, *, host_side: bool) -> Callable[[Env], BaseException]:
    """A bound function that raises error, which the guest does not catch: the guest's
    uncaught JavaScriptError, or (host_side) the very object the tool raised."""

    def scenario(env: Env) -> BaseException:
        raised: list[BaseException] = []

        def tool() -> None:
            raised.append(error)
            raise error

        exc = bound_failure(tool, "await tool()")
        assert isinstance(exc, pydeno.JavaScriptError)
        assert exc.name == type(error).__name__
        assert raised == [error]
        return raised[0] if host_side else exc

    return scenario


def protocol_violation(env: Env) -> BaseException:
    env.fake_worker("bad_answer", "unknown_kind")
    return eval_failure("1", timeout=10, startup_timeout=10)


def deno_missing(env: Env) -> BaseException:
    env.monkeypatch.setenv("PYDENO_DENO", "/nonexistent/pydeno-test/deno")
    exc = failure(pydeno.Runtime)
    assert isinstance(exc.__cause__, FileNotFoundError)
    return exc


def fetched(url: str, **options: Any) -> BaseException:
    """What a guest's uncaught fetch(url) raises, through an HttpFetch allowing url."""
    with pydeno.HttpFetch([url], **options) as fetch, pydeno.Runtime() as rt:
        fetch.attach(rt)
        return failure(lambda: rt.eval(f"fetch({json.dumps(url)})"))


def fetch_metadata(env: Env) -> BaseException:
    return fetched("http://169.254.169.254/latest/meta-data/")


def fetch_closed_port(env: Env) -> BaseException:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return fetched(f"http://127.0.0.1:{port}/", allow_addresses=["127.0.0.1"])


def fetch_unanswered(env: Env) -> BaseException:
    # The kernel accepts the connection into the backlog; nothing ever answers.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        return fetched(f"http://127.0.0.1:{listener.getsockname()[1]}/", allow_addresses=["127.0.0.1"], timeout=0.2)


KEY = bytes(range(32))
BUDGET_SPENT = r"Evaluation failed: ToolBudgetError: the tool-call budget of 1 calls is spent"
JOURNAL_NOT_AUTHENTIC = r"journal is not authentic: wrong key, or altered since it was signed"
SNAPSHOT_NOT_AUTHENTIC = r"snapshot is not authentic: wrong key, or altered since it was signed"
DIVERGED = r"replaying run 1: call 1 was tools\.add\(\), but the journal recorded tools\.weather\(\)"


CHECKOUT_TIMED_OUT = (
    r"no fresh sandbox within checkout_timeout=0\.2s \(max_workers=1, 1 checked out, 0 starting\); nothing ran"
)


def pool_exhausted(env: Env) -> BaseException:
    with pydeno.SandboxPool(size=0, max_workers=1, checkout_timeout=0.2) as pool, pool.checkout():
        return failure(lambda: pool.checkout().__enter__())


def session_leased_elsewhere(env: Env) -> BaseException:
    with pydeno.SessionPool(pydeno.MemoryJournalStore(), KEY) as sessions, sessions.lease("a"):
        return failure(lambda: sessions.lease("a", timeout=0.1).__enter__())


def owner_over_its_live_cap(env: Env) -> BaseException:
    with (
        pydeno.SessionPool(pydeno.MemoryJournalStore(), KEY, max_live_per_owner=1) as sessions,
        sessions.lease("a", owner="alice"),
    ):
        return failure(lambda: sessions.lease("b", owner="alice").__enter__())


def sqlite_locked_elsewhere(env: Env) -> BaseException:
    """A second real process holds an exclusive lock on the file while a lease ends."""
    import subprocess
    import sys
    import tempfile

    locker = (
        "import sqlite3, sys; db = sqlite3.connect(sys.argv[1], isolation_level=None); "
        "db.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); sys.stdin.readline()"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/sessions.db"
        with pydeno.SQLiteJournalStore(path, busy_timeout=0.1) as store, pydeno.SessionPool(store, KEY) as sessions:
            proc = subprocess.Popen([sys.executable, "-c", locker, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            assert proc.stdout is not None and proc.stdin is not None
            try:
                assert proc.stdout.readline() == b"locked\n"

                def lease_that_runs() -> None:
                    with sessions.lease("a") as agent:
                        agent.run("globalThis.x = 1")

                return failure(lease_that_runs)
            finally:
                proc.stdin.close()
                proc.wait(10)
                proc.stdout.close()
                sessions.close()


def sqlite_file_not_a_database(env: Env) -> BaseException:
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".db") as f:
        f.write(b"not a database " * 300)
        f.flush()
        return failure(lambda: pydeno.SQLiteJournalStore(f.name))


def paused_too_long(env: Env) -> BaseException:
    with pydeno.AgentSandbox({"approve": lambda: True}, max_pause=0.2, timeout=10) as session:
        paused = session.start("await tools.approve()")
        assert isinstance(paused, pydeno.PausedToolCall)
        time.sleep(0.6)  # the approver is slower than max_pause
        return failure(lambda: paused.resume(value=True))


def bridge_over_budget(env: Env) -> BaseException:
    calls: list[int] = []
    bridge = pydeno.ToolBridge({"ping": lambda: calls.append(1)}, max_calls=1)
    with pydeno.Runtime() as rt:
        bridge.attach(rt)
        exc = failure(lambda: rt.eval("await tools.ping(); await tools.ping()"))
    assert calls == [1]  # the refused call never reached Python
    return exc


SHOPPING = "('weather' in tools) ? await tools.weather('Oslo') : await tools.add(1, 2)"


def replay_with_other_tools(env: Env) -> BaseException:
    tools = {"weather": lambda city: {"city": city}, "add": lambda a, b: a + b}
    with pydeno.AgentSandbox(tools) as session:
        session.run(SHOPPING)
        journal = session.dump(KEY)
    # Loaded where the service no longer offers "weather": the guest takes the other branch.
    return failure(lambda: pydeno.AgentSandbox.load(journal, key=KEY, tools={"add": tools["add"]}))


def journal_with_wrong_key(env: Env) -> BaseException:
    with pydeno.AgentSandbox() as session:
        session.run("let kept = 1")
        journal = session.dump(KEY)
    return failure(lambda: pydeno.AgentSandbox.load(journal, key=bytes(32)))


def tampered_snapshot(env: Env) -> BaseException:
    with pydeno.AgentSandbox({"approve": lambda: True}) as session:
        assert isinstance(session.start("await tools.approve()"), pydeno.PausedToolCall)
        snapshot = bytearray(session.dump(KEY))
    snapshot[-40] ^= 1  # a byte of the signed body
    return failure(lambda: pydeno.AgentSandbox.load(bytes(snapshot), key=KEY, tools={"approve": lambda: True}))


def program_with_a_type_error(env: Env) -> BaseException:
    count = pydeno.Tool(
        "count", lambda args: 1, input_schema={"type": "object", "properties": {"n": {"type": "integer"}}}
    )
    with pydeno.CodeMode([count]) as cm:
        result = cm.execute("await tools.count({ n: 'one' })", typecheck=True)
    assert result.exception is not None and result.tool_calls == ()
    return result.exception


def mcp_server_killed_mid_call(env: Env) -> BaseException:
    """A Code Mode program calls a tool of a real MCP server (tests/mcp_servers/), which
    connects back here with its pid once inside the tool; the scenario kills it then."""
    import os
    import signal
    import sys
    from pathlib import Path

    from anyio.abc import SocketAttribute, SocketStream
    from anyio.streams.buffered import BufferedByteReceiveStream
    from mcp import Client, StdioServerParameters

    script = Path(__file__).parents[1] / "mcp_servers" / "files_server.py"

    async def kill(conn: SocketStream) -> None:
        async with conn:
            os.kill(int(await BufferedByteReceiveStream(conn).receive_until(b"\n", 32)), signal.SIGKILL)

    async def main() -> BaseException | None:
        server = StdioServerParameters(command=sys.executable, args=[str(script)])
        async with Client(server) as files, pydeno.AsyncCodeMode(await pydeno.mcp_tools({"files": files})) as cm:
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
            async with listener, anyio.create_task_group() as tg:
                tg.start_soon(listener.serve, kill)
                port = listener.extra(SocketAttribute.local_port)
                result = await cm.execute(f"await tools.files.hang({{port: {port}}})")
                tg.cancel_scope.cancel()
        return result.exception

    exc = anyio.run(main)
    assert exc is not None
    return exc


def layer_missing(env: Env) -> BaseException:
    # A simulated kernel without Landlock (the launcher's private test switch).
    env.launch(missing_layers={"landlock": "landlock_create_ruleset failed: ENOSYS"})
    return failure(pydeno.Runtime)


def selftest_breach(env: Env) -> BaseException:
    # A kernel that takes the Landlock rules without enforcing them: the self-test reads host files.
    env.launch(silent_layers=frozenset({"landlock"}))
    return failure(pydeno.Runtime)


def memory_unreadable(env: Env) -> BaseException:
    def refused(usage: _monitor.Usage) -> int:
        raise PermissionError(13, "Permission denied", "/proc/<pid>/stat")

    env.monkeypatch.setattr(_monitor, "memory_of", refused)
    return failure(pydeno.Runtime)


def closed_runtime(env: Env) -> BaseException:
    rt = pydeno.Runtime()
    rt.close()
    return failure(lambda: rt.eval("1"))


def closed_function(env: Env) -> BaseException:
    with pydeno.Runtime() as rt:
        fn = rt.eval("(x) => x + 1")
        assert fn(1) == 2
        fn.close()
        return failure(lambda: fn(1))


def bad_option(env: Env) -> BaseException:
    return failure(lambda: pydeno.Runtime(timeout=-1))


def code_not_a_string(env: Env) -> BaseException:
    with pydeno.Runtime() as rt:
        return failure(lambda: rt.eval(123))  # type: ignore[arg-type]


def cancelled_async_eval(env: Env) -> BaseException:
    async def main() -> BaseException:
        rt = pydeno.AsyncRuntime()
        try:
            assert await rt.eval("1") == 1
            task = asyncio.create_task(rt.eval("await new Promise(() => {})"))
            await asyncio.sleep(0.3)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError as exc:
                assert rt.closed
                return exc
            pytest.fail("the eval was not cancelled")
        finally:
            await rt.close()

    return asyncio.run(main())


def outer_trio_deadline(env: Env) -> BaseException:
    async def main() -> BaseException:
        async with pydeno.AsyncRuntime(timeout=10) as rt:
            try:
                with trio.fail_after(0.3):
                    await rt.eval("await new Promise(() => {})")
            except trio.TooSlowError as exc:
                assert rt.closed
                return exc
        pytest.fail("the outer deadline did not fire")

    return trio.run(main)


def outer_deadline(env: Env) -> BaseException:
    async def main() -> BaseException:
        async with pydeno.AsyncRuntime(timeout=10) as rt:
            try:
                with anyio.fail_after(0.3):
                    await rt.eval("await new Promise(() => {})")
            except TimeoutError as exc:
                assert rt.closed
                return exc
        pytest.fail("the outer deadline did not fire")

    return anyio.run(main)


def unknown(env: Env) -> BaseException:
    return KeyError("x")


# A cluster of its own, in a child process: a Ray driver keeps threads and descriptors after
# ray.shutdown(), which the leak guard would rightly count. The child pickles the exception
# RayPool.eval raised (pickling keeps a pydeno error's kind, hint and notes) and checks that
# nothing of Ray's outlived the cluster.
RAY_ACTOR_KILLED = """
import base64, pickle, sys, threading, time
import psutil, ray
import pydeno.ray

ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
failed = []
try:
    with pydeno.ray.RayPool(actors=1, timeout=60) as pool:
        def run():
            try:
                pool.eval("await new Promise(r => setTimeout(r, 60000))")
            except Exception as exc:
                failed.append(exc)
        thread = threading.Thread(target=run)
        thread.start()
        while not pool.stats()["per_actor"][0]["running"]:
            time.sleep(0.02)
        ray.kill(pool._actors.slots[0].handle)
        thread.join()
finally:
    ray.shutdown()
deadline = time.monotonic() + 10
def left():
    return [p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
while left() and time.monotonic() < deadline:
    time.sleep(0.05)
assert not left(), left()
sys.stdout.write(base64.b64encode(pickle.dumps(failed[0])).decode())
"""


def ray_actor_killed_mid_eval(env: Env) -> BaseException:
    import base64
    import pickle
    import subprocess
    import sys

    child = subprocess.run(
        [sys.executable, "-c", RAY_ACTOR_KILLED], capture_output=True, text=True, timeout=120, check=False
    )
    assert child.returncode == 0, child.stderr
    exc = pickle.loads(base64.b64decode(child.stdout))
    assert isinstance(exc, BaseException)
    return exc


HOST_WAIT = r"host callbacks kept the guest waiting for more than 0\.2s in one command \(max_host_wait\); worker killed"
DATA_WORKER = "new Worker('data:application/javascript,setInterval(() => {}, 1000)', {type: 'module'})"

TABLE = [
    pytest.param(
        Case(
            "js_error",
            pydeno.JavaScriptError,
            lambda env: eval_failure("null.x"),
            r"Evaluation failed: TypeError: Cannot read properties of null \(reading 'x'\)",
        ),
        id="js_error: null.x",
    ),
    pytest.param(
        Case(
            "timeout",
            pydeno.RuntimeTimeout,
            lambda env: eval_failure("while (true) {}", timeout=0.5),
            r"command exceeded timeout=0\.5s; worker killed",
        ),
        id="timeout: a busy loop",
    ),
    pytest.param(Case("timeout", TimeoutError, outer_deadline, ""), id="timeout: an outer anyio.fail_after"),
    pytest.param(Case("timeout", trio.TooSlowError, outer_trio_deadline, ""), id="timeout: an outer trio.fail_after"),
    pytest.param(
        Case(
            "cpu_limit",
            pydeno.RuntimeTimeout,
            lambda env: eval_failure("while (true) {}", cpu_limit=0.3, timeout=10),
            r"worker used more than 0\.3s of CPU in one command and was killed",
        ),
        id="cpu_limit: a busy loop",
    ),
    pytest.param(
        Case(
            "memory_limit",
            pydeno.WorkerCrashed,
            lambda env: eval_failure(
                "const keep = []; while (true) keep.push(new Uint8Array(16 * 2**20).fill(1))",
                max_memory=128 * MiB,
                timeout=20,
            ),
            r"worker used \d+ bytes, over max_memory=134217728; killed"
            r"|worker ran out of its V8 heap \(sized from max_memory=134217728\) and was stopped",
        ),
        id="memory_limit: an ArrayBuffer bomb",
    ),
    pytest.param(
        Case(
            "thread_limit",
            pydeno.WorkerCrashed,
            lambda env: eval_failure(
                f"for (let i = 0; i < 10; i++) {DATA_WORKER}; await new Promise(() => {{}})",
                max_threads=12,
                timeout=10,
            ),
            r"worker started \d+ threads \(limit 12\); killed",
        ),
        id="thread_limit: Web Workers",
    ),
    pytest.param(
        Case(
            "worker_crashed",
            pydeno.WorkerCrashed,
            killed_from_outside,
            r"worker process died \(killed by SIGKILL\)(: .*)?",
        ),
        id="worker_crashed: killed from outside",
    ),
    pytest.param(
        Case(
            "guest_crashed",
            pydeno.WorkerCrashed,
            lambda env: eval_failure("(await import('node:fs')).closeSync(1); 1", timeout=10),
            r"worker died running guest code \(exit code 0\)(: .*)?",
        ),
        id="guest_crashed: the guest closes the worker's output",
    ),
    pytest.param(
        Case(
            "terminated",
            pydeno.RuntimeTerminated,
            terminated_during("await new Promise(() => {})"),
            r"runtime was terminated on request",
        ),
        id="terminated: during an await",
    ),
    pytest.param(
        Case(
            "force_killed",
            pydeno.RuntimeForceKilled,
            terminated_during("while (true) {}"),
            r"worker did not acknowledge termination within terminate_grace=0\.3s; killed",
        ),
        id="force_killed: during a busy loop",
    ),
    pytest.param(
        Case(
            "host_wait",
            pydeno.RuntimeTimeout,
            lambda env: bound_failure(sleeper(0.6), "await tool()", max_host_wait=0.2, timeout=10),
            HOST_WAIT,
        ),
        id="host_wait: a slow bound function",
    ),
    pytest.param(
        Case("max_pause", pydeno.RuntimeTimeout, paused_too_long, HOST_WAIT, via_agent=True),
        id="max_pause: an approval that came too late",
    ),
    pytest.param(
        Case("checkout_timeout", pydeno.CheckoutTimeout, pool_exhausted, CHECKOUT_TIMED_OUT),
        id="checkout_timeout: a pool whose one worker is checked out",
    ),
    pytest.param(
        Case(
            "typecheck_failed",
            pydeno.TypeCheckError,
            program_with_a_type_error,
            r"the program did not type-check \(1 type error\); nothing ran:\n"
            r"TS2322: Type 'string' is not assignable to type 'number'\. \(line 1, column 21\)\n[\s\S]*",
        ),
        id="typecheck_failed: a Code Mode program that passes a string for an integer",
    ),
    pytest.param(
        Case("tool_budget", pydeno.JavaScriptError, bridge_over_budget, BUDGET_SPENT),
        id="tool_budget: a ToolBridge call past max_calls",
    ),
    pytest.param(
        Case("journal_invalid", pydeno.JournalError, journal_with_wrong_key, JOURNAL_NOT_AUTHENTIC),
        id="journal_invalid: a journal loaded with another key",
    ),
    pytest.param(
        Case("replay_divergence", pydeno.ReplayDivergence, replay_with_other_tools, DIVERGED),
        id="replay_divergence: a guest that asks for other tools on replay",
    ),
    pytest.param(
        Case("snapshot_invalid", pydeno.SnapshotAuthenticationError, tampered_snapshot, SNAPSHOT_NOT_AUTHENTIC),
        id="snapshot_invalid: a paused session's snapshot altered after signing",
    ),
    pytest.param(
        Case(
            "host_call_budget",
            pydeno.WorkerCrashed,
            lambda env: bound_failure(counter(), "for (let i = 0; i < 10; i++) await tool()", max_host_calls=5),
            r"guest made more than max_host_calls=5 host calls",
        ),
        id="host_call_budget: ten awaited host calls",
    ),
    pytest.param(
        Case(
            "inflight_limit",
            pydeno.JavaScriptError,
            lambda env: bound_failure(
                counter(),
                "await Promise.all(Array.from({length: 10}, () => tool()))",
                max_inflight_host_calls=4,
            ),
            r"Evaluation failed: Error: more than 4 host calls in flight",
        ),
        id="inflight_limit: ten concurrent host calls",
    ),
    pytest.param(
        Case(
            "tool_budget",
            pydeno.JavaScriptError,
            tool_raising(pydeno.ToolBudgetError("budget spent"), host_side=False),
            "Evaluation failed: ToolBudgetError: budget spent",
        ),
        id="tool_budget: uncaught by the guest",
    ),
    pytest.param(
        Case(
            "tool_budget",
            pydeno.ToolBudgetError,
            tool_raising(pydeno.ToolBudgetError("budget spent"), host_side=True),
            "budget spent",
        ),
        id="tool_budget: the host-side exception",
    ),
    pytest.param(
        Case(
            "tool_not_found",
            pydeno.JavaScriptError,
            tool_raising(pydeno.ToolNotFoundError("no such user"), host_side=False),
            "Evaluation failed: ToolNotFoundError: no such user",
        ),
        id="tool_not_found: uncaught by the guest",
    ),
    pytest.param(
        Case(
            "tool_not_found",
            pydeno.ToolNotFoundError,
            tool_raising(pydeno.ToolNotFoundError("no such user"), host_side=True),
            "no such user",
        ),
        id="tool_not_found: the host-side exception",
    ),
    pytest.param(
        Case(
            "tool_failed",
            pydeno.JavaScriptError,
            tool_raising(pydeno.ToolError("upstream refused"), host_side=False),
            "Evaluation failed: ToolError: upstream refused",
        ),
        id="tool_failed: uncaught by the guest",
    ),
    pytest.param(
        Case(
            "tool_failed",
            pydeno.ToolError,
            tool_raising(pydeno.ToolError("upstream refused"), host_side=True),
            "upstream refused",
        ),
        id="tool_failed: the host-side exception",
    ),
    pytest.param(
        Case(
            "fetch_refused",
            pydeno.JavaScriptError,
            fetch_metadata,
            r"Evaluation failed: FetchRefused: fetch refused: GET http://169\.254\.169\.254/latest/meta-data/: "
            r"169\.254\.169\.254 is a cloud metadata address; allow it with allow_addresses= only knowingly",
        ),
        id="fetch_refused: a guest fetches the cloud metadata address",
    ),
    pytest.param(
        Case(
            "fetch_failed",
            pydeno.JavaScriptError,
            fetch_closed_port,
            r"Evaluation failed: FetchFailed: fetch failed: GET http://127\.0\.0\.1:\d+/: .*Connection refused",
        ),
        id="fetch_failed: a guest fetches a closed port on an allowed address",
    ),
    pytest.param(
        Case(
            "fetch_timeout",
            pydeno.JavaScriptError,
            fetch_unanswered,
            r"Evaluation failed: FetchTimeout: fetch timed out after 0\.2s: GET http://127\.0\.0\.1:\d+/",
        ),
        id="fetch_timeout: a guest fetches from a server that never answers",
    ),
    pytest.param(
        Case(
            "upstream_failed",
            pydeno.JavaScriptError,
            mcp_server_killed_mid_call,
            r"Evaluation failed: UpstreamError: MCP server 'files' went away during tools\.files\.hang\(\): "
            r"Connection closed",
        ),
        id="upstream_failed: an MCP server killed during a Code Mode tool call",
    ),
    pytest.param(
        Case(
            "protocol_violation",
            pydeno.WorkerCrashed,
            protocol_violation,
            r"worker broke protocol: unexpected frame of kind 99 with 3 items",
        ),
        id="protocol_violation: a fake worker's unknown frame",
    ),
    pytest.param(
        Case(
            "deno_unavailable",
            pydeno.WorkerCrashed,
            deno_missing,
            r"worker failed to start: No such file or directory \(/nonexistent/pydeno-test/deno\) \[ENOENT\]",
        ),
        id="deno_unavailable: PYDENO_DENO names a missing file",
    ),
    pytest.param(
        Case(
            "sandbox_unavailable",
            pydeno.WorkerCrashed,
            layer_missing,
            r"worker failed to start: an OS sandbox is required but landlock is unavailable: "
            r"landlock_create_ruleset failed: ENOSYS",
        ),
        id="sandbox_unavailable: a kernel without Landlock",
    ),
    pytest.param(
        Case(
            "sandbox_unavailable",
            pydeno.WorkerCrashed,
            selftest_breach,
            r"worker failed to start: sandbox self-test failed: read /etc/passwd; .*",
        ),
        id="sandbox_unavailable: the self-test reads a host file",
    ),
    pytest.param(
        Case(
            "limits_unmeasurable",
            pydeno.WorkerCrashed,
            memory_unreadable,
            r"max_memory cannot be enforced on this system \(the worker's resource usage cannot be read\) "
            r"and sandbox='require' demands every protection",
        ),
        id="limits_unmeasurable: the worker's memory cannot be read",
    ),
    pytest.param(
        Case("closed", pydeno.ClosedError, closed_runtime, "runtime is closed"), id="closed: a closed runtime"
    ),
    pytest.param(
        Case("closed", pydeno.ClosedError, closed_function, "Function has been closed"),
        id="closed: a closed JsFunction",
    ),
    pytest.param(
        Case(
            "lease_timeout",
            pydeno.LeaseTimeout,
            session_leased_elsewhere,
            r"session 'a' is leased elsewhere; waited lease_timeout=0\.1s",
        ),
        id="lease_timeout: a session leased twice at once",
    ),
    pytest.param(
        Case(
            "session_limit",
            pydeno.SessionLimitError,
            owner_over_its_live_cap,
            r"owner 'alice' has 1 live sessions, all leased or unsaved, the cap max_live_per_owner=1",
        ),
        id="session_limit: an owner over its live cap",
    ),
    pytest.param(
        Case(
            "store_busy",
            pydeno.StoreBusy,
            sqlite_locked_elsewhere,
            r"journal store /\S+/sessions\.db is locked by another process; waited busy_timeout=0\.1s",
        ),
        id="store_busy: a SQLite file another process holds locked",
    ),
    pytest.param(
        Case(
            "store_failed",
            pydeno.StoreError,
            sqlite_file_not_a_database,
            r"journal store /\S+\.db failed: DatabaseError: file is not a database",
        ),
        id="store_failed: a file that is not a SQLite database",
    ),
    pytest.param(
        Case(
            "actor_died",
            pydeno.ActorDied,
            ray_actor_killed_mid_eval,
            r"Ray actor 0 died running eval: The actor died unexpectedly before finishing this task\.[\s\S]*",
        ),
        id="actor_died: a Ray actor killed with ray.kill during RayPool.eval",
    ),
    pytest.param(
        Case(
            "invalid_input",
            ValueError,
            bad_option,
            r"timeout must be a positive, finite number of seconds, got -1",
        ),
        id="invalid_input: a bad option",
    ),
    pytest.param(
        Case("invalid_input", TypeError, code_not_a_string, r"code must be a str of JavaScript, got int"),
        id="invalid_input: code that is not a str",
    ),
    pytest.param(Case("cancelled", asyncio.CancelledError, cancelled_async_eval, ""), id="cancelled: task.cancel()"),
    pytest.param(Case("unknown", KeyError, unknown, "'x'"), id="unknown: a KeyError"),
    pytest.param(
        Case(
            "tool_failed",
            pydeno.JavaScriptError,
            lambda env: bound_failure(lambda: {}["missing"], "await tool()"),
            r"Evaluation failed: KeyError: host function tool\(\) failed on the host \(KeyError\); its details are "
            r"hidden from the program",
        ),
        id="tool_failed: a bound function that raises KeyError, uncaught",
    ),
    pytest.param(
        Case(
            "sandbox_denied",
            pydeno.JavaScriptError,
            lambda env: eval_failure("await fetch('http://127.0.0.1:8080/')"),
            r'Evaluation failed: TypeError: no network access in this sandbox: "127\.0\.0\.1:8080" was not reached',
        ),
        id="sandbox_denied: fetch without an HttpFetch",
    ),
    pytest.param(
        Case(
            "sandbox_denied",
            pydeno.JavaScriptError,
            lambda env: eval_failure("(await import('node:fs')).readFileSync('/etc/passwd', 'utf8')"),
            r"Evaluation failed: ReferenceError: no file access in this sandbox",
        ),
        id="sandbox_denied: node:fs reads a file",
    ),
    pytest.param(
        Case(
            "import_refused",
            pydeno.JavaScriptError,
            lambda env: eval_failure("await import('npm:lodash')"),
            r"Evaluation failed: TypeError: npm packages cannot be imported in this sandbox",
        ),
        id="import_refused: an npm package",
    ),
    pytest.param(
        Case(
            "import_refused",
            pydeno.JavaScriptError,
            lambda env: eval_failure("await import('lodash')"),
            r'Evaluation failed: TypeError: module "lodash" cannot be imported in this sandbox: it was not added; '
            r"only added modules, packages the host provided \(packages=\) and node: built-ins can be imported",
        ),
        id="import_refused: a bare name that was not added",
    ),
    pytest.param(
        Case(
            "package_unresolved",
            pydeno.PackageUnresolved,
            lambda env: failure(lambda: packages("pydeno-no-such-package-xyz@1.0.0")),
            r"package 'pydeno-no-such-package-xyz@1\.0\.0' could not be resolved: error: .*",
        ),
        id="package_unresolved: a package the registry does not have",
    ),
    pytest.param(
        Case(
            "package_refused",
            pydeno.PackageRefused,
            lambda env: failure(lambda: packages("fs-extra@11.2.0")),
            r"package bundle refused: 'fs-extra@11\.2\.0' needs node:fs \(files\), .*",
        ),
        id="package_refused: a package that needs files",
    ),
]


@pytest.mark.parametrize("case", TABLE)
def test_each_kind_is_produced_end_to_end_and_explained_as_the_catalog_says(
    case: Case, monkeypatch: pytest.MonkeyPatch, fake_worker: FakeWorker, launch: Launcher
) -> None:
    exc = case.scenario(Env(monkeypatch, fake_worker, launch))
    assert type(exc) is case.error
    assert re.fullmatch(case.message, str(exc)), str(exc)
    assert_explained(exc, case.kind, via_agent=case.via_agent)


def test_every_kind_has_an_end_to_end_scenario_except_unknown_which_is_anything_else() -> None:
    covered = {param.values[0].kind for param in TABLE}
    assert covered == set(pydeno.KINDS)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (pydeno.JournalError("journal entry 3 is not authentic"), "journal_invalid"),
        (pydeno.ReplayDivergence("replay asked for lookup(1), the journal holds lookup(2)"), "replay_divergence"),
        (pydeno.SnapshotAuthenticationError("snapshot signature does not match"), "snapshot_invalid"),
    ],
    ids=["JournalError", "ReplayDivergence", "SnapshotAuthenticationError"],
)
def test_the_journal_and_snapshot_errors_classify_by_their_type(error: pydeno.PydenoError, kind: str) -> None:
    assert_explained(error, kind)


@pytest.mark.parametrize(
    ("options", "kind", "message"),
    [
        (
            {"cpu_limit": 1e-05},
            "cpu_limit",
            r"worker used more than 1e-05s of CPU in one command and was killed",
        ),
        (
            {"max_host_wait": 1e-05},
            "host_wait",
            r"host callbacks kept the guest waiting for more than 1e-05s in one command \(max_host_wait\); "
            r"worker killed",
        ),
    ],
    ids=["cpu_limit=1e-05", "max_host_wait=1e-05"],
)
def test_a_limit_the_host_prints_in_exponent_notation_keeps_its_kind(
    options: dict[str, Any], kind: str, message: str
) -> None:
    with pydeno.Runtime(timeout=10, **options) as rt:
        # A CPU allowance this small may already stop bind_function, itself a command: the
        # same limit, so the same message and kind.
        exc = failure(lambda: (rt.bind_function("tool", sleeper(0.3)), rt.eval("await tool(); while (true) {}")))
    assert type(exc) is pydeno.RuntimeTimeout
    assert re.fullmatch(message, str(exc)), str(exc)
    assert_explained(exc, kind)
