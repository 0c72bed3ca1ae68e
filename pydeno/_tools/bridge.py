"""``ToolBridge``: a service's functions as ``tools.<name>(...)`` in guest code, on a budget.

The guest sees one frozen global, ``tools``, whose members are async functions. Each call
first meets a counter kept in the guest's closure: past ``max_calls`` it throws a catchable
``ToolBudgetError`` and never reaches Python. The host counts too (a guest that forges frames
gets the same answer) and runs the tool. What the guest receives when a tool fails:

* ``ToolError``, ``ToolNotFoundError``, ``ToolBudgetError`` (and subclasses): an ``Error``
  named after the pydeno class, with the message as written: tools raise these on purpose,
  for the guest to read and handle;
* any other exception: an ``Error`` named after its class, message hidden unless the runtime
  has ``expose_host_errors=True``;
* a result that cannot cross the wire: a ``TypeError`` saying so (the worker lives on).

Tools may be plain or async functions, each made a positional :class:`~pydeno.Tool`
(see pydeno/_tools/tool.py), or ``Tool`` objects. ``describe_tools()`` and ``typescript()``
describe them for a model's prompt, from their signatures, docstrings and type hints, by the
one emitter Code Mode uses (pydeno/_tools/typescript.py).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, overload

from .._base import tracing
from .._base.checks import optional_count
from .tool import Tool, positional_tool
from .toolset import ToolSet, budget_message

if TYPE_CHECKING:
    from .._runtime._async import AsyncRuntime
    from .._runtime._sync import Runtime

__all__ = ["ToolBridge"]

# The one host function behind every tool; the installer takes it off the global object.
HOST_FUNCTION: Final = "__pydeno_tool_call"

# Runs once per runtime, before any guest code that uses tools. LEFT is the budget still
# available (null: none), NAMES the tools' names.
_INSTALL: Final = """(() => {
  const call = globalThis.%(host)s;
  delete globalThis.%(host)s;
  let left = %(left)s;
  const spent = %(message)s;
  const ErrorCtor = Error;
  const capture = Error.captureStackTrace;
  // A failed call's error is made by the worker when the answer comes; it gets the frames of
  // the guest's call instead (the ones above this function), so it says where the call was.
  const make = (name) => {
    const tool = async (...args) => {
      if (left !== null) {
        if (left <= 0) {
          const error = new ErrorCtor(spent);
          error.name = "ToolBudgetError";
          throw error;
        }
        left -= 1;
      }
      const site = {};
      capture(site, tool);
      try {
        return await call(name, args);
      } catch (error) {
        try {
          if (error instanceof ErrorCtor) {
            const frames = String(site.stack);
            error.stack = `${error.name}: ${error.message}${frames.slice(frames.indexOf("\\n"))}`;
          }
        } catch {}
        throw error;
      }
    };
    return tool;
  };
  const tools = Object.create(null);
  const spaces = [tools];
  for (const name of %(names)s) {
    const parts = name.split(".");
    let space = tools;
    for (let i = 0; i < parts.length - 1; i++) {
      if (space[parts[i]] === undefined) spaces.push(space[parts[i]] = Object.create(null));
      space = space[parts[i]];
    }
    space[parts[parts.length - 1]] = make(name);
  }
  for (const space of spaces) Object.freeze(space);
  Object.defineProperty(globalThis, "tools", {
    value: tools, writable: false, enumerable: false, configurable: false,
  });
})()"""


def install_script(names: list[str], left: int | None, limit: int) -> str:
    """The guest code that defines ``tools`` over the names, with LEFT calls of the budget
    of LIMIT still available to the guest's own counter (None: no counter)."""
    return _INSTALL % {
        "host": HOST_FUNCTION,
        "left": "null" if left is None else str(left),
        "message": json.dumps(budget_message(limit)),
        "names": json.dumps(names),
    }


