"""Kernel-enforced limits for one worker: a cgroup of its own, where this system lets us make one.

The host's monitor is a Python thread: while the host holds the GIL (decoding a large result,
a host function that computes) it samples nothing, and a guest can allocate far past
``max_memory`` in that time. A cgroup's limits are the kernel's, and hold however busy the
host is: what the worker brings into memory (swap included) is capped at ``max_memory`` and
its tasks (threads count as tasks) at one above ``max_threads``. The monitor still kills first and
reports, when it gets to run; the cgroup is the wall behind it, and what it counted is the
evidence the host reports from when the kernel did the stopping.

Three systems are met: cgroup v2 (one unified tree), cgroup v1 (a tree per controller, as on
many container hosts) and neither (or one this user may not write). Where a group cannot be
made, :func:`mechanism` says why and the monitor alone enforces the limits. Which groups this
process is in and where their trees are mounted is read by ``platform``; what can be made
under them is found out here.

Groups are named ``pydeno-<host pid>-<n>``, or ``pydeno-<host pid>-s<n>`` for those the zygote
makes for its spares (launcher.py's SPARE_GROUP), which the host adopts with the spare; a host
that died before removing its groups leaves them empty, and the first group a process makes
removes those of hosts gone.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import os
import re
import threading
import time
from pathlib import Path
from typing import Final, NamedTuple

from . import platform
from .mailbox import host_running

__all__ = ["Mechanism", "WorkerGroup", "mechanism", "remove_spare_groups", "task_limit"]

_NAME: Final = re.compile(r"pydeno-(\d+)-s?\d+")
_counter = itertools.count(1)
_swept: set[Path] = set()
_sweep_lock = threading.Lock()


def task_limit(max_threads: int) -> int:
    """The kernel's cap on the worker's tasks: exactly the count the monitor convicts at."""
    return max_threads + 1


class Mechanism(NamedTuple):
    """How this system can cap a worker: ``version`` 1 or 2 with the parent directories new
    groups go under, or ``version`` None and why not."""

    version: int | None
    memory_parent: Path | None = None
    pids_parent: Path | None = None
    reason: str = ""

    def describe(self) -> str:
        if self.version is None:
            return f"host monitor only (no per-worker cgroup: {self.reason})"
        where = self.memory_parent if self.memory_parent is not None else self.pids_parent
        return f"cgroup v{self.version} per worker, under {where}"


def _writable_parent(parent: Path, probe_file: str) -> str | None:
    """None if a group made under parent has ``probe_file`` and can be removed; else why not."""
    probe = parent / f"pydeno-{os.getpid()}-0"
    try:
        with contextlib.suppress(FileExistsError):
            probe.mkdir()
        try:
            if not (probe / probe_file).exists():
                return f"{parent} does not give new groups {probe_file}"
        finally:
            probe.rmdir()
    except OSError as exc:
        return f"cannot make a group under {parent}: {exc.strerror or exc}"
    return None


@functools.cache
def mechanism() -> Mechanism:
    """What this system allows (read once per process)."""
    try:
        own = platform.cgroup_membership()
        mounts = {name: Path(mount) for name, mount in platform.cgroup_mounts(("memory", "pids")).items()}
    except (OSError, ValueError, IndexError) as exc:
        return Mechanism(None, reason=f"cannot read this process's cgroups ({exc})")
    if "memory" in mounts and "memory" in own:
        memory = mounts["memory"] / own["memory"].lstrip("/")
        why = _writable_parent(memory, "memory.limit_in_bytes")
        if why is not None:
            return Mechanism(None, reason=why)
        pids = None
        if "pids" in mounts and "pids" in own:
            candidate = mounts["pids"] / own["pids"].lstrip("/")
            if _writable_parent(candidate, "pids.max") is None:
                pids = candidate
        return Mechanism(1, memory, pids)
    if "" in mounts and "" in own:
        parent = mounts[""] / own[""].lstrip("/")
        try:
            enabled = (parent / "cgroup.subtree_control").read_text().split()
            if "memory" not in enabled:
                # Enabling a controller for children fails while the group itself holds
                # processes (the host does), except at the root: then there is no way here.
                (parent / "cgroup.subtree_control").write_text("+memory +pids")
        except OSError as exc:
            return Mechanism(None, reason=f"the memory controller is not delegated to {parent} ({exc.strerror})")
        why = _writable_parent(parent, "memory.max")
        if why is not None:
            return Mechanism(None, reason=why)
        return Mechanism(2, parent, parent)
    return Mechanism(None, reason="no cgroup memory controller is mounted")


def _sweep(parent: Path) -> None:
    """Remove the empty groups of hosts that are gone, once per parent and process."""
    with _sweep_lock:
        if parent in _swept:
            return
        _swept.add(parent)
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            found = _NAME.fullmatch(entry.name)
            if found and int(found.group(1)) != os.getpid() and not host_running(int(found.group(1))):
                with contextlib.suppress(OSError):
                    entry.rmdir()


def _write(path: Path, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _counter_in(path: Path, key: str) -> int:
    """The value of ``key`` in a flat-keyed cgroup file (``key N`` per line); 0 if absent."""
    try:
        text = path.read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


class WorkerGroup:
    """One worker's cgroup (a directory per v1 controller, or one v2 directory)."""

    def __init__(
        self, found: Mechanism, max_memory: int | None, max_threads: int | None, adopted: str | None = None
    ) -> None:
        """Make the group, or with ``adopted``, take the group of that name a spare is already
        in (the zygote made it); then set its limits."""
        self.version = found.version
        self.max_memory = max_memory
        self.max_threads = max_threads
        name = adopted if adopted is not None else f"pydeno-{os.getpid()}-{next(_counter)}"
        self.memory_dir = found.memory_parent / name if found.memory_parent and max_memory is not None else None
        self.pids_dir = found.pids_parent / name if found.pids_parent and max_threads is not None else None
        self.dirs = list(dict.fromkeys(d for d in (self.memory_dir, self.pids_dir) if d is not None))
        for parent in {d.parent for d in self.dirs}:
            _sweep(parent)
        try:
            if adopted is None:
                for directory in self.dirs:
                    directory.mkdir()
            self._set_limits()
        except OSError:
            self.remove()
            raise

    @staticmethod
    def parents(max_memory: int | None, max_threads: int | None) -> tuple[str, ...]:
        """Where a worker's group goes, a directory per controller it needs (none where this
        system allows no group, or none is asked for): what the zygote makes a spare's under."""
        found = mechanism()
        if found.version is None:
            return ()
        wanted = [
            found.memory_parent if max_memory is not None else None,
            found.pids_parent if max_threads is not None else None,
        ]
        return tuple(dict.fromkeys(str(parent) for parent in wanted if parent is not None))

    @classmethod
    def create(cls, max_memory: int | None, max_threads: int | None, adopted: str | None = None) -> WorkerGroup | None:
        """A group with the limits set (with ``adopted``: the spare's group of that name), or
        None where this system allows none (or none is asked for); an OSError if making it
        failed where it should have worked."""
        found = mechanism()
        if found.version is None or (max_memory is None and max_threads is None):
            return None
        group = cls(found, max_memory, max_threads, adopted)
        return group if group.dirs else None

    def _set_limits(self) -> None:
        if self.memory_dir is not None and self.max_memory is not None:
            # max_memory itself: the group is charged only what the worker brought into
            # memory, while its resident size (what the monitor kills at max_memory) also
            # counts the pages of deno's binary other processes loaded first. So the monitor
            # still comes first whenever it runs, and a worker the kernel stops reaches
            # max_memory plus those pages.
            hard = str(self.max_memory)
            if self.version == 1:
                _write(self.memory_dir / "memory.limit_in_bytes", hard)
                # Swap counts too where the kernel accounts it; else the cap would not hold
                # on a machine with swap.
                if (self.memory_dir / "memory.memsw.limit_in_bytes").exists():
                    _write(self.memory_dir / "memory.memsw.limit_in_bytes", hard)
            else:
                _write(self.memory_dir / "memory.max", hard)
                with contextlib.suppress(OSError):
                    _write(self.memory_dir / "memory.swap.max", "0")
        if self.pids_dir is not None and self.max_threads is not None:
            _write(self.pids_dir / "pids.max", str(task_limit(self.max_threads)))

    def add(self, pid: int) -> None:
        """Move the process into the group (every controller's directory)."""
        for directory in self.dirs:
            _write(directory / "cgroup.procs", str(pid))

    # -- what the kernel counted ----------------------------------------------------------
    def oom_killed(self) -> bool:
        """Whether the kernel killed a task of this group for going over its memory cap."""
        if self.memory_dir is None:
            return False
        if self.version == 1:
            return _counter_in(self.memory_dir / "memory.oom_control", "oom_kill") > 0
        return _counter_in(self.memory_dir / "memory.events", "oom_kill") > 0

    def peak_memory(self) -> int:
        if self.memory_dir is None:
            return 0
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            return int((self.memory_dir / name).read_text())
        except (OSError, ValueError):
            return 0

    def tasks_refused(self) -> bool:
        """Whether the kernel refused the group a task (a thread) over its cap."""
        if self.pids_dir is None:
            return False
        return _counter_in(self.pids_dir / "pids.events", "max") > 0

    def remove(self) -> None:
        """Remove the directories (the worker must be reaped). Never raises: a group that
        cannot go yet is left empty, for a later host's sweep."""
        for directory in self.dirs:
            _remove(directory)


def _remove(directory: Path) -> None:
    for _attempt in range(20):
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                return
            # The last task leaves its group a moment after its parent reaps it.
            time.sleep(0.005)


def remove_spare_groups() -> None:
    """Remove the groups the zygote made for spares of this process, once it is gone (it was
    killed, and the spares with it). Never raises."""
    found = mechanism()
    own = re.compile(rf"pydeno-{os.getpid()}-s\d+")
    for parent in dict.fromkeys(p for p in (found.memory_parent, found.pids_parent) if p is not None):
        with contextlib.suppress(OSError):
            for entry in parent.iterdir():
                if own.fullmatch(entry.name):
                    _remove(entry)
