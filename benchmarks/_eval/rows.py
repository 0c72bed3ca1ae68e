"""The rows of the printed table, each a figure of the sides' results, the denominator of its
ratio, and the targets it is held to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .config import (
    AWAIT_CODE,
    DENSITY_WORKERS,
    HOST_CALL_AWAIT_CODE,
    HOST_CALL_CODE,
    IDLE_POOL_SIZE,
    OVERSUBSCRIBED_RUNTIMES,
    POOL_SIZE,
    WARM_CODE,
)

# The issue whose targets --check-targets holds a run to; earlier issues' targets are shown too.
CURRENT_ISSUE = "issue 20"


@dataclass(frozen=True, slots=True)
class Target:
    limit: float
    source: str  # the issue that set it
    at_least: bool = False  # a floor to reach (a rate), not a ceiling
    on_value: bool = False  # ours' own figure against the limit (CPU per second), not the ratio

    @property
    def direction(self) -> str:
        return ">=" if self.at_least else "<="

    def holds(self, figure: float | None) -> bool | None:
        if figure is None:
            return None
        return figure >= self.limit if self.at_least else figure <= self.limit


@dataclass(frozen=True, slots=True)
class Row:
    ratio_key: str
    label: str
    section: str
    key: str
    unit: str  # display unit
    # Newest first: the first is the target a run is held to, the rest are shown beside it.
    targets: tuple[Target, ...] = ()
    # The ratio's denominator as (side, section, key); None: the same figure of the peer
    # isolated. A side of "ours" makes it a ratio of two of our own figures.
    over: tuple[str, str, str] | None = None
    # A rate: the ratio is still ours / theirs, but higher is better and its target a floor.
    higher_is_better: bool = False
    has_ratio: bool = True


ISSUE7, ISSUE20, CODE_MODE_ISSUE, SETUP_ISSUE = "issue 7", CURRENT_ISSUE, "Code Mode issue", "issue 32"
ISSUE34 = "issue 34"
ROWS = (
    Row("warm_eval_p50", f"warm eval({WARM_CODE!r}) p50", "warm_eval", "p50_us", "us", targets=(Target(0.4, ISSUE7),)),
    Row("warm_eval_p99", f"warm eval({WARM_CODE!r}) p99", "warm_eval", "p99_us", "us"),
    Row(
        "warm_eval_vs_inprocess",
        "warm eval p50, against the peer in-process",
        "warm_eval",
        "p50_us",
        "us",
        targets=(Target(2.0, ISSUE20),),
        over=("peer_inprocess", "warm_eval", "p50_us"),
    ),
    Row(
        "warm_eval_vs_inprocess_fast",
        "warm eval p50, against the peer in-process's fastest round",
        "warm_eval",
        "p50_us",
        "us",
        targets=(Target(3.0, ISSUE34),),
        over=("peer_inprocess", "warm_eval", "fastest_round_p50_us"),
    ),
    # The floor of any eval across a process boundary: a bare deno echoing one byte, back to
    # back, over pipes, held against the same fastest round.
    Row(
        "echo_floor",
        "ours: bare deno echoing a byte over pipes back to back, over the peer in-process's fastest round",
        "echo_floor",
        "p50_us",
        "us",
        over=("peer_inprocess", "warm_eval", "fastest_round_p50_us"),
    ),
    Row(
        "warm_eval_vs_echo_floor",
        "ours: warm eval p50 over that floor",
        "warm_eval",
        "p50_us",
        "us",
        over=("ours", "echo_floor", "p50_us"),
    ),
    Row(
        "host_call_p50",
        f"host call eval({HOST_CALL_CODE!r}) p50",
        "host_call",
        "p50_us",
        "us",
        targets=(Target(0.2, ISSUE20), Target(0.4, ISSUE7)),
    ),
    Row("host_call_p99", f"host call eval({HOST_CALL_CODE!r}) p99", "host_call", "p99_us", "us"),
    Row(
        "host_call_await_p50",
        f"ours: host call eval({HOST_CALL_AWAIT_CODE!r}) p50, against the peer's {HOST_CALL_CODE!r}",
        "host_call_await",
        "p50_us",
        "us",
        targets=(Target(0.2, ISSUE34),),
        over=("peer", "host_call", "p50_us"),
    ),
    Row(
        "await_eval_p50",
        f"ours: eval({AWAIT_CODE!r}) p50, over our warm eval({WARM_CODE!r})",
        "await_eval",
        "p50_us",
        "us",
        targets=(Target(1.5, ISSUE34),),
        over=("ours", "warm_eval", "p50_us"),
    ),
    Row(
        "new_code_await_p50",
        "ours: a ten-line program with await, new at each eval, p50, over the same without await",
        "new_code_await",
        "p50_us",
        "us",
        over=("ours", "new_code_plain", "p50_us"),
    ),
    Row(
        "new_code_plain_p50",
        "ours: that program without await, new at each eval, p50",
        "new_code_plain",
        "p50_us",
        "us",
    ),
    Row("warm_eval_async_p50", "ours: warm eval, AsyncRuntime (asyncio) p50", "warm_eval_async", "p50_us", "us"),
    Row("host_call_async_p50", "ours: host call, AsyncRuntime (asyncio) p50", "host_call_async", "p50_us", "us"),
    Row(
        "cpu_per_eval",
        "CPU per warm eval, host + worker",
        "cpu_per_eval",
        "us",
        "us",
        targets=(Target(0.35, ISSUE20),),
    ),
    Row("cpu_per_eval_host", "  of which the host process", "cpu_per_eval", "host_us", "us"),
    Row("cpu_per_eval_worker", "  of which the worker process(es)", "cpu_per_eval", "worker_us", "us"),
    Row(
        "cold_start_p50",
        "cold start to first result p50",
        "cold_start",
        "p50_ms",
        "ms",
        targets=(Target(0.35, ISSUE20), Target(0.5, ISSUE7)),
    ),
    Row("cold_start_p90", "cold start to first result p90", "cold_start", "p90_ms", "ms"),
    Row(
        "cold_start_back_to_back_p50",
        "cold start, each right after the last one's close p50",
        "cold_start_back_to_back",
        "p50_ms",
        "ms",
    ),
    Row("cold_start_off_p50", "cold start, ours with sandbox='off' p50", "cold_start_off", "p50_ms", "ms"),
    Row("deno_floor_p50", "ours: bare deno run of an empty script p50", "deno_floor", "p50_ms", "ms", has_ratio=False),
    Row("deno_floor_p90", "ours: bare deno run of an empty script p90", "deno_floor", "p90_ms", "ms", has_ratio=False),
    Row(
        "deno_floor_jitless_p50",
        "ours: the same with --v8-flags=--jitless p50",
        "deno_floor_jitless",
        "p50_ms",
        "ms",
        has_ratio=False,
    ),
    Row(
        "deno_floor_inspector_p50",
        "ours: bare deno importing node:inspector (the design before) p50",
        "deno_floor_inspector",
        "p50_ms",
        "ms",
        has_ratio=False,
    ),
    Row(
        "deno_floor_worker_flags_p50",
        "ours: bare deno, empty script, with the worker's flags (no code cache) p50",
        "deno_floor_worker_flags",
        "p50_ms",
        "ms",
        has_ratio=False,
    ),
    Row(
        "deno_floor_first_byte_p50",
        "ours: the same, to its first statement (a byte written) p50",
        "deno_floor_first_byte",
        "p50_ms",
        "ms",
        has_ratio=False,
    ),
    Row(
        "deno_floor_worker_code_p50",
        "ours: the same, the worker's own program compiled and never run before it, p50",
        "deno_floor_worker_code",
        "p50_ms",
        "ms",
        has_ratio=False,
    ),
    Row(
        "cold_start_vs_deno_floor",
        "ours: cold start p50 over the bare deno floor p50",
        "cold_start",
        "p50_ms",
        "ms",
        targets=(Target(1.3, ISSUE20),),
        over=("ours", "deno_floor", "p50_ms"),
    ),
    Row(
        "cold_start_vs_worker_flags_floor",
        "ours: cold start p50 over that floor with the worker's flags",
        "cold_start",
        "p50_ms",
        "ms",
        over=("ours", "deno_floor_worker_flags", "p50_ms"),
    ),
    Row(
        "cold_start_vs_worker_code_floor",
        "ours: cold start p50 over deno's start with the worker's program parsed",
        "cold_start",
        "p50_ms",
        "ms",
        over=("ours", "deno_floor_worker_code", "p50_ms"),
    ),
    Row(
        "worker_code_floor_vs_peer",
        "ours: that floor with the worker's program parsed, over the peer's cold start",
        "deno_floor_worker_code",
        "p50_ms",
        "ms",
        over=("peer", "cold_start", "p50_ms"),
    ),
    Row(
        "big_result_p50",
        "20k-object result p50",
        "big_result",
        "p50_ms",
        "ms",
        targets=(Target(0.15, ISSUE20), Target(0.2, ISSUE7)),
    ),
    # The 20k result's floor: the guest's build and the host's decoding, which any design
    # pays, measured beside each sample; over the peer's figure it bounds, and ours over it.
    Row(
        "big_result_build_p50",
        "ours: the 20k build alone (only its length crossing) p50",
        "big_result_build",
        "p50_ms",
        "ms",
        has_ratio=False,
    ),
    Row(
        "big_result_decode_p50",
        "ours: decoding its JSON text on the host alone p50",
        "big_result_decode",
        "p50_ms",
        "ms",
        has_ratio=False,
    ),
    Row(
        "big_result_floor",
        "ours: that build + decode, over the peer's 20k result",
        "big_result_floor",
        "p50_ms",
        "ms",
        over=("peer", "big_result", "p50_ms"),
    ),
    Row(
        "big_result_vs_floor",
        "ours: 20k-object result p50 over that floor",
        "big_result",
        "p50_ms",
        "ms",
        over=("ours", "big_result_floor", "p50_ms"),
    ),
    Row("worker_rss", "worker RSS after warm-up", "rss", "worker_bytes", "MiB"),
    Row("idle_rss", "idle worker RSS", "idle_rss", "worker_bytes", "MiB", targets=(Target(0.6, ISSUE7),)),
    Row("idle_rss_shared", "per-host helper RSS (ours: zygote; peer: spare worker)", "idle_rss", "shared_bytes", "MiB"),
    Row("idle_uss", "idle worker USS", "idle_uss", "worker_uss_bytes", "MiB", targets=(Target(0.5, ISSUE20),)),
    Row("idle_uss_anon", "idle worker anonymous memory", "idle_uss", "worker_anon_bytes", "MiB"),
    Row("idle_uss_shared", "per-host helper USS", "idle_uss", "shared_uss_bytes", "MiB"),
    Row(
        "density_pss",
        f"PSS per worker, {DENSITY_WORKERS} alive",
        "density",
        "pss_per_worker_bytes",
        "MiB",
        targets=(Target(0.5, ISSUE20),),
    ),
    Row(
        "density_workers_per_gib",
        f"workers per GiB (GiB / PSS per worker, {DENSITY_WORKERS} alive)",
        "density",
        "workers_per_gib",
        "count",
        higher_is_better=True,
    ),
    Row("density_shared_pss", f"per-host helper PSS, {DENSITY_WORKERS} alive", "density", "shared_pss_bytes", "MiB"),
    # The memory floors, each over the peer's figure it bounds: what bare deno needs idle.
    Row(
        "deno_floor_uss",
        "ours: bare idle deno USS, over the peer's idle worker",
        "deno_floor_memory",
        "uss_bytes",
        "MiB",
        over=("peer", "idle_uss", "worker_uss_bytes"),
    ),
    Row(
        "deno_floor_inspector_uss",
        "ours: bare idle deno with node:inspector (the design before) USS, over the peer's idle worker",
        "deno_floor_memory",
        "inspector_uss_bytes",
        "MiB",
        over=("peer", "idle_uss", "worker_uss_bytes"),
    ),
    Row("deno_floor_anon", "ours: bare idle deno anonymous memory", "deno_floor_memory", "anon_bytes", "MiB"),
    Row(
        "deno_floor_pss",
        f"ours: bare idle deno PSS per process, {DENSITY_WORKERS} alive, over the peer's per worker",
        "deno_floor_memory",
        "pss_per_process_bytes",
        "MiB",
        over=("peer", "density", "pss_per_worker_bytes"),
    ),
    Row(
        "deno_floor_inspector_pss",
        f"ours: the same with node:inspector (the design before), {DENSITY_WORKERS} alive, over the peer's per worker",
        "deno_floor_memory",
        "inspector_pss_per_process_bytes",
        "MiB",
        over=("peer", "density", "pss_per_worker_bytes"),
    ),
    Row(
        "oversubscribed",
        f"{OVERSUBSCRIBED_RUNTIMES} runtimes, {OVERSUBSCRIBED_RUNTIMES} threads: evals/s",
        "oversubscribed",
        "evals_per_s",
        "rate",
        targets=(Target(2.5, ISSUE20, at_least=True),),
        higher_is_better=True,
    ),
    Row(
        "oversubscribed_async",
        f"{OVERSUBSCRIBED_RUNTIMES} runtimes, {OVERSUBSCRIBED_RUNTIMES} tasks on one event loop: evals/s",
        "oversubscribed_async",
        "evals_per_s",
        "rate",
        higher_is_better=True,
    ),
    Row(
        "idle_worker_cpu",
        "one idle runtime: its worker's CPU",
        "idle_cpu",
        "worker_ms_per_s",
        "ms/s",
        targets=(Target(1.0, ISSUE20, on_value=True),),
    ),
    Row("idle_worker_host_cpu", "one idle runtime: the host's CPU", "idle_cpu", "host_ms_per_s", "ms/s"),
    Row(
        "idle_pool_cpu",
        f"idle pool of {IDLE_POOL_SIZE}: workers + host CPU",
        "idle_pool_cpu",
        "total_ms_per_s",
        "ms/s",
        targets=(Target(5.0, ISSUE20, on_value=True),),
    ),
    Row(
        "idle_pool_workers_cpu",
        f"idle pool of {IDLE_POOL_SIZE}: workers' CPU",
        "idle_pool_cpu",
        "worker_ms_per_s",
        "ms/s",
    ),
    Row(
        "idle_pool_host_cpu", f"idle pool of {IDLE_POOL_SIZE}: the host's CPU", "idle_pool_cpu", "host_ms_per_s", "ms/s"
    ),
    Row("pool_checkout_p50", "pool checkout p50", "pool_checkout", "p50_us", "us"),
    Row(
        "pool_first_eval_p50",
        "pool checkout + first eval p50",
        "pool_first_eval",
        "p50_us",
        "us",
        targets=(Target(0.5, ISSUE20), Target(0.5, ISSUE7)),
    ),
    # Its floor: a bare deno answering one byte over a pipe after the same sleep.
    Row(
        "wake_floor",
        "ours: bare deno answering a pipe after the same idle, over the peer's first eval",
        "wake_floor",
        "p50_us",
        "us",
        over=("peer", "pool_first_eval", "p50_us"),
    ),
    Row(
        "pool_first_eval_vs_wake_floor",
        "ours: pool checkout + first eval p50 over that floor",
        "pool_first_eval",
        "p50_us",
        "us",
        over=("ours", "wake_floor", "p50_us"),
    ),
    Row(
        "pool_first_eval_plain_p50",
        "ours: pool checkout + first eval p50, no setup (beside the next)",
        "pool_first_eval_plain",
        "p50_us",
        "us",
        has_ratio=False,
    ),
    Row(
        "pool_first_eval_setup_vs_plain",
        "ours: the same, workers set up (module + bound function + eval), over no setup",
        "pool_first_eval_setup",
        "p50_us",
        "us",
        targets=(Target(1.1, SETUP_ISSUE),),
        over=("ours", "pool_first_eval_plain", "p50_us"),
    ),
    Row("pool_throughput", f"pool of {POOL_SIZE}, time per eval (2 threads)", "pool_throughput", "p50_us", "us"),
    Row("two_mb_to_host_p50", "2 MB value guest -> host p50", "two_mb_to_host", "p50_ms", "ms"),
    Row("two_mb_to_guest_p50", "2 MB value host -> guest p50", "two_mb_to_guest", "p50_ms", "ms"),
    Row(
        "code_mode_p50",
        "Code Mode: 3 tool calls + 1,000 items p50",
        "code_mode",
        "p50_ms",
        "ms",
        targets=(Target(0.4, CODE_MODE_ISSUE),),
    ),
    Row("code_mode_validation", "ours: schema validation per execution", "code_mode_costs", "validation_us", "us"),
    Row("code_mode_strip", "ours: TypeScript strip per execution", "code_mode_costs", "strip_us", "us"),
)


def figure(side: dict[str, Any] | None, section: str, key: str) -> float | None:
    if not side:
        return None
    part = side.get(section)
    if not isinstance(part, dict) or not isinstance(part.get(key), int | float):
        return None
    return float(part[key])


def row_figure(side: dict[str, Any] | None, row: Row) -> float | None:
    return figure(side, row.section, row.key)


def denominator(results: dict[str, Any], row: Row) -> float | None:
    side, section, key = row.over or ("peer", row.section, row.key)
    return figure(results.get(side), section, key)


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "MiB":
        return f"{value / 2**20:.1f} MiB"
    if unit == "us":
        return f"{value:.1f} us"
    if unit == "ms/s":
        return f"{value:.3f} ms/s"
    if unit == "rate":
        return f"{value:,.0f}/s"
    if unit == "count":
        return f"{value:.1f}"
    return f"{value:.2f} ms"
