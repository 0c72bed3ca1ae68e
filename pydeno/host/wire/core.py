"""The runtime core: a state machine shared by :class:`pydeno.Runtime` and :class:`pydeno.AsyncRuntime`.

Every rule of a runtime's conversation with its worker lives here once: which event means
what, the deadlines and budgets of each command, the accounting of host calls, console
output, how a host function's exception is shown to the guest, and what a failure leaves
the runtime in. It takes bytes (``feed``) and the time (its clocks) in, and gives events,
bytes to send, deadlines and notices out. It owns no process, thread or lock, never sleeps
and calls nothing above it: what the monitor must know (a command began, the last one ended,
a host function's deadline, a termination's grace, the end) it queues as :data:`Notice`s,
which the supervisor (pydeno/host/process/supervisor.py), its only caller, applies right after the
call that made them. A request is made in one call (:meth:`Core.request`), which returns
the :class:`Command` that carries its id and the bytes to send. The runtime's lifecycle is
one :class:`State`, moved in one place (:meth:`Core._move`), and every counter the runtime's
``stats()`` reports of its conversation is kept here.
"""

from __future__ import annotations

import enum
import math
import re
from collections import deque
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from ..._base.checks import bytes_text, limit_text, seconds
from ..._base.errors import PydenoError, RuntimeForceKilled, RuntimeTimeout, guest_error
from ..._base.failures import (
    closed_error,
    command_timed_out,
    force_killed,
    handshake_timed_out,
    host_calls_exceeded,
    host_wait_exceeded,
    protocol_broken,
    terminated,
)
from ..._base.kinds import classify_error
from ..._base.options import RuntimeOptions, console_log
from .codec import Codec
from .connection import (
    AddModule,
    AddPackage,
    Bind,
    Call,
    Completed,
    Connection,
    Console,
    Eval,
    EvalModule,
    Event,
    Hello,
    HostCall,
    LoadWasm,
    ProtocolError,
    Request,
    Terminated,
)

__all__ = [
    "CLOSED",
    "CLOSED_BY_CALL",
    "NEED_DATA",
    "AddModule",
    "AddPackage",
    "Bind",
    "Call",
    "Closed",
    "Command",
    "Core",
    "Eval",
    "EvalModule",
    "ForceKill",
    "HostWait",
    "IDLE",
    "Idle",
    "LoadWasm",
    "Notice",
    "RUNNING",
    "Request",
    "Running",
    "State",
    "bind_check",
    "closed_after",
    "wasm_check",
]

# Where a failing on_console handler is reported: the guest's console output's own logger.
log = console_log

# While waiting, drivers wake at least this often to drain stderr and check the worker.
TICK: Final = 0.25
# After a frame is sent, drivers look at the pipe again without sleeping for this long: a
# warm answer comes well within it, and a reader that sleeps costs a wake-up on a VM (~75 us
# of the writer's time, plus the loop's registration for the async driver). The sync driver
# looks in a tight loop, the async one once per turn of the event loop; so a long command
# costs at most this much host CPU, and never holds the event loop.
LOOK_NS: Final = 200_000

# What closed a runtime, as the note of a later use of it says.
CLOSED_BY_CALL: Final = "close() was called on the runtime (by the code, or by the pool, session or block owning it)"
_ABANDONED: Final = (
    "the runtime was closed when its caller abandoned a running command (a cancellation, an outer "
    "deadline or KeyboardInterrupt): the worker's state was unknown, so it was killed"
)
# A quoted failure is cut here: it may end in the worker's last line of stderr.
_MAX_QUOTED: Final = 500

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
# A module bound by load_wasm may not take the name of the namespace the guest instantiates
# it with either.
_RESERVED_WASM: Final = _RESERVED | {"WebAssembly"}
# Where load_wasm's refusal under jitless=True sends the operator.
_WASM_DOCS: Final = "docs/security.md#webassembly"


