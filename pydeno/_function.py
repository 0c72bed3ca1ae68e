"""``JsFunction``: a handle to a guest function, callable from Python."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .host._core import Core

__all__ = ["JsFunction"]


class JsFunction:
    """A guest function returned by an eval. ``fn(*args)`` calls it in the worker.

    On a :class:`~pydeno.Runtime` the call returns the value; on an
    :class:`~pydeno.AsyncRuntime` it returns an awaitable. ``close()`` releases the
    function in the worker; afterwards a call raises ``RuntimeError("Function has been
    closed")``. Handles are released automatically when garbage-collected and when the
    runtime closes.
    """

    __slots__ = ("__weakref__", "_closed", "_core", "_driver", "_id")

    def __init__(self, core: Core, driver: Any, function_id: int) -> None:
        self._core = core
        self._driver = driver
        self._id = function_id
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed or self._core.closed

    def __call__(self, *args: Any, timeout: float | None = None) -> Any:
        return self._driver._call_function(self, list(args), timeout)

    def close(self) -> None:
        """Release the guest function. Idempotent; does no I/O."""
        if not self._closed:
            self._closed = True
            self._core.connection.release(self._id)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # never raise from a finalizer
            self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<pydeno.JsFunction #{self._id} ({state})>"
