"""The error-kind table, produced for real, and a guest's attempts to steer it.

1. One table-driven test: every kind of ``pydeno.KINDS`` that has a feature behind it is
   produced end to end (real deno workers; host-side conditions for the host-side kinds)
   and checked against the catalog, the exception's ``.kind``/``.hint``/``.docs`` and its
   PEP 678 note.
2. The forgery battery: a real guest reaches the worker's stderr and stdout, prints host
   messages, throws errors named like host errors and writes forged frames. It may make a
   failure look less retryable, never more, and never turns a host fact into another kind.
   A worker that exits cleanly with a whole host message as its last stderr line is the
   hostile fake ``tests/fake_workers/forged_clean_exit.py``.
3. Typed evidence: a start failure's cause is read by its type, never its text; real spawn
   failures come from fault injection at ``Launch.start`` in ``pydeno.host._process``.

What a guest can reach from inside the worker (found with real workers, pinned below):
``(await import('node:process')).default.stderr.write`` and ``node:fs`` ``writeSync(2, ..)``
reach fd 2; ``process.stdout.write`` and ``writeSync(1, ..)`` reach fd 1, the wire itself;
``console.error`` is a console frame, not stderr. ``process.kill(process.pid, ..)`` kills
the worker; ``process.exit`` fails (the worker deleted ``Deno``), but ``fs.closeSync(1)``
makes the worker's next write fail, and the worker then exits with code 0.
"""

from __future__ import annotations

import asyncio
import errno
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
from pydeno._taxonomy import docs_page
from pydeno.host import _child, _monitor, _spawner
from tests.packages_cache import packages

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

FakeWorker = Callable[..., None]
Launcher = Callable[..., None]
MiB = 2**20
DIED = "worker process died ("
GUEST_DIED = "worker died running guest code ("


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


def failure(action: Callable[[], object]) -> Exception:
    """The exception action raised; fail the test if it raised none."""
    try:
        action()
    except Exception as exc:  # noqa: BLE001 - the exception is what the scenario produces
        return exc
    pytest.fail("the scenario did not fail")


def eval_failure(code: str, **options: Any) -> Exception:
    with pydeno.Runtime(**options) as rt:
        exc = failure(lambda: rt.eval(code))
        if not isinstance(exc, pydeno.JavaScriptError):
            assert rt.closed
        return exc


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


def assert_explained(exc: BaseException, kind: str, *, via_agent: bool = False) -> pydeno.ErrorInfo:
    """exc classifies as kind, agrees with the catalog, and (a pydeno error) carries the
    same kind, its hint, its page and a note that str(exc) does not contain."""
    info = pydeno.classify_error(exc, via_agent=via_agent)
    assert info.kind == kind
    assert (info.retryable, info.retry_with_larger_limits, info.summary) == pydeno.KINDS[kind]
    assert info.to_dict() == {
        "kind": kind,
        "retryable": info.retryable,
        "summary": info.summary,
        "retry_with_larger_limits": info.retry_with_larger_limits,
    }
    if isinstance(exc, pydeno.PydenoError):
        # An exception does not know it came out of an agent run: its own attributes are
        # those of the kind without via_agent (host_wait for max_pause).
        own = pydeno.classify_error(exc).kind
        assert exc.kind == own
        assert isinstance(exc.hint, str) and exc.hint
        assert exc.docs == docs_page(own) == f"pydeno errors {own}"
        note = exc.__notes__[0]
        assert note.startswith(f"Kind: {own} (")
        assert f"\nFix: {exc.hint}\n" in note
        assert note.endswith(f"\nDocs: {exc.docs}")
        assert ("retryable: yes" in note) == pydeno.KINDS[own][0]
        assert note not in str(exc)
        assert "Kind: " not in str(exc) and "Docs: " not in str(exc)
    return info


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