class ToolBridge:
    """``ToolBridge(tools, max_calls=None)``: ``tools`` maps names (JavaScript identifiers,
    or several joined by dots for a namespace) to functions, which the guest calls with
    positional arguments, or to :class:`~pydeno.Tool` objects, which it calls with one object
    of named arguments, checked against their schema; ``max_calls`` bounds how many tool calls
    the guest may make in total.

    ``attach(rt)`` installs ``tools`` in a runtime (``await bridge.attach(rt)`` for an
    :class:`~pydeno.AsyncRuntime`). One bridge's budget is shared by every runtime it is
    attached to.
    """

    def __init__(self, tools: Mapping[str, Callable[..., Any] | Tool], max_calls: int | None = None) -> None:
        if not isinstance(tools, Mapping):
            raise TypeError(f"tools must be a mapping of name to function, got {type(tools).__name__}")
        made: list[Tool] = []
        for name, fn in tools.items():
            if isinstance(fn, Tool):
                if fn.name != name:
                    raise ValueError(f"the tool named {fn.name!r} is listed as {name!r}: list it under its own name")
                made.append(fn)
            else:
                made.append(positional_tool(name, fn))
        self._set = ToolSet(made, max_calls=optional_count("max_calls", max_calls, 0))
        self._budget = self._set.budget()

    @property
    def max_calls(self) -> int | None:
        return self._set.max_calls

    @property
    def calls_made(self) -> int:
        """Tool calls that reached the host so far (refused ones included)."""
        return self._budget.spent

    @property
    def names(self) -> list[str]:
        return list(self._set.tools)

    # -- installing ------------------------------------------------------------------
    def install_script(self) -> str:
        """The guest code that defines ``tools``, with the budget left now."""
        return install_script(self.names, self._budget.left, self.max_calls or 0)

    @overload
    def attach(self, rt: Runtime) -> None: ...
    @overload
    def attach(self, rt: AsyncRuntime) -> Awaitable[None]: ...
    def attach(self, rt: Runtime | AsyncRuntime) -> Awaitable[None] | None:
        """Install ``tools`` in rt (a coroutine to await for an AsyncRuntime)."""
        if rt._steps.has_function(HOST_FUNCTION):
            raise RuntimeError("a ToolBridge is already attached to this runtime")
        return rt._steps.install(HOST_FUNCTION, Dispatcher(self.dispatch), self.install_script())

    # -- calls -----------------------------------------------------------------------
    def charge(self, name: Any) -> Tool:
        """Count one call to name against the budget: the tool, or the ToolBudgetError or
        ToolNotFoundError the guest should get instead (an unknown name is charged too)."""
        self._budget.charge()
        return self._set.get(name)

    def charge_spent(self, calls: int) -> None:
        """Count calls made elsewhere (a restored session's, whose runs were not kept)."""
        self._budget.add(calls)

    def run(self, name: str, args: Any) -> Any:
        """Run a charged call with the guest's arguments, checked against the tool first (an
        awaitable for an async tool)."""
        return _invoke(self._set.tools[name], args)

    def dispatch(self, name: Any, args: Any) -> Any:
        """The host function behind ``tools``: charge the call and run it."""
        return _invoke(self.charge(name), args)

    # -- descriptions ----------------------------------------------------------------
    def describe_tools(self) -> list[dict[str, Any]]:
        """Each tool's name, description and parameters, for a model's prompt."""
        return self._set.signatures()

    def typescript(self) -> str:
        """TypeScript declarations of ``tools``, for a model writing guest code."""
        return "\n".join(self._set.declarations())


def _invoke(tool: Tool, args: Any) -> Any:
    """A tool's call with the guest's arguments, in a span of its own where anyone traces."""
    return tracing.around(
        "pydeno.tool_call", {"pydeno.tool.name": tool.name}, lambda: tool.invoke(tool.arguments(args))
    )


class Dispatcher:
    """The host function behind ``tools``, which names the tool a failed call was to, for
    the error the guest gets (see guest_error)."""

    __slots__ = ("_dispatch",)

    def __init__(self, dispatch: Callable[[Any, Any], Any]) -> None:
        self._dispatch = dispatch

    def __call__(self, name: Any, args: Any) -> Any:
        return self._dispatch(name, args)

    @staticmethod
    def name_call(args: list[Any]) -> str | None:
        return f"tools.{args[0]}()" if args and isinstance(args[0], str) else None
