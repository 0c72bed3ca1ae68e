"""Every limit, fired by a real hostile guest against a real deno worker.

Each test checks the exception type, the exact host-authored message, the error's kind, that
a limit which kills the worker leaves the runtime closed, and (through ``host_unharmed``
and the leak guard in conftest) that the host keeps no worker process and no extra thread.
"""

from __future__ import annotations

import asyncio
import gc
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import psutil
import pytest

import pydeno
from pydeno.host.process import spawner

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

MiB = 2**20
BLOB_WORKER = (
    "new Worker(URL.createObjectURL(new Blob(['setInterval(() => {}, 1000)'], "
    "{type: 'application/javascript'})), {type: 'module'})"
)


def _host_threads() -> int:
    # Trio's idle worker-thread cache retires itself; it is not anything pydeno started. The
    # spawner thread is the process's own, kept with the zygote between runtimes.
    kept = spawner.infrastructure().threads
    return sum(1 for t in threading.enumerate() if not t.name.startswith("Trio thread") and t.ident not in kept)


def _children() -> list[psutil.Process]:
    """Every process below this one (a confined worker is the zygote's child) but the zygote."""
    kept = spawner.infrastructure().processes
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in kept]


# A hostile guest may cost the host some allocator slack, never its own bomb's worth.
HOST_RSS_SLACK = 64 * 2**20


@pytest.fixture(autouse=True)
def host_unharmed() -> Iterator[None]:
    """After each test the host has no deno child left, its thread count is back, and its
    own memory did not grow by anything like what the guest tried to allocate."""
    threads = _host_threads()
    rss = psutil.Process().memory_info().rss
    yield
    if psutil.Process().memory_info().rss - rss >= HOST_RSS_SLACK:
        # Only then: what the test dropped in a cycle is not the guest's doing. A collection
        # after every test would cost more than most of them, late in a run.
        gc.collect()
        assert psutil.Process().memory_info().rss - rss < HOST_RSS_SLACK
    deadline = time.monotonic() + 5.0
    # The monitor thread exits by itself one sampling period after its last worker goes.
    while (_host_threads() > threads or _children()) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert _children() == []
    assert _host_threads() == threads


def assert_kind(exc: BaseException, kind: str, *, via_agent: bool = False) -> None:
    assert pydeno.classify_error(exc, via_agent=via_agent).kind == kind


def assert_message(exc: BaseException, pattern: str) -> re.Match[str]:
    """str(exc) matches pattern whole. (pytest.raises(match=) also sees the PEP 678 notes
    pydeno adds, so it cannot anchor at the end of the host's message.)"""
    found = re.fullmatch(pattern, str(exc))
    assert found, f"{str(exc)!r} does not match {pattern!r}"
    return found


def assert_closed(rt: pydeno.Runtime) -> None:
    assert rt.closed
    with pytest.raises(RuntimeError, match=r"^runtime is closed\nKind: closed "):
        rt.eval("1")


def worker_pid(rt: pydeno.Runtime | pydeno.AsyncRuntime) -> int:
    process = rt._sup.process
    assert process is not None
    return process.pid


def wait_for_command(rt: pydeno.Runtime | pydeno.AsyncRuntime) -> None:
    """Wait until rt has a command in flight, then a little longer so the worker runs it."""
    deadline = time.monotonic() + 10
    while not rt._sup.in_command and time.monotonic() < deadline:
        time.sleep(0.005)
    assert rt._sup.in_command
    time.sleep(0.3)


def sleeper(seconds: float) -> Callable[[], float]:
    def sleep() -> float:
        time.sleep(seconds)
        return seconds

    return sleep


