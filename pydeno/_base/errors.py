"""pydeno's exception tree.

Every exception pydeno raises on purpose is one of these, a documented builtin
(``TypeError``/``ValueError`` for a bad argument, ``RuntimeError`` for a misuse such as a
paused run), or cancellation (tests/unit/test_prose_copies.py checks this tree against the
classes)::

    PydenoError                 base of everything below
    ├── JavaScriptError         the guest threw or failed to compile (.name, .message, .stack)
    ├── WorkerCrashed           the worker died, was killed, broke protocol or would not start
    ├── RuntimeTimeout          a sandbox deadline passed (not a builtin TimeoutError: an outer
    │                           anyio.fail_after raising TimeoutError means *your* deadline fired)
    ├── RuntimeTerminated       terminate() stopped the command and the worker acknowledged it
    ├── RuntimeForceKilled      terminate() was never acknowledged; the worker was killed
    ├── ClosedError             a closed runtime, function or session was used (also a RuntimeError)
    ├── CheckoutTimeout         a pool had no fresh worker within checkout_timeout (nothing ran)
    ├── LeaseTimeout            a session stayed leased elsewhere past lease_timeout (nothing ran)
    ├── SessionLimitError       an owner reached its cap of live sessions or stored bytes
    ├── StoreError              a journal store could not be read or written
    │   └── StoreBusy           ... because another process held it locked past busy_timeout
    ├── PackageError            an npm package could not be had for the guest (nothing ran)
    │   ├── PackageUnresolved   ... no such package or version, or the registry unreachable
    │   └── PackageRefused      ... its bundle does not match the lock, or needs what is never granted
    ├── ActorDied               a Ray actor running the sandbox died
    ├── ToolError               a host tool failed (raise it from a tool; the guest sees its name)
    │   ├── ToolBudgetError     the tool-call budget is spent
    │   ├── ToolNotFoundError   what the tool was asked for does not exist
    │   ├── FetchRefused        HttpFetch refused a guest's request before sending it
    │   ├── FetchFailed         ... sent it, but got no usable answer
    │   ├── FetchTimeout        ... sent it, but it did not finish within the timeout
    │   └── UpstreamError       an upstream MCP server a tool forwards to failed
    ├── JournalError            an agent journal is malformed, too large or not authentic
    │   └── ReplayDivergence    replaying a journal asked for different tool calls
    ├── SnapshotAuthenticationError   a signed snapshot failed authentication
    └── TypeCheckError          a Code Mode program did not type-check (nothing ran)

``str(exc)`` is always the message the host wrote, and any text that came from the worker
or the guest only ever follows the host's prefix, so the start of a message can be trusted.

Every one of them also carries ``.kind`` (see :func:`pydeno.classify_error`), ``.hint`` (the
operator's fix, naming the option and its current value where one applies, a byte limit also
in MiB or GiB), ``.model_hint`` (what the *program* can change, in the program's terms and
with the limit's value where one applies, never an option name: what Code Mode and MCP
results show a model) and ``.docs`` (where its page is read: ``pydeno errors <kind>``, and the
docs site's page when the package names one), and shows the operator's part in tracebacks as
a PEP 678 note.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import ClassVar, Final, TypeVar

from .checks import human_bytes, limit_text
from .docs_links import docs_page, note_for
from .kind_patterns import DENIED, HOST_FAILURE, IMPORT_REFUSED
from .kinds import Catalog, classify_new, info_of

__all__ = [
    "error_fields",
    "ActorDied",
    "CheckoutTimeout",
    "ClosedError",
    "JavaScriptError",
    "JournalError",
    "LeaseTimeout",
    "PackageError",
    "PackageRefused",
    "PackageUnresolved",
    "PydenoError",
    "ReplayDivergence",
    "RuntimeForceKilled",
    "RuntimeTerminated",
    "RuntimeTimeout",
    "SessionLimitError",
    "SnapshotAuthenticationError",
    "StoreBusy",
    "StoreError",
    "ToolBudgetError",
    "ToolError",
    "ToolNotFoundError",
    "TypeCheckError",
    "WorkerCrashed",
    "guest_error",
    "worker_reported",
]


class PydenoError(Exception):
    """Base class of pydeno's own errors: ``.kind``, ``.hint`` and ``.docs`` explain it."""

    # How classify_error finds the kind of an instance: ("type", kind) for a class whose
    # type decides it, ("message", kind) for one whose host-authored message may name a
    # kind (kind when it names none), ("guest", "") for the guest error's own rule.
    KIND_RULE: ClassVar[tuple[str, str]] = ("type", "unknown")

    def __init__(
        self,
        message: str = "",
        *,
        hint: str | None = None,
        model_hint: str | None = None,
        _kind: str | None = None,
    ) -> None:
        super().__init__(message)
        self._explain(hint, _kind, model_hint)

    def _explain(self, hint: str | None, kind: str | None = None, model_hint: str | None = None) -> None:
        _explain(self, hint, kind, model_hint=model_hint)


