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
    └── RuntimeForceKilled      terminate() was never acknowledged; the worker was killed

``str(exc)`` is always the message the host wrote, and any text that came from the worker
or the guest only ever follows the host's prefix, so the start of a message can be trusted.
"""

from __future__ import annotations

__all__ = [
    "JavaScriptError",
    "PydenoError",
    "RuntimeForceKilled",
    "RuntimeTerminated",
    "RuntimeTimeout",
    "WorkerCrashed",
]


class PydenoError(Exception):
    """Base class of pydeno's own errors."""


class JavaScriptError(PydenoError):
    """The guest code threw, or failed to compile.

    ``name`` and ``message`` are the guest error's own (``name`` is empty when the guest
    threw something that is not an object), ``stack`` its stack with the worker's frames
    removed. ``str()`` is ``"Evaluation failed: Name: message"``.
    """

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


class RuntimeTimeout(PydenoError):
    """A deadline of the sandbox's own passed; the worker was killed."""


class RuntimeTerminated(PydenoError):
    """The running command was stopped by ``terminate()``; the worker acknowledged it."""


class RuntimeForceKilled(PydenoError):
    """``terminate()`` was not acknowledged within ``terminate_grace``; the worker was killed."""