# -- timeout -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "code",
    [
        pytest.param("while (true) {}", id="an infinite loop"),
        pytest.param("await new Promise(() => {})", id="an awaited promise that never settles"),
        pytest.param("new Promise(() => {})", id="a returned promise that never settles"),
        pytest.param(
            "(function f() { Promise.resolve().then(f) })(); await new Promise(() => {})",
            id="an infinite microtask loop",
        ),
        # Awaiting a promise nothing references while the garbage collector runs once made
        # deno panic (an inspector session, used then, reported it from inside the GC).
        pytest.param(
            "setInterval(() => { for (let i = 0; i < 1e5; i++) ({a: [i]}) }, 5); await new Promise(() => {})",
            id="an unreachable awaited promise while a timer allocates",
        ),
    ],
)
def test_guest_code_that_never_finishes_is_killed_at_its_timeout(code: str) -> None:
    with pydeno.Runtime(timeout=0.5) as rt:
        started = time.monotonic()
        with pytest.raises(pydeno.RuntimeTimeout) as info:
            rt.eval(code)
        assert_message(info.value, r"command exceeded timeout=0\.5s; worker killed")
        assert 0.5 <= time.monotonic() - started < 3.0
        assert_kind(info.value, "timeout")
        assert_closed(rt)


def test_time_spent_in_a_host_function_is_not_charged_to_the_timeout() -> None:
    with pydeno.Runtime(timeout=0.5) as rt:
        rt.bind_function("slow", sleeper(0.8))
        assert rt.eval("await slow()") == 0.8
        assert rt.eval("1") == 1


def test_a_busy_loop_after_a_host_call_still_hits_the_timeout_later_by_the_host_call_time() -> None:
    with pydeno.Runtime(timeout=1.0) as rt:
        rt.bind_function("slow", sleeper(0.3))
        started = time.monotonic()
        with pytest.raises(pydeno.RuntimeTimeout) as info:
            rt.eval("await slow(); while (true) {}")
        assert_message(info.value, r"command exceeded timeout=1\.0s; worker killed")
        # The deadline moved later by the 0.3 s the host function took.
        assert time.monotonic() - started >= 1.3
        assert_kind(info.value, "timeout")
        assert_closed(rt)


# -- cpu_limit -----------------------------------------------------------------------------
def test_a_busy_loop_over_the_cpu_limit_is_killed_before_its_wall_clock_timeout() -> None:
    with pydeno.Runtime(cpu_limit=0.5, timeout=10) as rt:
        cpu = psutil.Process(worker_pid(rt)).cpu_times()
        before = cpu.user + cpu.system
        watch = rt._sup.watch
        assert watch is not None
        started = time.monotonic()
        with pytest.raises(pydeno.RuntimeTimeout) as info:
            rt.eval("while (true) {}")
        assert_message(info.value, r"worker used more than 0\.5s of CPU in one command and was killed")
        assert time.monotonic() - started < 5.0
        # The monitor's last sample is the one that convicted.
        used = watch.last_cpu - before
        print(f"cpu_limit=0.5: the worker had used {used:.3f}s of CPU in the command when killed")
        assert 0.5 < used < 1.5
        assert_kind(info.value, "cpu_limit")
        assert_closed(rt)


def test_cpu_is_charged_per_command_so_short_commands_may_add_up_past_the_cap() -> None:
    with pydeno.Runtime(cpu_limit=0.5, timeout=10) as rt:
        rt.eval("function spin(ms) { const end = Date.now() + ms; while (Date.now() < end) {} return ms }")
        worker = psutil.Process(worker_pid(rt))
        before = sum(worker.cpu_times()[:2])
        commands = 0
        # Each command spins for 150 ms of wall-clock time, so at most that much CPU; go on
        # until the commands together have used well over the cap (however loaded the host).
        while sum(worker.cpu_times()[:2]) - before < 0.7 and commands < 40:
            assert rt.eval("spin(150)") == 150
            commands += 1
        assert sum(worker.cpu_times()[:2]) - before > 0.5
        assert not rt.closed


