"""stats() of runtimes and pools, the per-execution figures of ExecutionResult, and the log
records of workers that start, close and die: against real deno workers, sync and async."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import pydeno
from pydeno._base.stats import COMMON_KEYS, Stats, merge_dicts
from pydeno._cli.mcp_tool import OUTPUT_SCHEMA, refused

MiB = 1 << 20
# About a tenth of a second of CPU or more in the worker, whatever the machine's load: a fixed
# amount of work, not a span of wall time.
BUSY = "{ let x = 0; for (let i = 0; i < 2e7; i++) x += i; x }"
BIG = "globalThis.big = new Uint8Array(96 * 2 ** 20).fill(1); big.length"
POOL_KEYS = ("checkouts", "size", "max_workers", "idle", "live")


def pid_of(rt: Any) -> int:
    process = rt._sup.process
    assert process is not None
    return int(process.pid)


def kind_of(record: logging.LogRecord) -> Any:
    """The record's ``kind`` field (a handler reads it as record.kind)."""
    return record.__dict__.get("kind", "no kind field")


def assert_shape(stats: dict[str, Any]) -> None:
    assert list(stats)[: len(COMMON_KEYS)] == list(COMMON_KEYS)
    json.dumps(stats, allow_nan=False)
    assert set(stats["queue_wait_seconds"]) == {"count", "total", "max"}


@pytest.fixture(scope="module")
def shared() -> Iterator[pydeno.Runtime]:
    """One worker for the tests that only read figures off it."""
    with pydeno.Runtime() as rt:
        yield rt


# -- the arithmetic ----------------------------------------------------------------------------


def test_merging_stats_adds_counts_and_cpu_and_keeps_the_largest_peak_and_wait() -> None:
    a, b = Stats(), Stats()
    a.record_command(2)
    a.record_cpu(0.5)
    a.record_rss(10)
    a.record_worker_killed("timeout")
    a.record_queue_wait(0.25)
    b.record_command()
    b.record_host_calls(4)
    b.record_cpu(0.25)
    b.record_rss(30)
    b.record_worker_started(2)
    b.record_worker_killed("timeout")
    b.record_worker_killed("memory_limit")
    b.record_queue_wait(0.5)
    merged = a.copy().merge(b.as_dict())
    assert merged.as_dict() == {
        "commands": 3,
        "host_calls": 4,
        "cpu_seconds": 0.75,
        "peak_rss_bytes": 30,
        "workers_started": 2,
        "workers_killed": {"memory_limit": 1, "timeout": 2},
        "queue_wait_seconds": {"count": 2, "total": 0.75, "max": 0.5},
    }
    assert merge_dicts([a.as_dict(), b.as_dict()]) == merged.as_dict()
    assert a.as_dict()["commands"] == 2, "merging into a copy leaves the original as it was"


def test_a_stats_dict_from_another_object_merges_even_with_its_own_keys() -> None:
    pool_like = {**Stats().as_dict(), "commands": 5, "checkouts": 9, "size": 2}
    assert Stats().merge(pool_like).commands == 5
    assert Stats.from_dict({}).as_dict() == Stats().as_dict()


# -- Runtime -----------------------------------------------------------------------------------


def test_a_runtime_counts_its_commands_and_the_host_calls_it_answered(shared: pydeno.Runtime) -> None:
    before = shared.stats()
    shared.bind_function("twice", lambda x: 2 * x)
    assert shared.eval("(await twice(1)) + (await twice(2))") == 6
    with pytest.raises(pydeno.JavaScriptError):
        shared.eval("throw new Error('no')")
    shared.add_module("m", "export const one = 1")
    assert shared.eval_module("export { one } from 'm'") == {"one": 1}
    after = shared.stats()
    assert after["commands"] - before["commands"] == 5  # bind, two evals, add_module, eval_module
    assert after["host_calls"] - before["host_calls"] == 2
    assert after["workers_started"] == 1 and after["workers_killed"] == {}
    assert_shape(after)


def test_cpu_seconds_grow_with_a_busy_loop(shared: pydeno.Runtime) -> None:
    before = shared.stats()["cpu_seconds"]
    shared.eval(BUSY)
    after = shared.stats()["cpu_seconds"]
    assert after - before >= 0.05
    assert before > 0, "starting deno takes CPU too"


