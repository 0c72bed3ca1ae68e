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

import sys
from collections.abc import Callable, Iterable, Mapping
from typing import ClassVar, Final

from .docs_links import docs_page, note_for
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
