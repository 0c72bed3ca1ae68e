#!/usr/bin/env python3
"""Benchmark our pydeno against the reference peer (PyPI ``pydeno==0.13.2``) in one run.

Both packages are imported as ``pydeno``, so they cannot share an interpreter. This script
is therefore both the driver and the measurer: the driver re-runs this file once per side
(``--side ours|peer|peer-inprocess --json-out FILE``) under that side's interpreter, and
every side runs the same :func:`measure` function. Our side runs in a subprocess too, so
both are measured the same way (fresh interpreter, same process tree shape).

Usage::

    python benchmarks/bench_eval.py --peer-python /path/to/peer/bin/python
    python benchmarks/bench_eval.py --quick          # one round, fewer samples: about 30 s
    python benchmarks/bench_eval.py --skip-peer      # ours only
    python benchmarks/bench_eval.py --skip-peer --sections pool_setup   # only these sections

The measuring side must only need the standard library (plus the ``pydeno`` under test and,
optionally, ``psutil``): the peer's venv has nothing else installed.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_OUTPUT = HERE / "results" / "bench_eval.json"
DEFAULT_PEER_VENV = HERE / ".peer-venv"
PEER_VERSION = "0.13.2"
# The driver's order is the measuring order: one side after the other, like for like first.
SIDES = ("ours", "peer", "peer-inprocess")
SIDE_KEYS = {"ours": "ours", "peer": "peer", "peer-inprocess": "peer_inprocess"}
CHILD_TIMEOUT_S = 900.0
TIMED_SECTIONS = (
    "warm_eval",
    "host_call",
    "big_result",
    "cold_start",
    "cold_start_off",
    "warm_eval_unmonitored",
    "warm_eval_async",
    "host_call_async",
    "pool_checkout",
    "pool_first_eval",
    "pool_first_eval_setup",
    "pool_first_eval_plain",
    "two_mb_to_host",
    "two_mb_to_guest",
    "pool_throughput",
    "code_mode",
    "deno_floor",
    "deno_floor_jitless",
    "deno_floor_inspector",
    "deno_floor_worker_flags",
    "big_result_build",
    "big_result_decode",
    "big_result_floor",
    "wake_floor",
)
SECTION_UNITS = {
    "code_mode": "ms",
    "pool_checkout": "us",
    "pool_first_eval": "us",
    "pool_first_eval_setup": "us",
    "pool_first_eval_plain": "us",
    "two_mb_to_host": "ms",
    "two_mb_to_guest": "ms",
    "pool_throughput": "us",
    "warm_eval": "us",
    "host_call": "us",
    "big_result": "ms",
    "cold_start": "ms",
    "cold_start_off": "ms",
    "warm_eval_unmonitored": "us",
    "warm_eval_async": "us",
    "host_call_async": "us",
    "deno_floor": "ms",
    "deno_floor_jitless": "ms",
    "deno_floor_inspector": "ms",
    "deno_floor_worker_flags": "ms",
    "big_result_build": "ms",
    "big_result_decode": "ms",
    "big_result_floor": "ms",
    "wake_floor": "us",
}

WARM_CODE = "1+1"
HOST_CALL_CODE = "add(1, 2)"
BIG_LEN = 20_000
BIG_CODE = "Array.from({length: 20000}, (_, i) => ({id: i, name: 'x' + i}))"
# The same build, with only its length crossing: what the guest's own part of BIG_CODE costs.
BIG_BUILD_CODE = f"{BIG_CODE}.length"
# A 2 MB structured value (about 2.1 MB as JSON): 16,000 records of five fields.
TWO_MB_LEN = 16_000
TWO_MB_CODE = (
    "Array.from({length: 16000}, (_, i) => "
    "({id: i, name: 'item-' + i, tags: ['a', 'b', 'c'], score: i / 8, note: 'x'.repeat(64)}))"
)
# A host function returns a promise in our guest and its value in the peer's (whose eval
# neither awaits a returned promise nor allows top-level await).
TWO_MB_TO_GUEST_CODE = {
    "ours": "Promise.resolve(big()).then((v) => v.length + v[15999].tags.length)",
    "peer": "((v) => v.length + v[15999].tags.length)(big())",
}
# Code Mode: a program that makes three schema-validated tool calls and returns a 1,000-item
# result, through each side's structured-result API (ours: CodeMode.execute; the peer's:
# AgentSandbox.execute, whose tools are globals and whose program returns with `return`).
CODE_MODE_ITEMS = 1000
CODE_MODE_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
CODE_MODE_BODY = (
    "const a = await {p}count({{n: 1}}); const b = await {p}echo({{n: a}});"
    " const list = await {p}items({{n: 1000}}); {r}list.map((x) => ({{...x, b}}))"
)
CODE_MODE_CODE = {
    "ours": CODE_MODE_BODY.format(p="tools.", r=""),
    "peer": CODE_MODE_BODY.format(p="", r="return "),
}
POOL_SIZE = 2
# The pool's setup= figure (ours only): what each new worker is given before it can be
# checked out, and what the first eval then uses of it.
SETUP_MODULE = "export const twice = (x) => 2 * x;"
SETUP_CODE = "globalThis.base = 1"
# The peer's IsolatedRuntime kills the worker after 10,000 host calls by default.
PEER_DEFAULT_MAX_HOST_CALLS = 10_000
# Issue 20's density and oversubscription figures: this many workers alive at once, and as
# many runtimes driven at once (more than the machine has cores), and an idle pool's size.
DENSITY_WORKERS = 8
OVERSUBSCRIBED_RUNTIMES = 8
IDLE_POOL_SIZE = 4
# Before a memory or idle reading: the last start's CPU and V8's post-start work settle.
SETTLE_SECONDS = 0.5
# What the bare deno floor runs: an empty script, with the flags our worker passes that spare
# deno work an empty script does not need (looking for a config file and a lockfile).
DENO_FLOOR_ARGS = ("run", "--quiet", "--no-prompt", "--no-config", "--no-lock", "--no-remote", "--no-npm")
# How long the pool's first-eval samples wait once the pool is full (_wait_pool_full).
POOL_IDLE_SECONDS = 0.05
# The wake floor's bare deno: each chunk read from stdin is written back, with blocking reads
# and writes, as a worker's read loop does once it has stopped polling.
ECHO_SCRIPT = (
    "const buf = new Uint8Array(64);\n"
    "for (;;) {\n"
    "  const n = Deno.stdin.readSync(buf);\n"
    "  if (n === null) break;\n"
    "  Deno.stdout.writeSync(buf.subarray(0, n));\n"
    "}\n"
)


@dataclass(frozen=True, slots=True)
class Params:
    iterations: int
    warmup: int
    cold_runs: int
    big_runs: int
    # Untimed runs before the cold-start and big-result loops: the first spawn pays for
    # reading the binaries from disk, which is not what either side is being compared on.
    cold_warmup: int = 2
    big_warmup: int = 2
    # How long the oversubscribed runtimes are driven, and how long an idle worker or pool is
    # watched for the CPU it uses.
    window_s: float = 2.0
    idle_s: float = 3.0
    # The sections to run (measure's section names); empty: all of them.
    sections: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        return [
            *(["--sections", ",".join(self.sections)] if self.sections else []),
            "--iterations",
            str(self.iterations),
            "--warmup",
            str(self.warmup),
            "--cold-runs",
            str(self.cold_runs),
            "--big-runs",
            str(self.big_runs),
            "--cold-warmup",
            str(self.cold_warmup),
            "--big-warmup",
            str(self.big_warmup),
            "--window",
            str(self.window_s),
            "--idle-seconds",
            str(self.idle_s),
        ]


DEFAULT_PARAMS = Params(iterations=2000, warmup=200, cold_runs=15, big_runs=15)
QUICK_PARAMS = Params(
    iterations=500, warmup=100, cold_runs=5, big_runs=5, cold_warmup=1, big_warmup=1, window_s=0.5, idle_s=1.0
)
# Each round measures every side once with the parameters above.
DEFAULT_ROUNDS = 3
QUICK_ROUNDS = 1


class WrongValue(AssertionError):
    """A runtime returned something other than what the benchmarked code evaluates to."""


# ---------------------------------------------------------------------------------------
# Measuring side (runs in a subprocess, under either venv)
# ---------------------------------------------------------------------------------------


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


def _summary(samples_ns: list[int], unit: str) -> dict[str, Any]:
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


def _descendants(root: int) -> Iterator[int]:
    """Pids of every descendant of root, read from /proc (psutil may be missing)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue  # exited while we looked
        # The command name may contain spaces and parentheses; the fields after the last
        # ')' are fixed: state, ppid, ...
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        yield pid
        stack.extend(children.get(pid, []))