def _explain(
    exc: Exception, hint: str | None, kind: str | None, *, note: bool = True, model_hint: str | None = None
) -> None:
    """Give exc its kind, hint (the operator's), model hint (the program's), docs page and
    (unless note is False) the PEP 678 note that shows the operator's part.

    The host's own failures come from the factories below, which name their kind; the kind
    of any other is found as classify_error finds it. Raised as ``raise ... from err`` inside
    ``except``, such an exception's cause is set only after __init__: it is classified with
    the exception being handled, as it will be.
    """
    info = info_of(kind) if kind is not None else classify_new(exc, sys.exception())
    # What classify_error reads first (then the message, for one a factory did not make).
    exc._authored_kind = kind  # type: ignore[attr-defined]
    exc.kind = info.kind  # type: ignore[attr-defined]
    exc.hint = hint or Catalog[info.kind].fix  # type: ignore[attr-defined]
    exc.model_hint = model_hint or Catalog[info.kind].model_fix  # type: ignore[attr-defined]
    exc.docs = docs_page(info.kind)  # type: ignore[attr-defined]
    if note:
        exc.add_note(note_for(info, exc.hint))  # type: ignore[attr-defined]


# JavaScriptError's default cause: none at all, which is not a cause of None (null).
_NO_CAUSE: Final = object()