def _global_name(name: Any, reserved: frozenset[str]) -> str:
    """name, if it may be a guest global the host defines, else a TypeError/ValueError."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if not _IDENTIFIER.match(name) or name in reserved:
        raise ValueError(
            f"{name!r} cannot be a guest global: use a JavaScript identifier "
            "(letters, digits, _ or $, not starting with a digit) that is not a reserved word"
            + (" or WebAssembly" if "WebAssembly" in reserved else "")
        )
    return name


def closed_after(exc: BaseException) -> str:
    """What closed a runtime that exc ended: its kind and its (host-authored) message."""
    if not isinstance(exc, Exception):
        return _ABANDONED
    kind = classify_error(exc).kind
    text = str(exc)
    if len(text) > _MAX_QUOTED:
        text = text[:_MAX_QUOTED] + "..."
    return f"the runtime was closed after {kind}: {text}" if text else f"the runtime was closed after {kind}"


def bind_check(name: Any, fn: Any) -> str:
    """bind_function's arguments, refused before anything is sent."""
    checked = _global_name(name, _RESERVED)
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    return checked


def wasm_check(options: RuntimeOptions, name: Any, module: Any) -> tuple[str, bytes]:
    """load_wasm's arguments, refused before anything is sent: the name a guest global may
    take, the module's bytes within max_message_bytes, and a worker whose V8 has
    WebAssembly at all."""
    checked = _global_name(name, _RESERVED_WASM)
    if isinstance(module, str):
        raise TypeError("module must be the module's bytes, got str: read a .wasm file in binary mode ('rb')")
    if not isinstance(module, (bytes, bytearray, memoryview)):
        raise TypeError(f"module must be bytes, bytearray or memoryview, got {type(module).__name__}")
    # A memoryview of any format or layout: its bytes, copied once, so that the caller
    # changing its buffer meanwhile cannot change what is compiled.
    data = module.tobytes() if isinstance(module, memoryview) else bytes(module)
    limit = options.max_message_bytes
    if len(data) > limit:
        raise ValueError(
            f"the module's {bytes_text(len(data))} bytes are over max_message_bytes (now {limit_text(limit)}): "
            "raise max_message_bytes= or load a smaller module"
        )
    if options.jitless:
        # V8 without a JIT has no WebAssembly, and this deno's V8 has no Wasm interpreter
        # to stand in (--wasm-jitless is accepted and changes nothing): the guest's
        # WebAssembly is undefined. Said here, not as a ReferenceError in the guest.
        raise ValueError(
            "WebAssembly is not available with jitless=True (the default): V8 without its JIT compilers "
            "has no WebAssembly. Start the runtime with jitless=False to load modules; that runs all guest "
            f"code with V8's JIT compilers on, a larger attack surface ({_WASM_DOCS})"
        )
    return checked, data


class State(enum.Enum):
    """Where a runtime is in its life. Moves only forward, and only as _MOVES allows."""

    # The worker has not shaken hands yet (it may not even have been started).
    STARTING = "starting"
    # It shook hands: commands may run.
    READY = "ready"
    # terminate() was asked while a command ran: the worker has terminate_grace to
    # acknowledge it before the monitor kills it.
    TERMINATING = "terminating"
    # Closed for good (closed_by says why); the worker is ended.
    CLOSED = "closed"


_MOVES: Final = {
    State.STARTING: frozenset({State.READY, State.CLOSED}),
    State.READY: frozenset({State.TERMINATING, State.CLOSED}),
    State.TERMINATING: frozenset({State.CLOSED}),
    State.CLOSED: frozenset(),
}
# Read on every step of the warm path: a module name is one lookup, the enum's member two.
CLOSED: Final = State.CLOSED


# -- what the supervisor must apply, in order, right after the call that queued it ----------
class Running:
    """The first command in flight began: charge CPU to commands from now."""

    __slots__ = ()


class Idle:
    """The last command in flight ended: charge CPU to the time between commands from now."""

    __slots__ = ()


class HostWait(NamedTuple):
    """A host function's run must end by deadline, else the worker is killed with verdict;
    (None, None) once it returned."""

    deadline: float | None
    verdict: PydenoError | None


class ForceKill(NamedTuple):
    """Kill the worker at deadline with verdict unless it acknowledged a termination first."""

    deadline: float
    verdict: PydenoError


class Closed(NamedTuple):
    """The runtime closed: end the worker. by_call: close() (or terminate() with nothing to
    terminate) closed it, not a failure."""

    by_call: bool


