"""The resource monitor: one background thread that samples every live worker from /proc and
its CPU clock, and kills any that goes over its memory, thread or CPU limit.

It runs whether or not a command is in flight, so a guest timer that allocates between
commands is caught too. A verdict is recorded *before* the kill, and the driver that then
sees the worker die reports the verdict instead of a plain death: the message is decided
from what the host measured, never from anything the worker wrote.

The thread starts with the first watched worker and exits when none is left, so an idle
process has no pydeno thread. A worker that is quiescent (no command in flight, and not one
nanosecond of CPU nor one page of memory more since its last sample) is sampled less and
less often, down to QUIET_INTERVAL: it cannot allocate or compute without running, and the
first sample that sees it run, or a command that starts, brings it back to INTERVAL. So an
idle pool costs the host next to nothing, while the kernel's walls (its cgroup, or the
zygote's watch) hold meanwhile as they do whenever the host is too busy to sample.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Final, NamedTuple

from ..._base.errors import PydenoError, RuntimeTimeout
from ..._base.failures import cpu_between_commands, cpu_in_command, over_memory, over_threads
from . import platform

__all__ = ["INTERVAL", "QUIET_INTERVAL", "Usage", "Watch", "unwatch", "watch"]

# Sampling period while a worker may be doing anything. One sample is a pread(2) of
# /proc/<pid>/stat and a read of the worker's CPU clock: a few microseconds of host CPU.
INTERVAL: Final = 0.05
# The longest a quiescent worker goes unsampled: each quiet sample doubles its interval from
# INTERVAL up to this.
QUIET_INTERVAL: Final = 0.8


# CPU seconds a worker may use while no command is in flight when no cpu_limit is set (with
# one, cpu_limit is the allowance): guest work left running after its command returned (Web
# Workers, timers, pending promises) is charged, and a worker that goes past it is stopped.
IDLE_CPU_SECONDS: Final = 1.0
# The least allowance a cpu_limit gives between commands: a tiny cap for commands must not
# stop a worker for the moment it spends waiting for the next one.
IDLE_CPU_FLOOR: Final = 0.1
# The charge drains at this many cores' worth of CPU, so that what a well-behaved worker does
# between commands (its garbage collector, a moment of polling for the next command) never
# adds up over a long life, while work that keeps a core busy fills it within seconds.
IDLE_CPU_DRAIN: Final = 0.1


# What a reading raises where this system will not tell (a refused or missing /proc file, a
# line that does not parse); ProcessLookupError, a subclass of OSError, is caught first.
UNREADABLE: Final = (OSError, IndexError, ValueError)


class Usage(NamedTuple):
    """One reading of a worker: its resident size in bytes, its thread count and the CPU
    seconds (user + system, all its threads) it has used."""

    rss: int
    threads: int
    cpu: float


def read_usage(stat: int, pid: int) -> Usage:
    """Read a worker through its /proc/<pid>/stat descriptor and its CPU clock (to the
    nanosecond, which is what lets a quiescent worker be told from one that ran at all)."""
    threads, rss = platform.stat_threads_and_rss(stat)
    return Usage(rss, threads, time.clock_gettime(platform.cpu_clock(pid)))


# The three readings, one function each: where the kernel would refuse one on some system, a
# test replaces it to run on such a "system".
def memory_of(usage: Usage) -> int:
    return usage.rss


def threads_of(usage: Usage) -> int:
    return usage.threads


def cpu_of(usage: Usage) -> float:
    return usage.cpu


class Watch:
    """The limits of one worker and what the monitor has seen of it."""

    __slots__ = (
        "_lock",
        "_seen",
        "_stat",
        "command_cpu_start",
        "cpu_limit",
        "due",
        "host_wait_deadline",
        "host_wait_verdict",
        "idle_charge",
        "idle_mark",
        "interval",
        "kill",
        "kill_at",
        "kill_verdict",
        "last_cpu",
        "max_memory",
        "max_threads",
        "peak_rss",
        "pid",
        "released",
        "unmeasurable",
        "verdict",
        "window_peak",
    )

    def __init__(
        self,
        pid: int,
        max_memory: int | None,
        max_threads: int | None,
        cpu_limit: float | None,
        *,
        kill: Callable[[], None] | None = None,
    ) -> None:
        self.pid = pid
        self.max_memory = max_memory
        self.max_threads = max_threads
        self.cpu_limit = cpu_limit
        # CPU seconds the worker had used when the current command started (inf when no
        # cpu_limit charges commands); None while no command is in flight.
        self.command_cpu_start: float | None = None
        self.peak_rss = 0
        # The largest RSS sampled since the last reset_window(): what one Code Mode execution
        # reports as its peak.
        self.window_peak = 0
        self.last_cpu = 0.0
        # CPU used while no command was in flight, drained at IDLE_CPU_DRAIN, and the reading
        # (with its time) the next idle sample charges from: taken as a command ends where a
        # cpu_limit makes that reading anyway, else by the first sample after it (so that ending
        # a command reads nothing); None while a command runs.
        self.idle_charge = 0.0
        self.idle_mark: tuple[float, float] | None = None
        self.verdict: PydenoError | None = None
        self.unmeasurable: str | None = None
        # Deadlines that are not resources: a host function running past the command's host
        # wait budget, and a termination not acknowledged within its grace.
        self.host_wait_deadline: float | None = None
        self.host_wait_verdict: PydenoError | None = None
        self.kill_at: float | None = None
        self.kill_verdict: PydenoError | None = None
        self.released = False
        # How to SIGKILL the worker's group without reaping it (WorkerProcess.signal_kill: a
        # pidfd for a zygote's child, whose pid init could reuse should the zygote die first);
        # None: killpg by pid, safe for a child of this process, which stays unreaped until closed.
        self.kill = kill
        # When the monitor samples this worker next, after how long, and what the last sample
        # read (a quiescent worker reads the same twice).
        self.due = 0.0
        self.interval = INTERVAL
        self._seen: Usage | None = None
        # The worker's /proc/<pid>/stat, opened by the first reading and closed on release; only
        # read or closed under _lock, so that a closed descriptor's number, taken by another
        # file, is never read.
        self._stat: int | None = None
        self._lock = threading.Lock()

    def force_kill_at(self, deadline: float, verdict: PydenoError) -> None:
        self.kill_verdict = verdict
        self.kill_at = deadline
        self.hurry()

    def hurry(self) -> None:
        """Sample at INTERVAL again from now on (a command starts, a deadline is set): called
        after what makes the worker not quiescent is recorded, which tick() reads under the
        same lock, so that no command starts on a slowed watch unseen."""
        with self._lock:
            if self.interval == INTERVAL:
                return
            self.interval = INTERVAL
            self.due = 0.0
        _monitor.wake()

    def tick(self, now: float) -> None:
        """Sample, and set when to sample next: a quiescent worker's interval doubles, up to
        QUIET_INTERVAL; any other's is INTERVAL."""
        usage = self.sample()
        with self._lock:
            quiet = (
                usage is not None
                and usage == self._seen
                and self.command_cpu_start is None
                and self.kill_at is None
                and self.host_wait_deadline is None
            )
            self._seen = usage
            self.interval = min(self.interval * 2, QUIET_INTERVAL) if quiet else INTERVAL
            self.due = now + self.interval

    def read(self) -> Usage:
        """The worker's usage now. ProcessLookupError once it is gone (or released); one of
        UNREADABLE where this system will not tell."""
        with self._lock:
            if self.released:
                raise ProcessLookupError(self.pid)
            if self._stat is None:
                self._stat = platform.open_stat(self.pid)
            return read_usage(self._stat, self.pid)

    def sample(self) -> Usage | None:
        """Measure once; on a breach record the verdict and kill the worker's group. The
        reading, or None where none was taken."""
        if self.verdict is not None:
            return None
        now = time.monotonic()
        if self.kill_at is not None and now >= self.kill_at and self.kill_verdict is not None:
            self.convict(self.kill_verdict)
            return None
        deadline = self.host_wait_deadline
        if deadline is not None and now >= deadline and self.host_wait_verdict is not None:
            self.convict(self.host_wait_verdict)
            return None
        if self.max_memory is None and self.max_threads is None and self.cpu_limit is None:
            return None
        try:
            usage = self.read()
            rss, threads, cpu = memory_of(usage), threads_of(usage), cpu_of(usage)
        except ProcessLookupError:
            return None
        except UNREADABLE as exc:
            self.unmeasurable = f"{type(exc).__name__}"
            return None
        self.last_cpu = cpu
        self.peak_rss = max(self.peak_rss, rss)
        self.window_peak = max(self.window_peak, rss)
        verdict: PydenoError | None = None
        if self.max_memory is not None and rss > self.max_memory:
            verdict = over_memory(rss, self.max_memory)
        elif self.max_threads is not None and threads > self.max_threads:
            verdict = over_threads(threads, self.max_threads)
        else:
            start = self.command_cpu_start
            if self.cpu_limit is not None and start is not None and cpu - start > self.cpu_limit:
                verdict = cpu_in_command(self.cpu_limit)
            elif start is None:
                verdict = self._idle_verdict(cpu, now)
        if verdict is not None:
            self.convict(verdict)
        return usage

    def reset_window(self) -> None:
        """Start a new window for window_peak."""
        self.window_peak = 0

    def idle_allowance(self) -> float:
        return max(self.cpu_limit, IDLE_CPU_FLOOR) if self.cpu_limit is not None else IDLE_CPU_SECONDS

    def _idle_verdict(self, cpu: float, now: float) -> RuntimeTimeout | None:
        """With no command in flight: charge what the worker used since the last idle reading,
        and convict it past the allowance (guest work left running, which terminate() may
        not even stop)."""
        mark, self.idle_mark = self.idle_mark, (cpu, now)
        if mark is None:
            return None
        self.idle_charge = max(0.0, self.idle_charge + (cpu - mark[0]) - IDLE_CPU_DRAIN * (now - mark[1]))
        allowance = self.idle_allowance()
        if self.idle_charge <= allowance:
            return None
        return cpu_between_commands(allowance, self.cpu_limit)

    def convict(self, verdict: PydenoError) -> None:
        """Record why the worker is being killed (first reason wins), then kill it."""
        with self._lock:
            if self.released:
                # The runtime closed and reaped the worker: its pid may already be reused.
                return
            if self.verdict is None:
                self.verdict = verdict
            if self.kill is not None:
                self.kill()
                return
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)

    def release(self) -> None:
        """The runtime is closing: from now on never signal this pid, nor read it."""
        with self._lock:
            self.released = True
            if self._stat is not None:
                with contextlib.suppress(OSError):
                    os.close(self._stat)
                self._stat = None

    def unmeasurable_limits(self) -> list[str]:
        """The limits set on this worker that the monitor cannot read what they bound for
        (memory, CPU time, threads): /proc or the CPU clock is refused, or this system has
        no such counter."""
        checks: list[tuple[str, object, Callable[[Usage], float]]] = [
            ("max_memory", self.max_memory, memory_of),
            ("cpu_limit", self.cpu_limit, cpu_of),
            ("max_threads", self.max_threads, threads_of),
        ]
        wanted = [(name, read) for name, limit, read in checks if limit is not None]
        if not wanted:
            return []
        try:
            usage = self.read()
        except ProcessLookupError:
            return []  # it died: the driver will report that instead
        except UNREADABLE as exc:
            self.unmeasurable = type(exc).__name__
            return [name for name, _ in wanted]
        failed: list[str] = []
        for name, read in wanted:
            try:
                read(usage)
            except UNREADABLE as exc:
                self.unmeasurable = type(exc).__name__
                failed.append(name)
        return failed

    def _read_cpu(self) -> float:
        try:
            return cpu_of(self.read())
        except UNREADABLE:
            return self.last_cpu

    def command_started(self) -> None:
        """Start charging CPU to a command; read now so the baseline is exact. With a
        cpu_limit, the readings at each command's end and start charge the time between
        exactly, however short (commands in quick succession must not hide background work);
        without one the monitor's samples charge it."""
        if self.cpu_limit is None:
            self.idle_mark = None
            # Not None: the idle rule must not take this for time between commands.
            self.command_cpu_start = math.inf
            self.hurry()
            return
        cpu = self._read_cpu()
        verdict = self._idle_verdict(cpu, time.monotonic())
        self.idle_mark = None
        self.command_cpu_start = cpu
        self.hurry()
        if verdict is not None:
            self.convict(verdict)

    def command_finished(self) -> None:
        self.command_cpu_start = None
        if self.cpu_limit is not None:
            self.idle_mark = (self._read_cpu(), time.monotonic())


