"""What a runtime's spans say of its worker (pydeno/_base/tracing.py makes the spans)."""

from __future__ import annotations

from typing import Any

from ..host.process.supervisor import Supervisor

__all__ = ["worker_attributes"]


def worker_attributes(sup: Supervisor, cpu_before: float) -> dict[str, Any]:
    """The worker's pid, the CPU seconds it used since it had used cpu_before, and the
    largest resident size seen of it: read only for a span, never on an untraced path."""
    figures = sup.stats()
    attributes: dict[str, Any] = {
        "pydeno.worker.cpu_seconds": max(0.0, figures.cpu_seconds - cpu_before),
        "pydeno.worker.peak_rss_bytes": figures.peak_rss_bytes,
    }
    process = sup.process
    if process is not None:
        attributes["pydeno.worker.pid"] = process.pid
    return attributes