# -- max_memory ---------------------------------------------------------------------------
def test_a_heap_bomb_is_stopped_by_the_memory_limit() -> None:
    limit = 128 * MiB
    with pydeno.Runtime(max_memory=limit, timeout=30) as rt:
        with pytest.raises(pydeno.WorkerCrashed) as info:
            rt.eval("const a = []; while (true) a.push({x: Math.random(), s: 'y'.repeat(100)})")
        message = str(info.value)
        rss = re.fullmatch(rf"worker used (\d+) bytes, over max_memory={limit}; killed", message)
        heap = re.fullmatch(
            rf"worker ran out of its V8 heap \(sized from max_memory={limit}\) and was stopped", message
        )
        assert rss or heap, message
        process = rt._sup.process
        assert process is not None
        if rss:
            # The host's resident-memory kill: it reports what it measured, over the limit.
            overshoot = int(rss.group(1)) - limit
            print(f"heap bomb, max_memory={limit}: killed at {overshoot} bytes ({overshoot / MiB:.1f} MiB) over")
            assert overshoot > 0
            assert process.popen.returncode == -signal.SIGKILL
        else:
            # V8's own fatal exit on its heap limit.
            print(f"heap bomb, max_memory={limit}: V8 ran out of its heap first")
            assert process.popen.returncode == -signal.SIGTRAP
        assert_kind(info.value, "memory_limit")
        assert_closed(rt)


def test_memory_outside_the_v8_heap_is_caught_by_the_resident_memory_limit() -> None:
    limit = 256 * MiB
    with pydeno.Runtime(max_memory=limit, timeout=30) as rt:
        with pytest.raises(pydeno.WorkerCrashed) as info:
            rt.eval("const keep = []; while (true) keep.push(new Uint8Array(16 * 2**20).fill(1))")
        found = assert_message(info.value, rf"worker used (\d+) bytes, over max_memory={limit}; killed")
        overshoot = int(found.group(1)) - limit
        print(f"ArrayBuffer bomb, max_memory={limit}: killed at {overshoot} bytes ({overshoot / MiB:.1f} MiB) over")
        assert 0 < overshoot < 512 * MiB
        assert_kind(info.value, "memory_limit")
        assert_closed(rt)


def test_string_doubling_ends_in_a_range_error_or_a_memory_kill() -> None:
    with pydeno.Runtime(max_memory=256 * MiB, timeout=30) as rt:
        with pytest.raises((pydeno.JavaScriptError, pydeno.WorkerCrashed)) as info:
            rt.eval("let s = 'x'; while (true) s += s")
        if isinstance(info.value, pydeno.JavaScriptError):
            assert_message(info.value, r"Evaluation failed: RangeError: Invalid string length")
            assert_kind(info.value, "js_error")
            assert rt.eval("1 + 1") == 2
        else:
            assert_message(
                info.value,
                r"worker used \d+ bytes, over max_memory=268435456; killed"
                r"|worker ran out of its V8 heap \(sized from max_memory=268435456\) and was stopped",
            )
            assert_kind(info.value, "memory_limit")
            assert_closed(rt)


# -- max_threads ----------------------------------------------------------------------------
def test_a_web_worker_can_start_and_answer_within_the_thread_limit() -> None:
    with pydeno.Runtime(timeout=10) as rt:
        code = (
            "const w = new Worker('data:application/javascript,postMessage(6 * 7)', {type: 'module'});"
            "const v = await new Promise(r => { w.onmessage = e => r(e.data) }); w.terminate(); v"
        )
        assert rt.eval(code) == 42


@pytest.mark.parametrize(("workers", "max_threads"), [(200, 64), (10, 20)])
def test_a_guest_that_starts_many_web_workers_is_killed_at_the_thread_limit(workers: int, max_threads: int) -> None:
    with pydeno.Runtime(timeout=20, max_threads=max_threads) as rt:
        with pytest.raises(pydeno.WorkerCrashed) as info:
            rt.eval(f"for (let i = 0; i < {workers}; i++) {BLOB_WORKER}; await new Promise(() => {{}})")
        found = assert_message(info.value, rf"worker started (\d+) threads \(limit {max_threads}\); killed")
        assert int(found.group(1)) > max_threads
        assert_kind(info.value, "thread_limit")
        assert_closed(rt)