class _Monitor:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._strong: set[Watch] = set()
        self._thread: threading.Thread | None = None
        # Set to cut the thread's sleep short: a quiescent worker's command started, or the
        # last worker went.
        self._woken = threading.Event()

    def add(self, w: Watch) -> None:
        with self._lock:
            self._strong.add(w)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pydeno-monitor", daemon=True)
                self._thread.start()

    def remove(self, w: Watch) -> None:
        w.release()
        with self._lock:
            self._strong.discard(w)
            last = not self._strong
        if last:
            # So that the thread sees it has nothing left to watch and ends now, not after
            # the quiet interval it is sleeping through.
            self._woken.set()

    def wake(self) -> None:
        self._woken.set()

    def _run(self) -> None:
        while True:
            with self._lock:
                watches = list(self._strong)
                if not watches:
                    self._thread = None
                    return
            now = time.monotonic()
            for w in watches:
                # The thread wakes for the watch due first; a slowed one due within half its
                # slack is taken along, so that the quiescent workers of a pool come to be
                # sampled on one wake-up, not each on its own.
                if w.due - (w.interval - INTERVAL) / 2 <= now:
                    w.tick(now)
            # A watch hurried meanwhile has due 0 and the event set: the wait returns at once.
            pause = min(w.due for w in watches) - time.monotonic()
            if pause > 0:
                self._woken.wait(pause)
            self._woken.clear()


_monitor = _Monitor()


def watch(w: Watch) -> None:
    _monitor.add(w)


def unwatch(w: Watch) -> None:
    _monitor.remove(w)