# -- the forgery battery --------------------------------------------------------------------------
# Every message the host writes (or, for a prefix, its start), as a guest would copy it.
HOST_MESSAGES = {
    "timeout": "command exceeded timeout=1s; worker killed",
    "timeout as printed": "command exceeded timeout=1.0s; worker killed",
    "cpu_limit": "worker used more than 1.0s of CPU in one command and was killed",
    "host_wait": (
        "host callbacks kept the guest waiting for more than 1.0s in one command (max_host_wait); worker killed"
    ),
    "memory_limit": "worker used 1 bytes, over max_memory=1; killed",
    "memory_limit from V8": "worker ran out of its V8 heap (sized from max_memory=1) and was stopped",
    "thread_limit": "worker started 99 threads (limit 1); killed",
    "host_call_budget": "guest made more than max_host_calls=1 host calls",
    "protocol_violation": "worker broke protocol: forged",
    "malformed frame": "worker sent a malformed frame (forged)",
    "sandbox_unavailable": "worker failed to start: an OS sandbox is required but forged",
    "limits_unmeasurable": "max_memory cannot be enforced on this system (forged)",
    "deno_unavailable": "worker failed to start: No such file or directory (/usr/bin/deno) [ENOENT]",
    "worker_crashed": "worker process died (killed by SIGKILL)",
    "guest_crashed": "worker died running guest code (exit code 0)",
    "force_killed": "worker did not acknowledge termination within terminate_grace=1.0s; killed",
    "terminated": "runtime was terminated on request",
    "closed runtime": "runtime is closed",
    "closed function": "Function has been closed",
    "abandoned tool calls": "too many abandoned tool calls in this session",
}
# Kinds only the host can establish; no guest action may produce one except by really
# causing it (a guest that really ends its worker is guest_crashed, one that breaks the wire is
# protocol_violation).
HOST_FACTS = {
    "timeout",
    "cpu_limit",
    "memory_limit",
    "thread_limit",
    "host_wait",
    "max_pause",
    "host_call_budget",
    "terminated",
    "force_killed",
    "sandbox_unavailable",
    "limits_unmeasurable",
    "deno_unavailable",
    "closed",
}


def js(text: str) -> str:
    """text as a JavaScript string literal."""
    return json.dumps(text)


def js_line(text: str) -> str:
    """text and a newline as a JavaScript string literal."""
    return json.dumps(text + "\n")


def assert_never_more_retryable(info: pydeno.ErrorInfo, honest: str) -> None:
    """A forgery may at most make the honest kind less retryable, never more."""
    if not pydeno.KINDS[honest][0]:
        assert not info.retryable


# The ways a guest can end its own worker, all reached through node: modules. The two
# signals need sandbox="off": the seccomp filter refuses the worker every fatal signal to
# itself (tests/security/test_deaths.py); an exit needs no permission anywhere.
DEATHS = {
    "SIGKILL": (
        "(await import('node:process')).default.kill((await import('node:process')).default.pid, 'SIGKILL')",
        "killed by SIGKILL",
        "off",
    ),
    "SIGTERM": (
        "(await import('node:process')).default.kill((await import('node:process')).default.pid, 'SIGTERM')",
        "killed by SIGTERM",
        "off",
    ),
    # process.exit needs the Deno global the worker deleted; closing fd 1 makes the worker's
    # own next write fail, and it then exits with code 0.
    "exit 0": ("(await import('node:fs')).closeSync(1); 1", "exit code 0", "require"),
}


@pytest.mark.parametrize("death", list(DEATHS))
@pytest.mark.parametrize("forged", list(HOST_MESSAGES.values()), ids=list(HOST_MESSAGES))
def test_a_guest_that_prints_a_host_message_to_stderr_and_ends_its_worker_is_a_guest_crash_never_retried(
    forged: str, death: str
) -> None:
    code, how, sandbox = DEATHS[death]
    with pydeno.Runtime(timeout=10, sandbox=sandbox) as rt:
        exc = failure(lambda: rt.eval(f"(await import('node:fs')).writeSync(2, {js_line(forged)}); {code}"))
        assert rt.closed
    assert type(exc) is pydeno.WorkerCrashed
    assert str(exc) == f"{GUEST_DIED}{how}): {forged}"
    info = assert_explained(exc, "guest_crashed")
    assert not info.retryable


@pytest.mark.parametrize("death", list(DEATHS))
def test_the_guest_reaches_stderr_through_node_process_too_and_still_only_after_the_prefix(death: str) -> None:
    forged = "worker used 1 bytes, over max_memory=1; killed"
    code, how, sandbox = DEATHS[death]
    with pydeno.Runtime(timeout=10, sandbox=sandbox) as rt:
        exc = failure(
            lambda: rt.eval(f"(await import('node:process')).default.stderr.write({js_line(forged)}); {code}")
        )
    assert str(exc) == f"{GUEST_DIED}{how}): {forged}"
    assert_explained(exc, "guest_crashed")


