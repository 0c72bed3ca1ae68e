"""Warm evals per second with many runtimes driven at once: by threads, or by asyncio tasks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .config import WARM_CODE
from .runtimes import WrongValue


def evals_per_second(runtimes: list[Any], seconds: float) -> dict[str, Any]:
    """Warm evals per second with every runtime driven by a thread of its own for seconds."""
    counts = [0] * len(runtimes)
    failures: list[BaseException] = []
    go = threading.Barrier(len(runtimes) + 1)
    deadline = [0.0]

    def loop(slot: int, rt: Any) -> None:
        go.wait()
        n = 0
        try:
            while time.monotonic() < deadline[0]:
                value = rt.eval(WARM_CODE)
                if value != 2:
                    raise WrongValue(f"eval({WARM_CODE!r}) returned {value!r} on runtime {slot}")
                n += 1
        except Exception as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failures.append(exc)
        counts[slot] = n

    threads = [threading.Thread(target=loop, args=(i, rt)) for i, rt in enumerate(runtimes)]
    for thread in threads:
        thread.start()
    deadline[0] = time.monotonic() + seconds
    t0 = time.perf_counter_ns()
    go.wait()
    for thread in threads:
        thread.join()
    elapsed = (time.perf_counter_ns() - t0) / 1e9
    if failures:
        raise failures[0]
    return _rate(counts, elapsed, "threads")


def _rate(counts: list[int], elapsed: float, driver: str) -> dict[str, Any]:
    return {
        "runtimes": len(counts),
        "driver": driver,
        "seconds": round(elapsed, 3),
        "evals": sum(counts),
        "evals_per_s": round(sum(counts) / elapsed, 1),
        "per_runtime": counts,
    }


def async_evals_per_second(make: Callable[[], Any], n: int, seconds: float) -> dict[str, Any]:
    """The same with n tasks on one asyncio event loop, a runtime of its own each."""
    import asyncio
    import contextlib

    async def run() -> dict[str, Any]:
        async with contextlib.AsyncExitStack() as stack:
            runtimes = [await stack.enter_async_context(make()) for _ in range(n)]
            for rt in runtimes:
                await rt.eval(WARM_CODE)
            counts = [0] * n
            loop = asyncio.get_running_loop()
            deadline = loop.time() + seconds

            async def drive(slot: int) -> None:
                while loop.time() < deadline:
                    value = await runtimes[slot].eval(WARM_CODE)
                    if value != 2:
                        raise WrongValue(f"async eval({WARM_CODE!r}) returned {value!r} on runtime {slot}")
                    counts[slot] += 1

            t0 = time.perf_counter_ns()
            await asyncio.gather(*(drive(i) for i in range(n)))
            return _rate(counts, (time.perf_counter_ns() - t0) / 1e9, "asyncio tasks")

    return asyncio.run(run())
