"""Approval of tool calls, and a call paused for its caller.

A policy (``approve=``) decides each call of a tool that is not read-only: ``None`` runs
every one; ``"read_only"`` refuses them; ``"ask"`` pauses each for the caller; a callable
``(name, arguments) -> bool`` is asked once per tool and run; a mapping decides per tool
(``True``, ``False``, ``"ask"`` or a callable; a tool it does not name is refused).

A paused call is a :class:`PausedToolCall`, whoever paused it: Code Mode's ``start()`` for a
tool whose policy is ``"ask"``, and an agent session's ``start()``, which asks for every call.
Its ``resume()`` hands the answer back to the owner that paused it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal

from .._base.errors import ToolError
from .._runtime.json_values import value_json
from .tool import Tool

__all__ = ["UNANSWERED", "Approval", "ApprovePolicy", "PausedToolCall", "check_policy"]

Approver = Callable[[str, Any], bool]
ApprovePolicy = None | Literal["read_only", "ask"] | Approver | Mapping[str, 'bool | Literal["ask"] | Approver']
Decision = bool | Literal["ask"]


def check_policy(approve: Any, names: Iterable[str]) -> ApprovePolicy:
    """approve= as given, once it is one of the policies and names only tools in names."""
    if approve is None or approve in ("read_only", "ask") or callable(approve):
        return approve  # type: ignore[no-any-return]
    if isinstance(approve, Mapping):
        known = set(names)
        for name, rule in approve.items():
            if name not in known:
                raise ValueError(f"approve= names {name!r}, which is not one of the tools")
            if not isinstance(rule, bool) and not callable(rule) and rule != "ask":
                raise TypeError(f'approve[{name!r}] must be True, False, "ask" or a callable (name, arguments) -> bool')
        return dict(approve)
    raise TypeError(
        'approve must be None, "read_only", "ask", a callable (name, arguments) -> bool, or a mapping of '
        f"tool names to those, got {approve!r}"
    )


class Approval:
    """One run's decisions under a policy: a callable is asked once per tool and run (a loop
    of fifty writes is one decision), from whichever thread the call arrives on."""

    __slots__ = ("_decided", "_lock", "policy")

    def __init__(self, policy: ApprovePolicy) -> None:
        self.policy = policy
        self._decided: dict[str, bool] = {}
        self._lock = threading.Lock()

    def decide(self, tool: Tool, arguments: Any) -> Decision:
        """True (run it), False (refuse it) or "ask" (pause for the caller)."""
        policy = self.policy
        if policy is None or tool.read_only:
            return True
        if policy == "read_only":
            return False
        if policy == "ask":
            return "ask"
        if isinstance(policy, Mapping):
            rule = policy.get(tool.name, False)
            if isinstance(rule, bool) or rule == "ask":
                return rule
            policy = rule
        with self._lock:
            known = self._decided.get(tool.name)
        if known is None:
            assert callable(policy)
            known = bool(policy(tool.name, arguments))
            with self._lock:
                self._decided[tool.name] = known
        return known


# Pauses every call: an agent session's start().
ASK_EACH: Final = Approval("ask")


class _Unanswered:
    """resume() called without a value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNANSWERED"


UNANSWERED: Final = _Unanswered()


class PausedToolCall:
    """A run stopped at a tool call, waiting for the caller: ``.name``, ``.args``; answer it
    with ``.resume(value=...)`` or ``.resume(error=...)`` (awaited for an async sandbox), which
    returns the run's next step: its result, or the next PausedToolCall."""

    def __init__(self, owner: Any, name: str, args: list[Any]) -> None:
        self._owner = owner
        self.name = name
        self.args = args
        self.answered = False

    def __repr__(self) -> str:
        args = value_json(self.args)
        return f"PausedToolCall(tools.{self.name}(*{args[:200]}))"

    def resume(self, value: Any = UNANSWERED, *, error: BaseException | str | None = None) -> Any:
        """Answer the call: value is what the tool returns to the guest, or error what it
        throws (a str becomes a ToolError with that message). With neither, an agent
        session answers ``None`` and a Code Mode runs the tool (the call is approved)."""
        if isinstance(error, str):
            error = ToolError(error)
        if error is not None and not isinstance(error, Exception):
            raise TypeError(f"error must be an exception or a str, got {type(error).__name__}")
        if value is not UNANSWERED and error is not None:
            raise TypeError("resume() takes a value or an error, not both")
        return self._owner._resume(self, value, error)