def test_console_error_is_a_console_frame_not_stderr_and_classifies_nothing() -> None:
    received: list[tuple[str, str]] = []
    forged = "worker used 1 bytes, over max_memory=1; killed"
    with pydeno.Runtime(on_console=lambda level, text: received.append((level, text))) as rt:
        exc = failure(lambda: rt.eval(f"console.error({js(forged)}); null.x"))
        process = rt._sup.process
        assert process is not None
        assert forged.encode() not in process.stderr_tail()
        assert not rt.closed
    assert received == [("error", forged)]
    assert_explained(exc, "js_error")


def test_what_the_guest_writes_to_stderr_while_it_lives_never_becomes_an_error() -> None:
    forged = "worker used 1 bytes, over max_memory=1; killed"
    with pydeno.Runtime() as rt:
        assert rt.eval(f"(await import('node:fs')).writeSync(2, {js_line(forged)}); 'alive'") == "alive"
        exc = failure(lambda: rt.eval("null.x"))
        process = rt._sup.process
        assert process is not None
        assert forged.encode() in process.stderr_tail()
    assert_explained(exc, "js_error")


THROWS = {
    "an Error named like a host error": "throw Object.assign(new Error(MSG), {name: NAME})",
    "a class named like a host error": (
        "throw new ({[NAME]: class extends Error { get name() { return NAME } }})[NAME](MSG)"
    ),
    "an Error with an empty name": "throw Object.assign(new Error(MSG), {name: ''})",
    "a plain object": "throw {name: NAME, message: MSG}",
    "a thrown string": "throw MSG",
    "the message as the name": "throw Object.assign(new Error(MSG), {name: MSG})",
}
HOST_NAMES = ["WorkerCrashed", "RuntimeTimeout", "RuntimeTerminated", "RuntimeError", "TimeoutError", "MemoryError"]


@pytest.mark.parametrize("shape", list(THROWS))
def test_a_guest_error_that_copies_a_host_error_name_or_message_is_a_js_error_never_a_host_fact(shape: str) -> None:
    with pydeno.Runtime() as rt:
        for name in HOST_NAMES if "NAME" in THROWS[shape] else [""]:
            for forged in HOST_MESSAGES.values():
                code = THROWS[shape].replace("NAME", js(name)).replace("MSG", js(forged))
                exc = failure(lambda code=code: rt.eval(code))
                assert type(exc) is pydeno.JavaScriptError, code
                assert str(exc).startswith("Evaluation failed: ")
                assert forged in str(exc)
                info = assert_explained(exc, "js_error")
                assert not info.retryable and not info.retry_with_larger_limits
        assert not rt.closed


@pytest.mark.parametrize(
    "code",
    [
        "throw new Error('more than 4 host calls in flight')",
        "throw Object.assign(new Error('more than 99 host calls in flight'), {name: 'WorkerCrashed'})",
        "throw 'Error: more than 4 host calls in flight'",
    ],
)
def test_a_guest_error_that_copies_the_in_flight_refusal_is_at_most_that_non_retryable_kind(code: str) -> None:
    with pydeno.Runtime() as rt:
        exc = failure(lambda: rt.eval(code))
    assert type(exc) is pydeno.JavaScriptError
    info = assert_explained(exc, "inflight_limit")
    assert not info.retryable
    assert_never_more_retryable(info, "js_error")


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("throw Object.assign(new Error('spent'), {name: 'ToolBudgetError'})", "tool_budget"),
        ("throw new Error('ToolBudgetError: my own budget is spent')", "tool_budget"),
        ("throw 'ToolBudgetError'", "tool_budget"),
        ("throw Object.assign(new Error('x'), {name: 'ToolNotFoundError'})", "tool_not_found"),
        ("throw Object.assign(new Error('x'), {name: 'ToolError'})", "tool_failed"),
        ("throw Object.assign(new Error('x'), {name: 'ToolErrors'})", "js_error"),
    ],
)
def test_a_guest_error_that_names_a_tool_error_is_that_tool_kind_and_never_retryable(code: str, kind: str) -> None:
    with pydeno.Runtime() as rt:
        exc = failure(lambda: rt.eval(code))
        assert not rt.closed
    assert type(exc) is pydeno.JavaScriptError
    info = assert_explained(exc, kind)
    assert not info.retryable
    assert_never_more_retryable(info, "js_error")


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("throw new TypeError('no network access in this sandbox')", "sandbox_denied"),
        ("throw new Error('no file access in this sandbox: \"/x\" was not read')", "sandbox_denied"),
        (
            "throw Object.assign(new Error('no network access in this sandbox'), {name: 'WorkerCrashed'})",
            "sandbox_denied",
        ),
        ("throw 'npm packages cannot be imported in this sandbox'", "import_refused"),
        (
            "throw new Error('module \"x\" cannot be imported in this sandbox: files are not available')",
            "import_refused",
        ),
        ("throw new Error('tools.x() failed on the host (KeyError); its details are hidden')", "tool_failed"),
        ("throw new Error('host function f() failed on the host (MemoryError): worker used 1 bytes')", "tool_failed"),
        ("throw new Error('no network access in this sandbox, honestly')", "js_error"),
    ],
)
def test_a_guest_error_that_copies_a_sandbox_refusal_or_a_host_failure_gains_no_retry(code: str, kind: str) -> None:
    with pydeno.Runtime() as rt:
        exc = failure(lambda: rt.eval(code))
        assert not rt.closed
    assert type(exc) is pydeno.JavaScriptError
    info = assert_explained(exc, kind)
    assert not info.retryable and not info.retry_with_larger_limits
    assert_never_more_retryable(info, "js_error")


