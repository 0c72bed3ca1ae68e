"""The resource monitor: one background thread that samples every live worker with psutil
and kills any that goes over its memory, thread or CPU limit.

It runs whether or not a command is in flight, so a guest timer that allocates between
commands is caught too. A verdict is recorded *before* the kill, and the driver that then
sees the worker die reports the verdict instead of a plain death: the message is decided
from what the host measured, never from anything the worker wrote.

The thread starts with the first watched worker and exits when none is left, so an idle
process has no pydeno thread.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import psutil

from .._errors import PydenoError, RuntimeTimeout, cpu_between_commands, cpu_in_command, over_memory, over_threads

__all__ = ["INTERVAL", "Watch", "watch"]

# Sampling period. One sample of a worker costs about 120 us of host CPU (three /proc reads
# under psutil's oneshot), so 20 Hz costs well under 0.5% of a core per worker.
INTERVAL: Final = 0.05


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


# What a reading raises where this system will not tell (a psutil refusal, a missing /proc
# file, a platform without the counter); NoSuchProcess, a subclass, is caught first.
UNREADABLE: Final = (psutil.Error, OSError, NotImplementedError)


# The three readings, one function each: where psutil would be refused on some system, a
# test replaces one of these to run on such a "system".
def memory_of(process: psutil.Process) -> int:
    return int(process.memory_info().rss)


def threads_of(process: psutil.Process) -> int:
    return int(process.num_threads())


def cpu_of(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


@dataclass(eq=False)
class Watch:
    """The limits of one worker and what the monitor has seen of it."""

    pid: int
    max_memory: int | None
    max_threads: int | None
    cpu_limit: float | None
    process: psutil.Process | None = None
    # CPU seconds the worker had used when the current command started (inf when no
    # cpu_limit charges commands); None while no command is in flight.
    command_cpu_start: float | None = None
    peak_rss: int = 0
    # The largest RSS sampled since the last reset_window(): what one Code Mode execution
    # reports as its peak.
    window_peak: int = 0
    last_cpu: float = 0.0
    # CPU used while no command was in flight, drained at IDLE_CPU_DRAIN, and the reading
    # (with its time) the next idle sample charges from: taken as a command ends where a
    # cpu_limit makes that reading anyway, else by the first sample after it (so that ending
    # a command reads nothing); None while a command runs.
    idle_charge: float = 0.0
    idle_mark: tuple[float, float] | None = None
    verdict: PydenoError | None = None
    unmeasurable: str | None = None
    # Deadlines that are not resources: a host function running past the command's host
    # wait budget, and a termination not acknowledged within its grace.
    host_wait_deadline: float | None = None
    host_wait_verdict: PydenoError | None = None
    kill_at: float | None = None
    kill_verdict: PydenoError | None = None
    released: bool = False
    # How to SIGKILL the worker's group without reaping it (WorkerProcess.signal_kill: a
    # pidfd for a zygote's child, whose pid init could reuse should the zygote die first);
    # None: killpg by pid, safe for a child of this process, which stays unreaped until closed.
    kill: Callable[[], None] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def force_kill_at(self, deadline: float, verdict: PydenoError) -> None:
        self.kill_verdict = verdict
        self.kill_at = deadline

    def sample(self) -> None:
        """Measure once; on a breach record the verdict and kill the worker's group."""
        if self.verdict is not None:
            return
        now = time.monotonic()
        if self.kill_at is not None and now >= self.kill_at and self.kill_verdict is not None:
            self.convict(self.kill_verdict)
            return
        deadline = self.host_wait_deadline
        if deadline is not None and now >= deadline and self.host_wait_verdict is not None:
            self.convict(self.host_wait_verdict)
            return
        if self.max_memory is None and self.max_threads is None and self.cpu_limit is None:
            return
        try:
            if self.process is None:
                self.process = psutil.Process(self.pid)
            with self.process.oneshot():
                rss = memory_of(self.process)
                threads = threads_of(self.process)
                cpu = cpu_of(self.process)
        except psutil.NoSuchProcess:
            return
        except UNREADABLE as exc:
            self.unmeasurable = f"{type(exc).__name__}"
            return
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
        """The runtime is closing: from now on never signal this pid."""
        with self._lock:
            self.released = True

    def unmeasurable_limits(self) -> list[str]:
        """The limits set on this worker that the monitor cannot read what they bound for
        (memory, CPU time, threads): psutil is refused, or this system has no such counter."""
        checks: list[tuple[str, object, Callable[[psutil.Process], float]]] = [
            ("max_memory", self.max_memory, memory_of),
            ("cpu_limit", self.cpu_limit, cpu_of),
            ("max_threads", self.max_threads, threads_of),
        ]
        failed: list[str] = []
        for name, limit, read in checks:
            if limit is None:
                continue
            try:
                read(self.process or psutil.Process(self.pid))
            except psutil.NoSuchProcess:
                return failed  # it died: the driver will report that instead
            except UNREADABLE as exc:
                self.unmeasurable = type(exc).__name__
                failed.append(name)
        return failed

    def _read_cpu(self) -> float:
        try:
            if self.process is None:
                self.process = psutil.Process(self.pid)
            return cpu_of(self.process)
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
            return
        cpu = self._read_cpu()
        verdict = self._idle_verdict(cpu, time.monotonic())
        self.idle_mark = None
        self.command_cpu_start = cpu
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

    def _run(self) -> None:
        while True:
            with self._lock:
                watches = list(self._strong)
                if not watches:
                    self._thread = None
                    return
            for w in watches:
                w.sample()
            time.sleep(INTERVAL)


_monitor = _Monitor()


def watch(w: Watch) -> None:
    _monitor.add(w)


def unwatch(w: Watch) -> None:
    _monitor.remove(w)
