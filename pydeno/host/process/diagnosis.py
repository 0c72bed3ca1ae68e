"""The diagnosis of a worker's death: from the evidence the host gathered itself, which
failure it was.

The supervisor gathers the evidence when it meets a dead worker (its exit status, whether it
was still running when its output ended, what the monitor convicted it of, what the kernel
counted in its cgroup, whether its last output acknowledged a termination) and asks
:func:`cause` which host-authored failure that is. Nothing here trusts the worker's text:
its last line of stderr is only ever quoted after the host's prefix, and the one reading of
it (V8's heap-limit line) can only make a death look less retryable.
"""

from __future__ import annotations

from typing import NamedTuple

from ..._base.errors import PydenoError, WorkerCrashed
from ..._base.failures import (
    GUEST_DEATH,
    guest_ended_worker,
    heap_exhausted,
    layer_missing,
    over_memory,
    over_threads,
    selftest_failed,
    terminated,
    worker_died,
)
from ..._base.options import RuntimeOptions
from . import platform as _platform
from .cgroup import task_limit
from .worker import WorkerProcess

__all__ = ["Evidence", "cause", "threads_refused"]


class Evidence(NamedTuple):
    """What the host saw of a dead worker, besides its process."""

    # Its last output acknowledged a termination the host had asked for.
    acknowledged: bool
    # What the monitor convicted it of, if anything.
    verdict: PydenoError | None
    # It had shaken hands.
    shook_hands: bool
    # It was still running when the host met the end of its output (or a closed input).
    ended_alone: bool
    # The kernel refuses it every fatal signal to itself (the seccomp filter).
    signals_confined: bool
    # It was found dead as a command began: it died while no command ran.
    died_idle: bool
    # A command was in flight.
    in_command: bool
    # The largest resident size the monitor read.
    peak_rss: int


def cause(process: WorkerProcess, options: RuntimeOptions, seen: Evidence) -> PydenoError:
    """Why the worker died, in this order: a termination it acknowledged, a limit the
    monitor enforced, a limit the kernel enforced, a refusal at start-up, V8's fatal exit on
    its heap limit, a death from outside, or a death its guest code caused."""
    if seen.acknowledged:
        # It acknowledged and exited while the driver was busy elsewhere (in a host
        # function, say): the driver met the closed pipe before the acknowledgement, and
        # the monitor may meanwhile have passed the grace and convicted it as unresponsive.
        return terminated()
    if seen.verdict is not None:
        return seen.verdict
    stopped = _stopped_by_the_kernel(process, options, seen.peak_rss)
    if stopped is not None:
        return stopped
    if not seen.shook_hands:
        refusal = process.sandbox_refusal()
        if refusal is not None:
            return layer_missing(refusal)
        kept = process.permission_kept()
        if kept is not None:
            return selftest_failed([kept])
        return worker_died(process.death_message("worker exited during startup"))
    code = process.popen.returncode
    if not seen.ended_alone and process.pipe_error is None:
        return guest_ended_worker(process.death_message(GUEST_DEATH, "closed its pipes"))
    if (
        code == -_platform.V8_FATAL_SIGNAL
        and options.max_memory is not None
        and _platform.v8_out_of_memory(process.stderr_tail())
    ):
        # V8 ends the process with a trap on a fatal error after printing what it was; a
        # guest can print that line too, but only to make its death look less retryable.
        return heap_exhausted(options.max_memory)
    if code is not None and _from_outside(code, seen):
        return worker_died(process.death_message("worker process died"))
    return guest_ended_worker(process.death_message(GUEST_DEATH))


def _stopped_by_the_kernel(process: WorkerProcess, options: RuntimeOptions, peak_rss: int) -> WorkerCrashed | None:
    """The limit enforced while the monitor did not get to run (the host was busy): by
    the worker's cgroup, from what the kernel counted (a kill over the memory cap, a
    thread refused over the task cap), or by the zygote's watch where there is none."""
    group = process.cgroup
    if group is None:
        over = process.killed_over_cap()
        if over is not None and over[0] == "memory" and options.max_memory is not None:
            return over_memory(over[1], options.max_memory)
        if over is not None and over[0] == "threads" and options.max_threads is not None:
            return over_threads(over[1], options.max_threads)
        return None
    if options.max_memory is not None and group.oom_killed():
        peak = max(group.peak_memory(), peak_rss)
        return over_memory(max(peak, options.max_memory + 1), options.max_memory)
    return threads_refused(process, options)


def threads_refused(process: WorkerProcess, options: RuntimeOptions) -> WorkerCrashed | None:
    """thread_limit, if the worker's cgroup refused it a task over its cap."""
    group, max_threads = process.cgroup, options.max_threads
    if group is None or max_threads is None or not group.tasks_refused():
        return None
    return over_threads(task_limit(max_threads), max_threads)


def _from_outside(code: int, seen: Evidence) -> bool:
    """Whether a death after the handshake can only have come from outside the worker.

    An exit is always the worker's own doing, and so is a fault (a crash of the engine, an
    abort): guest input can cause either. A signal that only another process sends (SIGKILL,
    SIGTERM, ...) is from outside where the seccomp filter refuses the worker every such
    signal to itself, and, where it does not, only if it came while no command ran.
    """
    if code >= 0 or -code in _platform.FAULT_SIGNALS:
        return False
    return seen.signals_confined or seen.died_idle or not seen.in_command
