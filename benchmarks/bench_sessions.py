#!/usr/bin/env python3
"""Many sessions on one host: a SessionPool with far more sessions than live workers.

Measured in one run, on this machine, with a real SQLite file:

* **create**: N sessions (default 1,000), each leased once and given a little state (one
  run that sets a global and calls a tool), with ``max_live=50`` and ``warm_workers=2``:
  every lease past the first 50 evicts the least recently used session;
* **evicted**: a second round-robin pass over all N: every lease finds its session evicted
  and restores it, a fresh worker replaying its journal (the tool is not called again);
* **evicted, paced**: the same for 200 sessions, each lease started once the warm workers
  are ready, as in a service with spare capacity: what the replay itself costs;
* **live**: leases of the 50 sessions that are live (a lease, a run, the end of the lease
  writing the journal);
* **memory held**: the live workers' unique and proportional memory (USS, PSS), the host
  process's RSS, and the SQLite file's size, after the passes.

Lease figures include the run inside the lease and the journal written at its end: what a
service pays per conversation turn. Writes ``benchmarks/results/bench_sessions.json``.

Usage::

    python benchmarks/bench_sessions.py               # 1,000 sessions
    python benchmarks/bench_sessions.py --sessions 200
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common.machine import machine_info  # noqa: E402
from _common.output import write_json  # noqa: E402
from _common.stats import summary  # noqa: E402

import pydeno  # noqa: E402

DEFAULT_OUTPUT = HERE / "results" / "bench_sessions.json"
MAX_LIVE = 50
FIRST_RUN = "globalThis.turns = [await tools.lookup(%d)]"
NEXT_RUN = "turns.push(turns.length); turns.length"


def workers() -> list[psutil.Process]:
    found = []
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if p.name() == "deno" and p.cmdline()[1:2] == ["run"]:
                found.append(p)
    return found


def memory_held(path: Path) -> dict[str, Any]:
    uss = pss = 0
    alive = workers()
    for p in alive:
        with contextlib.suppress(psutil.Error):
            full = p.memory_full_info()
            uss += full.uss
            pss += full.pss
    return {
        "live_workers": len(alive),
        "workers_uss_mib": uss / 2**20,
        "workers_pss_mib": pss / 2**20,
        "host_rss_mib": psutil.Process().memory_info().rss / 2**20,
        "sqlite_file_mib": sum(os.path.getsize(f) for f in path.parent.glob(path.name + "*")) / 2**20,
    }


def lease(sessions: pydeno.SessionPool, name: str, code: str) -> float:
    started = time.perf_counter()
    with sessions.lease(name) as agent:
        agent.run(code)
    return time.perf_counter() - started


def ready_warm_worker(sessions: pydeno.SessionPool) -> None:
    """Wait until the pool's warm workers are all started and idle."""
    warm = sessions._warm
    while warm is not None and len(warm._core.idle) < warm._core.size:
        time.sleep(0.005)


def run(n: int, warm: int) -> dict[str, Any]:
    calls = 0

    def lookup(x: int) -> int:
        nonlocal calls
        calls += 1
        return x

    names = [f"session-{i}" for i in range(n)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sessions.db"
        with (
            pydeno.SQLiteJournalStore(path) as store,
            pydeno.SessionPool(
                store, secrets.token_bytes(32), max_live=MAX_LIVE, warm_workers=warm, tools={"lookup": lookup}
            ) as sessions,
        ):
            created = [lease(sessions, name, FIRST_RUN % i) for i, name in enumerate(names)]
            evicted = [lease(sessions, name, NEXT_RUN) for name in names]
            tool_calls_after_replays = calls
            # The same, paced as a service with spare capacity would be: each lease of an
            # evicted session starts once a warm worker is ready (what the replay costs alone).
            paced = []
            for name in names[: min(n, 200)]:
                ready_warm_worker(sessions)
                paced.append(lease(sessions, name, NEXT_RUN))
            live_names = list(sessions._book.live)
            live = [lease(sessions, name, NEXT_RUN) for name in live_names for _ in range(4)]
            held = memory_held(path)
            stats = sessions.stats()
    if tool_calls_after_replays != n:
        raise SystemExit(f"replays called the tool again: {tool_calls_after_replays} calls for {n} sessions")
    return {
        "sessions": n,
        "max_live": MAX_LIVE,
        "warm_workers": warm,
        "create": summary(created),
        "evicted": summary(evicted),
        "evicted_paced": summary(paced),
        "live": summary(live),
        "memory": held,
        "stats": stats,
    }


def report(out: dict[str, Any]) -> str:
    m = out["machine"]
    r = out["result"]
    mem = r["memory"]
    lines = [
        f"machine: {m['cpu_count']} CPUs ({m.get('cpu_model')}), python {m['python']}, {m.get('platform')}",
        f"{r['sessions']} sessions, max_live={r['max_live']}, warm_workers={r['warm_workers']}, SQLite store",
        "lease (with one run and the journal written)   p50 ms    p90 ms    p99 ms",
    ]
    rows = (
        ("create", "new session"),
        ("evicted", "evicted session (replay)"),
        ("evicted_paced", "evicted, a warm worker ready (replay only)"),
        ("live", "live session"),
    )
    for key, label in rows:
        s = r[key]
        lines.append(f"  {label:<44} {s['p50_ms']:8.2f}  {s['p90_ms']:8.2f}  {s['p99_ms']:8.2f}")
    lines.append(
        f"memory held: {mem['live_workers']} workers, USS {mem['workers_uss_mib']:.0f} MiB, "
        f"PSS {mem['workers_pss_mib']:.0f} MiB; host RSS {mem['host_rss_mib']:.0f} MiB; "
        f"SQLite {mem['sqlite_file_mib']:.2f} MiB"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--warm-workers", type=int, default=2)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    out = {"machine": machine_info(), "result": run(args.sessions, args.warm_workers)}
    print(report(out))
    write_json(args.output, out)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
