"""The stepping API: how features drive a runtime one step at a time.

Agents, Code Mode, the MCP server, session pools and pools do not just evaluate code: they
start a program, stop at each host call it makes (to approve it, journal it, or hand it to
someone else), answer it, and take the program's outcome; they meter what a run used and
merge a runtime's figures. A runtime offers exactly that through ``rt._steps`` (an
:class:`~pydeno._async_runtime.AsyncSteps`, or its sync twin ``Steps``), in these types.
Features import this module, never the wire, the process or the core.

A command in steps, each under the runtime's lock::

    pending = await rt._steps.start(code, timeout)
    while (call := await rt._steps.next_call(pending)) is not None:
        await rt._steps.answer(pending, call, value)     # or error=...
    value = rt._steps.outcome(pending)                   # or raises the program's error

Any failure or interruption of a step ends the command (and an interruption, the runtime).
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["GuestCall", "Pending"]


class Pending(Protocol):
    """A command started and not yet taken: opaque to features, handed back to each step."""

    @property
    def rid(self) -> int: ...


class GuestCall(Protocol):
    """A host call the guest made: which host function, with what arguments."""

    @property
    def call_id(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def args(self) -> list[Any]: ...
