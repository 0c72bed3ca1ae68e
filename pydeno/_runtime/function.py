"""``JsFunction``: a handle to a guest function, callable from Python."""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

from .._base.failures import closed_error

__all__ = ["FunctionOwner", "JsFunction", "function_id"]


class FunctionOwner(Protocol):
    """The runtime a handle came from, as the handle uses it: the runtime's own drivers."""

    @property
    def closed(self) -> bool: ...

    @property
    def _closed_by(self) -> str: ...

    def _call_function(self, fn: JsFunction, args: list[Any], timeout: float | None) -> Any: ...

    def _release_function(self, function_id: int) -> None: ...


class JsFunction:
    """A guest function returned by an eval. ``fn(*args)`` calls it in the worker.

    On a :class:`~pydeno.Runtime` the call returns the value; on an
    :class:`~pydeno.AsyncRuntime` it returns an awaitable. ``close()`` releases the
    function in the worker; afterwards a call raises :class:`~pydeno.ClosedError` (a
    ``RuntimeError``) ``"Function has been closed"``, whose note says whether the handle or
    its runtime was closed, and by what. Handles are released automatically when
    garbage-collected and when the runtime closes.
    """

    __slots__ = ("__weakref__", "_closed", "_id", "_owner")

    def __init__(self, owner: FunctionOwner, function_id: int) -> None:
        self._owner = owner
        self._id = function_id
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed or self._owner.closed

    def __call__(self, *args: Any, timeout: float | None = None) -> Any:
        return self._owner._call_function(self, list(args), timeout)

    def close(self) -> None:
        """Release the guest function. Idempotent; does no I/O."""
        if not self._closed:
            self._closed = True
            self._owner._release_function(self._id)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # never raise from a finalizer
            self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<pydeno.JsFunction #{self._id} ({state})>"


def function_id(fn: JsFunction, owner: FunctionOwner) -> int:
    """The worker's id of fn, a handle that may go to owner's worker: one of its own, open."""
    if fn._owner is not owner:
        raise ValueError("a JsFunction can only be passed back to the runtime it came from")
    if fn.closed:
        why = "close() was called on this JsFunction" if fn._closed else f"its runtime is closed: {owner._closed_by}"
        raise closed_error("Function has been closed", why)
    return fn._id
