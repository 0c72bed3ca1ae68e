"""Summaries of latency samples."""

from __future__ import annotations

import math
from typing import Any


def percentile(samples: list[int] | list[float], pct: float) -> float:
    """Nearest-rank percentile: always an observed sample, never an interpolation."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return float(ordered[rank - 1])


def summary(samples_s: list[float]) -> dict[str, float]:
    """Latency samples in seconds as their count and p50/p90/p99 in milliseconds."""
    return {
        "n": len(samples_s),
        "p50_ms": percentile(samples_s, 50) * 1e3,
        "p90_ms": percentile(samples_s, 90) * 1e3,
        "p99_ms": percentile(samples_s, 99) * 1e3,
    }


def summary_ns(samples_ns: list[int], unit: str) -> dict[str, Any]:
    """Samples in nanoseconds as their count, percentiles, extremes and mean in unit (us or ms)."""
    scale = {"us": 1e3, "ms": 1e6}[unit]
    return {
        "n": len(samples_ns),
        f"p50_{unit}": percentile(samples_ns, 50) / scale,
        f"p90_{unit}": percentile(samples_ns, 90) / scale,
        f"p99_{unit}": percentile(samples_ns, 99) / scale,
        f"min_{unit}": min(samples_ns) / scale,
        f"max_{unit}": max(samples_ns) / scale,
        f"mean_{unit}": sum(samples_ns) / len(samples_ns) / scale,
    }
