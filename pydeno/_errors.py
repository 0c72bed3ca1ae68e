"""pydeno's exception tree.

Every exception pydeno raises on purpose is one of these, a documented builtin
(``TypeError``/``ValueError`` for a bad argument, ``RuntimeError`` for a closed object),
or cancellation::

    PydenoError                 base of everything below
    ├── JavaScriptError         the guest threw or failed to compile (.name, .message, .stack)
    ├── WorkerCrashed           the worker died, was killed, broke protocol or would not start
    ├── RuntimeTimeout          a sandbox deadline passed (not a builtin TimeoutError: an outer
    │                           anyio.fail_after raising TimeoutError means *your* deadline fired)
    ├── RuntimeTerminated       terminate() stopped the command and the worker acknowledged it
    ├── RuntimeForceKilled      terminate() was never acknowledged; the worker was killed
    ├── CheckoutTimeout         a pool had no fresh worker within checkout_timeout (nothing ran)
    ├── ToolError               a host tool failed (raise it from a tool; the guest sees its name)
    │   ├── ToolBudgetError     the tool-call budget is spent
    │   └── ToolNotFoundError   what the tool was asked for does not exist
    ├── JournalError            an agent journal is malformed, too large or not authentic
    │   └── ReplayDivergence    replaying a journal asked for different tool calls
    └── SnapshotAuthenticationError   a signed snapshot failed authentication

``str(exc)`` is always the message the host wrote, and any text that came from the worker
or the guest only ever follows the host's prefix, so the start of a message can be trusted.

Every one of them also carries ``.kind`` (see :func:`pydeno.classify_error`), ``.hint`` (the
fix, naming the limit and its current value where one applies) and ``.docs`` (its page), and
shows them in tracebacks as a PEP 678 note.
"""

from __future__ import annotations

import sys
from typing import ClassVar

from ._taxonomy import Catalog, classify_new, docs_page, note_for

__all__ = [
    "CheckoutTimeout",
    "JavaScriptError",
    "JournalError",
    "PydenoError",
    "ReplayDivergence",
    "RuntimeForceKilled",
    "RuntimeTerminated",
    "RuntimeTimeout",
    "SnapshotAuthenticationError",
    "ToolBudgetError",
    "ToolError",
    "ToolNotFoundError",
    "WorkerCrashed",
    "guest_error",
]


class PydenoError(Exception):
    """Base class of pydeno's own errors: ``.kind``, ``.hint`` and ``.docs`` explain it."""

    # How classify_error finds the kind of an instance: ("type", kind) for a class whose
    # type decides it, ("message", kind) for one whose host-authored message may name a
    # kind (kind when it names none), ("guest", "") for the guest error's own rule.
    KIND_RULE: ClassVar[tuple[str, str]] = ("type", "unknown")

    def __init__(self, message: str = "", *, hint: str | None = None) -> None:
        super().__init__(message)
        self._explain(hint)

    def _explain(self, hint: str | None) -> None:
        # Raised as ``raise ... from err`` inside ``except``, this exception's cause is set
        # only after __init__: classify it with the exception being handled, as it will be.
        info = classify_new(self, sys.exception())
        self.kind: str = info.kind
        self.hint: str = hint or Catalog[info.kind].fix
        self.docs: str = docs_page(info.kind)
        self.add_note(note_for(info, self.hint))


class JavaScriptError(PydenoError):
    """The guest code threw, or failed to compile.

    ``name`` and ``message`` are the guest error's own (``name`` is empty when the guest
    threw something that is not an object), ``stack`` its stack with the worker's frames
    removed. ``str()`` is ``"Evaluation failed: Name: message"``.
    """

    KIND_RULE = ("guest", "")

    PREFIX = "Evaluation failed: "

    def __init__(self, name: str, message: str, stack: str = "") -> None:
        self.name = name
        self.message = message
        self.stack = stack
        super().__init__(f"{self.PREFIX}{name}: {message}" if name else f"{self.PREFIX}{message}")

    def __reduce__(self) -> tuple[type[JavaScriptError], tuple[str, str, str]]:
        return (type(self), (self.name, self.message, self.stack))


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


class CheckoutTimeout(PydenoError):
    """A pool had no fresh worker to hand out within its ``checkout_timeout``; nothing ran.
    Not a builtin ``TimeoutError``: that stays the caller's own deadline."""

    KIND_RULE = ("type", "checkout_timeout")


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


class JournalError(PydenoError):
    """An agent journal is malformed, truncated, too large or not authentic."""

    KIND_RULE = ("type", "journal_invalid")


class ReplayDivergence(JournalError):
    """Replaying a journal asked for different tool calls than were recorded."""

    KIND_RULE = ("type", "replay_divergence")


class SnapshotAuthenticationError(PydenoError):
    """A signed snapshot failed authentication."""

    KIND_RULE = ("type", "snapshot_invalid")


_TOOL_FAMILY = (ToolBudgetError, ToolNotFoundError, ToolError)


def guest_error(exc: BaseException, *, expose: bool, where: str) -> tuple[str, str]:
    """(name, message) of the Error a guest receives for a host function's exception.

    A replayed answer carries its recorded pair. The tool errors are raised on purpose for
    the guest to read: the family's name (so a subclass still classifies as its kind) and
    the message as written. Any other exception: its class name, and its text only when the
    runtime exposes host errors; ``where`` names the function in the hidden-details message.
    """
    recorded = getattr(exc, "guest_error", None)
    if isinstance(recorded, tuple):
        return recorded
    if isinstance(exc, ToolError):
        return next(c.__name__ for c in type(exc).__mro__ if c in _TOOL_FAMILY), str(exc)
    name = type(exc).__name__
    if expose:
        return name, str(exc)
    return name, f"{where} raised {name} (details hidden; pass expose_host_errors=True to show them)"