# -- host calls -----------------------------------------------------------------------------
def test_more_host_calls_than_max_host_calls_kill_the_worker() -> None:
    calls = []
    with pydeno.Runtime(max_host_calls=100) as rt:
        rt.bind_function("f", lambda: calls.append(1))
        with pytest.raises(pydeno.WorkerCrashed) as info:
            rt.eval("for (let i = 0; i < 150; i++) await f()")
        assert_message(info.value, r"guest made more than max_host_calls=100 host calls")
        assert len(calls) == 100
        assert_kind(info.value, "host_call_budget")
        assert_closed(rt)


def test_the_host_call_budget_spans_the_runtimes_life_not_one_command() -> None:
    with pydeno.Runtime(max_host_calls=100) as rt:
        rt.bind_function("f", lambda: 1)
        assert rt.eval("let n = 0; for (let i = 0; i < 60; i++) n += await f(); n") == 60
        with pytest.raises(pydeno.WorkerCrashed) as info:
            rt.eval("for (let i = 0; i < 60; i++) await f()")
        assert_message(info.value, r"guest made more than max_host_calls=100 host calls")
        assert_kind(info.value, "host_call_budget")
        assert_closed(rt)


def test_too_many_concurrent_host_calls_are_refused_with_a_javascript_error() -> None:
    with pydeno.Runtime(max_inflight_host_calls=32) as rt:
        rt.bind_function("f", lambda: 1)
        with pytest.raises(pydeno.JavaScriptError) as info:
            rt.eval("await Promise.all(Array.from({length: 100}, () => f()))")
        assert_message(info.value, r"Evaluation failed: Error: more than 32 host calls in flight")
        assert_kind(info.value, "inflight_limit")
        assert not rt.closed
        assert rt.eval("await f()") == 1


def test_the_guest_can_catch_the_in_flight_refusal_and_carry_on() -> None:
    with pydeno.Runtime(max_inflight_host_calls=32) as rt:
        rt.bind_function("f", lambda: 1)
        code = "try { await Promise.all(Array.from({length: 100}, () => f())) } catch (e) { e.message }"
        assert rt.eval(code) == "more than 32 host calls in flight"
        assert rt.eval("(await Promise.all(Array.from({length: 32}, () => f()))).length") == 32


def test_a_host_function_slower_than_max_host_wait_gets_the_worker_killed() -> None:
    seen: dict[str, Any] = {}
    with pydeno.Runtime(max_host_wait=0.3, timeout=10) as rt:
        pid = worker_pid(rt)

        def slow() -> str:
            time.sleep(1.0)
            # The monitor killed the worker while this function was still running.
            try:
                seen["status"] = psutil.Process(pid).status()
            except psutil.NoSuchProcess:
                seen["status"] = "gone"
            return "late"

        rt.bind_function("slow", slow)
        with pytest.raises(pydeno.RuntimeTimeout) as info:
            rt.eval("await slow()")
        assert_message(
            info.value,
            (
                r"host callbacks kept the guest waiting for more than 0\.3s in one command \(max_host_wait\); "
                r"worker killed"
            ),
        )
        assert seen["status"] in (psutil.STATUS_ZOMBIE, "gone")
        assert_kind(info.value, "host_wait")
        assert_kind(info.value, "max_pause", via_agent=True)
        assert_closed(rt)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_async_host_function_that_never_returns_ends_the_command_at_max_host_wait(backend: str) -> None:
    cancelled = []

    async def forever() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.append(True)

    async def main() -> None:
        async with pydeno.AsyncRuntime(max_host_wait=0.3, timeout=10) as rt:
            await rt.bind_function("forever", forever)
            with pytest.raises(pydeno.RuntimeTimeout) as info:
                await rt.eval("await forever()")
            assert_kind(info.value, "host_wait")
            assert rt.closed

    anyio.run(main, backend=backend)
    assert cancelled == [True]


