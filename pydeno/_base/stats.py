"""The figures behind every ``stats()``: a small counting class with no I/O.

:class:`Stats` holds the keys that ``Runtime.stats()``, the pools' ``stats()`` and any other
object that starts workers report (docs/observability.md describes each), counts into them and
merges them::

    total = Stats()
    total.record_command()                 # a command finished (ok or failed)
    total.record_host_calls(3)             # host-function calls answered
    total.record_worker_started()
    total.record_worker_killed("timeout")  # a classify_error kind
    total.record_cpu(0.25)                 # CPU seconds to add
    total.record_rss(64 << 20)             # an RSS reading: the peak is kept
    total.record_queue_wait(0.002)         # one wait for a worker (or a runtime's lock)
    total.merge(other)                     # another Stats, or a dict as_dict() made
    total.as_dict()                        # a fresh, JSON-ready dict

Merging adds the counts and the CPU seconds and keeps the largest peak and the longest wait,
so the figures of many runtimes (or of many processes, sent over as dicts) add up to those of
the object that started them all. An object adds keys of its own (a pool's ``checkouts``,
``size``, ...) to the dict ``as_dict()`` returns; :func:`merge_dicts` sums only the keys here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["COMMON_KEYS", "Stats", "merge_dicts"]

# The keys every stats() dict has, in the order it lists them.
COMMON_KEYS = (
    "commands",
    "host_calls",
    "cpu_seconds",
    "peak_rss_bytes",
    "workers_started",
    "workers_killed",
    "queue_wait_seconds",
)


class Stats:
    """Counts of one object's work, and of its workers'. Not thread-safe by itself: the
    owner updates it under its own lock, or from one thread."""

    __slots__ = (
        "commands",
        "cpu_seconds",
        "host_calls",
        "peak_rss_bytes",
        "queue_wait_count",
        "queue_wait_max",
        "queue_wait_total",
        "workers_killed",
        "workers_started",
    )

    def __init__(self) -> None:
        self.commands = 0
        self.host_calls = 0
        self.cpu_seconds = 0.0
        self.peak_rss_bytes = 0
        self.workers_started = 0
        self.workers_killed: dict[str, int] = {}
        self.queue_wait_count = 0
        self.queue_wait_total = 0.0
        self.queue_wait_max = 0.0

    # -- counting --------------------------------------------------------------------------
    def record_command(self, n: int = 1) -> None:
        self.commands += n

    def record_host_calls(self, n: int = 1) -> None:
        self.host_calls += n

    def record_cpu(self, seconds: float) -> None:
        """Add CPU seconds (user + system) a worker used."""
        self.cpu_seconds += max(0.0, seconds)

    def record_rss(self, rss_bytes: int) -> None:
        """An RSS reading of one worker: the largest is kept."""
        self.peak_rss_bytes = max(self.peak_rss_bytes, rss_bytes)

    def record_worker_started(self, n: int = 1) -> None:
        self.workers_started += n

    def record_worker_killed(self, kind: str, n: int = 1) -> None:
        """A worker the host killed or lost, under the classify_error kind of the failure."""
        self.workers_killed[kind] = self.workers_killed.get(kind, 0) + n

    def record_queue_wait(self, seconds: float) -> None:
        """One wait for a worker (a checkout's, or a command's behind another)."""
        seconds = max(0.0, seconds)
        self.queue_wait_count += 1
        self.queue_wait_total += seconds
        self.queue_wait_max = max(self.queue_wait_max, seconds)

    # -- combining -------------------------------------------------------------------------
    def merge(self, other: Stats | Mapping[str, Any]) -> Stats:
        """Add other's figures to these (counts and CPU summed, peaks and the longest wait
        kept); other is a Stats or a dict with the keys :meth:`as_dict` gives. Returns self."""
        if not isinstance(other, Stats):
            other = Stats.from_dict(other)
        self.commands += other.commands
        self.host_calls += other.host_calls
        self.cpu_seconds += other.cpu_seconds
        self.record_rss(other.peak_rss_bytes)
        self.workers_started += other.workers_started
        for kind, n in other.workers_killed.items():
            self.record_worker_killed(kind, n)
        self.queue_wait_count += other.queue_wait_count
        self.queue_wait_total += other.queue_wait_total
        self.queue_wait_max = max(self.queue_wait_max, other.queue_wait_max)
        return self

    def copy(self) -> Stats:
        return Stats().merge(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Stats:
        """The Stats of a dict :meth:`as_dict` made (keys it lacks count as zero; others are
        ignored)."""
        stats = cls()
        stats.commands = int(data.get("commands", 0))
        stats.host_calls = int(data.get("host_calls", 0))
        stats.cpu_seconds = float(data.get("cpu_seconds", 0.0))
        stats.peak_rss_bytes = int(data.get("peak_rss_bytes", 0))
        stats.workers_started = int(data.get("workers_started", 0))
        stats.workers_killed = {str(k): int(v) for k, v in dict(data.get("workers_killed", {})).items()}
        waits = data.get("queue_wait_seconds", {})
        stats.queue_wait_count = int(waits.get("count", 0))
        stats.queue_wait_total = float(waits.get("total", 0.0))
        stats.queue_wait_max = float(waits.get("max", 0.0))
        return stats

    def as_dict(self) -> dict[str, Any]:
        """The figures as a new JSON-ready dict: the keys of COMMON_KEYS, in that order."""
        return {
            "commands": self.commands,
            "host_calls": self.host_calls,
            "cpu_seconds": self.cpu_seconds,
            "peak_rss_bytes": self.peak_rss_bytes,
            "workers_started": self.workers_started,
            "workers_killed": dict(sorted(self.workers_killed.items())),
            "queue_wait_seconds": {
                "count": self.queue_wait_count,
                "total": self.queue_wait_total,
                "max": self.queue_wait_max,
            },
        }

    def __repr__(self) -> str:
        return f"Stats({self.as_dict()!r})"


def merge_dicts(dicts: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The common keys of several stats() dicts, merged as :meth:`Stats.merge` does."""
    total = Stats()
    for data in dicts:
        total.merge(data)
    return total.as_dict()
