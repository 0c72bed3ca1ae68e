#!/usr/bin/env python3
"""What Ray adds: short evals through ``pydeno.ray.RayPool`` against a local ``SandboxPool``.

Measured in one run, on this machine, with the same number of workers on each side (two: a
local ``SandboxPool(size=2)`` in this process; a ``RayPool`` of two actors with one worker
each, on a local Ray cluster of two CPUs):

* **throughput**: 2,000 evaluations of ``1 + 1``, each on a fresh worker (what a pool gives),
  from as many client threads as there are workers: evaluations per second, and the p50 /
  p99 time of one evaluation as its client saw it. The Ray pool is also measured through one
  ``map()`` of the 2,000 codes.
* **per-task overhead**: one client, evaluations paced so that a warm worker is always ready
  (a pause after each): the time of one evaluation when no worker start is in the way, on
  each side. Ray's per-task overhead is the difference of the two p50s.
* **Ray's floor**: a call of an empty method of a Ray actor, p50 / p99: what any task costs,
  back to back and paced as the evaluations are (the like-for-like floor of the overhead).

Writes ``benchmarks/results/bench_ray.json``.

Usage::

    python benchmarks/bench_ray.py            # full: 2,000 evaluations per side
    python benchmarks/bench_ray.py --quick    # 200
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common.machine import machine_info  # noqa: E402
from _common.output import write_json  # noqa: E402
from _common.stats import summary  # noqa: E402

import pydeno  # noqa: E402

DEFAULT_OUTPUT = HERE / "results" / "bench_ray.json"
PROGRAM = "1 + 1"
WORKERS = 2
# A pause long enough for a pool to have started its next spare worker.
PACE_S = 0.25


def checked(value: Any) -> None:
    if value != 2:
        raise SystemExit(f"an evaluation gave a wrong answer: {value!r}")


def clients(evaluate: Callable[[], Any], total: int, threads: int) -> dict[str, Any]:
    """``total`` evaluations from ``threads`` client threads, as fast as they go."""
    samples: list[float] = []
    lock = threading.Lock()
    left = [total]
    errors: list[BaseException] = []

    def client() -> None:
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            started = time.perf_counter()
            try:
                checked(evaluate())
            except BaseException as exc:  # noqa: BLE001 - reported once the run ends
                errors.append(exc)
                return
            elapsed = time.perf_counter() - started
            with lock:
                samples.append(elapsed)

    workers = [threading.Thread(target=client) for _ in range(threads)]
    started, cpu = time.perf_counter(), time.process_time()
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    if errors:
        raise SystemExit(f"an evaluation failed: {errors[0]!r}")
    return {
        "evals": total,
        "clients": threads,
        "seconds": seconds,
        "evals_per_s": total / seconds,
        # This process's CPU (every thread of it) per evaluation: for the Ray pool, the
        # driver's cost of a task, which bounds how many tasks one driver can keep going.
        "driver_cpu_ms_per_eval": cpu / total * 1e3,
        **summary(samples),
    }


def paced(evaluate: Callable[[], Any], calls: int, check: Callable[[Any], None] = checked) -> dict[str, float]:
    samples: list[float] = []
    for _ in range(calls):
        time.sleep(PACE_S)
        started = time.perf_counter()
        check(evaluate())
        samples.append(time.perf_counter() - started)
    return summary(samples)


def local(total: int, calls: int) -> dict[str, Any]:
    with pydeno.SandboxPool(size=WORKERS) as pool:

        def evaluate() -> Any:
            with pool.checkout() as rt:
                return rt.eval(PROGRAM)

        for _ in range(WORKERS):
            evaluate()  # warm both sides' code paths
        out = {"throughput": clients(evaluate, total, WORKERS), "paced": paced(evaluate, calls)}
        out["stats"] = {k: v for k, v in pool.stats().items() if k in ("commands", "workers_started", "cpu_seconds")}
    out["worker_cpu_ms_per_eval"] = out["stats"]["cpu_seconds"] / out["stats"]["workers_started"] * 1e3
    return out


def on_ray(total: int, calls: int) -> dict[str, Any]:
    import ray

    import pydeno.ray

    ray.init(address="local", num_cpus=WORKERS, include_dashboard=False, log_to_driver=False)
    try:

        @ray.remote(num_cpus=0)
        class Empty:
            def call(self) -> None:
                return None

        empty = Empty.remote()  # type: ignore[attr-defined]
        ray.get(empty.call.remote())
        floor: list[float] = []
        for _ in range(max(200, calls)):
            started = time.perf_counter()
            ray.get(empty.call.remote())
            floor.append(time.perf_counter() - started)
        # The floor of a paced command is a paced call: after a pause, every thread on the
        # way (the driver's, the actor's, the raylet's) has gone to sleep and is woken again,
        # which a call right after another does not pay.
        floor_paced = paced(lambda: ray.get(empty.call.remote()), calls, check=lambda value: None)
        ray.kill(empty)
        with pydeno.ray.RayPool(actors=WORKERS, workers_per_actor=1) as pool:
            for _ in range(WORKERS):
                checked(pool.eval(PROGRAM))
            out: dict[str, Any] = {"floor": summary(floor), "floor_paced": floor_paced}
            out["throughput"] = clients(lambda: pool.eval(PROGRAM), total, WORKERS)
            started, cpu = time.perf_counter(), time.process_time()
            values = pool.map([PROGRAM] * total)
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
            for value in values:
                checked(value)
            out["map"] = {
                "evals": total,
                "seconds": seconds,
                "evals_per_s": total / seconds,
                "driver_cpu_ms_per_eval": cpu / total * 1e3,
            }
            out["paced"] = paced(lambda: pool.eval(PROGRAM), calls)
            stats = pool.stats()
            out["stats"] = {k: stats[k] for k in ("commands", "workers_started", "cpu_seconds", "actors_replaced")}
            # A worker serves one evaluation: its whole CPU (start, warm-up, the eval) is the
            # evaluation's cost on its node.
            out["worker_cpu_ms_per_eval"] = stats["cpu_seconds"] / stats["workers_started"] * 1e3
    finally:
        ray.shutdown()
    return out


def main_run(args: argparse.Namespace) -> dict[str, Any]:
    total, calls = (200, 40) if args.quick else (2000, 200)
    out: dict[str, Any] = {"machine": machine_info(), "program": PROGRAM, "workers": WORKERS}
    out["ray_version"] = __import__("ray").__version__
    out["local_pool"] = local(total, calls)
    out["ray_pool"] = on_ray(total, calls)
    lp, rp = out["local_pool"], out["ray_pool"]
    out["ray_overhead_per_task_ms"] = {
        "p50": rp["paced"]["p50_ms"] - lp["paced"]["p50_ms"],
        "p99": rp["paced"]["p99_ms"] - lp["paced"]["p99_ms"],
        # What of it is pydeno's: the overhead less a paced empty actor call's.
        "over_paced_floor_p50": rp["paced"]["p50_ms"] - lp["paced"]["p50_ms"] - rp["floor_paced"]["p50_ms"],
    }
    out["throughput_ratio_ray_over_local"] = rp["throughput"]["evals_per_s"] / lp["throughput"]["evals_per_s"]
    return out


def report(out: dict[str, Any]) -> str:
    m = out["machine"]
    lp, rp = out["local_pool"], out["ray_pool"]
    lines = [
        f"machine: {m['cpu_count']} CPUs ({m.get('cpu_model')}), python {m['python']}, ray {out['ray_version']}, "
        f"load {m.get('loadavg_at_start')}",
        f"{lp['throughput']['evals']} evals, {out['workers']} workers, {out['workers']} client threads:",
        f"  local SandboxPool      {lp['throughput']['evals_per_s']:8.1f} evals/s   "
        f"p50 {lp['throughput']['p50_ms']:7.2f} ms   p99 {lp['throughput']['p99_ms']:7.2f} ms",
        f"  RayPool.eval           {rp['throughput']['evals_per_s']:8.1f} evals/s   "
        f"p50 {rp['throughput']['p50_ms']:7.2f} ms   p99 {rp['throughput']['p99_ms']:7.2f} ms",
        f"  RayPool.map            {rp['map']['evals_per_s']:8.1f} evals/s",
        f"  driver CPU per eval    local {lp['throughput']['driver_cpu_ms_per_eval']:.2f} ms, "
        f"RayPool.eval {rp['throughput']['driver_cpu_ms_per_eval']:.2f} ms, RayPool.map "
        f"{rp['map']['driver_cpu_ms_per_eval']:.2f} ms; worker CPU per eval {rp['worker_cpu_ms_per_eval']:.1f} ms",
        "one paced client (a warm worker always ready):",
        f"  local SandboxPool      p50 {lp['paced']['p50_ms']:7.2f} ms   p99 {lp['paced']['p99_ms']:7.2f} ms",
        f"  RayPool.eval           p50 {rp['paced']['p50_ms']:7.2f} ms   p99 {rp['paced']['p99_ms']:7.2f} ms",
        f"  Ray's per-task overhead p50 {out['ray_overhead_per_task_ms']['p50']:6.2f} ms   "
        f"(an empty actor call: p50 {rp['floor']['p50_ms']:.2f} ms back to back, "
        f"{rp['floor_paced']['p50_ms']:.2f} ms paced as the evaluations are)",
        f"  over a paced empty actor call  {out['ray_overhead_per_task_ms']['over_paced_floor_p50']:6.2f} ms",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 evaluations per side instead of 2,000")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the JSON goes")
    args = parser.parse_args()
    out = main_run(args)
    print(report(out))
    write_json(args.output, out)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