def test_a_sync_runtimes_async_host_function_that_never_returns_ends_the_command_at_max_host_wait() -> None:
    async def forever() -> None:
        await asyncio.sleep(3600)

    with pydeno.Runtime(max_host_wait=0.3, timeout=10) as rt:
        rt.bind_function("forever", forever)
        with pytest.raises(pydeno.RuntimeTimeout) as info:
            rt.eval("await forever()")
        assert_kind(info.value, "host_wait")
        assert_closed(rt)


async def never_answers(query: str) -> str:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


@pytest.mark.parametrize("how", ["execute", "start"])
def test_an_async_code_mode_tool_that_never_returns_ends_the_program_at_max_host_wait(how: str) -> None:
    async def main() -> None:
        async with pydeno.AsyncCodeMode([pydeno.Tool("search", never_answers)], max_host_wait=0.3) as cm:
            result = await getattr(cm, how)("await tools.search({query: 'x'})")
            assert isinstance(result, pydeno.ExecutionResult)
            assert not result.ok
            assert result.error is not None and result.error["kind"] == "host_wait"
            again = await cm.execute("1 + 1")
            assert again.ok and again.value == 2

    anyio.run(main)


def test_an_async_agent_tool_that_never_returns_ends_the_run_at_max_pause() -> None:
    async def main() -> None:
        async with pydeno.AsyncAgentSandbox({"search": never_answers}, max_pause=0.3) as agent:
            with pytest.raises(pydeno.RuntimeTimeout) as info:
                await agent.run("await tools.search('x')")
            assert_kind(info.value, "max_pause", via_agent=True)

    anyio.run(main)


def test_an_async_host_function_that_raises_timeout_error_itself_is_the_guests_error() -> None:
    async def gives_up() -> None:
        raise TimeoutError("upstream took too long")

    with pydeno.Runtime(max_host_wait=5, timeout=10, expose_host_errors=True) as rt:
        rt.bind_function("gives_up", gives_up)
        assert (
            rt.eval("try { await gives_up() } catch (e) { e.message }")
            == "host function gives_up() failed on the host (TimeoutError): upstream took too long"
        )


# -- console --------------------------------------------------------------------------------
NOTICE = "pydeno: console output went over max_console_bytes=100000 in this command; the rest is dropped"


def _split(received: list[tuple[str, str]]) -> tuple[int, list[tuple[str, str]]]:
    """Characters of guest text received, and the host's notices."""
    notices = [(level, text) for level, text in received if text.startswith("pydeno: ")]
    guest = sum(len(text) for _, text in received if not text.startswith("pydeno: "))
    return guest, notices


def test_an_endless_console_flood_is_capped_and_the_command_still_times_out() -> None:
    received: list[tuple[str, str]] = []
    options: dict[str, Any] = {"timeout": 1.0, "max_console_bytes": 100_000}
    with pydeno.Runtime(**options, on_console=lambda level, text: received.append((level, text))) as rt:
        with pytest.raises(pydeno.RuntimeTimeout) as info:
            rt.eval("for (;;) console.log('x'.repeat(1000))")
        assert_message(info.value, r"command exceeded timeout=1\.0s; worker killed")
        guest, notices = _split(received)
        assert guest <= 100_000
        assert len(notices) == 1
        assert notices[0][0] == "warn"
        assert notices[0][1] == NOTICE
        assert_kind(info.value, "timeout")
        assert_closed(rt)


def test_a_finite_console_flood_is_capped_per_command_and_returns_its_value() -> None:
    received: list[tuple[str, str]] = []
    handler = lambda level, text: received.append((level, text))  # noqa: E731
    with pydeno.Runtime(timeout=10, max_console_bytes=100_000, on_console=handler) as rt:
        for _ in range(2):
            received.clear()
            assert rt.eval("for (let i = 0; i < 1000; i++) console.log('x'.repeat(1000)); 'done'") == "done"
            guest, notices = _split(received)
            assert 0 < guest <= 100_000
            assert [text for _, text in notices] == [NOTICE]


