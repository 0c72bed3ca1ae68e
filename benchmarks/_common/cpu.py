"""CPU time used over a window, by this process (per thread) and by the processes below it,
from the kernel's per-process CPU clocks."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from . import procfs

# clock_getcpuclockid(3) for another process: CPUCLOCK_SCHED of pid, as glibc encodes it.
_CPUCLOCK_SCHED = 2


def cpu_clock_ns(pid: int) -> int:
    """CPU time pid has used, user plus system, all its threads (exited ones too), in ns: the
    kernel's own per-process clock. /proc/<pid>/stat has the same total in 10 ms ticks, too
    coarse for a few thousand evals."""
    return time.clock_gettime_ns(((~pid) << 3) | _CPUCLOCK_SCHED)


def _descendant_clocks() -> dict[int, int]:
    clocks: dict[int, int] = {}
    for pid in procfs.descendants(os.getpid()):
        try:
            clocks[pid] = cpu_clock_ns(pid)
        except OSError:  # exited while we looked
            continue
    return clocks


def _reaped_ns() -> int:
    times = os.times()
    return round((times.children_user + times.children_system) * 1e9)


def _thread_clocks() -> dict[int, int]:
    """CPU time of each live thread of this process, in ns (its schedstat's first field)."""
    clocks: dict[int, int] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat", encoding="ascii") as fh:
                clocks[int(tid)] = int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):  # exited while we looked
            continue
    return clocks


def by_thread_name(threads_ns: dict[int, int]) -> dict[str, int]:
    """Per-thread CPU keyed by the name Python gives each thread, largest first."""
    names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    named: dict[str, int] = {}
    for tid, ns in threads_ns.items():
        name = names.get(tid, f"thread {tid} (not a Python thread)")
        named[name] = named.get(name, 0) + ns
    return dict(sorted(named.items(), key=lambda item: -item[1]))


def cpu_used(body: Callable[[], object]) -> dict[str, Any]:
    """CPU used while body ran, in ns: by this process (every thread: the caller, and the
    library's monitor, reader and pool threads), by the worker processes below it, and by
    the per-host helpers, apart. The host's clock is read inside the walks of /proc for the
    other processes, so those walks are not charged to it."""
    before = _descendant_clocks()
    reaped = _reaped_ns()
    host = time.clock_gettime_ns(time.CLOCK_PROCESS_CPUTIME_ID)
    # Inside the host's window, so that its threads' parts add up to no more than it.
    threads = _thread_clocks()
    wall = time.perf_counter_ns()
    body()
    wall = time.perf_counter_ns() - wall
    threads = {tid: ns - threads.get(tid, 0) for tid, ns in _thread_clocks().items()}
    host = time.clock_gettime_ns(time.CLOCK_PROCESS_CPUTIME_ID) - host
    reaped = _reaped_ns() - reaped
    after = _descendant_clocks()
    helpers = procfs.shared_helpers()
    # A process that started inside the window used all of its CPU there.
    workers = sum(ns - before.get(pid, 0) for pid, ns in after.items() if pid not in helpers)
    shared = sum(ns - before.get(pid, 0) for pid, ns in after.items() if pid in helpers)
    return {
        "wall_ns": wall,
        "host_ns": host,
        # A worker that exited and that this process reaped shows in its children's times.
        "workers_ns": workers + reaped,
        "shared_ns": shared,
        "host_threads_ns": {tid: ns for tid, ns in threads.items() if ns > 0},
        "worker_processes": sum(1 for pid in after if pid not in helpers),
        # One that exited in the window and was reaped by another process (a zygote) took
        # its CPU time with it: a window with any such is missing some.
        "unaccounted_exits": sum(1 for pid in before if pid not in after),
    }


def idle_cost(seconds: float) -> dict[str, Any]:
    """CPU per second of wall time used while this process only sleeps for seconds, with
    the host's part split by thread, so that a busy one shows."""
    used = cpu_used(lambda: time.sleep(seconds))
    per_s = 1e9 / float(used["wall_ns"])

    def ms_per_s(ns: int) -> float:
        return round(ns / 1e6 * per_s, 4)

    return {
        "seconds": round(used["wall_ns"] / 1e9, 3),
        "worker_ms_per_s": ms_per_s(used["workers_ns"]),
        "host_ms_per_s": ms_per_s(used["host_ns"]),
        "shared_ms_per_s": ms_per_s(used["shared_ns"]),
        "total_ms_per_s": ms_per_s(used["workers_ns"] + used["host_ns"] + used["shared_ns"]),
        "host_threads_ms_per_s": {name: ms_per_s(ns) for name, ns in by_thread_name(used["host_threads_ns"]).items()},
        "worker_processes": used["worker_processes"],
        "unaccounted_exits": used["unaccounted_exits"],
    }