def _rss_procfs(pid: int) -> int:
    with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _shared_helpers() -> frozenset[int]:
    """Pids of a side's per-host helper processes: one per host process whatever the number
    of workers, so not part of a worker's figures. Ours: the zygote that forks confined
    workers. The peer's: the one spare worker it keeps started ahead (a process that has
    imported everything and waits to be handed to the next runtime)."""
    # The spawner module names ours; older layouts had it as host/_spawner, or before that in
    # the process module.
    for name in ("pydeno.host.process.spawner", "pydeno.host._spawner", "pydeno.host._process"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        infrastructure = getattr(module, "infrastructure", None)
        if infrastructure is not None:
            return frozenset(infrastructure().processes)
    try:
        isolated = importlib.import_module("pydeno._isolated")
    except ImportError:
        return frozenset()
    spare = getattr(isolated, "_SPARE", None)
    if spare is not None and getattr(spare[0], "pid", None) is not None:
        return frozenset([int(spare[0].pid)])
    return frozenset()


def process_rss() -> dict[str, Any]:
    """RSS of this process and of every descendant: the workers, and (reported apart, as
    shared_bytes) a per-host helper process such as our zygote."""
    me = os.getpid()
    workers: list[dict[str, Any]] = []
    try:
        import psutil

        source = "psutil"
        host = int(psutil.Process(me).memory_info().rss)
        for child in psutil.Process(me).children(recursive=True):
            try:
                workers.append({"pid": child.pid, "name": child.name(), "rss_bytes": int(child.memory_info().rss)})
            except psutil.Error:  # exited (or became unreadable) while we looked
                continue
    except ImportError:
        # The peer's venv has only the peer installed; /proc gives the same numbers psutil
        # would (statm resident pages) on Linux.
        source = "procfs"
        host = _rss_procfs(me)
        for pid in _descendants(me):
            try:
                with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh:
                    name = fh.read().strip()
                workers.append({"pid": pid, "name": name, "rss_bytes": _rss_procfs(pid)})
            except OSError:
                continue
    helpers = _shared_helpers()
    shared = [w for w in workers if w["pid"] in helpers]
    workers = [w for w in workers if w["pid"] not in helpers]
    return {
        "source": source,
        "host_bytes": host,
        "worker_bytes": sum(w["rss_bytes"] for w in workers),
        "workers": workers,
        "shared_bytes": sum(w["rss_bytes"] for w in shared),
        "shared": shared,
    }


def _comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh:
        return fh.read().strip()


def smaps_rollup(pid: int) -> tuple[int, int]:
    """(USS, PSS) of pid in bytes, read from /proc/<pid>/smaps_rollup as psutil's
    memory_full_info() reads them: USS is the sum of the Private_* lines, PSS the Pss line.
    The peer's venv has no psutil; this gives it the same figures."""
    uss = pss = 0
    with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
        for line in fh:
            if line.startswith(b"Private_"):
                uss += int(line.split()[1]) * 1024
            elif line.startswith(b"Pss:"):
                pss = int(line.split()[1]) * 1024
    return uss, pss


def _anonymous_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
        for line in fh:
            if line.startswith(b"Anonymous:"):
                return int(line.split()[1]) * 1024
    return 0


def _running_elsewhere(executables: set[str], ours: set[int]) -> dict[str, int]:
    """How many processes outside ours run each executable. A page of a binary that another
    process maps too is not unique to ours, so a lone worker's USS moves with what else runs
    on the machine (another tenant's deno, say); its anonymous memory does not."""
    counts = dict.fromkeys(executables, 0)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in ours:
            continue
        try:
            exe = os.readlink(f"/proc/{entry}/exe")
        except OSError:  # a kernel thread, or gone
            continue
        if exe in counts:
            counts[exe] += 1
    return counts


def _memory_reader() -> tuple[Callable[[int], tuple[int, int]], str, tuple[type[BaseException], ...]]:
    """How to read a process's (USS, PSS): psutil where installed, else smaps_rollup; its
    name, and what reading a process that has gone raises."""
    try:
        import psutil
    except ImportError:
        return smaps_rollup, "smaps_rollup", (OSError,)

    def read(pid: int) -> tuple[int, int]:
        info = psutil.Process(pid).memory_full_info()
        return int(info.uss), int(info.pss)

    return read, "psutil", (psutil.Error, OSError)


def process_memory() -> dict[str, Any]:
    """USS, PSS and anonymous memory of every descendant of this process, the workers apart
    from the per-host helpers, and of this process itself."""
    read, source, gone = _memory_reader()
    helpers = _shared_helpers()
    workers: list[dict[str, Any]] = []
    shared: list[dict[str, Any]] = []
    for pid in _descendants(os.getpid()):
        try:
            uss, pss = read(pid)
            entry = {
                "pid": pid,
                "name": _comm(pid),
                "exe": os.readlink(f"/proc/{pid}/exe"),
                "uss_bytes": uss,
                "pss_bytes": pss,
                "anon_bytes": _anonymous_bytes(pid),
            }
        except gone:  # exited while we looked
            continue
        (shared if pid in helpers else workers).append(entry)
    host_uss, host_pss = read(os.getpid())
    ours = {os.getpid(), *(int(w["pid"]) for w in [*workers, *shared])}
    return {
        "source": source,
        "host_uss_bytes": host_uss,
        "host_pss_bytes": host_pss,
        "worker_uss_bytes": sum(w["uss_bytes"] for w in workers),
        "worker_pss_bytes": sum(w["pss_bytes"] for w in workers),
        "workers": workers,
        "shared_uss_bytes": sum(w["uss_bytes"] for w in shared),
        "shared_pss_bytes": sum(w["pss_bytes"] for w in shared),
        "shared": shared,
        "worker_anon_bytes": sum(w["anon_bytes"] for w in workers),
        "shared_anon_bytes": sum(w["anon_bytes"] for w in shared),
        "executables_running_elsewhere": _running_elsewhere({str(w["exe"]) for w in workers}, ours),
    }


# clock_getcpuclockid(3) for another process: CPUCLOCK_SCHED of pid, as glibc encodes it.
_CPUCLOCK_SCHED = 2


def cpu_clock_ns(pid: int) -> int:
    """CPU time pid has used, user plus system, all its threads (exited ones too), in ns: the
    kernel's own per-process clock. /proc/<pid>/stat has the same total in 10 ms ticks, too
    coarse for a few thousand evals."""
    return time.clock_gettime_ns(((~pid) << 3) | _CPUCLOCK_SCHED)


def _descendant_clocks() -> dict[int, int]:
    clocks: dict[int, int] = {}
    for pid in _descendants(os.getpid()):
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
    helpers = _shared_helpers()
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


def deno_floor_commands(workdir: Path) -> dict[str, list[str]]:
    """The bare deno floor's command lines: deno from the ``deno`` wheel running an empty
    script, plainly and with the V8 flag our workers run with; and a script that only
    imports node:inspector, which a worker must load to evaluate in V8's REPL mode (top-level
    await with declarations that persist), and with it Deno's Node compatibility layer; and
    that script, connecting its session, run with the flags every worker runs with (no V8 code
    cache, which a worker cannot have without caching every guest eval on disk; jitless;
    the inspector's grant), the floor of this design."""
    import deno

    binary = str(deno.find_deno_bin())
    script = workdir / "empty.js"
    script.write_text("", encoding="utf-8")
    inspector = workdir / "inspector.js"
    inspector.write_text('import "node:inspector";\n', encoding="utf-8")
    session = workdir / "session.js"
    session.write_text('import { Session } from "node:inspector";\nnew Session().connect();\n', encoding="utf-8")
    plain = [binary, *DENO_FLOOR_ARGS, str(script)]
    worker_flags = ["--no-code-cache", "--allow-sys=inspector", "--v8-flags=--jitless"]
    return {
        "deno_floor": plain,
        "deno_floor_jitless": [binary, *DENO_FLOOR_ARGS, "--v8-flags=--jitless", str(script)],
        "deno_floor_inspector": [binary, *DENO_FLOOR_ARGS, str(inspector)],
        "deno_floor_worker_flags": [binary, *DENO_FLOOR_ARGS, *worker_flags, str(session)],
    }


def deno_floor_memory(workdir: Path, count: int = DENSITY_WORKERS) -> dict[str, Any]:
    """The memory floor: bare deno (from the ``deno`` wheel) left idle on a script that only
    waits, and on one that imports node:inspector first, as every worker must. For each, the
    USS and anonymous memory of one such process alone, then the PSS per process with
    ``count`` of them alive: what the idle-USS and density rows measure of our workers."""
    import deno

    binary = str(deno.find_deno_bin())
    read, _, _ = _memory_reader()
    env = {"DENO_DIR": str(workdir / "cache"), "DENO_NO_UPDATE_CHECK": "1"}
    wait = "setInterval(() => {}, 3_600_000);\n"
    found: dict[str, Any] = {"processes": count}
    for prefix, text in (("", wait), ("inspector_", f'import "node:inspector";\n{wait}')):
        script = workdir / f"{prefix}idle.js"
        script.write_text(text, encoding="utf-8")
        argv = [binary, *DENO_FLOOR_ARGS, str(script)]
        procs: list[subprocess.Popen[bytes]] = []
        try:
            _start_idle(procs, 1, argv, env, workdir)
            found[f"{prefix}uss_bytes"] = read(procs[0].pid)[0]
            found[f"{prefix}anon_bytes"] = _anonymous_bytes(procs[0].pid)
            _start_idle(procs, count - 1, argv, env, workdir)
            found[f"{prefix}pss_per_process_bytes"] = round(sum(read(p.pid)[1] for p in procs) / count)
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
    return found


def _start_idle(
    procs: list[subprocess.Popen[bytes]], n: int, argv: list[str], env: dict[str, str], workdir: Path
) -> None:
    """Start n more of argv into procs, let them settle, and fail if any has exited."""
    quiet = subprocess.DEVNULL
    for _ in range(n):
        procs.append(subprocess.Popen(argv, env=env, cwd=workdir, stdin=quiet, stdout=quiet, stderr=quiet))
    time.sleep(SETTLE_SECONDS)
    ended = [p.returncode for p in procs if p.poll() is not None]
    if ended:
        raise RuntimeError(f"an idle bare deno exited with {ended[0]}")


def spawn_to_exit_ns(argv: list[str], workdir: Path) -> int:
    """Time from starting argv to its exit (it must succeed), with deno's cache in workdir."""
    env = {"DENO_DIR": str(workdir / "cache"), "DENO_NO_UPDATE_CHECK": "1"}
    t0 = time.perf_counter_ns()
    proc = subprocess.run(argv, env=env, cwd=workdir, stdin=subprocess.DEVNULL, capture_output=True, check=False)
    t1 = time.perf_counter_ns()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited with {proc.returncode}: {proc.stderr.decode(errors='replace')[-300:]}")
    return t1 - t0


class WakeFloor:
    """A bare jitless deno (from the ``deno`` wheel) echoing bytes over pipes: the floor of a
    pool's first eval, which goes to a process that has slept in a read since it started.
    ``round_trip_ns(slept)`` waits until the echo has slept that long since its last round
    trip, then times one byte there and back. Nothing of ours runs in it: what it takes is the
    machine waking a process that slept, and that process's caches gone cold, which grows with
    the sleep."""

    def __init__(self, workdir: Path, warm: int = 50) -> None:
        import deno

        script = workdir / "echo.js"
        script.write_text(ECHO_SCRIPT, encoding="utf-8")
        env = {"DENO_DIR": str(workdir / "cache"), "DENO_NO_UPDATE_CHECK": "1"}
        argv = [str(deno.find_deno_bin()), *DENO_FLOOR_ARGS, "--v8-flags=--jitless", str(script)]
        self._proc = subprocess.Popen(
            argv, env=env, cwd=workdir, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        try:
            for _ in range(warm):
                self._echo()
        except BaseException:
            self._proc.kill()
            self.close()
            raise
        self._last = time.perf_counter()

    def _echo(self) -> None:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(b"x")
        if self._proc.stdout.read(1) != b"x":
            raise RuntimeError(f"the echoing deno answered wrong or exited ({self._proc.poll()})")

    def round_trip_ns(self, slept: float) -> int:
        wait = self._last + slept - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        gc.collect()
        t0 = time.perf_counter_ns()
        self._echo()
        t1 = time.perf_counter_ns()
        self._last = time.perf_counter()
        return t1 - t0

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def _json_decoder() -> Callable[[bytes], Any]:
    """The decoder our host reads the worker's JSON lane with (pydeno/host/wire/codec.py); only
    our side has it installed."""
    import msgspec

    return msgspec.json.Decoder().decode


def big_result_json() -> bytes:
    """BIG_CODE's value as JSON.stringify writes it: the text the 20k floor decodes."""
    items = [{"id": i, "name": f"x{i}"} for i in range(BIG_LEN)]
    return json.dumps(items, separators=(",", ":")).encode()


def _time_evals(rt: Any, code: str, expected: object, n: int) -> list[int]:
    clock = time.perf_counter_ns
    run = rt.eval
    samples: list[int] = []
    for i in range(n):
        t0 = clock()
        value = run(code)
        t1 = clock()
        # Outside the timed window; a fast wrong answer must not count as a result.
        if value != expected:
            raise WrongValue(f"eval({code!r}) returned {value!r} (iteration {i}), expected {expected!r}")
        samples.append(t1 - t0)
    return samples


def _add(a: int, b: int) -> int:
    return a + b


def _check_big(value: object) -> None:
    if not isinstance(value, list):
        raise WrongValue(f"20k-object result is a {type(value).__name__}, expected a list")
    if len(value) != BIG_LEN:
        raise WrongValue(f"20k-object result has {len(value)} items, expected {BIG_LEN}")
    last = value[-1]
    if last != {"id": BIG_LEN - 1, "name": f"x{BIG_LEN - 1}"}:
        raise WrongValue(f"20k-object result's last item is {last!r}")


def _factory(side: str, params: Params) -> tuple[Callable[[], Any], dict[str, Any]]:
    """The runtime constructor for a side, after checking we imported the right package."""
    import pydeno

    is_peer = hasattr(pydeno, "IsolatedRuntime")
    if side == "ours":
        if is_peer:
            raise SystemExit(f"--side ours imported the peer package from {pydeno.__file__}")
        return pydeno.Runtime, {"class": "pydeno.Runtime"}
    if not is_peer:
        raise SystemExit(f"--side {side} imported our package from {pydeno.__file__}, not the peer")
    if side == "peer-inprocess":
        return pydeno.Runtime, {"class": "pydeno.Runtime (peer, V8 in-process)"}
    options: dict[str, Any] = {}
    if params.iterations + params.warmup >= PEER_DEFAULT_MAX_HOST_CALLS:
        # Only lifted when the run would trip it, so the default run uses the peer's defaults.
        options["max_host_calls"] = None
    # Checked against our package, which has no IsolatedRuntime; the peer is untyped here.
    peer_cls: Any = pydeno.IsolatedRuntime  # type: ignore[attr-defined]

    def make() -> Any:
        return peer_cls(**options)

    return make, {"class": "pydeno.IsolatedRuntime", "options": {k: repr(v) for k, v in options.items()}}


def _make_pool(side: str, size: int = POOL_SIZE) -> Any:
    import pydeno

    # The same call on both sides; each package's own pool.
    return pydeno.SandboxPool(size=size)


def _wait_pool_full(side: str, pool: Any, size: int = POOL_SIZE, limit: float = 30.0) -> float:
    """Until the pool has size ready workers, so a checkout never waits on a start; returns
    when it was seen full (time.perf_counter), which is when its newest worker became ready."""
    deadline = time.monotonic() + limit
    if side != "ours":
        pool.wait_ready()
        full = time.perf_counter()
    else:
        while len(pool._core.idle) < size or pool._core.starting:
            if time.monotonic() > deadline:
                raise RuntimeError("the pool did not fill up")
            time.sleep(0.01)
        full = time.perf_counter()
    time.sleep(POOL_IDLE_SECONDS)  # let the last start's CPU settle
    return full


def measure(side: str, params: Params) -> dict[str, Any]:
    """Every metric for one side. A failing section is recorded and the rest still run."""
    import pydeno

    make, runtime_info = _factory(side, params)
    result: dict[str, Any] = {
        "side": side,
        "runtime": runtime_info,
        "env": {
            "python": sys.version.split()[0],
            "executable": sys.executable,
            "pydeno_version": importlib.metadata.version("pydeno"),
            "pydeno_file": pydeno.__file__,
        },
        "params": {
            "iterations": params.iterations,
            "warmup": params.warmup,
            "cold_runs": params.cold_runs,
            "big_runs": params.big_runs,
            "cold_warmup": params.cold_warmup,
            "big_warmup": params.big_warmup,
            "window_s": params.window_s,
            "idle_s": params.idle_s,
        },
        "errors": {},
    }
    errors: dict[str, str] = result["errors"]

    def record(name: str, samples_ns: list[int]) -> None:
        result[name] = _summary(samples_ns, SECTION_UNITS[name])
        result.setdefault("samples_ns", {})[name] = samples_ns

    def section(name: str, body: Callable[[], None]) -> None:
        if params.sections and name not in params.sections:
            return
        started = time.perf_counter()
        try:
            body()
        except Exception as exc:  # noqa: BLE001 - reported in the results, the other sections go on
            errors[name] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc(file=sys.stderr)
        result.setdefault("section_seconds", {})[name] = round(time.perf_counter() - started, 3)

    rt: Any = None

    def warm_eval() -> None:
        nonlocal rt
        rt = make()
        rt.bind_function("add", _add)
        # JSON only: our worker's RSS keeps rising with the number of evals until V8's next
        # major GC, so the post-warm-up figure alone depends on how long the loops were.
        result["rss_at_start"] = process_rss()
        _time_evals(rt, WARM_CODE, 2, params.warmup)
        gc.collect()
        record("warm_eval", _time_evals(rt, WARM_CODE, 2, params.iterations))

    def host_call() -> None:
        if rt is None:
            raise RuntimeError("no runtime (warm_eval failed to create one)")
        _time_evals(rt, HOST_CALL_CODE, 3, params.warmup)
        gc.collect()
        record("host_call", _time_evals(rt, HOST_CALL_CODE, 3, params.iterations))

    def cpu_per_eval() -> None:
        # The kernel's count of CPU time, the host's threads and the workers' together, over
        # the same warm loop: what an eval costs the machine, not only the caller's wait.
        if rt is None:
            raise RuntimeError("no runtime (warm_eval failed to create one)")
        n = params.iterations
        run = rt.eval

        def loop() -> None:
            for i in range(n):
                value = run(WARM_CODE)
                if value != 2:
                    raise WrongValue(f"eval({WARM_CODE!r}) returned {value!r} (iteration {i})")

        loop()  # the warm-up: the first evals after another loop still settle
        gc.collect()
        used = cpu_used(loop)
        total = used["host_ns"] + used["workers_ns"] + used["shared_ns"]
        result["cpu_per_eval"] = {
            "evals": n,
            "us": round(total / n / 1e3, 3),
            "host_us": round(used["host_ns"] / n / 1e3, 3),
            "worker_us": round(used["workers_ns"] / n / 1e3, 3),
            "shared_us": round(used["shared_ns"] / n / 1e3, 3),
            "wall_us": round(used["wall_ns"] / n / 1e3, 3),
            "host_threads_us": {
                name: round(ns / n / 1e3, 3) for name, ns in by_thread_name(used["host_threads_ns"]).items()
            },
            "worker_processes": used["worker_processes"],
            "unaccounted_exits": used["unaccounted_exits"],
        }

    def rss() -> None:
        if rt is None:
            raise RuntimeError("no runtime (warm_eval failed to create one)")
        gc.collect()
        result["rss"] = process_rss()

    def close_warm() -> None:
        if rt is not None:
            rt.close()

    def big_result() -> None:
        # With the floor (ours), each sample is followed by the two parts no design can skip:
        # the guest's own build (the same code, only the length crossing) and decoding the
        # value's JSON with the decoder our host uses, into the same 20k Python objects.
        floor = (big_result_json(), _json_decoder()) if side == "ours" else None
        # A fresh runtime: the warm one may have died, and this one's heap starts clean.
        with make() as big_rt:
            for _ in range(params.big_warmup):
                _check_big(big_rt.eval(BIG_CODE))
                if floor is not None:
                    big_rt.eval(BIG_BUILD_CODE)
            samples: list[int] = []
            builds: list[int] = []
            decodes: list[int] = []
            for _ in range(params.big_runs):
                gc.collect()
                t0 = time.perf_counter_ns()
                value = big_rt.eval(BIG_CODE)
                t1 = time.perf_counter_ns()
                _check_big(value)
                del value
                samples.append(t1 - t0)
                if floor is None:
                    continue
                text, decode = floor
                gc.collect()
                t0 = time.perf_counter_ns()
                length = big_rt.eval(BIG_BUILD_CODE)
                t1 = time.perf_counter_ns()
                if length != BIG_LEN:
                    raise WrongValue(f"the 20k build's length came back as {length!r}")
                gc.collect()
                t2 = time.perf_counter_ns()
                value = decode(text)
                t3 = time.perf_counter_ns()
                _check_big(value)
                del value
                builds.append(t1 - t0)
                decodes.append(t3 - t2)
        record("big_result", samples)
        if floor is not None:
            record("big_result_build", builds)
            record("big_result_decode", decodes)
            record("big_result_floor", [b + d for b, d in zip(builds, decodes, strict=True)])

    def cold_start(make: Callable[[], Any] = make, name: str = "cold_start", floors: bool = False) -> None:
        # With floors (ours): the bare deno floor, deno spawned on an empty script, timed just
        # before each of our starts, so that the two meet the same moment of the machine.
        workdir = Path(tempfile.mkdtemp(prefix="bench-deno-floor-"))
        try:
            commands = deno_floor_commands(workdir) if floors else {}
            if commands:
                result["deno_floor_command"] = commands
            floor_samples: dict[str, list[int]] = {key: [] for key in commands}
            samples: list[int] = []
            for i in range(params.cold_warmup + params.cold_runs):
                for key, argv in commands.items():
                    gc.collect()
                    spent = spawn_to_exit_ns(argv, workdir)
                    if i >= params.cold_warmup:
                        floor_samples[key].append(spent)
                gc.collect()
                t0 = time.perf_counter_ns()
                cold = make()
                try:
                    value = cold.eval(WARM_CODE)
                    t1 = time.perf_counter_ns()
                finally:
                    # Teardown is not part of "time to first result", but it must finish
                    # before the next run so a dying worker does not compete for the CPU.
                    cold.close()
                if value != 2:
                    raise WrongValue(f"cold eval({WARM_CODE!r}) returned {value!r}, expected 2")
                if i >= params.cold_warmup:
                    samples.append(t1 - t0)
            record(name, samples)
            for key, taken in floor_samples.items():
                record(key, taken)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def warm_eval_unmonitored() -> None:
        # Ours only: the same warm loop with no resource limit, so the monitor thread never
        # samples this worker; the difference to warm_eval is the monitoring overhead.
        from pydeno.host.process.monitor import Watch

        with pydeno.Runtime(max_memory=None, max_threads=None, cpu_limit=None) as quiet:
            _time_evals(quiet, WARM_CODE, 2, params.warmup)
            gc.collect()
            record("warm_eval_unmonitored", _time_evals(quiet, WARM_CODE, 2, params.iterations))
            process = quiet._sup.process
            assert process is not None
            watch = Watch(pid=process.pid, max_memory=1 << 40, max_threads=1 << 20, cpu_limit=None)
            t0 = time.perf_counter_ns()
            for _ in range(200):
                watch.sample()
            result["monitor_sample_us"] = round((time.perf_counter_ns() - t0) / 200 / 1000, 1)

    def async_driver() -> None:
        # Ours only: the same two loops through AsyncRuntime under asyncio, so the sync
        # driver's cost is seen apart from the async one's (both sit on the same sans-IO
        # core; neither wraps the other).
        import asyncio

        async def loops() -> None:
            async with pydeno.AsyncRuntime() as art:
                await art.bind_function("add", lambda a, b: a + b)
                for name, code, expected in (("warm_eval_async", WARM_CODE, 2), ("host_call_async", HOST_CALL_CODE, 3)):
                    for _ in range(params.warmup):
                        await art.eval(code)
                    gc.collect()
                    samples: list[int] = []
                    clock = time.perf_counter_ns
                    for _ in range(params.iterations):
                        t0 = clock()
                        value = await art.eval(code)
                        samples.append(clock() - t0)
                        if value != expected:
                            raise WrongValue(f"async eval({code!r}) returned {value!r}, expected {expected!r}")
                    record(name, samples)

        asyncio.run(loops())

    def pool_sections() -> None:
        # Checkout alone, and checkout + first eval, from a pool that is full each time. For
        # ours, each sample is followed by one of the wake floor's, after the same sleep.
        pool = _make_pool(side)
        workdir = Path(tempfile.mkdtemp(prefix="bench-wake-floor-"))
        wake: WakeFloor | None = None
        try:
            if side == "ours":
                wake = WakeFloor(workdir)
            checkout_ns: list[int] = []
            first_ns: list[int] = []
            wake_ns: list[int] = []
            last_full: float | None = None
            for i in range(params.cold_warmup + params.cold_runs):
                full = _wait_pool_full(side, pool)
                gc.collect()
                started = time.perf_counter()
                t0 = time.perf_counter_ns()
                with pool.checkout() as pooled:
                    t1 = time.perf_counter_ns()
                    value = pooled.eval(WARM_CODE)
                    t2 = time.perf_counter_ns()
                if value != 2:
                    raise WrongValue(f"pooled eval returned {value!r}")
                if i >= params.cold_warmup:
                    checkout_ns.append(t1 - t0)
                    first_ns.append(t2 - t0)
                if wake is not None:
                    # The pool hands out its oldest idle worker: the one that was its newest,
                    # ready just as it was last seen full. The echo sleeps as long.
                    slept = started - last_full if last_full is not None else started - full
                    spent = wake.round_trip_ns(slept)
                    if i >= params.cold_warmup:
                        wake_ns.append(spent)
                last_full = full
            record("pool_checkout", checkout_ns)
            record("pool_first_eval", first_ns)
            if wake is not None:
                record("wake_floor", wake_ns)
            # Evals per second with POOL_SIZE runtimes from the pool, one thread each.
            _wait_pool_full(side, pool)
            counts = [0] * POOL_SIZE
            stop = time.monotonic() + params.window_s

            def worker(slot: int) -> None:
                with pool.checkout() as mine:
                    while time.monotonic() < stop:
                        mine.eval(WARM_CODE)
                        counts[slot] += 1

            threads = [threading.Thread(target=worker, args=(i,)) for i in range(POOL_SIZE)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            total = sum(counts)
            # As time per eval (lower is better, like every other row), in ns for record().
            record("pool_throughput", [int(params.window_s * 1e9 / max(1, total))])
            result["pool_evals_per_second"] = round(total / params.window_s)
        finally:
            pool.close()
            if wake is not None:
                wake.close()
            shutil.rmtree(workdir, ignore_errors=True)

    def pool_setup() -> None:
        # Checkout + first eval from a full pool whose workers were set up (a module added,
        # a function bound, code evaluated), beside the same from a pool without setup=,
        # alternating sample by sample so that both see the same machine.
        def setup(rt: Any) -> None:
            rt.add_module("lib", SETUP_MODULE)
            rt.bind_function("add", lambda a, b: a + b)
            rt.eval(SETUP_CODE)

        pools: dict[str, Any] = {}
        try:
            pools["pool_first_eval_setup"] = pydeno.SandboxPool(size=POOL_SIZE, setup=setup)
            pools["pool_first_eval_plain"] = pydeno.SandboxPool(size=POOL_SIZE)
            samples: dict[str, list[int]] = {name: [] for name in pools}
            for i in range(params.cold_warmup + params.cold_runs):
                for name, pool in pools.items():
                    for other in pools.values():
                        _wait_pool_full(side, other)
                    gc.collect()
                    t0 = time.perf_counter_ns()
                    with pool.checkout() as pooled:
                        value = pooled.eval(WARM_CODE)
                        t1 = time.perf_counter_ns()
                    if value != 2:
                        raise WrongValue(f"pooled eval returned {value!r}")
                    if i >= params.cold_warmup:
                        samples[name].append(t1 - t0)
            for name, taken in samples.items():
                record(name, taken)
        finally:
            for pool in pools.values():
                pool.close()

    def two_mb_to_host() -> None:
        with make() as big_rt:
            samples: list[int] = []
            for i in range(params.big_warmup + params.big_runs):
                gc.collect()
                t0 = time.perf_counter_ns()
                value = big_rt.eval(TWO_MB_CODE)
                t1 = time.perf_counter_ns()
                if not isinstance(value, list) or len(value) != TWO_MB_LEN:
                    raise WrongValue("the 2 MB value came back wrong")
                if i >= params.big_warmup:
                    samples.append(t1 - t0)
                del value
        record("two_mb_to_host", samples)

    def two_mb_to_guest() -> None:
        # Through a host function's result, which both sides support.
        value = [
            {"id": i, "name": f"item-{i}", "tags": ["a", "b", "c"], "score": i / 8, "note": "x" * 64}
            for i in range(TWO_MB_LEN)
        ]
        with make() as big_rt:
            big_rt.bind_function("big", lambda: value)
            samples: list[int] = []
            for i in range(params.big_warmup + params.big_runs):
                gc.collect()
                t0 = time.perf_counter_ns()
                seen = big_rt.eval(TWO_MB_TO_GUEST_CODE[side])
                t1 = time.perf_counter_ns()
                if seen != TWO_MB_LEN + 3:
                    raise WrongValue(f"the guest saw {seen!r} for the 2 MB value")
                if i >= params.big_warmup:
                    samples.append(t1 - t0)
        record("two_mb_to_guest", samples)

    def code_mode() -> None:
        def items(args: dict[str, Any]) -> list[dict[str, Any]]:
            return [{"id": i, "name": f"item {i}"} for i in range(args["n"])]

        def count(args: dict[str, Any]) -> int:
            return int(args["n"]) + 1

        fns = {"items": items, "count": count, "echo": count}
        if side == "ours":
            tools = [pydeno.Tool(name, fn, input_schema=CODE_MODE_SCHEMA) for name, fn in fns.items()]
            runner: Any = pydeno.CodeMode(tools)
        else:
            # The peer's API, which this file is not type-checked against.
            peer_api: Any = pydeno
            tools = [peer_api.SchemaTool(name, f"{name}.", CODE_MODE_SCHEMA, fn) for name, fn in fns.items()]
            runner = peer_api.AgentSandbox(tools=tools)
        code = CODE_MODE_CODE[side]
        try:
            samples: list[int] = []
            for i in range(params.warmup // 4 + params.iterations // 8):
                t0 = time.perf_counter_ns()
                outcome = runner.execute(code)
                t1 = time.perf_counter_ns()
                value = outcome.value if side == "ours" else outcome.result
                if not isinstance(value, list) or len(value) != CODE_MODE_ITEMS or value[-1]["b"] != 3:
                    raise WrongValue(f"the Code Mode execution gave {str(value)[:200]!r}")
                if i >= params.warmup // 4:
                    samples.append(t1 - t0)
            record("code_mode", samples)
            if side == "ours":
                # What two of its parts cost: validating the three calls' arguments on the
                # host, and stripping the program's types in the worker (a TypeScript eval
                # against the same JavaScript one).
                t0 = time.perf_counter_ns()
                for _ in range(1000):
                    for t, n in zip(tools, (1000, 1, 2), strict=True):
                        t.validate({"n": n})
                validation_us = (time.perf_counter_ns() - t0) / 1000 / 1000
                strip: dict[str, list[int]] = {"js": [], "ts": []}
                with make() as rt:
                    for i in range(params.warmup + params.iterations):
                        lang = "ts" if i % 2 else "js"
                        t0 = time.perf_counter_ns()
                        rt.eval("{ const a = 1; const b = [a, 2, 3].map((x) => x * 2); b.length }", lang=lang)
                        if i >= params.warmup:
                            strip[lang].append(time.perf_counter_ns() - t0)
                result["code_mode_costs"] = {
                    "validation_us": round(validation_us, 1),
                    "strip_us": round((statistics.median(strip["ts"]) - statistics.median(strip["js"])) / 1000, 1),
                }
        finally:
            runner.close()

    def idle_rss() -> None:
        with make() as idle:
            idle.eval(WARM_CODE)
            time.sleep(SETTLE_SECONDS)
            gc.collect()
            result["idle_rss"] = process_rss()
            result["idle_uss"] = process_memory()
            result["idle_cpu"] = idle_cost(params.idle_s)

    def idle_pool() -> None:
        pool = _make_pool(side, IDLE_POOL_SIZE)
        try:
            _wait_pool_full(side, pool, IDLE_POOL_SIZE)
            time.sleep(SETTLE_SECONDS)
            gc.collect()
            result["idle_pool_cpu"] = {"size": IDLE_POOL_SIZE, **idle_cost(params.idle_s)}
        finally:
            pool.close()

    def density() -> None:
        # DENSITY_WORKERS idle runtimes alive at once: their workers' PSS (each shared page
        # split between the processes that map it), then the same runtimes driven at once.
        runtimes: list[Any] = []
        try:
            for _ in range(max(DENSITY_WORKERS, OVERSUBSCRIBED_RUNTIMES)):
                runtimes.append(make())
                value = runtimes[-1].eval(WARM_CODE)
                if value != 2:
                    raise WrongValue(f"eval({WARM_CODE!r}) returned {value!r}")
            time.sleep(SETTLE_SECONDS)
            gc.collect()
            memory = process_memory()
            pss = memory["worker_pss_bytes"] / DENSITY_WORKERS
            result["density"] = {
                "workers": DENSITY_WORKERS,
                "worker_processes": len(memory["workers"]),
                "pss_per_worker_bytes": round(pss),
                "uss_per_worker_bytes": round(memory["worker_uss_bytes"] / DENSITY_WORKERS),
                "workers_per_gib": round(2**30 / pss, 2),
                "shared_pss_bytes": memory["shared_pss_bytes"],
                "memory": memory,
            }
            result["oversubscribed"] = evals_per_second(runtimes[:OVERSUBSCRIBED_RUNTIMES], params.window_s)
        finally:
            for each in runtimes:
                each.close()

    def deno_floor_memory_section() -> None:
        workdir = Path(tempfile.mkdtemp(prefix="bench-deno-floor-"))
        try:
            result["deno_floor_memory"] = deno_floor_memory(workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def oversubscribed_async() -> None:
        if side == "ours":
            make_async: Callable[[], Any] = pydeno.AsyncRuntime
        else:
            peer_async: Any = pydeno
            make_async = peer_async.AsyncIsolatedRuntime
        result["oversubscribed_async"] = async_evals_per_second(make_async, OVERSUBSCRIBED_RUNTIMES, params.window_s)

    section("warm_eval", warm_eval)
    if side == "ours":
        section("warm_eval_unmonitored", warm_eval_unmonitored)
    section("host_call", host_call)
    section("cpu_per_eval", cpu_per_eval)
    if side == "ours":
        section("async_driver", async_driver)
    section("rss", rss)
    section("close", close_warm)
    section("big_result", big_result)
    section("cold_start", lambda: cold_start(floors=side == "ours"))
    if side == "ours":
        # The default is sandbox="require"; the difference is what the OS layers and the
        # self-test cost at start-up.
        section("cold_start_unsandboxed", lambda: cold_start(lambda: pydeno.Runtime(sandbox="off"), "cold_start_off"))
    if side != "peer-inprocess":
        section("pool", pool_sections)
        if side == "ours":
            section("pool_setup", pool_setup)
        section("two_mb_to_host", two_mb_to_host)
        section("two_mb_to_guest", two_mb_to_guest)
        section("idle_rss", idle_rss)
        section("idle_pool", idle_pool)
        section("density", density)
        if side == "ours":
            section("deno_floor_memory", deno_floor_memory_section)
        section("oversubscribed_async", oversubscribed_async)
        section("code_mode", code_mode)
    return result


def run_side(side: str, params: Params, json_out: Path) -> int:
    result = measure(side, params)
    # The driver reads this only once we have exited, so a plain write cannot be seen half done.
    json_out.write_text(json.dumps(result), encoding="utf-8")
    return 0


# ---------------------------------------------------------------------------------------
# Driver side (runs under our interpreter)
# ---------------------------------------------------------------------------------------


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
        "host_call_p50",
        f"host call eval({HOST_CALL_CODE!r}) p50",
        "host_call",
        "p50_us",
        "us",
        targets=(Target(0.2, ISSUE20), Target(0.4, ISSUE7)),
    ),
    Row("host_call_p99", f"host call eval({HOST_CALL_CODE!r}) p99", "host_call", "p99_us", "us"),
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
        "ours: bare deno importing node:inspector p50",
        "deno_floor_inspector",
        "p50_ms",
        "ms",
        has_ratio=False,
    ),
    Row(
        "deno_floor_worker_flags_p50",
        "ours: the same, its session connected, with the worker's flags (no code cache) p50",
        "deno_floor_worker_flags",
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
        "ours: bare idle deno with node:inspector USS, over the peer's idle worker",
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
        f"ours: the same with node:inspector, {DENSITY_WORKERS} alive, over the peer's per worker",
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


def _figure(side: dict[str, Any] | None, section: str, key: str) -> float | None:
    if not side:
        return None
    part = side.get(section)
    if not isinstance(part, dict) or not isinstance(part.get(key), int | float):
        return None
    return float(part[key])


def _value(side: dict[str, Any] | None, row: Row) -> float | None:
    return _figure(side, row.section, row.key)


def _denominator(results: dict[str, Any], row: Row) -> float | None:
    side, section, key = row.over or ("peer", row.section, row.key)
    return _figure(results.get(side), section, key)


def _fmt(value: float | None, unit: str) -> str:
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


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _installed_version(python: Path, package: str) -> str | None:
    probe = f"import importlib.metadata as m; print(m.version({package!r}))"
    proc = subprocess.run([str(python), "-I", "-c", probe], capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def ensure_peer_venv(venv: Path) -> Path:
    """The peer's interpreter, creating the venv and installing the peer only if missing."""
    python = _venv_python(venv)
    if not python.exists():
        print(f"creating the peer venv at {venv} ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if _installed_version(python, "pydeno") != PEER_VERSION:
        print(f"installing pydeno=={PEER_VERSION} into {venv} ...", file=sys.stderr, flush=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", f"pydeno=={PEER_VERSION}"],
            check=True,
        )
    return python


def machine_info() -> dict[str, Any]:
    cpu_model = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
    }
    if hasattr(os, "sched_getaffinity"):
        info["cpus_usable"] = len(os.sched_getaffinity(0))
    if hasattr(os, "getloadavg"):
        # A busy machine skews everything; recorded so a noisy run can be recognised.
        info["loadavg_at_start"] = [round(x, 2) for x in os.getloadavg()]
    return info


def our_versions() -> dict[str, Any]:
    versions: dict[str, Any] = {}
    try:
        versions["ours"] = importlib.metadata.version("pydeno")
    except importlib.metadata.PackageNotFoundError:
        versions["ours"] = None
    try:
        try:
            from pydeno.host.process.staging import find_deno
        except ImportError:  # an older layout
            try:
                from pydeno.host._staging import find_deno  # type: ignore[import-not-found, no-redef]
            except ImportError:  # older still
                from pydeno.host._process import find_deno  # type: ignore[import-not-found, no-redef]

        deno = find_deno()
        out = subprocess.run([deno, "--version"], capture_output=True, text=True, check=True, timeout=30).stdout
        versions["deno"] = out.splitlines()[0].strip() if out else None
        versions["deno_full"] = out.strip()
        versions["deno_path"] = deno
    except (ImportError, OSError, subprocess.SubprocessError) as exc:
        versions["deno"] = f"unavailable: {exc}"
    git = subprocess.run(
        ["git", "-C", str(HERE.parent), "describe", "--always", "--dirty"], capture_output=True, text=True, check=False
    )
    if git.returncode == 0:
        versions["ours_git"] = git.stdout.strip()
    return versions


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
            merged[name] = _summary(pooled, unit)
            # Pooling hides a side that is fast in one process and slow in the next (the
            # peer's in-process runtime is bimodal here); keep each round's p50 to show it.
            merged[name][f"p50_per_round_{unit}"] = [
                run[name][f"p50_{unit}"] for run in runs if isinstance(run.get(name), dict)
            ]
    for key, headline in MEDIAN_ROUND_SECTIONS.items():
        measured = [run[key] for run in runs if isinstance(run.get(key), dict) and headline in run[key]]
        merged.pop(key, None)
        if measured:
            ordered = sorted(measured, key=lambda part: float(part[headline]))
            merged[key] = dict(ordered[(len(ordered) - 1) // 2])
            merged[key][f"{headline}_per_round"] = [part[headline] for part in measured]
    merged["wall_seconds"] = round(sum(float(run.get("wall_seconds", 0.0)) for run in runs), 2)
    return merged


def run_script_side(
    script: Path, side: str, python: str, argv: list[str], output: Path, label: str, timeout: float
) -> dict[str, Any]:
    """Run ``script --side side`` under python and return the JSON it wrote, or the error
    that stopped it; ``wall_seconds`` is how long it took. bench_memory.py runs its sides
    through this too."""
    tmp = output.with_name(f"{output.stem}.{side}.tmp")
    tmp.unlink(missing_ok=True)
    # -I: neither PYTHONPATH nor the working directory may put the other side's package
    # first on sys.path; the child also checks which pydeno it imported.
    cmd = [python, "-I", str(script.resolve()), "--side", side, "--json-out", str(tmp), *argv]
    print(f"{label}measuring {side} ({python}) ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, check=False, timeout=timeout, cwd=HERE)
    except subprocess.TimeoutExpired:
        return {"side": side, "errors": {"process": f"timed out after {timeout:.0f}s"}}
    except OSError as exc:
        return {"side": side, "errors": {"process": f"could not start {python}: {exc}"}}
    elapsed = time.perf_counter() - started
    if proc.returncode != 0 or not tmp.exists():
        return {"side": side, "errors": {"process": f"exited with code {proc.returncode}"}}
    data: dict[str, Any] = json.loads(tmp.read_text(encoding="utf-8"))
    tmp.unlink()
    data["wall_seconds"] = round(elapsed, 2)
    return data


def run_child(side: str, python: str, params: Params, output: Path, label: str) -> dict[str, Any]:
    return run_script_side(Path(__file__), side, python, params.argv(), output, f"{label}: ", CHILD_TIMEOUT_S)


def compute_ratios(results: dict[str, Any]) -> dict[str, float | None]:
    """Every row's ratio, ours over its denominator (the peer isolated unless the row names
    another). A rate's ratio is also written the other way round, as time per eval (peer's
    rate over ours), under ``<key>_time_per_eval`` so it reads like every other row."""
    ratios: dict[str, float | None] = {}
    for row in ROWS:
        if not row.has_ratio:
            continue
        mine, theirs = _value(results.get("ours"), row), _denominator(results, row)
        ratios[row.ratio_key] = round(mine / theirs, 4) if mine is not None and theirs else None
        if row.higher_is_better:
            ratios[f"{row.ratio_key}_time_per_eval"] = round(theirs / mine, 4) if theirs is not None and mine else None
    return ratios


def _compares(row: Row, target: Target) -> str:
    if target.on_value:
        return f"ours, {row.unit}"
    side, section, _ = row.over or ("peer", row.section, row.key)
    if side == "ours":
        return f"ours / ours' {section}"
    return f"ours / {side.replace('_', ' ')}" + (" (isolated)" if side == "peer" else "")


def _target_entry(row: Row, target: Target, figure: float | None) -> dict[str, Any]:
    bound = "value" if target.on_value else "ratio"
    return {
        "source": target.source,
        "phase": "this issue" if target.source == CURRENT_ISSUE else "earlier",
        "compares": _compares(row, target),
        "direction": target.direction,
        "target": target.limit,
        f"{'min' if target.at_least else 'max'}_{bound}": target.limit,
        "value": figure,
        "met": target.holds(figure),
    }


def compute_targets(results: dict[str, Any], ratios: dict[str, float | None]) -> dict[str, Any]:
    """metric -> its target (the newest), the figure it is held to, and whether it holds;
    a target an earlier issue set for the same metric goes under "earlier"."""
    targets: dict[str, Any] = {}
    for row in ROWS:
        if not row.targets:
            continue
        entries = []
        for target in row.targets:
            figure = _value(results.get("ours"), row) if target.on_value else ratios.get(row.ratio_key)
            entries.append(_target_entry(row, target, figure))
        targets[row.ratio_key] = {"label": row.label, **entries[0], "earlier": entries[1:]}
    return targets


def _verdict(met: bool | None) -> str:
    return "" if met is None else (" ok" if met else " MISS")


def _target_cell(row: Row, targets: dict[str, Any]) -> str:
    entry = targets.get(row.ratio_key)
    if not entry:
        return "-"
    cells = []
    for part in [entry, *entry["earlier"]]:
        what = "ours " if part["compares"].startswith("ours,") else ""
        cell = f"{what}{part['direction']} {part['target']:.2f}{_verdict(part['met'])}"
        cells.append(cell if part is entry else f"{part['source']}: {cell}")
    return cells[0] + (f" ({'; '.join(cells[1:])})" if cells[1:] else "")


def _ratio_cell(row: Row, ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:.2f} (higher is better)" if row.higher_is_better else f"{ratio:.2f}"


def _theirs_cell(results: dict[str, Any], row: Row) -> str:
    if row.over is None:
        return _fmt(_value(results.get("peer"), row), row.unit)
    side, section, _ = row.over
    figure = _fmt(_denominator(results, row), row.unit)
    return f"{figure} (ours, {section})" if side == "ours" else f"{figure} ({side.replace('_', ' ')})"


def render_table(results: dict[str, Any]) -> str:
    ours, inproc = results["ours"], results.get("peer_inprocess")
    targets = results.get("targets") or {}
    header = ["metric", "ours", "peer (isolated)", "ratio", "target", "peer in-process (not like-for-like)"]
    lines: list[list[str]] = []
    for row in ROWS:
        in_process = _fmt(_value(inproc, row), row.unit)
        if row.section == "rss" and inproc and "rss" in inproc:
            # No worker process exists in-process; the whole interpreter is the honest figure.
            in_process = f"no worker; host {inproc['rss']['host_bytes'] / 2**20:.1f} MiB"
        lines.append(
            [
                row.label,
                _fmt(_value(ours, row), row.unit),
                _theirs_cell(results, row),
                _ratio_cell(row, results["ratios"].get(row.ratio_key)),
                _target_cell(row, targets),
                in_process,
            ]
        )
    widths = [max(len(r[i]) for r in [header, *lines]) for i in range(len(header))]
    right = {1, 2, 3, 5}

    def fmt_line(cells: list[str]) -> str:
        padded = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return " | ".join(padded).rstrip()

    rule = "-+-".join("-" * w for w in widths)
    return "\n".join([fmt_line(header), rule, *(fmt_line(line) for line in lines)])


def render_targets(targets: dict[str, Any]) -> str:
    """Every target of the run, the current issue's first: held or missed."""
    current = [(k, t) for k, t in targets.items() if t["phase"] == "this issue"]
    earlier = [(k, t) for k, t in targets.items() if t["phase"] != "this issue"]
    earlier += [(k, {**e, "label": t["label"]}) for k, t in targets.items() for e in t["earlier"]]
    lines = []
    for title, group in ((f"targets of {CURRENT_ISSUE}", current), ("earlier targets", earlier)):
        if not group:
            continue
        held = sum(1 for _, t in group if t["met"])
        lines.append(f"{title}: {held} of {len(group)} met")
        width = max(len(t["label"]) for _, t in group)
        for _, t in group:
            value = "-" if t["value"] is None else f"{t['value']:.3f}"
            verdict = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
            source = "" if t["phase"] == "this issue" else f"  [{t['source']}]"
            lines.append(
                f"  {t['label'].ljust(width)}  {t['compares']} = {value} {t['direction']} {t['target']:.2f}: "
                f"{verdict}{source}"
            )
    return "\n".join(lines)


def peer_interpreter(args: argparse.Namespace) -> str | None:
    """The peer's interpreter for this run: --peer-python, else benchmarks/.peer-venv (made
    the first time); None with --skip-peer. Exits with 2 if --peer-python does not exist."""
    if args.skip_peer:
        return None
    if args.peer_python and not args.peer_python.is_file():
        print(f"error: --peer-python {args.peer_python} does not exist", file=sys.stderr)
        raise SystemExit(2)
    # Absolute, but not resolved: the sides run from another working directory, and a
    # venv's python is a link the venv is found through.
    return str(args.peer_python.absolute()) if args.peer_python else str(ensure_peer_venv(DEFAULT_PEER_VENV))


def drive(args: argparse.Namespace, params: Params) -> int:
    output: Path = args.output.resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    peer_python = peer_interpreter(args)

    machine = machine_info()
    versions = our_versions()
    print(
        f"machine: {machine['cpu_count']} CPUs ({machine.get('cpu_model')}), {machine['platform']}, "
        f"python {machine['python']}, load {machine.get('loadavg_at_start')}"
    )
    print(f"ours: pydeno {versions.get('ours')} ({versions.get('ours_git', '?')}), deno: {versions.get('deno')}")

    results: dict[str, Any] = {"machine": machine, "versions": versions}
    sides = [side for side in SIDES if side == "ours" or peer_python is not None]
    rounds: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    # Rounds alternate the sides, so a slow drift of the machine (another tenant, thermal
    # throttling) lands on all of them instead of on whichever ran last.
    for number in range(1, args.rounds + 1):
        for side in sides:
            python = sys.executable if side == "ours" else str(peer_python)
            rounds[side].append(run_child(side, python, params, output, f"round {number}/{args.rounds}"))
    for side in SIDES:
        results[SIDE_KEYS[side]] = merge_rounds(rounds[side]) if side in rounds else None

    peer = results.get("peer")
    if peer_python is not None:
        peer_env = (peer or {}).get("env") or (results.get("peer_inprocess") or {}).get("env") or {}
        versions["peer"] = peer_env.get("pydeno_version")
        versions["peer_python"] = peer_env.get("python")
        print(f"peer: pydeno {versions['peer']} (python {versions['peer_python']}, {peer_python})")
        if versions["peer"] not in (None, PEER_VERSION):
            print(f"warning: the peer is pydeno {versions['peer']}, not {PEER_VERSION}", file=sys.stderr)
    results["params"] = {**(results["ours"].get("params") or {}), "rounds": args.rounds}
    results["ratios"] = compute_ratios(results)
    results["targets"] = compute_targets(results, results["ratios"])
    if hasattr(os, "getloadavg"):
        machine["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]

    print()
    print(render_table(results))
    print(
        "ratio = ours / peer (isolated) unless the peer column names another figure; lower is better "
        "except where marked (rates: the JSON also has their time-per-eval ratio, peer / ours)."
    )
    print()
    print(render_targets(results["targets"]))
    print(f"load average at the start {machine.get('loadavg_at_start')}, at the end {machine.get('loadavg_at_end')}")
    ours_result = results["ours"]
    if isinstance(ours_result.get("warm_eval_unmonitored"), dict) and isinstance(ours_result.get("warm_eval"), dict):
        on = ours_result["warm_eval"]["p50_us"]
        off = ours_result["warm_eval_unmonitored"]["p50_us"]
        results["monitoring"] = {
            "warm_eval_p50_us_monitored": on,
            "warm_eval_p50_us_unmonitored": off,
            "sample_cost_us": ours_result.get("monitor_sample_us"),
            "interval_s": 0.05,
        }
        print(
            f"monitoring: warm eval p50 {on} us with the monitor, {off} us without; "
            f"one sample costs {ours_result.get('monitor_sample_us')} us of host CPU, every 50 ms per worker"
        )
    failed = False
    for side in SIDES:
        data = results.get(SIDE_KEYS[side])
        for name, message in ((data or {}).get("errors") or {}).items():
            print(f"ERROR [{side}] {name}: {message}")
            failed = failed or side == "ours"

    tmp = output.with_name(output.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    tmp.replace(output)
    print(f"\nresults written to {output}")
    if failed:
        return 1
    if args.check_targets and any(t["met"] is False for t in results["targets"].values() if t["phase"] == "this issue"):
        return 2
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--peer-python", type=Path, help=f"interpreter with pydeno=={PEER_VERSION} installed")
    parser.add_argument("--skip-peer", action="store_true", help="measure only ours")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON results file")
    parser.add_argument("--quick", action="store_true", help="one round, fewer samples, shorter windows (about 30 s)")
    parser.add_argument("--iterations", type=int, help="timed warm evals per metric")
    parser.add_argument("--warmup", type=int, help="untimed warm evals before timing")
    parser.add_argument("--cold-runs", type=int, help="cold starts to time")
    parser.add_argument("--big-runs", type=int, help="20k-object results to time")
    parser.add_argument("--cold-warmup", type=int, help="untimed cold starts first")
    parser.add_argument("--big-warmup", type=int, help="untimed 20k-object results first")
    parser.add_argument("--window", type=float, help="seconds the oversubscribed runtimes are driven")
    parser.add_argument("--idle-seconds", type=float, help="seconds an idle worker or pool is watched")
    parser.add_argument("--rounds", type=int, help="times every side is measured, alternating (samples are pooled)")
    parser.add_argument(
        "--sections", type=lambda text: tuple(text.split(",")), help="run only these sections (comma-separated names)"
    )
    parser.add_argument("--check-targets", action="store_true", help="exit 2 when a target of this issue is missed")
    # Internal: the driver re-runs this file with these to measure one side.
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--json-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side and not args.json_out:
        parser.error("--side needs --json-out")
    for name in ("iterations", "warmup", "cold_runs", "big_runs", "cold_warmup", "big_warmup", "rounds"):
        value = getattr(args, name)
        least = 0 if name.endswith("warmup") else 1
        if value is not None and value < least:
            parser.error(f"--{name.replace('_', '-')} must be >= {least}")
    for name in ("window", "idle_seconds"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    base = QUICK_PARAMS if args.quick else DEFAULT_PARAMS

    def pick(name: str) -> int:
        value: int | None = getattr(args, name)
        return int(getattr(base, name)) if value is None else value

    params = Params(
        iterations=pick("iterations"),
        warmup=pick("warmup"),
        cold_runs=pick("cold_runs"),
        big_runs=pick("big_runs"),
        cold_warmup=pick("cold_warmup"),
        big_warmup=pick("big_warmup"),
        window_s=base.window_s if args.window is None else args.window,
        idle_s=base.idle_s if args.idle_seconds is None else args.idle_seconds,
        sections=args.sections or (),
    )
    if args.rounds is None:
        args.rounds = QUICK_ROUNDS if args.quick else DEFAULT_ROUNDS
    if args.side:
        return run_side(args.side, params, args.json_out)
    return drive(args, params)


if __name__ == "__main__":
    sys.exit(main())
