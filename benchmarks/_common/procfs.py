"""The processes below this one and their memory, read from /proc (or psutil where installed):
RSS, and USS, PSS and anonymous memory, the workers apart from a side's per-host helpers."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator
from typing import Any


def descendants(root: int) -> Iterator[int]:
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


def rss_procfs(pid: int) -> int:
    with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def shared_helpers() -> frozenset[int]:
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
        host = rss_procfs(me)
        for pid in descendants(me):
            try:
                with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh:
                    name = fh.read().strip()
                workers.append({"pid": pid, "name": name, "rss_bytes": rss_procfs(pid)})
            except OSError:
                continue
    helpers = shared_helpers()
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


def comm(pid: int) -> str:
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


def anonymous_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
        for line in fh:
            if line.startswith(b"Anonymous:"):
                return int(line.split()[1]) * 1024
    return 0


def running_elsewhere(executables: set[str], ours: set[int]) -> dict[str, int]:
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


def memory_reader() -> tuple[Callable[[int], tuple[int, int]], str, tuple[type[BaseException], ...]]:
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
    read, source, gone = memory_reader()
    helpers = shared_helpers()
    workers: list[dict[str, Any]] = []
    shared: list[dict[str, Any]] = []
    for pid in descendants(os.getpid()):
        try:
            uss, pss = read(pid)
            entry = {
                "pid": pid,
                "name": comm(pid),
                "exe": os.readlink(f"/proc/{pid}/exe"),
                "uss_bytes": uss,
                "pss_bytes": pss,
                "anon_bytes": anonymous_bytes(pid),
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
        "executables_running_elsewhere": running_elsewhere({str(w["exe"]) for w in workers}, ours),
    }