def test_peak_rss_grows_with_a_big_allocation(shared: pydeno.Runtime) -> None:
    before = shared.stats()["peak_rss_bytes"]
    assert before > 10 * MiB
    shared.eval(BIG)
    assert shared.stats()["peak_rss_bytes"] >= before + 64 * MiB
    shared.eval("delete globalThis.big")


def test_a_stats_dict_is_a_fresh_copy_each_call(shared: pydeno.Runtime) -> None:
    first = shared.stats()
    first["workers_killed"]["timeout"] = 99
    first["queue_wait_seconds"]["count"] = 99
    first["commands"] = -1
    second = shared.stats()
    assert second["workers_killed"] == {} and second["queue_wait_seconds"]["count"] == 0
    assert second["commands"] >= 0


def test_a_closed_runtime_keeps_its_figures_and_a_close_is_no_kill() -> None:
    rt = pydeno.Runtime()
    rt.eval(BUSY)
    live = rt.stats()
    rt.close()
    closed = rt.stats()
    assert closed["commands"] == live["commands"] == 1
    assert closed["cpu_seconds"] >= live["cpu_seconds"] > 0
    assert closed["peak_rss_bytes"] >= live["peak_rss_bytes"] > 0
    assert closed["workers_started"] == 1 and closed["workers_killed"] == {}
    assert rt.stats() == closed, "nothing is read from a closed runtime's worker"


def test_the_commands_the_host_runs_for_itself_are_not_counted() -> None:
    with pydeno.Runtime(random_seed=7, clock=0) as rt:
        rt.eval("1")
        assert rt.stats()["commands"] == 1


@pytest.mark.slow
def test_a_timeout_counts_its_worker_as_killed_under_timeout_and_logs_it(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="pydeno.runtime")
    rt = pydeno.Runtime(timeout=0.3)
    pid = pid_of(rt)
    with pytest.raises(pydeno.RuntimeTimeout):
        rt.eval("while (true) {}")
    rt.close()
    stats = rt.stats()
    assert stats["workers_killed"] == {"timeout": 1}
    assert stats["commands"] == 1
    assert stats["cpu_seconds"] >= 0.05, "the spinning worker's CPU up to its kill is kept"
    records = [r for r in caplog.records if r.name == "pydeno.runtime" and getattr(r, "pid", None) == pid]
    assert [(r.levelno, kind_of(r)) for r in records] == [(logging.DEBUG, None), (logging.WARNING, "timeout")]
    assert records[1].getMessage() == f"pydeno: worker {pid} was killed or died: timeout"


def test_a_memory_kill_is_counted_under_memory_limit() -> None:
    rt = pydeno.Runtime(max_memory=128 * MiB, timeout=20)
    with pytest.raises(pydeno.WorkerCrashed):
        rt.eval("const keep = []; while (true) keep.push(new Uint8Array(16 * 2 ** 20).fill(1))")
    assert rt.stats()["workers_killed"] == {"memory_limit": 1}


def test_a_worker_killed_from_outside_while_idle_counts_as_killed_at_close(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="pydeno.runtime")
    rt = pydeno.Runtime()
    rt.eval("1")
    pid = pid_of(rt)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while rt._steps.alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    rt.close()
    assert rt.stats()["workers_killed"] == {"worker_crashed": 1}
    kinds = [kind_of(r) for r in caplog.records if getattr(r, "pid", None) == pid and r.levelno == logging.WARNING]
    assert kinds == ["worker_crashed"]


def test_a_guest_death_is_logged_with_its_kind_and_none_of_the_guest_text(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="pydeno")
    secret = "guest-wrote-this-to-stderr"
    rt = pydeno.Runtime(timeout=10)
    with pytest.raises(pydeno.WorkerCrashed) as info:
        rt.eval(f"const fs = await import('node:fs'); fs.writeSync(2, '{secret}\\n'); fs.closeSync(1); 1")
    assert secret in str(info.value), "the exception carries it, after the host's prefix"
    assert rt.stats()["workers_killed"] == {"guest_crashed": 1}
    mine = [r for r in caplog.records if r.name in ("pydeno.runtime", "pydeno.pool")]
    warned = [r for r in mine if r.levelno >= logging.WARNING]
    assert [kind_of(r) for r in warned] == ["guest_crashed"]
    for record in mine:
        assert secret not in record.getMessage() and secret not in repr(record.__dict__)


