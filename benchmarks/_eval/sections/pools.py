"""Pools: checkout, checkout + first eval (with, for ours, the wake floor beside each sample),
throughput, and (ours) the first eval from a pool whose workers were set up."""

from __future__ import annotations

import gc
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ..config import POOL_SIZE, SETUP_CODE, SETUP_MODULE, WARM_CODE
from ..context import Context
from ..floors import WakeFloor
from ..runtimes import WrongValue, make_pool, wait_pool_full


def checkouts(ctx: Context) -> None:
    # Checkout alone, and checkout + first eval, from a pool that is full each time. For
    # ours, each sample is followed by one of the wake floor's, after the same sleep.
    side, params = ctx.side, ctx.params
    pool = make_pool()
    workdir = Path(tempfile.mkdtemp(prefix="bench-wake-floor-"))
    wake: WakeFloor | None = None
    try:
        if ctx.ours:
            wake = WakeFloor(workdir)
        checkout_ns: list[int] = []
        first_ns: list[int] = []
        wake_ns: list[int] = []
        last_full: float | None = None
        for i in range(params.cold_warmup + params.cold_runs):
            full = wait_pool_full(side, pool)
            gc.collect()
            started = time.perf_counter()
            t0 = time.perf_counter_ns()
            with pool.checkout() as pooled:
                t1 = time.perf_counter_ns()
                value = pooled.eval(WARM_CODE)
                t2 = time.perf_counter_ns()
            if value != 2:
                raise WrongValue(f"pooled eval returned {value!r}")
            if i >= params.cold_warmup:
                checkout_ns.append(t1 - t0)
                first_ns.append(t2 - t0)
            if wake is not None:
                # The pool hands out its oldest idle worker: the one that was its newest,
                # ready just as it was last seen full. The echo sleeps as long.
                slept = started - last_full if last_full is not None else started - full
                spent = wake.round_trip_ns(slept)
                if i >= params.cold_warmup:
                    wake_ns.append(spent)
            last_full = full
        ctx.record("pool_checkout", checkout_ns)
        ctx.record("pool_first_eval", first_ns)
        if wake is not None:
            ctx.record("wake_floor", wake_ns)
        # Evals per second with POOL_SIZE runtimes from the pool, one thread each.
        wait_pool_full(side, pool)
        counts = [0] * POOL_SIZE
        stop = time.monotonic() + params.window_s

        def worker(slot: int) -> None:
            with pool.checkout() as mine:
                while time.monotonic() < stop:
                    mine.eval(WARM_CODE)
                    counts[slot] += 1

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(POOL_SIZE)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        total = sum(counts)
        # As time per eval (lower is better, like every other row), in ns for record().
        ctx.record("pool_throughput", [int(params.window_s * 1e9 / max(1, total))])
        ctx.result["pool_evals_per_second"] = round(total / params.window_s)
    finally:
        pool.close()
        if wake is not None:
            wake.close()
        shutil.rmtree(workdir, ignore_errors=True)


def pool_setup(ctx: Context) -> None:
    # Checkout + first eval from a full pool whose workers were set up (a module added,
    # a function bound, code evaluated), beside the same from a pool without setup=,
    # alternating sample by sample so that both see the same machine.
    import pydeno

    params = ctx.params

    def setup(rt: Any) -> None:
        rt.add_module("lib", SETUP_MODULE)
        rt.bind_function("add", lambda a, b: a + b)
        rt.eval(SETUP_CODE)

    pools: dict[str, Any] = {}
    try:
        pools["pool_first_eval_setup"] = pydeno.SandboxPool(size=POOL_SIZE, setup=setup)
        pools["pool_first_eval_plain"] = pydeno.SandboxPool(size=POOL_SIZE)
        samples: dict[str, list[int]] = {name: [] for name in pools}
        for i in range(params.cold_warmup + params.cold_runs):
            for name, pool in pools.items():
                for other in pools.values():
                    wait_pool_full(ctx.side, other)
                gc.collect()
                t0 = time.perf_counter_ns()
                with pool.checkout() as pooled:
                    value = pooled.eval(WARM_CODE)
                    t1 = time.perf_counter_ns()
                if value != 2:
                    raise WrongValue(f"pooled eval returned {value!r}")
                if i >= params.cold_warmup:
                    samples[name].append(t1 - t0)
        for name, taken in samples.items():
            ctx.record(name, taken)
    finally:
        for pool in pools.values():
            pool.close()