# A msgpack writer in the guest: frames the host would accept if the worker wrote them.
FRAMES_JS = """
const fs = await import('node:fs');
const te = new TextEncoder();
const str = (s) => { const b = te.encode(s); return [0xd9, b.length, ...b]; };
const frame = (...items) => {
  const body = [0x90 + items.length, ...items.flat()];
  const n = body.length;
  return new Uint8Array([n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255, ...body]);
};
const FORGED = 'worker used 1 bytes, over max_memory=1; killed';
"""
STDOUT_FORGERIES = [
    pytest.param(
        "fs.writeSync(1, te.encode(FORGED + '\\n'))",
        pydeno.WorkerCrashed,
        "protocol_violation",
        r"worker sent a malformed frame \(length \d+ exceeds max_message_bytes=67108864\)",
        id="a host message as raw text",
    ),
    pytest.param(
        "(await import('node:process')).default.stdout.write(FORGED + '\\n')",
        pydeno.WorkerCrashed,
        "protocol_violation",
        r"worker sent a malformed frame \(length \d+ exceeds max_message_bytes=67108864\)",
        id="raw text through process.stdout",
    ),
    pytest.param(
        "fs.writeSync(1, frame([5]))",
        pydeno.WorkerCrashed,
        "protocol_violation",
        r"worker broke protocol: acknowledged a termination never asked for",
        id="a termination acknowledgement",
    ),
    pytest.param(
        "fs.writeSync(1, frame([0], [1], str('2.0.0'), str('13.0')))",
        pydeno.WorkerCrashed,
        "protocol_violation",
        r"worker broke protocol: unexpected frame of kind 0 with 4 items",
        id="a second handshake",
    ),
    pytest.param(
        "fs.writeSync(1, frame([2], [0xcd, 3, 0xe7], str('WorkerCrashed'), str(FORGED), str(''), [0x90]))",
        pydeno.WorkerCrashed,
        "protocol_violation",
        r"worker broke protocol: an answer to request 999, which is not pending",
        id="an error answering a request never made",
    ),
    pytest.param(
        "fs.writeSync(1, frame([2], [1], str('WorkerCrashed'), str(FORGED), str(''), [0x90]))",
        pydeno.JavaScriptError,
        "js_error",
        r"Evaluation failed: WorkerCrashed: worker used 1 bytes, over max_memory=1; killed",
        id="an error answering the running eval",
    ),
    pytest.param(
        "fs.writeSync(1, frame([2], [1], str(''), str(FORGED), str(''), [0x90]))",
        pydeno.JavaScriptError,
        "js_error",
        r"Evaluation failed: worker used 1 bytes, over max_memory=1; killed",
        id="an error with no name answering the running eval",
    ),
    pytest.param(
        "fs.writeSync(1, frame([2], [1], str(''), str(FORGED), str(''), [0x91, 0x2a]))",
        pydeno.JavaScriptError,
        "js_error",
        r"Evaluation failed: worker used 1 bytes, over max_memory=1; killed",
        id="an error with a thrown value answering the running eval",
    ),
]