# Told apart by their classes (Supervisor._apply), never compared: HostWait and ForceKill,
# tuples of one shape, would compare equal.
Notice = Running | Idle | HostWait | ForceKill | Closed
# The two notices every command queues carry nothing: one of each serves them all (and the
# supervisor knows them by identity).
RUNNING: Final = Running()
IDLE: Final = Idle()


class _NeedData:
    """The sentinel :meth:`Core.pump` returns when it needs more bytes from the worker."""

    __slots__ = ()


NEED_DATA: Final = _NeedData()


class Command:
    """One request in flight: its id, the bytes that ask for it (until they are taken to be
    sent), and what it has been charged so far."""

    __slots__ = (
        "console_bytes",
        "console_capped",
        "data",
        "deadline",
        "host_call_started",
        "host_wait",
        "internal",
        "limit",
        "rid",
    )

    def __init__(
        self, rid: int, limit: float | None, deadline: float, data: bytes = b"", internal: bool = False
    ) -> None:
        self.rid = rid
        self.limit = limit
        # The guest's deadline; host-call time moves it later (timeout does not charge it).
        self.deadline = deadline
        self.data = data
        # Run by the host for itself (a determinism prelude, a package, a pool's warm-up):
        # stats() leaves it out.
        self.internal = internal
        self.host_wait = 0.0
        self.host_call_started: float | None = None
        self.console_bytes = 0
        self.console_capped = False

    def take_data(self) -> bytes:
        """The bytes to send, once: the command keeps no copy of a large frame while it runs."""
        data, self.data = self.data, b""
        return data