class JavaScriptError(PydenoError):
    """The guest code threw, or failed to compile; or a JavaScript ``Error`` object as a value.

    ``name`` and ``message`` are the guest error's own (``name`` is empty when the guest
    threw something that is not an object), ``stack`` its stack with the worker's frames
    removed. ``str()`` is ``"Evaluation failed: Name: message"``.

    An ``Error`` object that the guest returns, passes to a host function or puts inside
    either arrives as a JavaScriptError too, as a value (not raised), whose ``str()`` is
    ``"JavaScript Error value: Name: message"`` and whose kind is always ``js_error``,
    whatever its name or message say (docs/values.md). Besides ``name``, ``message`` and
    ``stack`` it has ``cause`` (the converted ``cause``, possibly another JavaScriptError;
    None without one, and ``has_cause`` tells ``cause: null`` from no cause at all),
    ``errors`` (an AggregateError's list, else None) and ``properties`` (a dict of its other
    own properties, such as ``code``). A thrown error has no cause, no errors and no
    properties.

    Code that did not compile raises a SyntaxError whose ``line`` and ``column`` (from 1,
    the column in characters) say where, in the code as written; ``str()`` ends with
    ``(line L, column C)`` and a note shows the line with a caret. Any other error's
    ``line`` and ``column`` are None.

    What the guest threw when it is not an ``Error`` (``throw {code: 42}``, a string, a
    number, ``null``...) is kept whole: ``has_value`` is True and ``value`` is it, converted
    as a returned value would be (``{"code": 42}``), and ``message`` shows it as
    ``console.log`` would (``{ code: 42 }``; a string as itself). A thrown value that cannot
    be converted (a cycle, a function, a getter that throws, over ``max_message_bytes``) is
    left out: ``has_value`` is False and ``message`` ends with why. A thrown ``Error``, and an
    Error value, have no value (``value`` is None).

    Any JavaScriptError passed to JavaScript (an argument, a host function's result, an
    item of either) becomes a real ``Error`` with the same name, message, stack, cause,
    errors and properties, of the built-in class its name names (``TypeError``...) or else
    an ``Error`` with that name; build one with
    ``JavaScriptError("TypeError", "bad input", cause=..., properties={"code": 7})``.
    """

    KIND_RULE = ("guest", "")

    PREFIX = "Evaluation failed: "
    VALUE_PREFIX = "JavaScript Error value: "
    # What cause, errors and properties may not name: the attributes of their own.
    RESERVED: Final = frozenset({"name", "message", "stack", "cause", "errors"})

    cause: object
    has_cause: bool
    # Set by the runtime that ran the code, which has its text (pydeno/_runtime/syntax.py).
    line: int | None = None
    column: int | None = None
    errors: list[object] | None
    properties: dict[str, object]
    value: object
    has_value: bool

    def __init__(
        self,
        name: str,
        message: str,
        stack: str = "",
        *,
        cause: object = _NO_CAUSE,
        errors: Iterable[object] | None = None,
        properties: Mapping[str, object] | None = None,
    ) -> None:
        self._parts(name, message, stack, cause, errors, properties)
        super().__init__(f"{self.PREFIX}{name}: {message}" if name else f"{self.PREFIX}{message}")

    def _parts(
        self,
        name: str,
        message: str,
        stack: str,
        cause: object,
        errors: Iterable[object] | None,
        properties: Mapping[str, object] | None,
    ) -> None:
        self.name = name
        self.message = message
        self.stack = stack
        self.has_cause = cause is not _NO_CAUSE
        self.cause = None if cause is _NO_CAUSE else cause
        self.errors = None if errors is None else list(errors)
        self.properties = {} if properties is None else dict(properties)
        self.value = None
        self.has_value = False
        for key in self.properties:
            if type(key) is not str:
                raise TypeError(f"JavaScriptError properties must have str keys, not {type(key).__name__}")
            if key in self.RESERVED:
                raise ValueError(f"JavaScriptError properties may not name {key!r}: pass it as its own argument")

    @classmethod
    def _value(
        cls,
        name: str,
        message: str,
        stack: str,
        cause: object,
        has_cause: bool,
        errors: list[object] | None,
        properties: dict[str, object],
    ) -> JavaScriptError:
        """An Error object the guest sent as a value: kind js_error, whatever its text, and
        no note (it is not a failure; it gets one only if it is raised and classified)."""
        exc = cls.__new__(cls)
        Exception.__init__(exc, f"{cls.VALUE_PREFIX}{name}: {message}" if name else f"{cls.VALUE_PREFIX}{message}")
        exc._parts(name, message, stack, cause if has_cause else _NO_CAUSE, errors, None)
        # Taken as decoded, not copied: the codec built it for this error alone.
        exc.properties = properties
        _explain(exc, None, "js_error", note=False)
        return exc

    def __reduce__(self) -> tuple[Callable[..., JavaScriptError], tuple[object, ...]]:
        # The state too: its kind, hint and every note (a retry loop's as well) cross a
        # process as they are, not as a fresh construction would make them; and its text,
        # which is not always the one __init__ would write.
        return (_rebuild_javascript_error, (type(self), self.args, dict(self.__dict__)))


def error_fields(exc: JavaScriptError) -> dict[str, object]:
    """An Error's parts as a JSON writer shows them: name, message, stack, and cause, errors
    and properties where the error has them; the values unconverted."""
    fields: dict[str, object] = {"name": exc.name, "message": exc.message, "stack": exc.stack}
    if exc.has_cause:
        fields["cause"] = exc.cause
    if exc.errors is not None:
        fields["errors"] = exc.errors
    if exc.properties:
        fields["properties"] = exc.properties
    return fields


def _rebuild_javascript_error(
    cls: type[JavaScriptError], args: tuple[object, ...], state: dict[str, object]
) -> JavaScriptError:
    exc = cls.__new__(cls, *args)
    exc.__dict__.update(state)
    return exc


