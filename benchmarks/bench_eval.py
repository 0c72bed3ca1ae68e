#!/usr/bin/env python3
"""Benchmark our pydeno against the reference peer (PyPI ``pydeno==0.13.2``) in one run.

Both packages are imported as ``pydeno``, so they cannot share an interpreter. This script
is therefore both the driver and the measurer: the driver re-runs this file once per side
(``--side ours|peer|peer-inprocess --json-out FILE``) under that side's interpreter, and
every side runs the same :func:`measure` function. Our side runs in a subprocess too, so
both are measured the same way (fresh interpreter, same process tree shape).

Usage::

    python benchmarks/bench_eval.py --peer-python /path/to/peer/bin/python
    python benchmarks/bench_eval.py --quick          # well under 30 s
    python benchmarks/bench_eval.py --skip-peer      # ours only

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
import statistics
import subprocess
import sys
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
    "two_mb_to_host",
    "two_mb_to_guest",
    "pool_throughput",
    "code_mode",
)
SECTION_UNITS = {
    "code_mode": "ms",
    "pool_checkout": "us",
    "pool_first_eval": "us",
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
}

WARM_CODE = "1+1"
HOST_CALL_CODE = "add(1, 2)"
BIG_LEN = 20_000
BIG_CODE = "Array.from({length: 20000}, (_, i) => ({id: i, name: 'x' + i}))"
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
THROUGHPUT_SECONDS = 2.0
# The peer's IsolatedRuntime kills the worker after 10,000 host calls by default.
PEER_DEFAULT_MAX_HOST_CALLS = 10_000


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

    def argv(self) -> list[str]:
        return [
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
        ]


DEFAULT_PARAMS = Params(iterations=2000, warmup=200, cold_runs=15, big_runs=15)
QUICK_PARAMS = Params(iterations=500, warmup=100, cold_runs=5, big_runs=5, cold_warmup=1, big_warmup=1)
# Each round measures every side once with the parameters above; ~13 s per round here.
DEFAULT_ROUNDS = 3
QUICK_ROUNDS = 2


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
    """Pids of our side's per-host helper processes (the zygote that forks confined workers):
    one per host process whatever the number of workers, so not part of a worker's RSS. The
    peer side has none that we know of: all its descendants count as workers."""
    # The spawner module, or in an older layout the process module, names them.
    for name in ("pydeno.host._spawner", "pydeno.host._process"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        infrastructure = getattr(module, "infrastructure", None)
        if infrastructure is not None:
            return frozenset(infrastructure().processes)
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


def _make_pool(side: str) -> Any:
    import pydeno

    if side == "ours":
        return pydeno.SandboxPool(size=POOL_SIZE)
    return pydeno.SandboxPool(size=POOL_SIZE)


def _wait_pool_full(side: str, pool: Any, limit: float = 30.0) -> None:
    """Until the pool has POOL_SIZE ready workers, so a checkout never waits on a start."""
    deadline = time.monotonic() + limit
    if side != "ours":
        pool.wait_ready()
        return
    while len(pool._core.idle) < POOL_SIZE or pool._core.starting:
        if time.monotonic() > deadline:
            raise RuntimeError("the pool did not fill up")
        time.sleep(0.01)
    time.sleep(0.05)  # let the last start's CPU settle


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
        },
        "errors": {},
    }
    errors: dict[str, str] = result["errors"]

    def record(name: str, samples_ns: list[int]) -> None:
        result[name] = _summary(samples_ns, SECTION_UNITS[name])
        result.setdefault("samples_ns", {})[name] = samples_ns

    def section(name: str, body: Callable[[], None]) -> None:
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

    def rss() -> None:
        if rt is None:
            raise RuntimeError("no runtime (warm_eval failed to create one)")
        gc.collect()
        result["rss"] = process_rss()

    def close_warm() -> None:
        if rt is not None:
            rt.close()

    def big_result() -> None:
        # A fresh runtime: the warm one may have died, and this one's heap starts clean.
        with make() as big_rt:
            for _ in range(params.big_warmup):
                _check_big(big_rt.eval(BIG_CODE))
            samples: list[int] = []
            for _ in range(params.big_runs):
                gc.collect()
                t0 = time.perf_counter_ns()
                value = big_rt.eval(BIG_CODE)
                t1 = time.perf_counter_ns()
                _check_big(value)
                del value
                samples.append(t1 - t0)
        record("big_result", samples)

    def cold_start(make: Callable[[], Any] = make, name: str = "cold_start") -> None:
        samples: list[int] = []
        for i in range(params.cold_warmup + params.cold_runs):
            gc.collect()
            t0 = time.perf_counter_ns()
            cold = make()
            try:
                value = cold.eval(WARM_CODE)
                t1 = time.perf_counter_ns()
            finally:
                # Teardown is not part of "time to first result", but it must finish before
                # the next run so a dying worker does not compete for the CPU.
                cold.close()
            if value != 2:
                raise WrongValue(f"cold eval({WARM_CODE!r}) returned {value!r}, expected 2")
            if i >= params.cold_warmup:
                samples.append(t1 - t0)
        record(name, samples)

    def warm_eval_unmonitored() -> None:
        # Ours only: the same warm loop with no resource limit, so the monitor thread never
        # samples this worker; the difference to warm_eval is the monitoring overhead.
        from pydeno.host._monitor import Watch

        with pydeno.Runtime(max_memory=None, max_threads=None, cpu_limit=None) as quiet:
            _time_evals(quiet, WARM_CODE, 2, params.warmup)
            gc.collect()
            record("warm_eval_unmonitored", _time_evals(quiet, WARM_CODE, 2, params.iterations))
            process = quiet._sup.process
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
        # Checkout alone, and checkout + first eval, from a pool that is full each time.
        pool = _make_pool(side)
        try:
            checkout_ns: list[int] = []
            first_ns: list[int] = []
            for i in range(params.cold_warmup + params.cold_runs):
                _wait_pool_full(side, pool)
                gc.collect()
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
            record("pool_checkout", checkout_ns)
            record("pool_first_eval", first_ns)
            # Evals per second with POOL_SIZE runtimes from the pool, one thread each.
            _wait_pool_full(side, pool)
            counts = [0] * POOL_SIZE
            stop = time.monotonic() + THROUGHPUT_SECONDS

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
            record("pool_throughput", [int(THROUGHPUT_SECONDS * 1e9 / max(1, total))])
            result["pool_evals_per_second"] = round(total / THROUGHPUT_SECONDS)
        finally:
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
            runner: Any = pydeno.CodeMode(tools)  # type: ignore[attr-defined]
        else:
            schema_tool: Any = pydeno.SchemaTool  # type: ignore[attr-defined]
            tools = [schema_tool(name, f"{name}.", CODE_MODE_SCHEMA, fn) for name, fn in fns.items()]
            runner = pydeno.AgentSandbox(tools=tools)  # type: ignore[call-arg]
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
            time.sleep(0.5)
            gc.collect()
            result["idle_rss"] = process_rss()

    section("warm_eval", warm_eval)
    if side == "ours":
        section("warm_eval_unmonitored", warm_eval_unmonitored)
    section("host_call", host_call)
    if side == "ours":
        section("async_driver", async_driver)
    section("rss", rss)
    section("close", close_warm)
    section("big_result", big_result)
    section("cold_start", cold_start)
    if side == "ours":
        # The default is sandbox="require"; the difference is what the OS layers and the
        # self-test cost at start-up.
        section("cold_start_unsandboxed", lambda: cold_start(lambda: pydeno.Runtime(sandbox="off"), "cold_start_off"))
    if side != "peer-inprocess":
        section("pool", pool_sections)
        section("two_mb_to_host", two_mb_to_host)
        section("two_mb_to_guest", two_mb_to_guest)
        section("idle_rss", idle_rss)
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


@dataclass(frozen=True, slots=True)
class Row:
    ratio_key: str
    label: str
    section: str
    key: str
    unit: str  # display unit
    target: float | None = None
    later_target: float | None = None


ROWS = (
    Row("warm_eval_p50", f"warm eval({WARM_CODE!r}) p50", "warm_eval", "p50_us", "us", target=0.4),
    Row("warm_eval_p99", f"warm eval({WARM_CODE!r}) p99", "warm_eval", "p99_us", "us"),
    Row("host_call_p50", f"host call eval({HOST_CALL_CODE!r}) p50", "host_call", "p50_us", "us", target=0.4),
    Row("host_call_p99", f"host call eval({HOST_CALL_CODE!r}) p99", "host_call", "p99_us", "us"),
    Row("warm_eval_async_p50", "ours: warm eval, AsyncRuntime (asyncio) p50", "warm_eval_async", "p50_us", "us"),
    Row("host_call_async_p50", "ours: host call, AsyncRuntime (asyncio) p50", "host_call_async", "p50_us", "us"),
    Row("cold_start_p50", "cold start to first result p50", "cold_start", "p50_ms", "ms", target=0.5),
    Row("cold_start_p90", "cold start to first result p90", "cold_start", "p90_ms", "ms"),
    Row("cold_start_off_p50", "cold start, ours with sandbox='off' p50", "cold_start_off", "p50_ms", "ms"),
    Row("big_result_p50", "20k-object result p50", "big_result", "p50_ms", "ms", target=0.2),
    Row("worker_rss", "worker RSS after warm-up", "rss", "worker_bytes", "MiB"),
    Row("idle_rss", "idle worker RSS", "idle_rss", "worker_bytes", "MiB", target=0.6),
    Row("idle_rss_shared", "per-host helper RSS (ours: zygote, 1 per host)", "idle_rss", "shared_bytes", "MiB"),
    Row("pool_checkout_p50", "pool checkout p50", "pool_checkout", "p50_us", "us"),
    Row("pool_first_eval_p50", "pool checkout + first eval p50", "pool_first_eval", "p50_us", "us", target=0.5),
    Row("pool_throughput", f"pool of {POOL_SIZE}, time per eval (2 threads)", "pool_throughput", "p50_us", "us"),
    Row("two_mb_to_host_p50", "2 MB value guest -> host p50", "two_mb_to_host", "p50_ms", "ms"),
    Row("two_mb_to_guest_p50", "2 MB value host -> guest p50", "two_mb_to_guest", "p50_ms", "ms"),
    Row("code_mode_p50", "Code Mode: 3 tool calls + 1,000 items p50", "code_mode", "p50_ms", "ms", target=0.4),
    Row("code_mode_validation", "ours: schema validation per execution", "code_mode_costs", "validation_us", "us"),
    Row("code_mode_strip", "ours: TypeScript strip per execution", "code_mode_costs", "strip_us", "us"),
)


def _value(side: dict[str, Any] | None, row: Row) -> float | None:
    if not side:
        return None
    section = side.get(row.section)
    if not isinstance(section, dict) or row.key not in section:
        return None
    return float(section[row.key])


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "MiB":
        return f"{value / 2**20:.1f} MiB"
    if unit == "us":
        return f"{value:.1f} us"
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
            from pydeno.host._staging import find_deno
        except ImportError:  # an older layout
            from pydeno.host._process import find_deno  # type: ignore[attr-defined, no-redef]

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


def merge_rounds(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One side's rounds as one result: timings pooled, RSS the median round's."""
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
    for key in ("rss", "rss_at_start"):
        measured = sorted((run[key] for run in runs if key in run), key=lambda rss: int(rss["worker_bytes"]))
        merged.pop(key, None)
        if measured:
            merged[key] = dict(measured[(len(measured) - 1) // 2])
            merged[key]["worker_bytes_per_round"] = [int(rss["worker_bytes"]) for rss in measured]
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


def compute_ratios(ours: dict[str, Any], peer: dict[str, Any] | None) -> dict[str, float | None]:
    ratios: dict[str, float | None] = {}
    for row in ROWS:
        mine, theirs = _value(ours, row), _value(peer, row)
        ratios[row.ratio_key] = round(mine / theirs, 4) if mine is not None and theirs else None
    return ratios


def compute_targets(ratios: dict[str, float | None]) -> dict[str, Any]:
    targets: dict[str, Any] = {}
    for row in ROWS:
        limit = row.target if row.target is not None else row.later_target
        if limit is None:
            continue
        ratio = ratios.get(row.ratio_key)
        targets[row.ratio_key] = {
            "max_ratio": limit,
            "phase": "this issue" if row.target is not None else "later",
            "met": None if ratio is None else ratio <= limit,
        }
    return targets


def render_table(results: dict[str, Any]) -> str:
    ours, peer, inproc = results["ours"], results.get("peer"), results.get("peer_inprocess")
    header = ["metric", "ours", "peer (isolated)", "ratio", "target", "peer in-process (not like-for-like)"]
    lines: list[list[str]] = []
    for row in ROWS:
        ratio = results["ratios"].get(row.ratio_key)
        if row.target is not None:
            verdict = "" if ratio is None else (" ok" if ratio <= row.target else " MISS")
            target = f"<= {row.target:.2f}{verdict}"
        elif row.later_target is not None:
            target = f"(later <= {row.later_target:.2f})"
        else:
            target = "-"
        in_process = _fmt(_value(inproc, row), row.unit)
        if row.section == "rss" and inproc and "rss" in inproc:
            # No worker process exists in-process; the whole interpreter is the honest figure.
            in_process = f"no worker; host {inproc['rss']['host_bytes'] / 2**20:.1f} MiB"
        lines.append(
            [
                row.label,
                _fmt(_value(ours, row), row.unit),
                _fmt(_value(peer, row), row.unit),
                "-" if ratio is None else f"{ratio:.2f}",
                target,
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
    results["ratios"] = compute_ratios(results["ours"], peer)
    results["targets"] = compute_targets(results["ratios"])

    print()
    print(render_table(results))
    print("ratio = ours / peer (isolated); lower is better.")
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
    parser.add_argument("--quick", action="store_true", help="fewer iterations and rounds (under 30 s)")
    parser.add_argument("--iterations", type=int, help="timed warm evals per metric")
    parser.add_argument("--warmup", type=int, help="untimed warm evals before timing")
    parser.add_argument("--cold-runs", type=int, help="cold starts to time")
    parser.add_argument("--big-runs", type=int, help="20k-object results to time")
    parser.add_argument("--cold-warmup", type=int, help="untimed cold starts first")
    parser.add_argument("--big-warmup", type=int, help="untimed 20k-object results first")
    parser.add_argument("--rounds", type=int, help="times every side is measured, alternating (samples are pooled)")
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
    )
    if args.rounds is None:
        args.rounds = QUICK_ROUNDS if args.quick else DEFAULT_ROUNDS
    if args.side:
        return run_side(args.side, params, args.json_out)
    return drive(args, params)


if __name__ == "__main__":
    sys.exit(main())
