"""Limits hold while the host is busy.

The host's monitor is a Python thread; a host that holds the GIL (a host function that
computes, a large result being decoded) starves it. A guest that times its burst for that
moment must still be stopped, by the kernel: the worker's own cgroup caps its memory and its
tasks. What the worker reached is watched from a separate process, which the host's GIL does
not stop.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import pydeno
from pydeno.host.process import cgroup

MiB = 2**20
HELD_SECONDS = 5.0

pytestmark = [
    pytest.mark.skipif(cgroup.mechanism().version is None, reason="this system lets no per-worker cgroup be made"),
    pytest.mark.slow,
]

# Samples a process's resident size until it is gone (or the file says stop), then prints
# the largest it saw.
WATCHER = """
import sys, time
pid, stop = sys.argv[1], sys.argv[2]
page = 4096
peak = 0
import os
while not os.path.exists(stop):
    try:
        with open(f"/proc/{pid}/statm") as f:
            peak = max(peak, int(f.read().split()[1]) * page)
    except (OSError, IndexError, ValueError):
        break
    time.sleep(0.002)
print(peak)
"""


def hold_the_gil(seconds: float) -> None:
    """Hold the GIL for about ``seconds``: one C-level call that never lets it go."""
    started = time.perf_counter()
    sum(range(10**6))
    per_million = time.perf_counter() - started
    sum(range(int(10**6 * seconds / max(per_million, 1e-4))))


class Watcher:
    def __init__(self, pid: int, tmp: Path) -> None:
        self.stop = tmp / "stop"
        self.process = subprocess.Popen(
            [sys.executable, "-c", WATCHER, str(pid), str(self.stop)], stdout=subprocess.PIPE, text=True
        )

    def peak(self) -> int:
        self.stop.touch()
        out, _ = self.process.communicate(timeout=30)
        return int(out)


@pytest.fixture
def tmp(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


ALLOCATE_IN_A_WEB_WORKER = (
    "const source = 'const keep = []; while (true) keep.push(new Uint8Array(8 * 2**20).fill(1))';"
    "new Worker(URL.createObjectURL(new Blob([source], {type: 'application/javascript'})), {type: 'module'});"
    "await new Promise((resolve) => setTimeout(resolve, 20));"
    "await hold(); 'survived'"
)


# The host call goes out first; the burst comes once the host is inside it.
BURST_OF_WEB_WORKERS = (
    "const held = hold();"
    "setTimeout(() => { for (let i = 0; i < 40; i++) "
    "new Worker('data:application/javascript,setInterval(() => {}, 1000)', {type: 'module'}) }, 300);"
    "await held; await new Promise(() => {})"
)


@pytest.mark.parametrize("sandbox", ["require", "off"])
def test_a_web_worker_that_allocates_while_the_host_holds_the_gil_is_stopped_near_max_memory(
    sandbox: str, tmp: Path
) -> None:
    max_memory = 128 * MiB
    with pydeno.Runtime(max_memory=max_memory, timeout=60, sandbox=sandbox) as rt:
        rt.bind_function("hold", lambda: hold_the_gil(HELD_SECONDS))
        process = rt._sup.process
        assert process is not None
        watcher = Watcher(process.pid, tmp)
        with pytest.raises(pydeno.WorkerCrashed) as info:
            rt.eval(ALLOCATE_IN_A_WEB_WORKER)
        peak = watcher.peak()
    assert pydeno.classify_error(info.value).kind == "memory_limit"
    assert str(info.value).startswith("worker used ")
    assert str(info.value).endswith(f" bytes, over max_memory={max_memory}; killed")
    # The bound the kernel enforces: max_memory and the larger of 64 MiB and a quarter.
    assert peak <= max_memory + max(64 * MiB, max_memory // 4), peak / MiB


def test_without_a_cgroup_the_zygote_stops_the_same_burst_near_max_memory(
    monkeypatch: pytest.MonkeyPatch, tmp: Path
) -> None:
    # The zygote is a process of its own: the host's GIL does not stop its watch.
    monkeypatch.setattr(cgroup, "mechanism", lambda: cgroup.Mechanism(None, reason="test"))
    max_memory = 128 * MiB
    with pydeno.Runtime(max_memory=max_memory, timeout=60) as rt:
        rt.bind_function("hold", lambda: hold_the_gil(HELD_SECONDS))
        process = rt._sup.process
        assert process is not None
        assert process.cgroup is None
        watcher = Watcher(process.pid, tmp)
        with pytest.raises(pydeno.WorkerCrashed) as info:
            rt.eval(ALLOCATE_IN_A_WEB_WORKER)
        peak = watcher.peak()
    assert pydeno.classify_error(info.value).kind == "memory_limit"
    assert re.fullmatch(rf"worker used \d+ bytes, over max_memory={max_memory}; killed", str(info.value))
    assert peak <= max_memory + max(64 * MiB, max_memory // 4), peak / MiB


def test_without_a_cgroup_or_the_zygote_the_same_burst_goes_far_past_max_memory(
    monkeypatch: pytest.MonkeyPatch, tmp: Path
) -> None:
    # The gap the two walls close, shown on this machine: with sandbox="off" there is no
    # zygote, and without a cgroup only the host's monitor is left.
    monkeypatch.setattr(cgroup, "mechanism", lambda: cgroup.Mechanism(None, reason="test"))
    max_memory = 128 * MiB
    with pydeno.Runtime(max_memory=max_memory, timeout=60, sandbox="off") as rt:
        rt.bind_function("hold", lambda: hold_the_gil(2.0))
        process = rt._sup.process
        assert process is not None
        assert process.cgroup is None
        watcher = Watcher(process.pid, tmp)
        # The eval may even succeed: nothing looked while the GIL was held.
        with contextlib.suppress(pydeno.WorkerCrashed):
            rt.eval(ALLOCATE_IN_A_WEB_WORKER)
        peak = watcher.peak()
    assert peak > max_memory + max(64 * MiB, max_memory // 4), peak / MiB


def test_web_workers_started_while_the_host_holds_the_gil_stop_at_the_thread_limit() -> None:
    burst = BURST_OF_WEB_WORKERS
    max_threads = 16
    with pydeno.Runtime(max_threads=max_threads, timeout=30) as rt:
        rt.bind_function("hold", lambda: hold_the_gil(2.0))
        process = rt._sup.process
        assert process is not None and process.cgroup is not None and process.cgroup.pids_dir is not None
        pids = process.cgroup.pids_dir
        with pytest.raises(pydeno.WorkerCrashed) as info:
            rt.eval(burst)
        # The kernel refused every thread past the cap: the worker never had more.
        assert not pids.exists()
    assert str(info.value) == f"worker started {max_threads + 1} threads (limit {max_threads}); killed"
    assert pydeno.classify_error(info.value).kind == "thread_limit"


def test_without_a_cgroup_the_zygote_stops_web_workers_started_while_the_host_holds_the_gil(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cgroup, "mechanism", lambda: cgroup.Mechanism(None, reason="test"))
    max_threads = 16
    states: list[str] = []
    with pydeno.Runtime(max_threads=max_threads, timeout=30) as rt:
        process = rt._sup.process
        assert process is not None and process.cgroup is None

        def hold() -> None:
            hold_the_gil(HELD_SECONDS)
            # Still holding the GIL: the monitor has not run, so only the zygote can have
            # ended the worker (it keeps it a zombie until the host lets go).
            states.append(Path(f"/proc/{process.pid}/stat").read_text().rpartition(")")[2].split()[0])

        rt.bind_function("hold", hold)
        with pytest.raises(pydeno.WorkerCrashed) as info:
            rt.eval(BURST_OF_WEB_WORKERS)
    assert states == ["Z"]
    assert re.fullmatch(rf"worker started \d+ threads \(limit {max_threads}\); killed", str(info.value))
    assert pydeno.classify_error(info.value).kind == "thread_limit"