class WorkerCrashed(PydenoError):
    """The worker process died, was killed by the host, broke protocol or would not start."""

    KIND_RULE = ("message", "worker_crashed")


class RuntimeTimeout(PydenoError):
    """A deadline of the sandbox's own passed; the worker was killed."""

    KIND_RULE = ("message", "timeout")


class RuntimeTerminated(PydenoError):
    """The running command was stopped by ``terminate()``; the worker acknowledged it."""

    KIND_RULE = ("type", "terminated")


class RuntimeForceKilled(PydenoError):
    """``terminate()`` was not acknowledged within ``terminate_grace``; the worker was killed."""

    KIND_RULE = ("type", "force_killed")


class ClosedError(PydenoError, RuntimeError):
    """A closed runtime, function handle, stream or session was used. Also a builtin
    ``RuntimeError``; ``str()`` is the kind table's exact phrase (``runtime is closed``,
    ``Function has been closed``, ...), and ``.hint`` (shown in the note) says what closed
    it: ``close()``, ``terminate()``, or the failure that closed it, with its kind."""

    KIND_RULE = ("type", "closed")


class CheckoutTimeout(PydenoError):
    """A pool had no fresh worker to hand out within its ``checkout_timeout``; nothing ran.
    Not a builtin ``TimeoutError``: that stays the caller's own deadline."""

    KIND_RULE = ("type", "checkout_timeout")


class LeaseTimeout(PydenoError):
    """A session stayed leased elsewhere, or no live slot freed up, within the pool's
    ``lease_timeout``; nothing ran. Not a builtin ``TimeoutError``."""

    KIND_RULE = ("type", "lease_timeout")


class SessionLimitError(PydenoError):
    """An owner reached its cap of live sessions or of stored journal bytes."""

    KIND_RULE = ("type", "session_limit")


class StoreError(PydenoError):
    """A journal store could not be read or written; what it held stays as it was."""

    KIND_RULE = ("type", "store_failed")


class StoreBusy(StoreError):
    """A journal store stayed locked by another process past its ``busy_timeout``; nothing
    was written."""

    KIND_RULE = ("type", "store_busy")


class PackageError(PydenoError):
    """An npm package given with ``pydeno.Packages`` could not be had for the guest."""

    KIND_RULE = ("type", "package_unresolved")


class PackageUnresolved(PackageError):
    """A package spec could not be resolved: no such package or version, the registry could
    not be reached, or (offline) the cache does not hold its bundle. Nothing ran."""

    KIND_RULE = ("type", "package_unresolved")


class PackageRefused(PackageError):
    """A package's bundle was refused: its bytes do not match the lock, or it needs what the
    sandbox never grants (files, the network, subprocesses). Nothing ran."""

    KIND_RULE = ("type", "package_refused")


class ActorDied(PydenoError):
    """A Ray actor running the sandbox died; the pool that owned it replaces it."""

    KIND_RULE = ("type", "actor_died")


class ToolError(PydenoError):
    """A host tool failed. Raise it (or a subclass) from a tool or bound function: the guest
    receives an Error with this class's name and, for these classes, the message."""

    KIND_RULE = ("type", "tool_failed")


class ToolBudgetError(ToolError):
    """The tool-call budget is spent."""

    KIND_RULE = ("type", "tool_budget")


class ToolNotFoundError(ToolError):
    """What the tool was asked for does not exist."""

    KIND_RULE = ("type", "tool_not_found")


class FetchRefused(ToolError):
    """HttpFetch refused a guest's request before sending it: the URL, method, a header or
    the address it resolves to is not allowed."""

    KIND_RULE = ("type", "fetch_refused")


class FetchFailed(ToolError):
    """A guest's request was sent but got no usable answer: the connection failed, or the
    response broke a cap."""

    KIND_RULE = ("type", "fetch_failed")


class FetchTimeout(ToolError):
    """A guest's request did not finish within HttpFetch's timeout. Not a builtin
    ``TimeoutError``: that stays the caller's own deadline."""

    KIND_RULE = ("type", "fetch_timeout")


