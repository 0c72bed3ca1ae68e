"""What sitting idle costs: one idle runtime's memory (RSS, USS, PSS) and CPU, and an idle
pool's CPU."""

from __future__ import annotations

import gc
import time

from _common.cpu import idle_cost
from _common.procfs import process_memory, process_rss

from ..config import IDLE_POOL_SIZE, SETTLE_SECONDS, WARM_CODE
from ..context import Context
from ..runtimes import make_pool, wait_pool_full


def idle_rss(ctx: Context) -> None:
    with ctx.make() as idle:
        idle.eval(WARM_CODE)
        time.sleep(SETTLE_SECONDS)
        gc.collect()
        ctx.result["idle_rss"] = process_rss()
        ctx.result["idle_uss"] = process_memory()
        ctx.result["idle_cpu"] = idle_cost(ctx.params.idle_s)


def idle_pool(ctx: Context) -> None:
    pool = make_pool(IDLE_POOL_SIZE)
    try:
        wait_pool_full(ctx.side, pool, IDLE_POOL_SIZE)
        time.sleep(SETTLE_SECONDS)
        gc.collect()
        ctx.result["idle_pool_cpu"] = {"size": IDLE_POOL_SIZE, **idle_cost(ctx.params.idle_s)}
    finally:
        pool.close()
