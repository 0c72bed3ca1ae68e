"""The warm runtime's sections: one runtime, started by warm_eval, measured warm by the
sections after it, closed by close."""

from __future__ import annotations

import gc
import shutil
import tempfile
import time
from pathlib import Path

from _common.cpu import by_thread_name, cpu_used
from _common.procfs import process_rss

from ..config import AWAIT_CODE, HOST_CALL_AWAIT_CODE, HOST_CALL_CODE, NEW_CODE_AWAIT, NEW_CODE_PLAIN, WARM_CODE
from ..context import Context
from ..floors import EchoFloor
from ..runtimes import WrongValue, add, time_evals


def warm_eval(ctx: Context) -> None:
    ctx.warm = rt = ctx.make()
    rt.bind_function("add", add)
    # JSON only: our worker's RSS keeps rising with the number of evals until V8's next
    # major GC, so the post-warm-up figure alone depends on how long the loops were.
    ctx.result["rss_at_start"] = process_rss()
    time_evals(rt, WARM_CODE, 2, ctx.params.warmup)
    gc.collect()
    ctx.record("warm_eval", time_evals(rt, WARM_CODE, 2, ctx.params.iterations))
    if ctx.ours:
        ctx.record("echo_floor", echo_round_trips(ctx.params.warmup, ctx.params.iterations))


def echo_round_trips(warmup: int, iterations: int) -> list[int]:
    """The floor of a warm eval (floors.EchoFloor), as many round trips as the eval's."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-echo-floor-"))
    try:
        echo = EchoFloor(workdir)
        try:
            for _ in range(warmup):
                echo.round_trip_ns()
            gc.collect()
            return [echo.round_trip_ns() for _ in range(iterations)]
        finally:
            echo.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def warm_eval_unmonitored(ctx: Context) -> None:
    # Ours only: the same warm loop with no resource limit, so the monitor thread never
    # samples this worker; the difference to warm_eval is the monitoring overhead.
    import pydeno

    try:
        from pydeno.host.process.monitor import Watch
    except ImportError:  # an older layout
        from pydeno.host._monitor import Watch  # type: ignore[import-not-found, no-redef]

    with pydeno.Runtime(max_memory=None, max_threads=None, cpu_limit=None) as quiet:
        time_evals(quiet, WARM_CODE, 2, ctx.params.warmup)
        gc.collect()
        ctx.record("warm_eval_unmonitored", time_evals(quiet, WARM_CODE, 2, ctx.params.iterations))
        process = quiet._sup.process
        assert process is not None
        watch = Watch(pid=process.pid, max_memory=1 << 40, max_threads=1 << 20, cpu_limit=None)
        t0 = time.perf_counter_ns()
        for _ in range(200):
            watch.sample()
        ctx.result["monitor_sample_us"] = round((time.perf_counter_ns() - t0) / 200 / 1000, 1)


def host_call(ctx: Context) -> None:
    rt = ctx.warm_runtime()
    time_evals(rt, HOST_CALL_CODE, 3, ctx.params.warmup)
    gc.collect()
    ctx.record("host_call", time_evals(rt, HOST_CALL_CODE, 3, ctx.params.iterations))


def await_forms(ctx: Context) -> None:
    # Ours only (the peer's eval has no top-level await): a host call as the README writes
    # it, and an eval that awaits, on the warm runtime.
    rt = ctx.warm_runtime()
    for name, code, expected in (("host_call_await", HOST_CALL_AWAIT_CODE, 3), ("await_eval", AWAIT_CODE, 2)):
        time_evals(rt, code, expected, ctx.params.warmup)
        gc.collect()
        ctx.record(name, time_evals(rt, code, expected, ctx.params.iterations))
    # Code new at every eval, as an agent's is: what the rewrite of code with await costs
    # over a plain eval of the same program (each is compiled anew either way).
    n = ctx.params.iterations // 4
    for name, code in (("new_code_await", NEW_CODE_AWAIT), ("new_code_plain", NEW_CODE_PLAIN)):
        time_evals(rt, code, 2, ctx.params.warmup, first=0)
        gc.collect()
        ctx.record(name, time_evals(rt, code, 2, n, first=ctx.params.warmup))


def cpu_per_eval(ctx: Context) -> None:
    # The kernel's count of CPU time, the host's threads and the workers' together, over
    # the same warm loop: what an eval costs the machine, not only the caller's wait.
    rt = ctx.warm_runtime()
    n = ctx.params.iterations
    run = rt.eval

    def loop() -> None:
        for i in range(n):
            value = run(WARM_CODE)
            if value != 2:
                raise WrongValue(f"eval({WARM_CODE!r}) returned {value!r} (iteration {i})")

    loop()  # the warm-up: the first evals after another loop still settle
    gc.collect()
    used = cpu_used(loop)
    total = used["host_ns"] + used["workers_ns"] + used["shared_ns"]
    ctx.result["cpu_per_eval"] = {
        "evals": n,
        "us": round(total / n / 1e3, 3),
        "host_us": round(used["host_ns"] / n / 1e3, 3),
        "worker_us": round(used["workers_ns"] / n / 1e3, 3),
        "shared_us": round(used["shared_ns"] / n / 1e3, 3),
        "wall_us": round(used["wall_ns"] / n / 1e3, 3),
        "host_threads_us": {
            name: round(ns / n / 1e3, 3) for name, ns in by_thread_name(used["host_threads_ns"]).items()
        },
        "worker_processes": used["worker_processes"],
        "unaccounted_exits": used["unaccounted_exits"],
    }


def async_driver(ctx: Context) -> None:
    # Ours only: the same two loops through AsyncRuntime under asyncio, so the sync
    # driver's cost is seen apart from the async one's (both sit on the same sans-IO
    # core; neither wraps the other).
    import asyncio

    import pydeno

    params = ctx.params

    async def loops() -> None:
        async with pydeno.AsyncRuntime() as art:
            await art.bind_function("add", lambda a, b: a + b)
            for name, code, expected in (("warm_eval_async", WARM_CODE, 2), ("host_call_async", HOST_CALL_CODE, 3)):
                for _ in range(params.warmup):
                    await art.eval(code)
                gc.collect()
                samples: list[int] = []
                clock = time.perf_counter_ns
                for _ in range(params.iterations):
                    t0 = clock()
                    value = await art.eval(code)
                    samples.append(clock() - t0)
                    if value != expected:
                        raise WrongValue(f"async eval({code!r}) returned {value!r}, expected {expected!r}")
                ctx.record(name, samples)

    asyncio.run(loops())


def rss(ctx: Context) -> None:
    ctx.warm_runtime()
    gc.collect()
    ctx.result["rss"] = process_rss()


def close(ctx: Context) -> None:
    if ctx.warm is not None:
        ctx.warm.close()