class UpstreamError(ToolError):
    """An upstream MCP server that a tool forwards to failed or went away during the call."""

    KIND_RULE = ("type", "upstream_failed")


class JournalError(PydenoError):
    """An agent journal is malformed, truncated, too large or not authentic."""

    KIND_RULE = ("type", "journal_invalid")


class ReplayDivergence(JournalError):
    """Replaying a journal asked for different tool calls than were recorded."""

    KIND_RULE = ("type", "replay_divergence")


class SnapshotAuthenticationError(PydenoError):
    """A signed snapshot failed authentication."""

    KIND_RULE = ("type", "snapshot_invalid")


class TypeCheckError(PydenoError):
    """A Code Mode program did not type-check against its tools' declarations; nothing ran.
    ``.diagnostics`` lists the type errors (code, message, line, column)."""

    KIND_RULE = ("type", "typecheck_failed")

    def __init__(self, message: str = "", *, diagnostics: tuple[dict[str, object], ...] = ()) -> None:
        super().__init__(message)
        self.diagnostics = diagnostics


_TOOL_FAMILY = (ToolBudgetError, ToolNotFoundError, FetchRefused, FetchFailed, FetchTimeout, UpstreamError, ToolError)


def guest_error(exc: BaseException, *, expose: bool, where: str) -> tuple[str, str]:
    """(name, message) of the Error a guest receives for a host function's exception.

    A replayed answer carries its recorded pair. The tool errors are raised on purpose for
    the guest to read: the family's name (so a subclass still classifies as its kind) and
    the message as written. Any other exception is a failure on the host: its class name,
    and a message that says so (``where`` names the function) and that shows the exception's
    text only when the runtime exposes host errors. How to expose them is the operator's
    business (the exception's note), never the program's: the message does not say.
    """
    recorded = getattr(exc, "guest_error", None)
    if isinstance(recorded, tuple):
        return recorded
    if isinstance(exc, ToolError):
        return next(c.__name__ for c in type(exc).__mro__ if c in _TOOL_FAMILY), str(exc)
    name = type(exc).__name__
    if expose:
        return name, f"{where} failed on the host ({name}): {exc}"
    return name, f"{where} {HOST_FAILED} ({name}){HIDDEN}"


# What a host failure's message says (guest_error); kinds.HOST_FAILURE reads these words.
HOST_FAILED: Final = "failed on the host"
HIDDEN: Final = "; its details are hidden from the program"


# --- The host's own failures ----------------------------------------------------------------
# Every message that picks a kind is written here, once, by the one function that makes that
# failure and names its kind; the hint travels with it. The anchored patterns that classify
# a message stay the contract for an exception known only by its type and text (pickled
# across a process, say): tests/unit/test_error_factories.py checks that each message here
# classifies, through the patterns alone, to the kind its function names.
FACTORIES: list[Callable[..., Exception]] = []

_F = TypeVar("_F", bound=Callable[..., Exception])

GUEST_DEATH: Final = "worker died running guest code"
_GUEST_HINT: Final = (
    "the guest's code ended its worker (an exit, a closed output, or a crash it provoked); the same code "
    "would do it again, so fix the code rather than retrying it"
)
_SANDBOX_HINT: Final = (
    "run `python -m pydeno doctor` to see which OS layer is missing and why; run where every layer "
    "applies, or pass sandbox='best_effort' knowingly"
)


def _factory(fn: _F) -> _F:
    FACTORIES.append(fn)
    return fn


def _secs(seconds: float) -> str:
    """Seconds as a program's reader reads them: ``1 s``, ``0.5 s``."""
    return f"{seconds:g} s"


def _for_model(kind: str, limit: str | None) -> str:
    """The kind's text for a model with the limit's value after its first clause: "The
    program did not finish in time (its limit is 1 s per run): ...". Only the value: the
    option that sets it is the operator's, and a program cannot change it."""
    text = Catalog[kind].model_fix
    if limit is None:
        return text
    head, colon, rest = text.partition(":")
    return f"{head} (its limit is {limit}){colon}{rest}"


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


