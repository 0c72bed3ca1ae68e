"""bench_eval's command line and driver: run every side in its own subprocess, round after
round, merge the rounds, and print and write the results."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from _common.machine import machine_info, our_versions, print_header
from _common.output import write_json
from _common.peer import PEER_VERSION, peer_interpreter, warn_unless_peer_version
from _common.sides import add_side_arguments, check_side_arguments, run_script_side

from .config import (
    CHILD_TIMEOUT_S,
    DEFAULT_OUTPUT,
    DEFAULT_PARAMS,
    DEFAULT_ROUNDS,
    QUICK_PARAMS,
    QUICK_ROUNDS,
    SCRIPT,
    SIDE_KEYS,
    SIDES,
    Params,
)
from .measure import run_side
from .merge import merge_rounds
from .report import compute_ratios, compute_targets, render_table, render_targets
from .sections import BY_NAME

DESCRIPTION = "Benchmark our pydeno against the reference peer (PyPI ``pydeno==0.13.2``) in one run."


def run_child(side: str, python: str, params: Params, output: Path, label: str) -> dict[str, Any]:
    return run_script_side(SCRIPT, side, python, params.argv(), output, f"{label}: ", CHILD_TIMEOUT_S)


def drive(args: argparse.Namespace, params: Params) -> int:
    output: Path = args.output.resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    peer_python = peer_interpreter(args)

    machine = machine_info()
    versions = our_versions()
    print_header(machine, versions)

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
        warn_unless_peer_version(versions["peer"])
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

    write_json(output, results)
    print(f"\nresults written to {output}")
    if failed:
        return 1
    if args.check_targets and any(t["met"] is False for t in results["targets"].values() if t["phase"] == "this issue"):
        return 2
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
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
    add_side_arguments(parser, SIDES)
    args = parser.parse_args(argv)
    check_side_arguments(parser, args)
    for name in ("iterations", "warmup", "cold_runs", "big_runs", "cold_warmup", "big_warmup", "rounds"):
        value = getattr(args, name)
        least = 0 if name.endswith("warmup") else 1
        if value is not None and value < least:
            parser.error(f"--{name.replace('_', '-')} must be >= {least}")
    for name in ("window", "idle_seconds"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0")
    # A misspelt name would otherwise measure nothing and write an empty run.
    unknown = [name for name in args.sections or () if name not in BY_NAME]
    if unknown:
        parser.error(f"--sections: unknown {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
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
