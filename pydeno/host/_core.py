"""The runtime core shared by :class:`pydeno.Runtime` and :class:`pydeno.AsyncRuntime`.

Everything that is a rule lives here once: argument checks, the worker's configuration,
which event means what, host-authored messages, how a host function's exception is shown
to the guest, and what state a failure leaves the runtime in. The two drivers only write
bytes, wait for descriptors and call the host's functions (plainly, or awaited).
"""

from __future__ import annotations

import contextvars
import logging
import math
import re
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypedDict

from .._budget import DEFAULT_DECODE_RATIO
from .._checks import count, optional_count, optional_seconds, seconds
from .._errors import (
    JavaScriptError,
    PydenoError,
    RuntimeForceKilled,
    RuntimeTerminated,
    RuntimeTimeout,
    WorkerCrashed,
)
from .._function import JsFunction
from .._tools import HOST_FUNCTION, guest_error
from .._values import MAX_DEPTH, Codec
from . import _monitor as monitor
from . import _platform
from ._cgroup import task_limit
from ._command import SANDBOX_MODES, SandboxMode, WorkerConfig
from ._monitor import Watch
from ._process import WorkerProcess
from ._wire import Completed, Connection, Console, Event, Hello, HostCall, ProtocolError, Terminated

__all__ = ["NEED_DATA", "Command", "Core", "RuntimeKwargs", "RuntimeOptions"]

log = logging.getLogger("pydeno.console")

DEFAULT_TIMEOUT: Final = 30.0
DEFAULT_MAX_MEMORY: Final = 512 * 2**20
DEFAULT_MAX_MESSAGE_BYTES: Final = 64 * 2**20
DEFAULT_STARTUP_TIMEOUT: Final = 10.0
# While waiting, drivers wake at least this often to drain stderr and check the worker.
TICK: Final = 0.25
# After a frame is sent, drivers look at the pipe again without sleeping for this long: a
# warm answer comes well within it, and a reader that sleeps costs a wake-up on a VM (~75 us
# of the writer's time, plus the loop's registration for the async driver). The sync driver
# looks in a tight loop, the async one once per turn of the event loop; so a long command
# costs at most this much host CPU, and never holds the event loop.
LOOK_NS: Final = 200_000

_IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*\Z")
# Names a bound function may not take: reserved words, and globals the guest relies on.
_RESERVED: Final = frozenset(
    (
        "break case catch class const continue debugger default delete do else enum export extends "
        "false finally for function if import in instanceof new null return super switch this throw "
        "true try typeof var void while with yield let static implements interface package private "
        "protected public await arguments eval undefined NaN Infinity globalThis console"
    ).split()
)
_LEVELS: Final = {
    "log": logging.INFO,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}

ConsoleHandler = Callable[[str, str], Any]

# The start of the message for a death the guest's own code caused (kind guest_crashed).
GUEST_DEATH: Final = "worker died running guest code"
_GUEST_HINT: Final = (
    "the guest's code ended its worker (an exit, a closed output, or a crash it provoked); the same code "
    "would do it again, so fix the code rather than retrying it"
)
# How long a dead worker's exit status may trail the end of its output.
_EXIT_SETTLE_SECONDS: Final = 0.5

_SANDBOX_HINT: Final = (
    "run `python -m pydeno doctor` to see which OS layer is missing and why; run where every layer "
    "applies, or pass sandbox='best_effort' knowingly"
)
_warned: set[str] = set()
_warned_lock = threading.Lock()
# Set while sandbox_status() starts its probe worker: a report is not a gap to warn about.
quiet_sandbox_warnings: contextvars.ContextVar[bool] = contextvars.ContextVar("quiet", default=False)


def layer_refusal(unavailable: str) -> str:
    """sandbox="require"'s refusal for ``<layer> is unavailable: <why>``."""
    return f"worker failed to start: an OS sandbox is required but {unavailable}"


def selftest_refusal(breaches: tuple[str, ...] | list[str]) -> str:
    return "worker failed to start: sandbox self-test failed: " + "; ".join(breaches)