@pytest.mark.parametrize(("code", "error", "kind", "message"), STDOUT_FORGERIES)
def test_forged_output_on_the_workers_stdout_is_at_worst_a_protocol_violation(
    code: str, error: type[Exception], kind: str, message: str
) -> None:
    with pydeno.Runtime(timeout=10) as rt:
        # The eval never settles by itself: whatever ends it is what the guest wrote.
        exc = failure(lambda: rt.eval(FRAMES_JS + code + "; await new Promise(() => {})"))
    assert type(exc) is error
    assert re.fullmatch(message, str(exc)), str(exc)
    info = assert_explained(exc, kind)
    assert info.kind not in HOST_FACTS
    assert not info.retryable


def test_a_console_frame_forged_on_stdout_is_only_console_output() -> None:
    received: list[tuple[str, str]] = []
    with pydeno.Runtime(on_console=lambda level, text: received.append((level, text))) as rt:
        assert rt.eval(FRAMES_JS + "fs.writeSync(1, frame([4], str('error'), str(FORGED))); 'done'") == "done"
        assert not rt.closed
    assert received == [("error", "worker used 1 bytes, over max_memory=1; killed")]


WHOLE_MESSAGE_FORGERIES = [
    "worker used 999 bytes, over max_memory=1; killed",
    "command exceeded timeout=1.0s; worker killed",
    "worker started 99 threads (limit 1); killed",
    "runtime is closed",
]


@pytest.mark.parametrize("when", ["after_hello", "mid_eval"])
@pytest.mark.parametrize("forged", WHOLE_MESSAGE_FORGERIES)
def test_a_worker_that_exits_cleanly_with_a_whole_host_message_on_stderr_is_still_a_guest_crash(
    fake_worker: FakeWorker, forged: str, when: str
) -> None:
    fake_worker("forged_clean_exit", when, forged)
    exc = eval_failure("1", timeout=10, startup_timeout=10)
    assert type(exc) is pydeno.WorkerCrashed
    assert str(exc) == f"{GUEST_DIED}exit code 0): {forged}"
    # An exit after the handshake is the worker's own doing; the forgery may only take
    # retryability away, never grant it.
    info = assert_explained(exc, "guest_crashed")
    assert_never_more_retryable(info, "guest_crashed")


class StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class CrashedStrRaises(pydeno.WorkerCrashed):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class BudgetStrRaises(pydeno.ToolBudgetError):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class TimeoutStrRaises(TimeoutError):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class ClosedStrRaises(RuntimeError):
    def __str__(self) -> str:
        raise ValueError("no text for you")


def cyclic(first: BaseException, second: BaseException) -> BaseException:
    crashed = pydeno.WorkerCrashed("worker failed to start: forged")
    crashed.__cause__ = first
    first.__cause__ = second
    second.__cause__ = first
    return crashed


def self_caused() -> BaseException:
    crashed = pydeno.WorkerCrashed("worker failed to start: forged")
    crashed.__cause__ = crashed
    return crashed


def context_cycle() -> BaseException:
    a, b = RuntimeError("runtime is closed"), RuntimeError("runtime is closed")
    a.__context__, b.__context__ = b, a
    return a