@_factory
def command_timed_out(limit: float | None) -> RuntimeTimeout:
    return RuntimeTimeout(
        f"command exceeded timeout={limit}s; worker killed",
        hint=f"raise timeout= (now {limit}), or make the code finish sooner",
        model_hint=_for_model("timeout", None if limit is None else f"{_secs(limit)} per run"),
        _kind="timeout",
    )


@_factory
def cpu_in_command(cpu_limit: float) -> RuntimeTimeout:
    return RuntimeTimeout(
        f"worker used more than {cpu_limit}s of CPU in one command and was killed",
        hint=f"raise cpu_limit= (now {cpu_limit}), or make the code do less work per command",
        model_hint=_for_model("cpu_limit", f"{_secs(cpu_limit)} of CPU per run"),
        _kind="cpu_limit",
    )


@_factory
def cpu_between_commands(allowance: float, cpu_limit: float | None) -> RuntimeTimeout:
    return RuntimeTimeout(
        f"worker used more than {allowance}s of CPU between commands and was killed",
        hint=(
            "the guest left work running after its command returned (Web Workers, timers, promises); "
            f"stop it before returning, or raise cpu_limit= (now {cpu_limit})"
        ),
        model_hint=(
            f"The program left work running after its run ended (Web Workers, timers, promises) and that work "
            f"used more than {_secs(allowance)} of CPU: finish or stop all of it before the run ends."
        ),
        _kind="cpu_limit",
    )


@_factory
def host_wait_exceeded(max_host_wait: float) -> RuntimeTimeout:
    return RuntimeTimeout(
        f"host callbacks kept the guest waiting for more than {max_host_wait}s in one command (max_host_wait); "
        "worker killed",
        hint=f"raise max_host_wait= (now {max_host_wait}), or make the host functions answer sooner",
        model_hint=_for_model("host_wait", f"{_secs(max_host_wait)} of waiting per run"),
        _kind="host_wait",
    )


@_factory
def over_memory(used: int, max_memory: int) -> WorkerCrashed:
    """A worker stopped over max_memory, by the monitor or by the kernel."""
    return WorkerCrashed(
        f"worker used {used} bytes, over max_memory={max_memory}; killed",
        hint=f"raise max_memory= (now {limit_text(max_memory)}), or reduce what the code keeps alive",
        model_hint=_for_model("memory_limit", human_bytes(max_memory)),
        _kind="memory_limit",
    )


@_factory
def heap_exhausted(max_memory: int) -> WorkerCrashed:
    return WorkerCrashed(
        f"worker ran out of its V8 heap (sized from max_memory={max_memory}) and was stopped",
        hint=f"raise max_memory= (now {limit_text(max_memory)}), or reduce what the code keeps alive",
        model_hint=_for_model("memory_limit", human_bytes(max_memory)),
        _kind="memory_limit",
    )


@_factory
def over_threads(threads: int, max_threads: int) -> WorkerCrashed:
    """A worker stopped over max_threads, by the monitor or by the kernel."""
    return WorkerCrashed(
        f"worker started {threads} threads (limit {max_threads}); killed",
        hint=f"start fewer Web Workers, or raise max_threads= (now {max_threads})",
        model_hint=_for_model("thread_limit", f"{max_threads} threads"),
        _kind="thread_limit",
    )


@_factory
def host_calls_exceeded(limit: int) -> WorkerCrashed:
    return WorkerCrashed(
        f"guest made more than max_host_calls={limit} host calls",
        hint=f"raise max_host_calls= (now {limit}), or batch the guest's host calls",
        model_hint=_for_model("host_call_budget", f"{limit} calls per run"),
        _kind="host_call_budget",
    )


@_factory
def protocol_broken(detail: str, *, malformed: bool) -> WorkerCrashed:
    """A frame the host refused; detail (which may quote the worker) follows the prefix."""
    message = f"worker sent a malformed frame ({detail})" if malformed else f"worker broke protocol: {detail}"
    return WorkerCrashed(message, _kind="protocol_violation")