# -- max_message_bytes --------------------------------------------------------------------
def test_a_result_over_max_message_bytes_is_a_javascript_error_and_the_runtime_survives() -> None:
    with pydeno.Runtime() as rt:
        with pytest.raises(pydeno.JavaScriptError) as info:
            rt.eval("'x'.repeat(500 * 2**20)")
        assert_message(
            info.value,
            (
                r"Evaluation failed: RangeError: result could not be converted: value is larger than "
                r"max_message_bytes=67108864 when encoded"
            ),
        )
        assert_kind(info.value, "js_error")
        assert rt.eval("'still here'") == "still here"


# -- terminate --------------------------------------------------------------------------------
FORCE_KILLED = r"worker did not acknowledge termination within terminate_grace=0\.5s; killed"
TERMINATED = r"runtime was terminated on request"
TERMINATIONS = [
    pytest.param("while (true) {}", pydeno.RuntimeForceKilled, FORCE_KILLED, "force_killed", id="busy loop"),
    pytest.param("await new Promise(() => {})", pydeno.RuntimeTerminated, TERMINATED, "terminated", id="await"),
]


@pytest.mark.parametrize(("code", "error", "message", "kind"), TERMINATIONS)
def test_terminate_from_another_thread_stops_the_running_eval(
    code: str, error: type[Exception], message: str, kind: str
) -> None:
    outcome: list[BaseException] = []
    with pydeno.Runtime(terminate_grace=0.5, timeout=20) as rt:

        def run() -> None:
            try:
                rt.eval(code)
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                outcome.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        wait_for_command(rt)
        rt.terminate()
        thread.join(timeout=10)
        assert not thread.is_alive()
        assert len(outcome) == 1
        assert isinstance(outcome[0], error)
        assert_message(outcome[0], message)
        assert_kind(outcome[0], kind)
        assert_closed(rt)


@pytest.mark.parametrize("seconds", [0.2, 1.0], ids=["within the grace", "past the grace"])
def test_terminate_during_a_host_call_is_acknowledged_even_if_the_host_function_runs_on(seconds: float) -> None:
    # The worker acknowledges and exits at once; the driver only learns of it once the host
    # function returns and its answer meets a closed pipe.
    entered = threading.Event()
    outcome: list[BaseException] = []
    with pydeno.Runtime(terminate_grace=0.5, timeout=20) as rt:

        def slow() -> int:
            entered.set()
            time.sleep(seconds)
            return 1

        rt.bind_function("slow", slow)

        def run() -> None:
            try:
                rt.eval("await slow()")
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                outcome.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        assert entered.wait(10)
        rt.terminate()
        thread.join(timeout=10)
        assert not thread.is_alive()
        assert len(outcome) == 1
        assert isinstance(outcome[0], pydeno.RuntimeTerminated)
        assert_message(outcome[0], TERMINATED)
        assert_kind(outcome[0], "terminated")
        assert_closed(rt)


def test_terminate_with_no_command_running_just_closes_the_runtime() -> None:
    with pydeno.Runtime() as rt:
        assert rt.eval("1") == 1
        rt.terminate()
        assert_closed(rt)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.mark.anyio
@pytest.mark.parametrize(("code", "error", "message", "kind"), TERMINATIONS)
async def test_terminate_from_another_task_stops_the_running_async_eval(
    code: str, error: type[Exception], message: str, kind: str
) -> None:
    outcome: list[BaseException] = []
    async with pydeno.AsyncRuntime(terminate_grace=0.5, timeout=20) as rt:

        async def run() -> None:
            try:
                await rt.eval(code)
            except Exception as exc:  # noqa: BLE001 - handed to the test task
                outcome.append(exc)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                while not rt._sup.in_command:
                    await anyio.sleep(0.005)
                await anyio.sleep(0.3)
                rt.terminate()
        assert len(outcome) == 1
        assert isinstance(outcome[0], error)
        assert_message(outcome[0], message)
        assert_kind(outcome[0], kind)
        assert rt.closed
        with pytest.raises(RuntimeError, match=r"^runtime is closed\nKind: closed "):
            await rt.eval("1")