def unmeasurable_refusal(limit: str) -> str:
    return (
        f"{limit} cannot be enforced on this system (the worker's resource usage cannot be read) "
        "and sandbox='require' demands every protection"
    )


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


class _NeedData:
    """The sentinel :meth:`Core.pump` returns when it needs more bytes from the worker."""

    __slots__ = ()


NEED_DATA: Final = _NeedData()


class RuntimeKwargs(TypedDict, total=False):
    """The keyword arguments of :class:`pydeno.Runtime` and :class:`pydeno.AsyncRuntime`;
    docs/limits.md says exactly what each bounds."""

    timeout: float | None
    cpu_limit: float | None
    max_memory: int | None
    max_threads: int | None
    max_host_calls: int | None
    max_host_wait: float | None
    max_inflight_host_calls: int
    max_message_bytes: int
    max_decode_ratio: int
    max_console_bytes: int
    jitless: bool
    startup_timeout: float
    terminate_grace: float
    on_console: ConsoleHandler | None
    expose_host_errors: bool
    sandbox: SandboxMode


class RuntimeOptions:
    """Validated keyword arguments of a runtime; a bad one raises TypeError/ValueError."""

    def __init__(
        self,
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        cpu_limit: float | None = None,
        max_memory: int | None = DEFAULT_MAX_MEMORY,
        max_threads: int | None = 64,
        max_host_calls: int | None = 10_000,
        max_host_wait: float | None = None,
        max_inflight_host_calls: int = 32,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_decode_ratio: int = DEFAULT_DECODE_RATIO,
        max_console_bytes: int = 1 << 20,
        jitless: bool = True,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        terminate_grace: float = 1.0,
        on_console: ConsoleHandler | None = None,
        expose_host_errors: bool = False,
        sandbox: SandboxMode = "require",
    ) -> None:
        self.timeout = optional_seconds("timeout", timeout)
        self.cpu_limit = optional_seconds("cpu_limit", cpu_limit)
        self.max_memory = optional_count("max_memory", max_memory, 32 * 2**20)
        self.max_threads = optional_count("max_threads", max_threads, 1)
        self.max_host_calls = optional_count("max_host_calls", max_host_calls, 0)
        self.max_host_wait = optional_seconds("max_host_wait", max_host_wait)
        self.max_inflight_host_calls = count("max_inflight_host_calls", max_inflight_host_calls, 1)
        self.max_message_bytes = count("max_message_bytes", max_message_bytes, 1024)
        self.max_decode_ratio = count("max_decode_ratio", max_decode_ratio, 1)
        self.max_console_bytes = count("max_console_bytes", max_console_bytes, 0)
        if not isinstance(jitless, bool):
            raise TypeError(f"jitless must be True or False, got {type(jitless).__name__}")
        self.jitless = jitless
        self.startup_timeout = seconds("startup_timeout", startup_timeout)
        self.terminate_grace = seconds("terminate_grace", terminate_grace)
        if on_console is not None and not callable(on_console):
            raise TypeError("on_console must be a callable (level, text) or None")
        self.on_console = on_console
        if not isinstance(expose_host_errors, bool):
            raise TypeError("expose_host_errors must be True or False")
        self.expose_host_errors = expose_host_errors
        if not isinstance(sandbox, str):
            raise TypeError(f"sandbox must be 'require', 'best_effort' or 'off', got {type(sandbox).__name__}")
        if sandbox not in SANDBOX_MODES:
            raise ValueError(
                f"sandbox must be 'require' (every OS layer, or refuse to start), 'best_effort' "
                f"(what this system allows, with a warning) or 'off' (no OS layers), got {sandbox!r}"
            )
        self.sandbox: SandboxMode = sandbox

    def worker_config(self) -> WorkerConfig:
        return WorkerConfig(
            max_memory=self.max_memory,
            max_message_bytes=self.max_message_bytes,
            max_decode_ratio=self.max_decode_ratio,
            jitless=self.jitless,
            max_depth=MAX_DEPTH,
            max_inflight_host_calls=self.max_inflight_host_calls,
            max_console_bytes=self.max_console_bytes,
            sandbox=self.sandbox,
            max_threads=self.max_threads,
        )