@_factory
def layer_missing(unavailable: str) -> WorkerCrashed:
    return WorkerCrashed(layer_refusal(unavailable), hint=_SANDBOX_HINT, _kind="sandbox_unavailable")


@_factory
def selftest_failed(breaches: tuple[str, ...] | list[str]) -> WorkerCrashed:
    return WorkerCrashed(selftest_refusal(breaches), hint=_SANDBOX_HINT, _kind="sandbox_unavailable")


@_factory
def limit_unmeasurable(limit: str) -> WorkerCrashed:
    return WorkerCrashed(
        unmeasurable_refusal(limit),
        hint=f"run where this process can read /proc/<pid>/stat of its workers, or set {limit}=None knowingly",
        _kind="limits_unmeasurable",
    )


@_factory
def handshake_timed_out(startup_timeout: float) -> WorkerCrashed:
    return WorkerCrashed(
        f"worker did not complete its handshake within startup_timeout={startup_timeout}s; killed",
        hint=f"retry on a fresh runtime; raise startup_timeout= (now {startup_timeout}) if the machine is overloaded",
        _kind="worker_crashed",
    )


@_factory
def worker_died(message: str) -> WorkerCrashed:
    """A death the environment may have caused: message is the worker process's account of
    it (``worker process died (...)``, ``worker exited during startup (...)``)."""
    return WorkerCrashed(message, _kind="worker_crashed")


@_factory
def guest_ended_worker(message: str) -> WorkerCrashed:
    """A death the guest's own code caused: message starts with GUEST_DEATH."""
    return WorkerCrashed(message, hint=_GUEST_HINT, _kind="guest_crashed")


@_factory
def start_failed(reason: str, cause: BaseException | None = None) -> WorkerCrashed:
    """A worker that could not be started: reason follows the prefix. A missing or
    unrunnable deno binary (cause a FileNotFoundError or PermissionError) is its own kind."""
    unavailable = isinstance(cause, (FileNotFoundError, PermissionError))
    exc = WorkerCrashed(
        f"worker failed to start: {reason}", _kind="deno_unavailable" if unavailable else "worker_crashed"
    )
    # The typed evidence travels with it, as ``raise ... from cause`` would set it.
    exc.__cause__ = cause
    return exc


@_factory
def closed_error(message: str, why: str | None = None) -> ClosedError:
    """What a closed runtime, function handle or session raises when used: the kind table's
    exact message, and a hint that says what closed it (``why``, host-authored: close() was
    called, or the failure that closed it, quoted)."""
    fix = Catalog["closed"].fix
    return ClosedError(message, hint=f"{why}. {fix}" if why else fix, _kind="closed")


@_factory
def terminated() -> RuntimeTerminated:
    return RuntimeTerminated("runtime was terminated on request", _kind="terminated")


@_factory
def force_killed(grace: float) -> RuntimeForceKilled:
    return RuntimeForceKilled(
        f"worker did not acknowledge termination within terminate_grace={grace}s; killed",
        hint=f"nothing to fix if the guest was busy; raise terminate_grace= (now {grace}) to wait longer",
        _kind="force_killed",
    )


# The worker's refusal to send a value larger than a frame may be: the result, or a host
# call's arguments (which the guest meets as a TypeError it may leave uncaught). Only the
# hint is read from it, with the host's own limit, never the number in the text: the kind
# stays js_error, so a guest that writes such text gains nothing.
_OVER_FRAME: Final = re.compile(
    r"(?:result|arguments to (\S+)\(\)) could not be converted: value is larger than max_message_bytes="
)


