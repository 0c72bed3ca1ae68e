#!/usr/bin/env python3
"""Worker memory over a long life: RSS growth across many evals, ours and the reference peer.

A long-lived runtime (a session, a tenant's runtime in a service) evaluates new code again and
again. This runs 100,000 evals of distinct code that keeps nothing alive itself on one runtime
and reports how much the worker's resident memory has grown at checkpoints, with a runtime
that repeats one identical eval and one whose every eval declares a new top-level ``let``
beside it. Like ``bench_eval.py``, the driver re-runs this file once per side (``--side ...
--json-out FILE``, through ``_common.sides``) under that side's interpreter, because both
packages are imported as ``pydeno``.

Usage::

    python benchmarks/bench_memory.py                  # ours (both sandbox modes) and the peer
    python benchmarks/bench_memory.py --quick          # 10,000 evals per workload
    python benchmarks/bench_memory.py --skip-peer      # ours only

The measuring side needs only the standard library, the ``pydeno`` under test and, optionally,
``psutil``, as in ``bench_eval.py``.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# A side runs with -I, which leaves this directory off sys.path. Only this directory: the
# checkout's root would put our pydeno ahead of the peer's.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _common.machine import machine_info, our_versions, print_header  # noqa: E402
from _common.output import render_grid, write_json  # noqa: E402
from _common.peer import peer_interpreter, warn_unless_peer_version  # noqa: E402
from _common.procfs import process_rss  # noqa: E402
from _common.sides import (  # noqa: E402
    add_side_arguments,
    check_side_arguments,
    run_script_side,
    write_side_result,
)

DEFAULT_OUTPUT = HERE / "results" / "bench_memory.json"
CHILD_TIMEOUT_S = 3600.0
DEFAULT_EVALS = 100_000
QUICK_EVALS = 10_000
CHECKPOINTS = (1_000, 10_000, 20_000, 50_000, 100_000)
# The peak is the largest growth among samples taken this often, checkpoints included.
SAMPLE_EVERY = 500
MiB = 2**20


@dataclass(frozen=True, slots=True)
class Workload:
    template: str  # eval number i is this with {i} replaced
    expected: Callable[[int], object]
    what: str

    def code(self, i: int) -> str:
        return self.template.replace("{i}", str(i))


WORKLOADS = {
    "distinct": Workload("({i}) + 1", lambda i: i + 1, "new code each time, keeping nothing alive"),
    "block": Workload("{ const x = {i}; x }", lambda i: i, "new code each time, its declaration inside a block"),
    "same": Workload("(7) + 1", lambda i: 8, "one identical eval, repeated"),
    "let": Workload(
        "let v{i} = {i}; v{i} + 1", lambda i: i + 1, "a new top-level let each time: every binding stays, by design"
    ),
}
DEFAULT_WORKLOADS = ("distinct", "block", "same", "let")
# The driver's order is the measuring order.
SIDES = ("ours", "ours-off", "peer")
SIDE_LABELS = {"ours": "ours (sandbox on)", "ours-off": "ours (sandbox off)", "peer": "peer (isolated)"}


# ---------------------------------------------------------------------------------------
# Measuring side (runs in a subprocess, under either venv)
# ---------------------------------------------------------------------------------------


def _private_bytes(pids: list[int]) -> int | None:
    """RssAnon of those processes: the worker's own pages, without the shared binary's."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
                for line in fh:
                    if line.startswith("RssAnon:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            return None
    return total


def _sample() -> tuple[int, int | None]:
    """RSS and private bytes of every worker of this process (per-host helpers left out)."""
    rss = process_rss()
    return int(rss["worker_bytes"]), _private_bytes([int(w["pid"]) for w in rss["workers"]])


def _make(side: str) -> Callable[[], Any]:
    import pydeno

    is_peer = hasattr(pydeno, "IsolatedRuntime")
    if side.startswith("ours"):
        if is_peer or not Path(pydeno.__file__).resolve().is_relative_to(HERE.parent):
            raise SystemExit(f"--side {side} imported {pydeno.__file__}, not the pydeno of {HERE.parent}")
        sandbox = "off" if side == "ours-off" else "require"
        return lambda: pydeno.Runtime(sandbox=sandbox)
    if not is_peer:
        raise SystemExit(f"--side {side} imported our package from {pydeno.__file__}, not the peer")
    # Checked against our package, which has no IsolatedRuntime; the peer is untyped here.
    peer_cls: Any = pydeno.IsolatedRuntime  # type: ignore[attr-defined]
    return peer_cls


def run_workload(make: Callable[[], Any], name: str, evals: int) -> dict[str, Any]:
    workload = WORKLOADS[name]
    checkpoints = sorted({n for n in CHECKPOINTS if n <= evals} | {evals})
    out: dict[str, Any] = {"evals": evals, "checkpoints": {}}
    with make() as rt:
        # The first eval is not counted: it is where a runtime finishes starting.
        if rt.eval("1") != 1:
            raise RuntimeError("eval('1') did not return 1")
        base_rss, base_private = _sample()
        out["baseline_bytes"] = base_rss
        out["baseline_private_bytes"] = base_private
        peak = (0, 0)
        started = time.perf_counter()
        run = rt.eval
        for i in range(1, evals + 1):
            code = workload.code(i)
            value = run(code)
            if value != workload.expected(i):
                raise RuntimeError(f"eval #{i} ({code!r}) returned {value!r}")
            if i % SAMPLE_EVERY and i not in checkpoints:
                continue
            rss, private = _sample()
            if rss - base_rss > peak[0]:
                peak = (rss - base_rss, i)
            if i in checkpoints:
                out["checkpoints"][str(i)] = {
                    "growth_bytes": rss - base_rss,
                    "private_growth_bytes": None if private is None or base_private is None else private - base_private,
                }
        out["seconds"] = round(time.perf_counter() - started, 2)
        out["peak_growth_bytes"], out["peak_at"] = peak
    return out


def measure(side: str, evals: int, workloads: list[str]) -> dict[str, Any]:
    import importlib.metadata

    import pydeno

    make = _make(side)
    result: dict[str, Any] = {
        "side": side,
        "env": {
            "python": sys.version.split()[0],
            "pydeno_version": importlib.metadata.version("pydeno"),
            "pydeno_file": pydeno.__file__,
        },
        "workloads": {},
        "errors": {},
    }
    for name in workloads:
        print(f"  {side}: {evals:,} evals, workload {name!r} ...", file=sys.stderr, flush=True)
        try:
            result["workloads"][name] = run_workload(make, name, evals)
        except Exception as exc:  # noqa: BLE001 - a failing workload is recorded; the others still run
            result["errors"][name] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
    return result


# ---------------------------------------------------------------------------------------
# Driver side (runs under our interpreter)
# ---------------------------------------------------------------------------------------


def run_child(side: str, python: str, evals: int, workloads: list[str], output: Path) -> dict[str, Any]:
    argv = ["--evals", str(evals), "--workloads", ",".join(workloads)]
    data = run_script_side(Path(__file__), side, python, argv, output, "", CHILD_TIMEOUT_S)
    data.pop("wall_seconds", None)
    return data


def _mib(value: int | None, signed: bool = True) -> str:
    if value is None:
        return "-"
    return f"{value / MiB:+.1f}" if signed else f"{value / MiB:.1f}"


def _growth(point: dict[str, Any] | None) -> str:
    if point is None:
        return "-"
    private = point.get("private_growth_bytes")
    return _mib(point["growth_bytes"]) + ("" if private is None else f" ({_mib(private)} private)")


def render_tables(results: dict[str, Any]) -> str:
    """One table per workload: a row per checkpoint, a column per side."""
    sides = [s for s in SIDES if s in results["sides"]]
    blocks: list[str] = []
    for name in results["params"]["workloads"]:
        runs = {s: (results["sides"][s].get("workloads") or {}).get(name) for s in sides}
        counts = sorted({int(n) for run in runs.values() if run for n in run["checkpoints"]})
        rows = [
            [
                "RSS after the first eval",
                *(_mib(r["baseline_bytes"], signed=False) if r else "-" for r in runs.values()),
            ]
        ]
        rows += [
            [f"growth after {n:,}", *(_growth(r["checkpoints"].get(str(n))) if r else "-" for r in runs.values())]
            for n in counts
        ]
        rows.append(
            [
                "peak growth (sampled)",
                *(f"{_mib(r['peak_growth_bytes'])} at {r['peak_at']:,}" if r else "-" for r in runs.values()),
            ]
        )
        rows.append(["time for the evals", *(f"{r['seconds']:.1f} s" if r else "-" for r in runs.values())])
        header = ["MiB", *(SIDE_LABELS[s] for s in sides)]
        workload = WORKLOADS[name]
        title = f"{name}: eval #i is {workload.template.replace('{i}', 'i')!r}, {workload.what}"
        blocks.append("\n".join([title, *render_grid(header, rows, right=set(range(1, len(header))))]))
    return "\n\n".join(blocks)


def drive(args: argparse.Namespace) -> int:
    output: Path = args.output.resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    peer_python = peer_interpreter(args)
    machine = machine_info()
    versions = our_versions()
    print_header(machine, versions)
    results: dict[str, Any] = {
        "machine": machine,
        "versions": versions,
        "params": {"evals": args.evals, "workloads": args.workloads, "sample_every": SAMPLE_EVERY},
        "sides": {},
    }
    for side in SIDES:
        if side == "peer" and peer_python is None:
            continue
        python = sys.executable if side.startswith("ours") else str(peer_python)
        results["sides"][side] = run_child(side, python, args.evals, args.workloads, output)
    peer = results["sides"].get("peer")
    if peer is not None:
        versions["peer"] = (peer.get("env") or {}).get("pydeno_version")
        warn_unless_peer_version(versions["peer"])

    print()
    print(render_tables(results))
    print("\ngrowth = worker RSS after that many evals minus its RSS after the first one;")
    print("private = the same for its anonymous pages only (RssAnon), without shared file pages.")
    failed = False
    for side, data in results["sides"].items():
        for name, message in (data.get("errors") or {}).items():
            print(f"ERROR [{side}] {name}: {message}")
            failed = failed or side.startswith("ours")
    write_json(output, results)
    print(f"\nresults written to {output}")
    return 1 if failed else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--peer-python", type=Path, help="interpreter with the peer installed")
    parser.add_argument("--skip-peer", action="store_true", help="measure only ours")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON results file")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_EVALS:,} evals per workload")
    parser.add_argument("--evals", type=int, help=f"evals per workload (default {DEFAULT_EVALS:,})")
    parser.add_argument(
        "--workloads", default=",".join(DEFAULT_WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}"
    )
    add_side_arguments(parser, SIDES)
    args = parser.parse_args(argv)
    check_side_arguments(parser, args)
    if args.evals is None:
        args.evals = QUICK_EVALS if args.quick else DEFAULT_EVALS
    if args.evals < 1:
        parser.error("--evals must be >= 1")
    args.workloads = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in args.workloads if w not in WORKLOADS]
    if unknown or not args.workloads:
        parser.error(f"--workloads: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(WORKLOADS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.side:
        if args.side.startswith("ours"):
            # -I left this checkout off sys.path; an installed pydeno elsewhere is not ours.
            sys.path.insert(0, str(HERE.parent))
        write_side_result(args.json_out, measure(args.side, args.evals, args.workloads))
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
