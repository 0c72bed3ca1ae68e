"""The supervisor: owns one runtime's worker process and what watches it.

It spawns the worker (through the zygote where confined) and registers it with the
monitor, holds it to its sandbox mode once it shook hands, moves bytes to and from its
pipes for the drivers (one frame whole at a time, from any thread), stops it, and, when it
dies, decides from the evidence what the death was. It is the one object a driver talks
to: a driver makes requests, steps commands, answers host calls and moves bytes through it.
The protocol itself is the core's (pydeno/host/wire/core.py), which calls nothing above it: what
the monitor must know, the core queues as notices, and the supervisor applies them right
after each call into the core (:meth:`Supervisor._apply`).

It also keeps the runtime's figures (``stats()``, docs/observability.md): the core's counts
of commands and host calls, the worker's CPU time and RSS read from the kernel only when
asked and once as the worker ends (never per command), and a worker the host killed or lost,
counted and logged (logger ``pydeno.runtime``) under the kind of its failure.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Final

from ..._base.errors import JavaScriptError
from ..._base.failures import closed_error, limit_unmeasurable, selftest_failed
from ..._base.kinds import classify_error
from ..._base.options import RuntimeOptions
from ..._base.stats import Stats
from ..wire.codec import MAX_DEPTH
from ..wire.connection import Hello, HostCall
from ..wire.core import (
    CLOSED,
    IDLE,
    NEED_DATA,
    RUNNING,
    Closed,
    Command,
    Core,
    ForceKill,
    HostWait,
    Request,
    State,
    closed_after,
)
from . import monitor, platform
from .diagnosis import Evidence, cause, threads_refused
from .monitor import Watch
from .spec import WorkerConfig
from .worker import WorkerProcess
from .zygote import ZygoteChild

__all__ = ["Supervisor", "quiet_sandbox_warnings", "worker_config"]

# A worker started and closed at DEBUG; killed or lost at WARNING. Every record carries
# ``kind`` (the classify_error kind of the failure, None for a start or a close) and ``pid``,
# and its message is the host's own: no guest text.
log = logging.getLogger("pydeno.runtime")

# How long a dead worker's exit status may trail the end of its output.
_EXIT_SETTLE_SECONDS: Final = 0.5

_warned: set[str] = set()
_warned_lock = threading.Lock()
# Set while sandbox_status() starts its probe worker: a report is not a gap to warn about.
quiet_sandbox_warnings: contextvars.ContextVar[bool] = contextvars.ContextVar("quiet", default=False)


def _warn_once(message: str) -> None:
    """One RuntimeWarning per distinct message per process: a service that starts a worker
    per request must not log the same gap thousands of times."""
    if quiet_sandbox_warnings.get():
        return
    with _warned_lock:
        if message in _warned:
            return
        _warned.add(message)
    warnings.warn(message, RuntimeWarning, stacklevel=4)


def worker_config(options: RuntimeOptions) -> WorkerConfig:
    """What the worker process is started with, from a runtime's options."""
    return WorkerConfig(
        max_memory=options.max_memory,
        max_message_bytes=options.max_message_bytes,
        max_decode_ratio=options.max_decode_ratio,
        jitless=options.jitless,
        max_depth=MAX_DEPTH,
        max_inflight_host_calls=options.max_inflight_host_calls,
        max_console_bytes=options.max_console_bytes,
        sandbox=options.sandbox,
        max_threads=options.max_threads,
    )