def worker_reported(
    name: str, message: str, stack: str, thrown: list[object] | None = None, *, max_message_bytes: int
) -> JavaScriptError:
    """The JavaScriptError for an error the worker reported (thrown: [the value], for a thrown
    value that is not an Error). Some get a fix of their own instead of their kind's generic
    one: a value over max_message_bytes names that limit, a host function's failure the guest
    did not catch names the function and how to show its details, and a refusal of the sandbox
    names what gives the guest that access instead."""
    exc = JavaScriptError(name, message, stack)
    if thrown:
        exc.value = thrown[0]
        exc.has_value = True
    kind = getattr(exc, "kind", None)
    hint = model_hint = None
    found = _OVER_FRAME.match(message)
    failed = HOST_FAILURE.match(message)
    if kind == "js_error" and found is not None:
        what = f"pass less to {found.group(1)}()" if found.group(1) else "return less from the code"
        hint = (
            f"{what} (a smaller value, or the rest in later calls), "
            f"or raise max_message_bytes= (now {limit_text(max_message_bytes)})"
        )
        told = what.replace("the code", "the program")
        model_hint = (
            f"{told[0].upper()}{told[1:]}: a smaller value, or the rest in later calls "
            f"(a value may be at most {human_bytes(max_message_bytes)})"
        )
    elif kind == "tool_failed" and failed is not None:
        where, raised = failed.group(1), failed.group(2)
        shown = (
            "pass expose_host_errors=True to show the guest (and this error) its text"
            if failed.group(3)
            else "its text is shown to the guest because expose_host_errors=True"
        )
        # The host's words first; what the worker reported (which function, which class)
        # only after them, as everywhere.
        hint = (
            "a host function or tool raised an exception that is not a pydeno.ToolError, and the guest did not "
            f"catch it ({where} raised {raised}): fix the function, or raise pydeno.ToolError with a message meant "
            f"for the program; {shown}"
        )
    elif kind in ("sandbox_denied", "import_refused"):
        hint, model_hint = _refusal_hints(message)
    if hint is None:
        return exc
    # The note made at construction is the one that names the fix: it is replaced.
    info = info_of(str(kind))
    notes = exc.__notes__
    notes[notes.index(note_for(info, Catalog[info.kind].fix))] = note_for(info, hint)
    exc.hint = hint  # type: ignore[attr-defined]
    if model_hint is not None:
        exc.model_hint = model_hint  # type: ignore[attr-defined]
    return exc


# What the operator can do instead of what the sandbox refused, by what it refused; and, where
# the kind's generic text says less, what the program can.
_WITHHELD: Final = {
    "network access": (
        "the sandbox has no network: attach a pydeno.HttpFetch(allow=[...]) to the runtime to give the guest a fetch() "
        "of the URLs you allow (HttpFetch.tool() in Code Mode)",
        "The program cannot reach the network from the sandbox: use the data it was given, or a tool that fetches "
        "for it if it has one.",
    ),
    "file access": (
        "the sandbox has no file system: read or write the files on the host and pass their contents in (in the "
        "code, or through a bound function or tool)",
        "The program cannot read or write files in the sandbox: use the data it was given, or a tool that reads "
        "for it if it has one.",
    ),
    "environment variables": (
        "the sandbox has no environment variables: pass the values the guest needs in the code or through a bound "
        "function",
        None,
    ),
}
_NOT_LOADED: Final = (
    "the sandbox loads no npm, jsr, remote or file modules: add the module's source under the name the guest "
    "imports with rt.add_module({spec}, source) (one ES module, its own imports added too), or do the work on "
    "the host in a bound function or tool"
)


def _refusal_hints(message: str) -> tuple[str, str | None]:
    """The operator's and the program's fix for a refusal of the sandbox (sandbox_denied,
    import_refused) that message, matched whole, states."""
    denied = DENIED.fullmatch(message)
    if denied is not None:
        operator, model = _WITHHELD.get(
            denied.group(1),
            (
                f"the sandbox grants no {denied.group(1)}, and no option changes that: do that work on the host, "
                "in a bound function or tool the guest may call",
                None,
            ),
        )
        return operator, model
    refused = IMPORT_REFUSED.fullmatch(message)
    spec = (refused.group(1) if refused is not None else None) or '"npm:<package>"'
    if refused is not None and (refused.group(2) or "").startswith("it was not added"):
        return (
            f"add the module before the code that imports it: rt.add_module({spec}, source) (its own imports too)",
            None,
        )
    return _NOT_LOADED.format(spec=spec), None