class Core:
    """One runtime's protocol state: options, the connection, the commands in flight.

    ``clock`` is a monotonic clock in seconds (deadlines), ``ns_clock`` a fine one in
    nanoseconds (the look-again window after a send).
    """

    def __init__(
        self,
        options: RuntimeOptions,
        make_function: Callable[[int], Any],
        function_id: Callable[[Any], int | None],
        clock: Callable[[], float],
        ns_clock: Callable[[], int],
    ) -> None:
        """make_function builds the handle of a guest function the worker sent (by its id);
        function_id gives the id of a handle passed back (None for any other value), or
        raises if it may not go."""
        self.options = options
        self._handle = make_function
        self.clock = clock
        self._ns_clock = ns_clock
        self.codec = Codec(
            self._make_function,
            function_id,
            options.max_message_bytes,
            max_decode_ratio=options.max_decode_ratio,
        )
        self.connection = Connection(self.codec, options.max_message_bytes)
        self.functions: dict[str, Callable[..., Any]] = {}
        self.commands: list[Command] = []
        self.state = State.STARTING
        # What closed the runtime, host-authored, for the note of every later use of it; and
        # whether close() did (not a failure).
        self.closed_by = ""
        self.closed_by_call = False
        self.terminate_deadline: float | None = None
        self.notices: deque[Notice] = deque()
        self._look_until = 0  # ns_clock; see LOOK_NS
        # The runtime's figures of its conversation (stats()): commands that ended, ok or
        # not, those the host ran for itself among them, and the host calls the guest made
        # (the count max_host_calls bounds).
        self.commands_done = 0
        self.internal_done = 0
        self.host_calls = 0

    @property
    def closed(self) -> bool:
        return self.state is CLOSED

    def _move(self, to: State) -> None:
        """The one place the lifecycle moves."""
        if to not in _MOVES[self.state]:
            raise AssertionError(f"a runtime cannot go from {self.state.value} to {to.value}")
        self.state = to

    def take_notices(self) -> list[Notice]:
        """What the supervisor must apply, in the order it was queued; emptied."""
        taken: list[Notice] = []
        while self.notices:
            taken.append(self.notices.popleft())
        return taken

    def close(self, why: str = CLOSED_BY_CALL, *, by_call: bool = False) -> None:
        """Close the runtime (idempotent): the supervisor is told to end the worker. why says
        what closed it; the first reason given is kept."""
        if not self.closed:
            self._move(State.CLOSED)
            self.closed_by = why
            self.closed_by_call = by_call
            self.notices.append(Closed(by_call))

    def check_open(self) -> None:
        if self.state is CLOSED:
            raise closed_error("runtime is closed", self.closed_by)

    # -- values ----------------------------------------------------------------------
    def _make_function(self, function_id: int) -> Any:
        self.connection.live_functions.add(function_id)
        return self._handle(function_id)

    # -- commands --------------------------------------------------------------------
    def request(self, request: Request, timeout: float | None = None, *, internal: bool = False) -> Command:
        """Make a request and start charging it (its deadline and, for the outermost one,
        CPU): the command carries its id and the bytes to send. timeout None: the runtime's."""
        if self.state is CLOSED:
            self.check_open()
        limit = self.options.timeout if timeout is None else seconds("timeout", timeout)
        connection = self.connection
        # An eval first, as most requests are: one type test instead of a pattern match.
        if type(request) is Eval:
            rid, data = connection.eval(request.code, typescript=request.typescript, program=request.program)
        else:
            rid, data = self._other(request)
        deadline = math.inf if limit is None else self.clock() + limit
        command = Command(rid, limit, deadline, data, internal)
        if not self.commands:
            self.notices.append(RUNNING)
        self.commands.append(command)
        return command

    def _other(self, request: Request) -> tuple[int, bytes]:
        """The id and bytes of a request other than an eval."""
        connection = self.connection
        match request:
            case Call(function_id, args):
                return connection.call(function_id, args)
            case Bind(name, fn):
                self.functions[name] = fn
                return connection.bind(name)
            case AddModule(specifier, source):
                return connection.add_module(specifier, source)
            case AddPackage(specifier, requires, source):
                return connection.add_package(specifier, list(requires), source)
            case EvalModule(source):
                return connection.eval_module(source)
            case LoadWasm(name, module):
                return connection.load_wasm(name, module)
            case Eval(code, typescript, program):
                return connection.eval(code, typescript=typescript, program=program)
        raise TypeError(f"not a request: {request!r}")

    def abandon(self, command: Command, exc: BaseException) -> None:
        """A command's step failed or was interrupted: stop charging it; if the caller
        abandoned it (cancellation, KeyboardInterrupt), the worker's state is unknown."""
        self.end(command)
        if not isinstance(exc, Exception):
            self.interrupted()

    def end(self, command: Command) -> None:
        """Stop charging a command, and count it as ended (once)."""
        if command in self.commands:
            self.commands.remove(command)
            self.commands_done += 1
            if command.internal:
                self.internal_done += 1
            if not self.commands:
                self.notices.append(IDLE)

    def finish(self, command: Command) -> Any:
        """The outcome of a completed command: its value, or raise its error."""
        self.end(command)
        return self.connection.take(command.rid)

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
        return self._ns_clock() < self._look_until

    def remaining(self, command: Command | None, startup_deadline: float = math.inf) -> float:
        """Seconds to wait at most before looking again (at most TICK); raise if a deadline
        (the command's, the start-up's, or a termination's grace) has passed."""
        now = self.clock()
        if self.terminate_deadline is not None and now >= self.terminate_deadline:
            raise self.fail(self._force_killed())
        deadline = startup_deadline if command is None else command.deadline
        left = deadline - now
        if left <= 0:
            raise self.timed_out(command)
        return min(left, TICK)

    def handle(self, event: Event) -> HostCall | None:
        """Apply an event; return a host call for the driver to run, else None."""
        if isinstance(event, HostCall):
            self.host_calls += 1
            limit = self.options.max_host_calls
            if limit is not None and self.host_calls > limit:
                raise self.fail(host_calls_exceeded(limit))
            return event
        if isinstance(event, Console):
            self._console(event)
        elif isinstance(event, Hello):
            if self.state is State.STARTING:
                self._move(State.READY)
        elif isinstance(event, Terminated):
            if self.terminate_deadline is None:
                raise self.protocol_failure(
                    ProtocolError("acknowledged a termination never asked for", malformed=False)
                )
            raise self.fail(terminated())
        # Completed carries nothing further to do here.
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
        try:
            self.options.on_console(event.level, event.text)
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
            command.host_call_started = self.clock()
            if self.options.max_host_wait is not None:
                # The monitor kills the worker if the host function is still running when
                # the command's host-wait budget runs out.
                left = self.options.max_host_wait - command.host_wait
                self.notices.append(HostWait(command.host_call_started + left, self._host_wait_error()))
        return self.functions[call.name]

    def settle_host_call(
        self, call: HostCall, result: Any = None, error: Exception | None = None, *, overran: bool = False
    ) -> bytes:
        """Charge the time a host function took to host wait (not to the guest's deadline) and
        build the reply to send: the result, or error as the guest is shown it. Raised instead:
        the command's failure when the function overran the host-wait budget (the driver gave
        up waiting; the monitor's kill says the same), or when error is this runtime's own
        (a command the function made on it broke it)."""
        command = self.commands[-1] if self.commands else None
        max_host_wait = self.options.max_host_wait
        if max_host_wait is not None:
            self.notices.append(HostWait(None, None))
        if command is not None and command.host_call_started is not None:
            spent = self.clock() - command.host_call_started
            command.host_call_started = None
            command.host_wait += spent
            command.deadline += spent
            if max_host_wait is not None and command.host_wait > max_host_wait:
                overran = True
        if overran:
            raise self.fail(self._host_wait_error())
        if error is None:
            return self.connection.reply(call.call_id, result)
        if self.closed and isinstance(error, PydenoError):
            raise error
        # A function that stands for others (the tool bridge's one host function) names the
        # one the guest called.
        name_call = getattr(self.functions.get(call.name), "name_call", None)
        where = name_call(call.args) if callable(name_call) else None
        if not isinstance(where, str):
            where = f"host function {call.name}()"
        name, message = guest_error(error, expose=self.options.expose_host_errors, where=where)
        return self.connection.reply_error(call.call_id, name, message)

    def host_call_left(self) -> float:
        """Seconds the running host function may still take before the command's host-wait
        budget is spent (inf: no budget, or no host call running)."""
        command = self.commands[-1] if self.commands else None
        if self.options.max_host_wait is None or command is None or command.host_call_started is None:
            return math.inf
        return command.host_call_started + self.options.max_host_wait - command.host_wait - self.clock()

    def _host_wait_error(self) -> RuntimeTimeout:
        assert self.options.max_host_wait is not None
        return host_wait_exceeded(self.options.max_host_wait)

    def sent(self) -> None:
        """A frame went out whole: look again at the pipe before sleeping (LOOK_NS)."""
        self._look_until = self._ns_clock() + LOOK_NS

    def feed(self, data: bytes) -> None:
        """Bytes the worker wrote, in order."""
        self.connection.feed(data)

    def request_termination(self) -> bytes | None:
        """Start terminating: the frame to send, or None if there is nothing to terminate
        (no command in flight: the runtime is simply closed)."""
        if self.closed:
            return None
        if not self.commands:
            self.close("terminate() was called while no command ran, which closes the runtime", by_call=True)
            return None
        if self.terminate_deadline is None:
            if self.state is State.READY:
                self._move(State.TERMINATING)
            self.terminate_deadline = self.clock() + self.options.terminate_grace
            self.notices.append(ForceKill(self.terminate_deadline, self._force_killed()))
        return self.connection.terminate()

    def _force_killed(self) -> RuntimeForceKilled:
        return force_killed(self.options.terminate_grace)

    # -- failures: each closes the runtime (ending the worker) and returns the error ------
    def fail(self, exc: Exception) -> Exception:
        """Close the runtime for exc (which ends the worker); return exc to raise."""
        self.close(closed_after(exc))
        return exc

    def protocol_failure(self, err: ProtocolError) -> Exception:
        return self.fail(protocol_broken(err.detail, malformed=err.malformed))

    def timed_out(self, command: Command | None) -> Exception:
        if command is None:
            return self.fail(handshake_timed_out(self.options.startup_timeout))
        return self.fail(command_timed_out(command.limit))

    def interrupted(self) -> None:
        """The caller abandoned a command (cancellation, KeyboardInterrupt): the worker's
        state is unknown, so it is killed and the runtime closed."""
        self.close(_ABANDONED)

    def saw_termination(self) -> bool:
        """Whether the frames still unread (a dead worker's last output, fed after its end)
        hold its acknowledgement of a termination."""
        try:
            while (event := self.connection.next_event()) is not None:
                if isinstance(event, Terminated):
                    return True
        except ProtocolError:
            return False
        return False

    def startup_deadline(self) -> float:
        return self.clock() + self.options.startup_timeout