class Supervisor:
    """One runtime's worker: its process, its watch, and the core that speaks to it."""

    def __init__(
        self,
        options: RuntimeOptions,
        make_function: Callable[[int], Any],
        function_id: Callable[[Any], int | None],
    ) -> None:
        self.core = core = Core(options, make_function, function_id, time.monotonic, time.perf_counter_ns)
        # The core's own questions, asked of it directly on the warm path: seconds to wait at
        # most before looking again (raising past a deadline), whether an answer is due any
        # moment, and a host call's time left. A deadline that passed fails the step it was
        # asked in, whose abandon() or fail_startup() applies what that queued.
        self.remaining: Callable[..., float] = core.remaining
        self.answer_expected: Callable[[], bool] = core.answer_expected
        self.host_call_left: Callable[[], float] = core.host_call_left
        self.process: WorkerProcess | None = None
        self.watch: Watch | None = None
        # Frames may come from two threads (terminate() and the command's own), and a frame
        # must reach the pipe whole: writers hold this lock, and terminate() queues its
        # frame in _outbox instead of waiting when a writer is mid-frame.
        self.write_lock = threading.Lock()
        self._outbox: list[bytes] = []
        # Whether the kernel refuses the worker every fatal signal to itself (the seccomp
        # filter is in force in it): then a kill is from outside. Read at the handshake.
        self.signals_confined = False
        self.died_idle = False
        self.figures = Stats()
        # Guards figures and the worker's readings: stats() may come from any thread. Once
        # the worker is ending (`_ended`), its pid is read no more from other threads: after
        # the reap it may be another process's.
        self._figures_lock = threading.Lock()
        self._cpu_seen = 0.0
        self._last_rss = 0
        self._ended = False
        self._kill_recorded = False
        # Held while spawn() runs (from a thread, for the async driver), so close() can wait.
        self._spawning = threading.Lock()
        # retire(): the worker's teardown finishes in the spawner's thread; its future.
        self._retiring = False
        self._ending: Future[None] | None = None

    # -- lifetime --------------------------------------------------------------------
    def spawn(self) -> WorkerProcess:
        """Start the worker and put it under the monitor's watch. Blocks (staging, the fork),
        so the async driver calls it from a thread: a runtime closed meanwhile (terminate()
        from elsewhere) gets no worker left behind."""
        with self._spawning:
            return self._spawn()

    def _spawn(self) -> WorkerProcess:
        options = self.core.options
        self.process = WorkerProcess(worker_config(options))
        with self._figures_lock:
            self.figures.record_worker_started()
        log.debug("pydeno: worker %d started", self.process.pid, extra={"kind": None, "pid": self.process.pid})
        self.watch = Watch(
            pid=self.process.pid,
            kill=self.process.signal_kill,
            max_memory=options.max_memory,
            max_threads=options.max_threads,
            cpu_limit=options.cpu_limit,
        )
        monitor.watch(self.watch)
        if self.core.closed:
            # Closed from another thread meanwhile, when there was no worker yet to end.
            self._end(self.core.closed_by_call)
            raise closed_error("runtime is closed", self.core.closed_by)
        return self.process

    def started(self) -> None:
        """The worker shook hands: hold it to the sandbox mode before any command runs.

        Under "require" a self-test breach or a limit the monitor cannot measure refuses the
        worker; under "best_effort" what is missing is reported once per process as a
        RuntimeWarning (see docs/security.md). The launcher already refused any missing layer
        under "require"; under "best_effort" it reported the ones it skipped on stderr.
        """
        try:
            self._hold_to_sandbox()
        finally:
            if self.core.notices:
                self._apply()

    def _hold_to_sandbox(self) -> None:
        mode = self.core.options.sandbox
        process, watch, hello = self.process, self.watch, self.core.connection.hello
        if process is not None:
            process.handshaken()
        if mode == "off" or process is None or watch is None or hello is None:
            return
        self.signals_confined = process.seccomp_filtered() and not any(
            gap.startswith("seccomp ") for gap in process.sandbox_skipped()
        )
        unmeasurable = watch.unmeasurable_limits()
        breaches = process.selftest_breaches(hello.breaches)
        if mode == "require":
            if breaches:
                raise self.core.fail(selftest_failed(breaches))
            if unmeasurable:
                limit = unmeasurable[0]
                raise self.core.fail(limit_unmeasurable(limit))
            return
        gaps = [
            *process.sandbox_skipped(),
            *(f"self-test: {what}" for what in breaches),
            *(f"{limit} cannot be enforced (the worker's resource usage cannot be read)" for limit in unmeasurable),
        ]
        if gaps:
            _warn_once("pydeno: sandbox='best_effort' started a worker without: " + "; ".join(gaps))

    def close(self) -> None:
        """Close the runtime and end the worker, one still being spawned in another thread
        too: it returns only once no worker of this runtime is left. Idempotent."""
        self.core.close(by_call=True)
        self._apply()
        # A spawn under way sees the runtime closed as it ends, and kills what it started.
        with self._spawning:
            pass

    def stop(self) -> None:
        """Stop the worker where it is (SIGSTOP): a worker its owner is done with, to be
        retired later, runs nothing meanwhile. The runtime stays open until then."""
        if self.process is not None and not self.core.closed:
            self.process.signal_stop()

    def retire(self) -> Future[None] | None:
        """Close the runtime of a worker that was started and is done with (a pool's, after
        its checkout): the worker is killed now, and its teardown (the reap, descriptors,
        cgroup) finishes in the spawner's thread; the future says when (None: nothing was
        left to end)."""
        self._retiring = True
        try:
            self.core.close(by_call=True)
            self._apply()
        finally:
            self._retiring = False
        ending, self._ending = self._ending, None
        return ending

    def discard(self) -> None:
        """Close the runtime and end its worker without waiting for a spawn under way (the
        runtime object is being collected)."""
        self.core.close()
        self._apply()

    def fail_startup(self, exc: BaseException) -> None:
        """The worker's start (its handshake, the sandbox's verdict, what the options ask of
        a fresh worker) failed or was abandoned with exc: close the runtime for it."""
        self.core.close(closed_after(exc))
        self._apply()
        self.failed(exc)

    def process_open(self) -> WorkerProcess:
        """The worker process of an open runtime; RuntimeError once it is closed."""
        if self.core.state is CLOSED:
            self.core.check_open()
        if self.process is None:
            raise closed_error("runtime is closed", "the runtime has no worker")
        return self.process

    # -- the driver's steps (each applies what the core queued for the monitor) --------
    @property
    def options(self) -> RuntimeOptions:
        return self.core.options

    @property
    def hello(self) -> Hello | None:
        return self.core.connection.hello

    @property
    def closed(self) -> bool:
        return self.core.closed

    @property
    def closed_by(self) -> str:
        """What closed the runtime ("" while it is open)."""
        return self.core.closed_by

    @property
    def in_command(self) -> bool:
        return bool(self.core.commands)

    @property
    def functions(self) -> dict[str, Callable[..., Any]]:
        """The host functions bound so far, by name."""
        return self.core.functions

    @property
    def host_calls(self) -> int:
        """The host calls the guest made so far (the core's count)."""
        return self.core.host_calls

    def ready(self) -> bool:
        """Whether the worker shook hands; raise if the runtime is closed. (One call on
        every command's way in.)"""
        core = self.core
        if core.state is CLOSED:
            core.check_open()
        return core.connection.hello is not None

    def startup_deadline(self) -> float:
        return self.core.startup_deadline()

    def convertible(self, value: Any) -> tuple[str, str] | None:
        return self.core.connection.convertible(value)

    def release_function(self, function_id: int) -> None:
        """A JsFunction handle closed: its release travels with the next frame sent."""
        self.core.connection.release(function_id)

    def request(self, request: Request, timeout: float | None = None, *, internal: bool = False) -> Command:
        """A new command: its id and bytes made and its charging begun in one step."""
        command = self.core.request(request, timeout, internal=internal)
        if self.core.notices:
            self._apply()
        return command

    def step(self, command: Command | None) -> tuple[HostCall, Callable[..., Any]] | bytes | object | None:
        """Apply what the worker sent until something needs the driver: None once command
        completed (or, with no command, once the handshake came), a host call with the
        function to run (its time now counts as host wait), bytes to send (the refusal of a
        host call over max_inflight_host_calls), or NEED_DATA."""
        core = self.core
        connection = core.connection
        while True:
            if command is None:
                if connection.hello is not None:
                    break
            elif command.rid in connection.outcomes:
                break
            item = core.pump()
            if item is NEED_DATA:
                if core.notices:
                    self._apply()
                return NEED_DATA
            if type(item) is HostCall:
                target = core.begin_host_call(item)
                if core.notices:
                    self._apply()
                return target if isinstance(target, bytes) else (item, target)
        if core.notices:
            self._apply()
        return None

    def answer(
        self, call: HostCall, result: Any = None, error: Exception | None = None, *, overran: bool = False
    ) -> bytes:
        """The reply to a host call, its time charged (Core.settle_host_call); raises the
        command's failure if the function overran its host-wait budget."""
        try:
            return self.core.settle_host_call(call, result, error, overran=overran)
        finally:
            if self.core.notices:
                self._apply()

    def finish(self, command: Command) -> Any:
        """The outcome of a completed command (Core.finish), read as the kernel saw it."""
        try:
            return self.core.finish(command)
        except JavaScriptError:
            # A thread the kernel refused (the worker's task cap) reaches the guest as an
            # error it may not even have caused itself; the worker is at its thread limit.
            refused = threads_refused(self.process, self.core.options) if self.process is not None else None
            if refused is None:
                raise
            failure = self.core.fail(refused)
            self._apply()
            self.failed(failure)
            raise failure from None
        finally:
            if self.core.notices:
                self._apply()

    def abandon(self, command: Command, exc: BaseException) -> None:
        """A command's step failed or was interrupted (Core.abandon): it ends, and if that
        ended the runtime, its worker counts as killed under exc's kind."""
        self.core.abandon(command, exc)
        self._apply()
        if self.core.closed:
            self.failed(exc)

    def failed(self, exc: BaseException) -> None:
        """The runtime ended with exc (a limit, a death, a cancellation, ...): count and log
        its worker as killed under exc's kind. Nothing if there was no worker, the runtime
        was closed by close(), or the worker's end is already counted."""
        process = self.process
        if process is None or self.core.closed_by_call:
            return
        self._killed(classify_error(exc).kind, process.pid)

    def _killed(self, kind: str, pid: int) -> None:
        with self._figures_lock:
            if self._kill_recorded:
                return
            self._kill_recorded = True
            self.figures.record_worker_killed(kind)
        log.warning("pydeno: worker %d was killed or died: %s", pid, kind, extra={"kind": kind, "pid": pid})

    # -- figures -----------------------------------------------------------------------
    def stats(self) -> Stats:
        """The runtime's figures now: a new Stats. The live worker's CPU time and RSS are read
        from the kernel here (a clock_gettime and a pread); an ended one's were kept."""
        with self._figures_lock:
            self._read_worker(rss=True)
            figures = self.figures.copy()
            figures.cpu_seconds = self._cpu_seen
        core = self.core
        figures.commands = core.commands_done - core.internal_done
        figures.host_calls = core.host_calls
        return figures

    def worker_cpu(self) -> float:
        """CPU seconds the worker has used: read now while it runs, else as it ended."""
        with self._figures_lock:
            self._read_worker(rss=False)
            return self._cpu_seen

    def worker_rss(self) -> int:
        """The worker's RSS now, or once it ended, the last read (0: never read)."""
        with self._figures_lock:
            self._read_worker(rss=True)
            return self._last_rss

    def record_queue_wait(self, seconds: float) -> None:
        with self._figures_lock:
            self.figures.record_queue_wait(seconds)

    def _read_worker(self, *, rss: bool) -> None:
        """Fold the kernel's readings of the worker (its CPU time, and its RSS if asked) and
        the monitor's into the figures, while its pid is surely still its own. Called under
        _figures_lock."""
        watch, process = self.watch, self.process
        if watch is None:
            return
        self._cpu_seen = max(self._cpu_seen, watch.last_cpu)
        self.figures.record_rss(watch.peak_rss)
        if process is None or self._ended or not _held(process):
            return
        if not rss:
            # The CPU clock alone, in one syscall: what worker_cpu() asks after each command.
            with contextlib.suppress(OSError):
                self._cpu_seen = max(self._cpu_seen, time.clock_gettime(platform.cpu_clock(process.pid)))
            return
        # The monitor's own reading, through the descriptor it keeps on the worker's
        # /proc/<pid>/stat (bound to the process whatever happens to its pid).
        try:
            usage = watch.read()
        except monitor.UNREADABLE:
            return
        self._cpu_seen = max(self._cpu_seen, usage.cpu)
        if usage.rss:  # a zombie has none left
            self._last_rss = usage.rss
            self.figures.record_rss(usage.rss)

    def _worker_ending(self, process: WorkerProcess) -> None:
        """The worker is ending (it died, or the runtime is closing): take the last readings,
        and from here on let no other thread read its pid."""
        with self._figures_lock:
            if not self._ended:
                # Figures never stop a close (one at interpreter exit, whose imports fail, say).
                with contextlib.suppress(Exception):
                    self._read_worker(rss=True)
                self._ended = True

    # -- what the core queued for the monitor -----------------------------------------
    def _apply(self) -> None:
        """Apply the core's notices, in order: called right after every call into the core
        that may queue one, in the thread that made it, so the monitor's view of commands,
        host waits and terminations is exact."""
        notices = self.core.notices
        while notices:
            notice = notices.popleft()
            watch, process = self.watch, self.process
            if notice is RUNNING:
                if watch is not None:
                    watch.command_started()
                if not self.signals_confined and process is not None and process.poll() is not None:
                    # Where guest code could signal its own worker, only this look tells a
                    # death from outside while idle from one during the command.
                    self.died_idle = True
            elif notice is IDLE:
                if watch is not None:
                    watch.command_finished()
            elif isinstance(notice, HostWait):
                if watch is not None:
                    watch.host_wait_deadline = notice.deadline
                    if notice.verdict is not None:
                        watch.host_wait_verdict = notice.verdict
            elif isinstance(notice, ForceKill):
                if watch is not None:
                    watch.force_kill_at(notice.deadline, notice.verdict)
            elif isinstance(notice, Closed):
                self._end(notice.by_call)

    def _end(self, by_call: bool) -> None:
        """The runtime closed: stop watching its worker and end it."""
        process = self.process
        if process is not None:
            self._worker_ending(process)
        if self.watch is not None:
            monitor.unwatch(self.watch)
        if process is not None:
            if by_call:
                self._closed_normally(process)
            self._ending = process.close(wait=not self._retiring)

    def _closed_normally(self, process: WorkerProcess) -> None:
        """close() ended the runtime: a worker that had died before (the monitor killed it
        between commands, say) is counted and logged as killed; else it closed."""
        watch = self.watch
        if watch is not None and watch.verdict is not None:
            self._killed(classify_error(watch.verdict).kind, process.pid)
        elif process.poll() is not None:
            self._killed("worker_crashed", process.pid)
        else:
            log.debug("pydeno: worker %d closed", process.pid, extra={"kind": None, "pid": process.pid})

    # -- bytes -----------------------------------------------------------------------
    def ingest(self, data: bytes | None) -> bool:
        """Feed what a read returned; True if there was data, raise if the worker is gone."""
        if data is None:
            raise self.died()
        if data:
            self.core.feed(data)
            return True
        return False

    def outbox(self, data: bytes = b"") -> bytes:
        """data, preceded by any frame queued by another thread; writers call it under
        write_lock, and again with no argument before releasing it."""
        if self._outbox:
            queued, self._outbox = self._outbox, []
            return b"".join([*queued, data])
        return data

    def push(self, view: memoryview) -> memoryview | None:
        """Write what the pipe takes now (and any frame queued meanwhile); None once all is
        sent, else what is left, for the driver to wait until the pipe is writable. Call it
        under write_lock. While the pipe is full it reads too: a worker blocked writing to
        us would never drain its stdin."""
        process = self.process_open()
        while True:
            n = process.write(view)
            if n < 0:
                raise self.died()
            view = view[n:]
            if not view:
                queued = self.outbox()
                if not queued:
                    self.core.sent()
                    return None
                view = memoryview(queued)
                continue
            if not self.ingest(process.read()):
                return view

    def terminate(self) -> None:
        """terminate() of both runtimes: safe from any thread or task, never blocks long.

        The frame is queued; whoever holds write_lock sends it with or right after its own
        frame, else this call takes the lock and sends it. Should the frame never get out,
        the monitor still kills the worker when the grace ends."""
        data = self.core.request_termination()
        self._apply()
        if data is None:
            return
        self._outbox.append(data)
        for _ in range(50):
            if self.write_lock.acquire(blocking=False):
                try:
                    pending = self.outbox()
                    # Tiny (under PIPE_BUF), so the pipe takes it whole or not at all.
                    if pending and self.process is not None and self.process.write(pending) != len(pending):
                        self._outbox.insert(0, pending)
                finally:
                    self.write_lock.release()
                return
            time.sleep(0.001)

    # -- a death --------------------------------------------------------------------
    def died(self) -> Exception:
        """The worker is gone: gather the evidence and close the runtime with the failure it
        shows (pydeno/host/process/diagnosis.py decides which)."""
        try:
            return self._diagnose()
        finally:
            if self.core.notices:
                self._apply()

    def _diagnose(self) -> Exception:
        process = self.process_open()
        self._worker_ending(process)
        watch = self.watch
        if watch is not None:
            watch.release()  # reaping frees the pid: the monitor must not signal it again
        # A worker still running when the host met the end of its output (or a closed input)
        # closed that pipe itself: only guest code does that. The exit status can trail the
        # end of file by a moment, so wait for it a little before deciding.
        ended_alone = process.settled(_EXIT_SETTLE_SECONDS)
        process.kill()
        if _held(process):
            # Dead but not yet reaped (a zygote's child): its clock holds its final CPU time.
            with contextlib.suppress(OSError), self._figures_lock:
                self._cpu_seen = max(self._cpu_seen, time.clock_gettime(platform.cpu_clock(process.pid)))
        core = self.core
        acknowledged = core.terminate_deadline is not None and self._acknowledged_termination(process)
        seen = Evidence(
            acknowledged=acknowledged,
            verdict=watch.verdict if watch is not None else None,
            shook_hands=core.state is not State.STARTING,
            ended_alone=ended_alone,
            signals_confined=self.signals_confined,
            died_idle=self.died_idle,
            in_command=bool(core.commands),
            peak_rss=watch.peak_rss if watch is not None else 0,
        )
        return core.fail(cause(process, core.options, seen))

    def _acknowledged_termination(self, process: WorkerProcess) -> bool:
        """Whether the dead worker's unread output holds its acknowledgement of terminate()."""
        while data := process.read():
            self.core.feed(data)
        return self.core.saw_termination()


def _held(process: WorkerProcess) -> bool:
    """Whether the worker's pid is still surely its own: not yet reaped by this process, or
    a zygote's child, which the zygote keeps unreaped until the host releases it."""
    if process.closed:
        return False
    popen = process.popen
    if isinstance(popen, ZygoteChild):
        return not popen.zygote.gone
    return popen.returncode is None
