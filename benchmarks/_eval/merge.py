"""A side's rounds as one result: the timed figures' samples pooled, the once-a-round figures
(memory, CPU, rates) the median round's."""

from __future__ import annotations

from typing import Any

from _common.stats import summary_ns

from .config import SECTION_UNITS, TIMED_SECTIONS

# Sections measured once per round (memory, CPU, rates): the merged result is the median
# round's, by the figure named here, with that figure of every round beside it.
MEDIAN_ROUND_SECTIONS = {
    "rss": "worker_bytes",
    "rss_at_start": "worker_bytes",
    "idle_rss": "worker_bytes",
    "idle_uss": "worker_uss_bytes",
    "density": "pss_per_worker_bytes",
    "cpu_per_eval": "us",
    "oversubscribed": "evals_per_s",
    "oversubscribed_async": "evals_per_s",
    "idle_cpu": "worker_ms_per_s",
    "idle_pool_cpu": "total_ms_per_s",
}


def merge_rounds(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One side's rounds as one result: timings pooled, memory, CPU and rates the median
    round's."""
    merged: dict[str, Any] = {k: v for k, v in runs[0].items() if k not in ("samples_ns", "section_seconds")}
    merged["rounds"] = len(runs)
    merged["errors"] = {}
    for number, run in enumerate(runs, 1):
        for name, message in (run.get("errors") or {}).items():
            merged["errors"][f"{name} (round {number})"] = message
    for name in TIMED_SECTIONS:
        pooled = [x for run in runs for x in (run.get("samples_ns") or {}).get(name, [])]
        merged.pop(name, None)
        if pooled:
            unit = SECTION_UNITS[name]
            merged[name] = summary_ns(pooled, unit)
            # Pooling hides a side that is fast in one process and slow in the next (the
            # peer's in-process runtime is bimodal here); keep each round's p50 to show it.
            per_round = [run[name][f"p50_{unit}"] for run in runs if isinstance(run.get(name), dict)]
            merged[name][f"p50_per_round_{unit}"] = per_round
            # The fastest round's p50: the like-for-like figure of a side whose rounds are
            # bimodal (the peer in-process has a fast mode and a slow one; see the README).
            if per_round:
                merged[name][f"fastest_round_p50_{unit}"] = min(per_round)
    for key, headline in MEDIAN_ROUND_SECTIONS.items():
        measured = [run[key] for run in runs if isinstance(run.get(key), dict) and headline in run[key]]
        merged.pop(key, None)
        if measured:
            ordered = sorted(measured, key=lambda part: float(part[headline]))
            merged[key] = dict(ordered[(len(ordered) - 1) // 2])
            merged[key][f"{headline}_per_round"] = [part[headline] for part in measured]
    merged["wall_seconds"] = round(sum(float(run.get("wall_seconds", 0.0)) for run in runs), 2)
    return merged