ODD_INPUTS = [
    pytest.param(StrRaises(), "unknown", id="__str__ raises"),
    pytest.param(
        CrashedStrRaises("worker process died (exit code 1)"), "unknown", id="a WorkerCrashed whose __str__ raises"
    ),
    pytest.param(BudgetStrRaises("spent"), "tool_budget", id="a ToolBudgetError whose __str__ raises"),
    pytest.param(TimeoutStrRaises(), "timeout", id="a TimeoutError whose __str__ raises"),
    pytest.param(ClosedStrRaises("runtime is closed"), "unknown", id="a RuntimeError whose __str__ raises"),
    pytest.param(cyclic(OSError(errno.EMFILE, "x"), OSError(errno.ENOMEM, "y")), "worker_crashed", id="cyclic causes"),
    pytest.param(cyclic(OSError(errno.EMFILE, "x"), FileNotFoundError()), "deno_unavailable", id="cyclic with a file"),
    pytest.param(self_caused(), "worker_crashed", id="its own cause"),
    pytest.param(context_cycle(), "closed", id="cyclic contexts"),
    pytest.param(KeyboardInterrupt(), "unknown", id="KeyboardInterrupt"),
    pytest.param(SystemExit(3), "unknown", id="SystemExit"),
    pytest.param(GeneratorExit(), "unknown", id="GeneratorExit"),
    pytest.param(BaseExceptionGroup("g", [KeyboardInterrupt()]), "unknown", id="a BaseExceptionGroup"),
    pytest.param(RuntimeError(None), "unknown", id="RuntimeError(None)"),
    pytest.param(Exception(), "unknown", id="Exception()"),
    pytest.param(TypeError(None), "invalid_input", id="TypeError(None)"),
    pytest.param(pydeno.WorkerCrashed(None), "worker_crashed", id="WorkerCrashed(None)"),  # type: ignore[arg-type]
    pytest.param(pydeno.RuntimeTimeout(None), "timeout", id="RuntimeTimeout(None)"),  # type: ignore[arg-type]
    pytest.param(pydeno.JavaScriptError(None, None), "js_error", id="JavaScriptError(None, None)"),  # type: ignore[arg-type]
    pytest.param(pydeno.JavaScriptError("", ""), "js_error", id="JavaScriptError('', '')"),
    pytest.param(None, "unknown", id="None"),
    pytest.param("worker used 1 bytes, over max_memory=1; killed", "unknown", id="a str"),
]


@pytest.mark.parametrize(("exc", "kind"), ODD_INPUTS)
@pytest.mark.parametrize("via_agent", [False, True])
def test_classify_error_never_raises_on_odd_inputs(exc: Any, kind: str, via_agent: bool) -> None:
    info = pydeno.classify_error(exc, via_agent=via_agent)
    assert info.kind == kind
    assert (info.retryable, info.retry_with_larger_limits, info.summary) == pydeno.KINDS[kind]


# -- typed evidence from chains ---------------------------------------------------------------------
def start_failure(cause: BaseException, message: str = "worker failed to start: forged") -> BaseException:
    """A WorkerCrashed raised from cause, as the host raises a failed start."""
    try:
        try:
            raise cause
        except BaseException as err:
            raise pydeno.WorkerCrashed(message) from err
    except pydeno.WorkerCrashed as exc:
        return exc


@pytest.mark.parametrize(
    ("cause", "kind"),
    [
        pytest.param(FileNotFoundError(), "deno_unavailable", id="FileNotFoundError()"),
        pytest.param(
            FileNotFoundError(errno.ENOENT, "No such file or directory", "/x"), "deno_unavailable", id="ENOENT"
        ),
        pytest.param(PermissionError(errno.EACCES, "Permission denied", "/x"), "deno_unavailable", id="EACCES"),
        pytest.param(OSError(errno.EMFILE, "Too many open files"), "worker_crashed", id="EMFILE"),
        pytest.param(OSError(errno.ENOSPC, "No space left on device"), "worker_crashed", id="ENOSPC"),
        pytest.param(OSError(errno.ENOMEM, "Cannot allocate memory"), "worker_crashed", id="ENOMEM"),
        pytest.param(OSError(errno.EMFILE, "No such file or directory"), "worker_crashed", id="EMFILE saying no file"),
        pytest.param(OSError(errno.EMFILE, "Permission denied"), "worker_crashed", id="EMFILE saying no permission"),
        pytest.param(
            FileNotFoundError(errno.ENOENT, "Too many open files"), "deno_unavailable", id="ENOENT saying EMFILE"
        ),
        pytest.param(ValueError("No such file or directory"), "worker_crashed", id="a ValueError saying no file"),
    ],
)
def test_a_start_failure_is_classified_by_the_type_of_its_cause_never_its_text(cause: BaseException, kind: str) -> None:
    exc = start_failure(cause)
    assert exc.__cause__ is cause
    info = assert_explained(exc, kind)
    assert info.retryable == (kind == "worker_crashed")


def test_an_implicit_context_counts_like_an_explicit_cause() -> None:
    try:
        try:
            raise PermissionError(errno.EACCES, "Permission denied")
        except PermissionError:
            raise pydeno.WorkerCrashed("worker failed to start: forged")  # noqa: B904 - the implicit context
    except pydeno.WorkerCrashed as exc:
        assert_explained(exc, "deno_unavailable")