def test_a_command_waiting_behind_another_threads_command_counts_a_queue_wait() -> None:
    with pydeno.Runtime() as rt:
        holding, release = threading.Event(), threading.Event()

        def hold() -> None:
            holding.set()
            release.wait(10)

        rt.bind_function("hold", hold)
        first = threading.Thread(target=rt.eval, args=("hold()",))
        first.start()
        assert holding.wait(10)
        threading.Timer(0.2, release.set).start()
        assert rt.eval("1") == 1  # behind the first command, which holds the runtime
        first.join()
        waits = rt.stats()["queue_wait_seconds"]
    assert waits["count"] == 1
    assert waits["total"] == waits["max"] > 0


def test_a_host_function_evaluating_on_its_own_runtime_is_no_queue_wait() -> None:
    with pydeno.Runtime() as rt:
        rt.bind_function("inner", lambda: rt.eval("40 + 1"))
        assert rt.eval("(await inner()) + 1") == 42
        stats = rt.stats()
    assert stats["queue_wait_seconds"]["count"] == 0
    assert stats["commands"] == 3 and stats["host_calls"] == 1  # bind, the outer and the inner eval


# -- AsyncRuntime ------------------------------------------------------------------------------


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_async_runtime_counts_commands_host_calls_cpu_and_queue_waits() -> None:
    rt = pydeno.AsyncRuntime()
    async with rt:
        assert rt.stats()["workers_started"] == 1

        async def inner() -> int:
            return int(await rt.eval("40 + 1"))

        holding, release = anyio.Event(), anyio.Event()

        async def hold() -> None:
            holding.set()
            await release.wait()

        async def let_go() -> None:
            await anyio.sleep(0.2)
            release.set()

        await rt.bind_function("inner", inner)
        await rt.bind_function("hold", hold)
        assert await rt.eval("(await inner()) + 1") == 42
        assert rt.stats()["queue_wait_seconds"]["count"] == 0, "re-entering from a host function waits for nothing"
        await rt.eval(BUSY)
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.eval, "hold()")
            await holding.wait()
            tg.start_soon(let_go)
            assert await rt.eval("1") == 1  # behind the task whose command holds the runtime
    stats = rt.stats()
    assert stats["commands"] == 7  # two binds, the outer and inner eval, the busy one, hold(), "1"
    assert stats["host_calls"] == 2
    assert stats["cpu_seconds"] >= 0.05
    assert stats["queue_wait_seconds"]["count"] == 1 and stats["queue_wait_seconds"]["max"] > 0
    assert stats["workers_killed"] == {}
    assert_shape(stats)


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_async_timeout_is_counted_under_timeout() -> None:
    rt = pydeno.AsyncRuntime(timeout=0.3)
    with pytest.raises(pydeno.RuntimeTimeout):
        await rt.eval("while (true) {}")
    await rt.close()
    assert rt.stats()["workers_killed"] == {"timeout": 1}


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_async_runtime_cancelled_mid_command_counts_its_worker_as_killed_cancelled() -> None:
    rt = pydeno.AsyncRuntime()
    await rt.eval("1")
    with anyio.move_on_after(0.3):
        await rt.eval("await new Promise(() => {})")
    await rt.close()
    assert rt.stats()["workers_killed"] == {"cancelled": 1}
    assert rt.stats()["commands"] == 2


# -- pools -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_pool_counts_checkouts_waits_and_the_figures_of_its_workers() -> None:
    with pydeno.SandboxPool(size=1, max_workers=1, checkout_timeout=30) as pool:
        deadline = time.monotonic() + 30
        while not pool._core.idle and time.monotonic() < deadline:
            time.sleep(0.01)
        held = threading.Event()
        release = threading.Event()

        def first() -> None:
            with pool.checkout() as rt:
                rt.eval(BUSY)
                held.set()
                release.wait(10)

        thread = threading.Thread(target=first)
        thread.start()
        assert held.wait(30)
        live = pool.stats()
        assert live["live"] == 1 and live["idle"] == 0
        assert live["cpu_seconds"] >= 0.05, "a checked-out worker's figures are read live"
        threading.Timer(0.2, release.set).start()
        with pool.checkout() as rt:  # waits for the cap to free up
            rt.bind_function("f", lambda: 1)
            rt.eval("f()")
        thread.join()
    stats = pool.stats()
    assert stats["checkouts"] == 2
    assert stats["commands"] == 3, "the pool's warm-up of each worker is not counted"
    assert stats["host_calls"] == 1
    assert stats["queue_wait_seconds"]["count"] == 1 and stats["queue_wait_seconds"]["total"] > 0
    assert stats["workers_started"] >= 2 and stats["workers_killed"] == {}
    assert stats["cpu_seconds"] >= live["cpu_seconds"]
    assert (stats["size"], stats["max_workers"]) == (1, 1)
    assert (stats["idle"], stats["live"]) == (0, 0), "read after close"
    assert_shape(stats)