@pytest.mark.anyio
async def test_terminate_during_an_async_host_call_is_acknowledged() -> None:
    entered = anyio.Event()

    async def slow() -> int:
        entered.set()
        await anyio.sleep(1.0)
        return 1

    async with pydeno.AsyncRuntime(terminate_grace=0.5, timeout=20) as rt:
        await rt.bind_function("slow", slow)
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:

                async def terminate() -> None:
                    await entered.wait()
                    rt.terminate()

                tg.start_soon(terminate)
                with pytest.raises(pydeno.RuntimeTerminated) as info:
                    await rt.eval("await slow()")
        assert_message(info.value, TERMINATED)
        assert_kind(info.value, "terminated")
        assert rt.closed


@pytest.mark.anyio
async def test_terminate_with_no_async_command_running_just_closes_the_runtime() -> None:
    async with pydeno.AsyncRuntime() as rt:
        assert await rt.eval("1") == 1
        rt.terminate()
        assert rt.closed
        with pytest.raises(RuntimeError, match=r"^runtime is closed\nKind: closed "):
            await rt.eval("1")


# -- argument validation --------------------------------------------------------------------
def _case(name: str, value: Any, error: type[Exception], message: str) -> Any:
    return pytest.param(name, value, error, message, id=f"{name}={value!r}")


def _seconds(name: str, *, none: bool) -> list[Any]:
    wrong_type = rf"{name} must be a number of seconds{' or None' if none else ''}, got "
    bad_value = rf"{name} must be a positive, finite number of seconds, got "
    wrong: list[Any] = ["1", True] if none else ["1", True, None]
    return [
        *(_case(name, value, TypeError, wrong_type + type(value).__name__) for value in wrong),
        *(
            _case(name, value, ValueError, bad_value + re.escape(repr(value)))
            for value in (0, -1, -0.5, float("nan"), float("inf"))
        ),
    ]


def _count(name: str, minimum: int, *, none: bool) -> list[Any]:
    wrong_type = rf"{name} must be an int{' or None' if none else ''}, got "
    wrong: list[Any] = ["1", True, 1.5] if none else ["1", True, 1.5, None]
    return [
        *(_case(name, value, TypeError, wrong_type + type(value).__name__) for value in wrong),
        _case(name, minimum - 1, ValueError, rf"{name} must be at least {minimum}, got {minimum - 1}"),
    ]


def _size(name: str, minimum: int) -> list[Any]:
    wrong_type = rf"{name} must be an int of bytes or a size as a str \(268435456, '256M', '1.5G'\), got "
    return [
        *(_case(name, value, TypeError, wrong_type + type(value).__name__) for value in (True, 1.5, None)),
        _case(name, "256 apples", ValueError, rf"{name}='256 apples' is not a size: give a whole number of bytes.*"),
        _case(name, minimum - 1, ValueError, rf"{name} must be at least {minimum}, got {minimum - 1}"),
    ]


INVALID_OPTIONS = [
    *_seconds("cpu_limit", none=True),
    *_count("max_threads", 1, none=True),
    *_count("max_host_calls", 0, none=True),
    *_seconds("max_host_wait", none=True),
    *_count("max_inflight_host_calls", 1, none=False),
    *_size("max_console_bytes", 0),
    *_count("max_decode_ratio", 1, none=False),
    *_seconds("terminate_grace", none=False),
]


@pytest.mark.parametrize("runtime", [pydeno.Runtime, pydeno.AsyncRuntime])
@pytest.mark.parametrize(("option", "value", "error", "message"), INVALID_OPTIONS)
def test_a_limit_option_of_the_wrong_type_or_value_is_refused_before_a_worker_starts(
    runtime: Callable[..., Any], option: str, value: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        runtime(**{option: value})
    assert type(info.value) is error
    assert_message(info.value, message)
    assert _children() == []
