"""A set of tools by name, and the budget their calls are counted against.

``ToolBridge`` (a service's functions, on a budget kept for the bridge's life) and Code
Mode (``Tool`` objects, on a budget per program) both hold their tools as a ``ToolSet``, and
count calls with a ``Budget``: one lookup, one declaration writer, one count.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from .._base.errors import ToolBudgetError, ToolNotFoundError
from .tool import Tool, check_namespaces
from .typescript import declarations, signature

__all__ = ["Budget", "ToolSet", "budget_message"]


def budget_message(limit: int) -> str:
    return f"the tool-call budget of {limit} calls is spent"


class Budget:
    """Tool calls counted against a limit (None: no limit), from any thread."""

    __slots__ = ("_lock", "limit", "spent")

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.spent = 0
        self._lock = threading.Lock()

    def charge(self) -> None:
        """Count one call, or raise the ToolBudgetError the guest gets once none is left."""
        with self._lock:
            if self.limit is not None and self.spent >= self.limit:
                raise ToolBudgetError(budget_message(self.limit))
            self.spent += 1

    def add(self, calls: int) -> None:
        """Count calls made elsewhere (a restored session's, whose runs were not kept)."""
        with self._lock:
            self.spent += calls

    @property
    def left(self) -> int | None:
        return None if self.limit is None else max(0, self.limit - self.spent)


class ToolSet:
    """Tools by name: no two with one name, no name both a tool and a namespace."""

    __slots__ = ("max_calls", "tools")

    def __init__(self, tools: Iterable[Tool], *, max_calls: int | None = None) -> None:
        self.tools: dict[str, Tool] = {}
        for t in tools:
            if t.name in self.tools:
                raise ValueError(f"two tools are named {t.name!r}")
            self.tools[t.name] = t
        check_namespaces(self.tools)
        self.max_calls = max_calls

    def get(self, name: Any) -> Tool:
        """The tool named name, or the ToolNotFoundError the guest gets."""
        found = self.tools.get(name) if isinstance(name, str) else None
        if found is None:
            raise ToolNotFoundError(f"there is no tool named {name!r}")
        return found

    def budget(self) -> Budget:
        return Budget(self.max_calls)

    def declarations(self) -> list[str]:
        """The ``.d.ts`` lines that declare ``tools``."""
        return declarations(self.tools.values())

    def signatures(self) -> list[dict[str, Any]]:
        """Each tool's name, description, parameters and return type, for a prompt."""
        return [signature(t) for t in self.tools.values()]