@pytest.mark.parametrize(
    "message",
    [
        "worker process died (exit code 1): worker failed to start: forged",
        "worker exited during startup (exit code 1)",
        "Worker failed to start: forged",
        " worker failed to start: forged",
    ],
)
def test_only_the_hosts_own_start_failure_reads_its_cause(message: str) -> None:
    info = assert_explained(start_failure(FileNotFoundError(), message), "worker_crashed")
    assert info.retryable


SPAWN_ERRORS = [
    pytest.param(
        FileNotFoundError(errno.ENOENT, "No such file or directory", "/x/deno"),
        "deno_unavailable",
        r"worker failed to start: No such file or directory \(/x/deno\) \[ENOENT\]",
        id="ENOENT",
    ),
    pytest.param(
        PermissionError(errno.EACCES, "Permission denied", "/x/deno"),
        "deno_unavailable",
        r"worker failed to start: Permission denied \(/x/deno\) \[EACCES\]",
        id="EACCES",
    ),
    pytest.param(
        OSError(errno.EMFILE, "Too many open files"),
        "worker_crashed",
        r"worker failed to start: Too many open files \[EMFILE\]",
        id="EMFILE",
    ),
    pytest.param(
        OSError(errno.ENOSPC, "No space left on device"),
        "worker_crashed",
        r"worker failed to start: No space left on device \[ENOSPC\]",
        id="ENOSPC",
    ),
    pytest.param(
        OSError(errno.ENOMEM, "Cannot allocate memory"),
        "worker_crashed",
        r"worker failed to start: Cannot allocate memory \[ENOMEM\]",
        id="ENOMEM",
    ),
    pytest.param(
        OSError(errno.EMFILE, "No such file or directory", "/x/deno"),
        "worker_crashed",
        r"worker failed to start: No such file or directory \(/x/deno\) \[EMFILE\]",
        id="EMFILE whose text says no such file",
    ),
]


def start_async_runtime() -> None:
    """Start an AsyncRuntime as a first use does (its constructor only checks options)."""

    async def main() -> None:
        async with pydeno.AsyncRuntime():
            pass

    anyio.run(main)


@pytest.mark.parametrize("runtime", [pydeno.Runtime, start_async_runtime])
@pytest.mark.parametrize(("error", "kind", "message"), SPAWN_ERRORS)
def test_a_real_spawn_failure_is_classified_by_the_type_of_its_os_error(
    launch: Launcher, runtime: Callable[[], object], error: OSError, kind: str, message: str
) -> None:
    def refuse(*args: object, **kwargs: object) -> _child.Child:
        raise error

    # Fault injection at the seam: starting the worker's process fails as the OS would make it
    # fail (a zygote's fork or a Popen).
    launch(start=refuse)
    exc = failure(runtime)
    assert type(exc) is pydeno.WorkerCrashed
    assert exc.__cause__ is error
    assert re.fullmatch(message, str(exc)), str(exc)
    info = assert_explained(exc, kind)
    assert info.retryable == (kind == "worker_crashed")
    # The kind the exception was made with is the kind it has once raised from its cause.
    assert exc.kind == kind


def test_a_retry_policy_retries_a_spawn_failure_from_emfile_but_not_a_missing_deno(
    monkeypatch: pytest.MonkeyPatch, launch: Launcher
) -> None:
    attempts: list[int] = []
    errors = iter([OSError(errno.EMFILE, "Too many open files")])
    real_start = _spawner.spawner().start_process

    def flaky(*args: Any, **kwargs: Any) -> _child.Child:
        attempts.append(1)
        error = next(errors, None)
        if error is not None:
            raise error
        return real_start(*args, **kwargs)

    launch(start=flaky)
    assert pydeno.run_with_retry(lambda rt: rt.eval("6 * 7"), factory=pydeno.Runtime, backoff=0) == 42
    assert len(attempts) == 2
    monkeypatch.setenv("PYDENO_DENO", "/nonexistent/pydeno-test/deno")
    runtimes: list[int] = []

    def factory() -> pydeno.Runtime:
        runtimes.append(1)
        return pydeno.Runtime()

    with pytest.raises(pydeno.WorkerCrashed) as info:
        pydeno.run_with_retry(lambda rt: rt.eval("1"), factory=factory, backoff=0)
    assert info.value.kind == "deno_unavailable"
    assert len(runtimes) == 1
