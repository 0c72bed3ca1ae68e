"""Many runtimes at once: the memory of 8 alive (and, for ours, of bare deno processes as its
floor), and the evals per second of 8 driven at once, by threads and on one event loop."""

from __future__ import annotations

import gc
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common.procfs import process_memory

from ..config import DENSITY_WORKERS, OVERSUBSCRIBED_RUNTIMES, SETTLE_SECONDS, WARM_CODE
from ..context import Context
from ..floors import deno_floor_memory as bare_deno_memory
from ..rates import async_evals_per_second, evals_per_second
from ..runtimes import WrongValue


def density(ctx: Context) -> None:
    # DENSITY_WORKERS idle runtimes alive at once: their workers' PSS (each shared page
    # split between the processes that map it), then the same runtimes driven at once.
    runtimes: list[Any] = []
    try:
        for _ in range(max(DENSITY_WORKERS, OVERSUBSCRIBED_RUNTIMES)):
            runtimes.append(ctx.make())
            value = runtimes[-1].eval(WARM_CODE)
            if value != 2:
                raise WrongValue(f"eval({WARM_CODE!r}) returned {value!r}")
        time.sleep(SETTLE_SECONDS)
        gc.collect()
        memory = process_memory()
        pss = memory["worker_pss_bytes"] / DENSITY_WORKERS
        ctx.result["density"] = {
            "workers": DENSITY_WORKERS,
            "worker_processes": len(memory["workers"]),
            "pss_per_worker_bytes": round(pss),
            "uss_per_worker_bytes": round(memory["worker_uss_bytes"] / DENSITY_WORKERS),
            "workers_per_gib": round(2**30 / pss, 2),
            "shared_pss_bytes": memory["shared_pss_bytes"],
            "memory": memory,
        }
        ctx.result["oversubscribed"] = evals_per_second(runtimes[:OVERSUBSCRIBED_RUNTIMES], ctx.params.window_s)
    finally:
        for each in runtimes:
            each.close()


def deno_floor_memory(ctx: Context) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-deno-floor-"))
    try:
        ctx.result["deno_floor_memory"] = bare_deno_memory(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def oversubscribed_async(ctx: Context) -> None:
    import pydeno

    if ctx.ours:
        make_async: Callable[[], Any] = pydeno.AsyncRuntime
    else:
        peer_async: Any = pydeno
        make_async = peer_async.AsyncIsolatedRuntime
    ctx.result["oversubscribed_async"] = async_evals_per_second(
        make_async, OVERSUBSCRIBED_RUNTIMES, ctx.params.window_s
    )