@dataclass(eq=False, slots=True)
class Command:
    """One eval or function call in flight, and what it has been charged so far."""

    rid: int
    limit: float | None
    # The guest's deadline; host-call time moves it later (timeout does not charge it).
    deadline: float
    host_wait: float = 0.0
    host_call_started: float | None = None
    console_bytes: int = 0
    console_capped: bool = False


class Core:
    """One runtime's state: options, the worker process, the protocol connection."""

    def __init__(self, options: RuntimeOptions, driver: Any) -> None:
        self.options = options
        self.driver = driver
        self.codec = Codec(
            self._make_function,
            self._function_id,
            options.max_message_bytes,
            max_decode_ratio=options.max_decode_ratio,
        )
        self.connection = Connection(self.codec, options.max_message_bytes)
        self.functions: dict[str, Callable[..., Any]] = {}
        self.process: WorkerProcess | None = None
        self.watch: Watch | None = None
        self.commands: list[Command] = []
        self.host_call_count = 0
        self.terminate_deadline: float | None = None
        # Frames may come from two threads (terminate() and the command's own), and a frame
        # must reach the pipe whole: writers hold this lock, and terminate() queues its
        # frame in _outbox instead of waiting when a writer is mid-frame.
        self.write_lock = threading.Lock()
        self._outbox: list[bytes] = []
        self._look_until = 0  # perf_counter_ns; see LOOK_NS
        # Whether the kernel refuses the worker every fatal signal to itself (the seccomp
        # filter is in force in it): then a kill is from outside. Read at the handshake.
        self.signals_confined = False
        self.died_idle = False
        self.closed = False

    # -- lifetime --------------------------------------------------------------------
    def spawn(self) -> WorkerProcess:
        options = self.options
        self.process = WorkerProcess(options.worker_config())
        self.watch = Watch(
            pid=self.process.pid,
            kill=self.process.signal_kill,
            max_memory=options.max_memory,
            max_threads=options.max_threads,
            cpu_limit=options.cpu_limit,
        )
        monitor.watch(self.watch)
        return self.process

    def started(self) -> None:
        """The worker shook hands: hold it to the sandbox mode before any command runs.

        Under "require" a self-test breach or a limit the monitor cannot measure refuses the
        worker; under "best_effort" what is missing is reported once per process as a
        RuntimeWarning (see docs/security.md). The launcher already refused any missing layer
        under "require"; under "best_effort" it reported the ones it skipped on stderr.
        """
        mode = self.options.sandbox
        process, watch, hello = self.process, self.watch, self.connection.hello
        if process is not None:
            process.handshaken()
        if mode == "off" or process is None or watch is None or hello is None:
            return
        self.signals_confined = process.seccomp_filtered() and not any(
            gap.startswith("seccomp ") for gap in process.sandbox_skipped()
        )
        unmeasurable = watch.unmeasurable_limits()
        if mode == "require":
            if hello.breaches:
                raise self._fail(WorkerCrashed(selftest_refusal(hello.breaches), hint=_SANDBOX_HINT))
            if unmeasurable:
                limit = unmeasurable[0]
                raise self._fail(
                    WorkerCrashed(
                        unmeasurable_refusal(limit),
                        hint=f"run where psutil can read /proc for the worker, or set {limit}=None knowingly",
                    )
                )
            return
        gaps = [
            *process.sandbox_skipped(),
            *(f"self-test: {what}" for what in hello.breaches),
            *(f"{limit} cannot be enforced (the worker's resource usage cannot be read)" for limit in unmeasurable),
        ]
        if gaps:
            _warn_once("pydeno: sandbox='best_effort' started a worker without: " + "; ".join(gaps))

    def close(self) -> None:
        self.closed = True
        if self.watch is not None:
            monitor.unwatch(self.watch)
        if self.process is not None:
            self.process.close()

    def check_open(self) -> WorkerProcess:
        if self.closed or self.process is None:
            raise RuntimeError("runtime is closed")
        return self.process

    # -- values ----------------------------------------------------------------------
    def _make_function(self, function_id: int) -> JsFunction:
        self.connection.live_functions.add(function_id)
        return JsFunction(self, self.driver, function_id)

    def _function_id(self, fn: JsFunction) -> int:
        if fn._core is not self:
            raise ValueError("a JsFunction can only be passed back to the runtime it came from")
        if fn.closed:
            raise RuntimeError("Function has been closed")
        return fn._id

    def check_function(self, fn: JsFunction) -> None:
        if fn.closed:
            raise RuntimeError("Function has been closed")
        self._function_id(fn)

    # -- commands --------------------------------------------------------------------
    def begin(self, rid: int, timeout: float | None) -> Command:
        """Start charging a command: its deadline and, for the outermost one, CPU."""
        limit = self.options.timeout if timeout is None else seconds("timeout", timeout)
        deadline = math.inf if limit is None else time.monotonic() + limit
        command = Command(rid, limit, deadline)
        if not self.commands:
            if self.watch is not None:
                self.watch.command_started()
            if not self.signals_confined and self.process is not None and self.process.poll() is not None:
                # Where guest code could signal its own worker, only this look tells a death
                # from outside while idle from one during the command.
                self.died_idle = True
        self.commands.append(command)
        return command

    def abandon(self, command: Command, exc: BaseException) -> None:
        """A command's step failed or was interrupted: stop charging it; if the caller
        abandoned it (cancellation, KeyboardInterrupt), the worker's state is unknown."""
        self.end(command)
        if not isinstance(exc, Exception):
            self.interrupted()

    def end(self, command: Command) -> None:
        if command in self.commands:
            self.commands.remove(command)
        if not self.commands and self.watch is not None:
            self.watch.command_finished()

    def finish(self, command: Command) -> Any:
        """The outcome of a completed command: its value, or raise its error."""
        self.end(command)
        try:
            return self.connection.take(command.rid)
        except JavaScriptError:
            # A thread the kernel refused (the worker's task cap) reaches the guest as an
            # error it may not even have caused itself; the worker is at its thread limit.
            refused = self._threads_refused(self.process) if self.process is not None else None
            if refused is None:
                raise
            raise self._fail(refused) from None

    @staticmethod
    def check_code(code: Any) -> str:
        if not isinstance(code, str):
            raise TypeError(f"code must be a str of JavaScript, got {type(code).__name__}")
        return code

    def bind_check(self, name: Any, fn: Any) -> str:
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        if not _IDENTIFIER.match(name) or name in _RESERVED:
            raise ValueError(
                f"{name!r} cannot be a guest global: use a JavaScript identifier "
                "(letters, digits, _ or $, not starting with a digit) that is not a reserved word"
            )
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        return name

    # -- events ----------------------------------------------------------------------
    def pump(self) -> HostCall | _NeedData | None:
        """Apply buffered events until one needs the driver: a host call to run, None when
        a request completed (the driver checks whether it was its own), or NEED_DATA."""
        while True:
            try:
                event = self.connection.next_event()
            except ProtocolError as err:
                raise self.protocol_failure(err) from None
            if event is None:
                return NEED_DATA
            call = self.handle(event)
            if call is not None or isinstance(event, (Completed, Hello)):
                return call

    def answer_expected(self) -> bool:
        """Whether a frame went out so recently that the driver should look at the pipe
        again rather than sleep on it (LOOK_NS)."""
        return time.perf_counter_ns() < self._look_until

    def ingest(self, data: bytes | None) -> bool:
        """Feed what a read returned; True if there was data, raise if the worker is gone."""
        if data is None:
            raise self.died()
        if data:
            self.connection.feed(data)
            return True
        return False

    def remaining(self, command: Command | None, startup_deadline: float = math.inf) -> float:
        """Seconds to wait at most before looking again (at most TICK); raise if a deadline
        (the command's, the start-up's, or a termination's grace) has passed."""
        now = time.monotonic()
        if self.terminate_deadline is not None and now >= self.terminate_deadline:
            raise self._fail(self._force_killed())
        deadline = startup_deadline if command is None else command.deadline
        left = deadline - now
        if left <= 0:
            raise self.timed_out(command)
        return min(left, TICK)

    def handle(self, event: Event) -> HostCall | None:
        """Apply an event; return a host call for the driver to run, else None."""
        if isinstance(event, HostCall):
            self.host_call_count += 1
            limit = self.options.max_host_calls
            if limit is not None and self.host_call_count > limit:
                raise self._fail(
                    WorkerCrashed(
                        f"guest made more than max_host_calls={limit} host calls",
                        hint=f"raise max_host_calls= (now {limit}), or batch the guest's host calls",
                    )
                )
            return event
        if isinstance(event, Console):
            self._console(event)
        elif isinstance(event, Terminated):
            if self.terminate_deadline is None:
                raise self.protocol_failure(
                    ProtocolError("acknowledged a termination never asked for", malformed=False)
                )
            raise self._fail(RuntimeTerminated("runtime was terminated on request"))
        # Hello and Completed carry nothing further to do here.
        return None

    def _console(self, event: Console) -> None:
        command = self.commands[0] if self.commands else None
        if command is not None:
            # Counted by the host, whatever the worker claims to have sent.
            command.console_bytes += len(event.text)
            if command.console_bytes > self.options.max_console_bytes:
                if command.console_capped:
                    return
                command.console_capped = True
                event = Console(
                    "warn",
                    f"pydeno: console output went over max_console_bytes={self.options.max_console_bytes} "
                    "in this command; the rest is dropped",
                )
        handler = self.options.on_console
        if handler is None:
            log.log(_LEVELS.get(event.level, logging.INFO), "%s", event.text)
            return
        try:
            handler(event.level, event.text)
        except Exception:
            # The handler is the caller's code; its failure must not leave a command
            # half-read, so it is logged and the command goes on.
            log.exception("pydeno: the on_console handler raised")

    # -- host calls ------------------------------------------------------------------
    def begin_host_call(self, call: HostCall) -> Callable[..., Any] | bytes:
        """The function to run for call, or the reply refusing it (too many in flight)."""
        if len(self.connection.host_calls) > self.options.max_inflight_host_calls:
            limit = self.options.max_inflight_host_calls
            return self.connection.reply_error(call.call_id, "Error", f"more than {limit} host calls in flight")
        command = self.commands[-1] if self.commands else None
        if command is not None:
            command.host_call_started = time.monotonic()
            if self.options.max_host_wait is not None and self.watch is not None:
                # The monitor kills the worker if the host function is still running when
                # the command's host-wait budget runs out.
                self.watch.host_wait_deadline = command.host_call_started + (
                    self.options.max_host_wait - command.host_wait
                )
                self.watch.host_wait_verdict = self._host_wait_error()
        return self.functions[call.name]

    def finish_host_call(self, call: HostCall, result: Any = None, error: Exception | None = None) -> bytes:
        """Charge the call's time and build the reply to send: the result, or the error shown
        to the guest. An error that is this runtime's own failure (a command the function
        made on it broke it) is that of the calling command too, and is raised instead."""
        self.end_host_call(call)
        if error is None:
            return self.connection.reply(call.call_id, result)
        if self.closed and isinstance(error, PydenoError):
            raise error
        return self.host_error_reply(call, error)

    def end_host_call(self, call: HostCall) -> None:
        """Charge the time a host function took to host wait, not to the guest's deadline."""
        command = self.commands[-1] if self.commands else None
        if self.watch is not None:
            self.watch.host_wait_deadline = None
        if command is None or command.host_call_started is None:
            return
        spent = time.monotonic() - command.host_call_started
        command.host_call_started = None
        command.host_wait += spent
        command.deadline += spent
        if self.options.max_host_wait is not None and command.host_wait > self.options.max_host_wait:
            raise self._fail(self._host_wait_error())

    def _host_wait_error(self) -> RuntimeTimeout:
        wait = self.options.max_host_wait
        return RuntimeTimeout(
            f"host callbacks kept the guest waiting for more than {wait}s in one command (max_host_wait); "
            "worker killed",
            hint=f"raise max_host_wait= (now {wait}), or make the host functions answer sooner",
        )

    def host_error_reply(self, call: HostCall, exc: BaseException) -> bytes:
        """The reply that shows a host function's exception to the guest (see guest_error)."""
        where = f"host function {call.name}()"
        if call.name == HOST_FUNCTION and call.args and isinstance(call.args[0], str):
            where = f"tools.{call.args[0]}()"
        name, message = guest_error(exc, expose=self.options.expose_host_errors, where=where)
        return self.connection.reply_error(call.call_id, name, message)

    # -- termination -------------------------------------------------------------------
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
        process = self.check_open()
        while True:
            n = process.write(view)
            if n < 0:
                raise self.died()
            view = view[n:]
            if not view:
                queued = self.outbox()
                if not queued:
                    self._look_until = time.perf_counter_ns() + LOOK_NS
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
        data = self.request_termination()
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

    def request_termination(self) -> bytes | None:
        """Start terminating: the frame to send, or None if there is nothing to terminate
        (no command in flight: the runtime is simply closed)."""
        if self.closed:
            return None
        if not self.commands:
            self.close()
            return None
        if self.terminate_deadline is None:
            self.terminate_deadline = time.monotonic() + self.options.terminate_grace
            if self.watch is not None:
                self.watch.force_kill_at(self.terminate_deadline, self._force_killed())
        return self.connection.terminate()

    def _force_killed(self) -> RuntimeForceKilled:
        grace = self.options.terminate_grace
        return RuntimeForceKilled(
            f"worker did not acknowledge termination within terminate_grace={grace}s; killed",
            hint=f"nothing to fix if the guest was busy; raise terminate_grace= (now {grace}) to wait longer",
        )

    # -- failures: each kills the worker, closes the runtime and returns the error -------
    def _fail(self, exc: Exception) -> Exception:
        self.close()
        return exc

    def protocol_failure(self, err: ProtocolError) -> Exception:
        return self._fail(WorkerCrashed(err.crash_message()))

    def died(self) -> Exception:
        """The worker is gone: report what the host knows about why, in this order: a
        termination it acknowledged, a limit the monitor enforced, V8's fatal exit on its heap
        limit, a death from outside, or a death its guest code caused."""
        process = self.check_open()
        if self.watch is not None:
            self.watch.release()  # reaping frees the pid: the monitor must not signal it again
        # A worker still running when the host met the end of its output (or a closed input)
        # closed that pipe itself: only guest code does that. The exit status can trail the
        # end of file by a moment, so wait for it a little before deciding.
        ended_alone = process.settled(_EXIT_SETTLE_SECONDS)
        process.kill()
        if self.terminate_deadline is not None and self._acknowledged_termination(process):
            # It acknowledged and exited while the driver was busy elsewhere (in a host
            # function, say): the driver met the closed pipe before the acknowledgement, and
            # the monitor may meanwhile have passed the grace and convicted it as unresponsive.
            return self._fail(RuntimeTerminated("runtime was terminated on request"))
        watch = self.watch
        if watch is not None and watch.verdict is not None:
            return self._fail(watch.verdict)
        stopped = self._stopped_by_the_kernel(process)
        if stopped is not None:
            return self._fail(stopped)
        if self.connection.hello is None:
            refusal = process.sandbox_refusal()
            if refusal is not None:
                return self._fail(WorkerCrashed(layer_refusal(refusal), hint=_SANDBOX_HINT))
            kept = process.permission_kept()
            if kept is not None:
                return self._fail(WorkerCrashed(selftest_refusal([kept]), hint=_SANDBOX_HINT))
            return self._fail(WorkerCrashed(process.death_message("worker exited during startup")))
        code = process.popen.returncode
        if not ended_alone and process.pipe_error is None:
            return self._fail(WorkerCrashed(process.death_message(GUEST_DEATH, "closed its pipes"), hint=_GUEST_HINT))
        if (
            code == -_platform.V8_FATAL_SIGNAL
            and self.options.max_memory is not None
            and _platform.v8_out_of_memory(process.stderr_tail())
        ):
            # V8 ends the process with a trap on a fatal error after printing what it was; a
            # guest can print that line too, but only to make its death look less retryable.
            memory = self.options.max_memory
            return self._fail(
                WorkerCrashed(
                    f"worker ran out of its V8 heap (sized from max_memory={memory}) and was stopped",
                    hint=f"raise max_memory= (now {memory}), or reduce what the code keeps alive",
                )
            )
        if code is not None and self._from_outside(code):
            return self._fail(WorkerCrashed(process.death_message("worker process died")))
        return self._fail(WorkerCrashed(process.death_message(GUEST_DEATH), hint=_GUEST_HINT))

    def _stopped_by_the_kernel(self, process: WorkerProcess) -> WorkerCrashed | None:
        """The limit enforced while the monitor did not get to run (the host was busy): by
        the worker's cgroup, from what the kernel counted (a kill over the memory cap, a
        thread refused over the task cap), or by the zygote's watch where there is none."""
        group, options = process.cgroup, self.options
        if group is None:
            over = process.killed_over_cap()
            if over is not None and over[0] == "memory" and options.max_memory is not None:
                return monitor.memory_verdict(over[1], options.max_memory)
            if over is not None and over[0] == "threads" and options.max_threads is not None:
                return monitor.thread_verdict(over[1], options.max_threads)
            return None
        if options.max_memory is not None and group.oom_killed():
            peak = max(group.peak_memory(), self.watch.peak_rss if self.watch is not None else 0)
            return monitor.memory_verdict(max(peak, options.max_memory + 1), options.max_memory)
        return self._threads_refused(process)

    def _threads_refused(self, process: WorkerProcess) -> WorkerCrashed | None:
        """thread_limit, if the worker's cgroup refused it a task over its cap."""
        group, max_threads = process.cgroup, self.options.max_threads
        if group is None or max_threads is None or not group.tasks_refused():
            return None
        return monitor.thread_verdict(task_limit(max_threads), max_threads)

    def _from_outside(self, code: int) -> bool:
        """Whether a death after the handshake can only have come from outside the worker.

        An exit is always the worker's own doing, and so is a fault (a crash of the engine,
        an abort): guest input can cause either. A signal that only another process sends
        (SIGKILL, SIGTERM, ...) is from outside where the seccomp filter refuses the worker
        every such signal to itself, and, where it does not, only if it came while no command
        ran.
        """
        if code >= 0 or -code in _platform.FAULT_SIGNALS:
            return False
        return self.signals_confined or self.died_idle or not self.commands

    def _acknowledged_termination(self, process: WorkerProcess) -> bool:
        """Whether the dead worker's unread output holds its acknowledgement of terminate()."""
        while data := process.read():
            self.connection.feed(data)
        try:
            while (event := self.connection.next_event()) is not None:
                if isinstance(event, Terminated):
                    return True
        except ProtocolError:
            return False
        return False

    def timed_out(self, command: Command | None) -> Exception:
        if command is None:
            wait = self.options.startup_timeout
            return self._fail(
                WorkerCrashed(
                    f"worker did not complete its handshake within startup_timeout={wait}s; killed",
                    hint=f"retry on a fresh runtime; raise startup_timeout= (now {wait}) if the machine is overloaded",
                )
            )
        return self._fail(
            RuntimeTimeout(
                f"command exceeded timeout={command.limit}s; worker killed",
                hint=f"raise timeout= (now {command.limit}), or make the code finish sooner",
            )
        )

    def interrupted(self) -> None:
        """The caller abandoned a command (cancellation, KeyboardInterrupt): the worker's
        state is unknown, so it is killed and the runtime closed."""
        self.close()

    def startup_deadline(self) -> float:
        return time.monotonic() + self.options.startup_timeout