def test_a_pool_checkout_that_times_out_is_a_queue_wait_too() -> None:
    with pydeno.SandboxPool(size=0, max_workers=1, checkout_timeout=0.2) as pool:
        with pool.checkout(timeout=30), pytest.raises(pydeno.CheckoutTimeout), pool.checkout():
            pass
        stats = pool.stats()
    assert stats["checkouts"] == 1
    assert stats["queue_wait_seconds"]["count"] == 2  # the cold first checkout waited too


def test_a_pool_counts_a_worker_it_lost_while_idle() -> None:
    with pydeno.SandboxPool(size=1) as pool:
        deadline = time.monotonic() + 30
        while not pool._core.idle and time.monotonic() < deadline:
            time.sleep(0.01)
        victim = pool._core.idle[0]
        os.kill(pid_of(victim), signal.SIGKILL)
        while victim._steps.alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        with pool.checkout() as rt:
            assert rt is not victim
            rt.eval("1")
        stats = pool.stats()
    assert stats["workers_killed"] == {"worker_crashed": 1}


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_async_pool_counts_checkouts_and_the_figures_of_its_workers() -> None:
    async with pydeno.AsyncSandboxPool(size=1) as pool:
        async with pool.checkout() as rt:
            await rt.eval(BUSY)
        async with pool.checkout() as rt:
            await rt.eval("1")
        stats = pool.stats()
    assert stats["checkouts"] == 2 and stats["commands"] == 2
    assert stats["cpu_seconds"] >= 0.05 and stats["workers_started"] >= 2
    assert all(key in stats for key in POOL_KEYS)
    assert_shape(stats)


# -- ExecutionResult ---------------------------------------------------------------------------


@pydeno.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@pytest.mark.slow
def test_an_execution_reports_the_cpu_rss_and_host_calls_of_its_own_run() -> None:
    with pydeno.CodeMode([add]) as cm:
        quick = cm.execute("await tools.add({ a: 1, b: 2 })")
        busy = cm.execute(f"{BUSY}; await tools.add({{ a: 1, b: 2 }}) + await tools.add({{ a: 3, b: 4 }})")
        failed = cm.execute("while (true) {}", timeout=0.3)
    assert quick.ok and quick.host_calls == 1 and 0 < quick.cpu_seconds < busy.cpu_seconds
    assert busy.ok and busy.host_calls == 2 and busy.cpu_seconds >= 0.05
    assert quick.peak_rss_bytes > 10 * MiB
    assert not failed.ok and failed.cpu_seconds >= 0.05 and failed.peak_rss_bytes > 10 * MiB
    data = busy.to_dict()
    assert (data["cpu_seconds"], data["peak_rss_bytes"], data["host_calls"]) == (
        busy.cpu_seconds,
        busy.peak_rss_bytes,
        2,
    )
    assert set(OUTPUT_SCHEMA["required"]) == set(data)
    assert "cpu" not in str(busy) and "rss" not in str(busy), "the model's text is unchanged"


def test_a_result_of_a_call_that_never_ran_reports_zero_figures() -> None:
    result = refused(ValueError("no code"))
    assert not result.ok
    assert (result.cpu_seconds, result.peak_rss_bytes, result.host_calls) == (0.0, 0, 0)
    assert result.to_dict()["peak_rss_bytes"] == 0


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_async_execution_reports_its_figures() -> None:
    async with pydeno.AsyncCodeMode([add]) as cm:
        result = await cm.execute(f"{BUSY}; await tools.add({{ a: 1, b: 2 }})")
    assert result.ok and result.host_calls == 1
    assert result.cpu_seconds >= 0.05 and result.peak_rss_bytes > 10 * MiB


@pytest.mark.slow
@pytest.mark.parametrize("pause", [0.0, 0.02, 0.05, 0.1])
def test_closing_a_pool_while_its_workers_start_logs_no_start_failure(
    caplog: pytest.LogCaptureFixture, pause: float
) -> None:
    caplog.set_level(logging.WARNING, logger="pydeno")
    for _ in range(3):
        pool = pydeno.SandboxPool(size=2)
        time.sleep(pause)
        pool.close()
    assert [r.getMessage() for r in caplog.records if "could not start" in r.getMessage()] == []
