"""Every section of bench_eval, by the name ``--sections`` selects it with, in measuring order.

The order matters: the warm runtime's sections run first and share the runtime warm_eval
starts, until close; everything after starts runtimes of its own.
"""

from __future__ import annotations

from ..context import OURS, WORKER_SIDES, Section
from . import code_mode, cold, density, idle, pools, transfer, warm

SECTIONS: tuple[Section, ...] = (
    Section("warm_eval", warm.warm_eval),
    Section("warm_eval_unmonitored", warm.warm_eval_unmonitored, OURS),
    Section("host_call", warm.host_call),
    Section("await_forms", warm.await_forms, OURS),
    Section("cpu_per_eval", warm.cpu_per_eval),
    Section("async_driver", warm.async_driver, OURS),
    Section("rss", warm.rss),
    Section("close", warm.close),
    Section("big_result", transfer.big_result),
    Section("cold_start", cold.cold_start),
    Section("cold_start_back_to_back", cold.cold_start_back_to_back, WORKER_SIDES),
    Section("cold_start_unsandboxed", cold.cold_start_unsandboxed, OURS),
    Section("pool", pools.checkouts, WORKER_SIDES),
    Section("pool_setup", pools.pool_setup, OURS),
    Section("two_mb_to_host", transfer.two_mb_to_host, WORKER_SIDES),
    Section("two_mb_to_guest", transfer.two_mb_to_guest, WORKER_SIDES),
    Section("idle_rss", idle.idle_rss, WORKER_SIDES),
    Section("idle_pool", idle.idle_pool, WORKER_SIDES),
    Section("density", density.density, WORKER_SIDES),
    Section("deno_floor_memory", density.deno_floor_memory, OURS),
    Section("oversubscribed_async", density.oversubscribed_async, WORKER_SIDES),
    Section("code_mode", code_mode.code_mode, WORKER_SIDES),
)
BY_NAME = {section.name: section for section in SECTIONS}
