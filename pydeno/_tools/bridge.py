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

Tools may be plain or async functions. ``describe_tools()`` and ``typescript()`` describe
them for a model's prompt, from their signatures, docstrings and type hints.
"""

from __future__ import annotations

import datetime
import inspect
import json
import re
import threading
import types
import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, overload

from .._base.checks import optional_count
from .._base.errors import ToolBudgetError, ToolError, ToolNotFoundError

if TYPE_CHECKING:
    from .._runtime._async import AsyncRuntime
    from .._runtime._sync import Runtime

__all__ = ["ToolBridge"]

# The one host function behind every tool; the installer takes it off the global object.
HOST_FUNCTION: Final = "__pydeno_tool_call"
_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*\Z")

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


def budget_message(limit: int) -> str:
    return f"the tool-call budget of {limit} calls is spent"


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
    """``ToolBridge(tools, max_calls=None)``: ``tools`` maps names (JavaScript identifiers) to
    functions; ``max_calls`` bounds how many tool calls the guest may make in total.

    ``attach(rt)`` installs ``tools`` in a runtime (``await bridge.attach(rt)`` for an
    :class:`~pydeno.AsyncRuntime`). One bridge's budget is shared by every runtime it is
    attached to.
    """

    def __init__(self, tools: Mapping[str, Callable[..., Any]], max_calls: int | None = None) -> None:
        if not isinstance(tools, Mapping):
            raise TypeError(f"tools must be a mapping of name to function, got {type(tools).__name__}")
        for name, fn in tools.items():
            if not isinstance(name, str) or not all(_NAME.match(part) for part in name.split(".")):
                raise ValueError(
                    f"tool name {name!r} is not a JavaScript identifier (letters, digits, _ or $), "
                    "or several joined by dots for a namespace"
                )
            if not callable(fn):
                raise TypeError(f"tool {name!r} must be callable, got {type(fn).__name__}")
        check_namespaces(tools)
        max_calls = optional_count("max_calls", max_calls, 0)
        self._tools = dict(tools)
        # Once, not per call: a tool's signature does not change.
        self._signatures = {name: _signature(fn) for name, fn in self._tools.items()}
        self.max_calls = max_calls
        self._spent = 0
        self._lock = threading.Lock()

    @property
    def calls_made(self) -> int:
        """Tool calls that reached the host so far (refused ones included)."""
        return self._spent

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    # -- installing ------------------------------------------------------------------
    def install_script(self) -> str:
        """The guest code that defines ``tools``, with the budget left now."""
        left = None if self.max_calls is None else max(0, self.max_calls - self._spent)
        return install_script(self.names, left, self.max_calls or 0)

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
    def charge(self, name: Any) -> None:
        """Count one call to name against the budget; raise the ToolBudgetError or
        ToolNotFoundError the guest should get instead."""
        with self._lock:
            if self.max_calls is not None and self._spent >= self.max_calls:
                raise ToolBudgetError(budget_message(self.max_calls))
            self._spent += 1
        if not isinstance(name, str) or name not in self._tools:
            raise ToolNotFoundError(f"there is no tool named {name!r}")

    def charge_spent(self, calls: int) -> None:
        """Count calls made elsewhere (a restored session's, whose runs were not kept)."""
        with self._lock:
            self._spent += calls

    def run(self, name: str, args: Any) -> Any:
        """Run a charged call with the guest's arguments, checked against the tool's signature
        first (an awaitable for an async tool)."""
        if not isinstance(args, list):
            raise ToolError(f"tools.{name}() was called with malformed arguments")
        signature = self._signatures[name]
        if signature is not None:
            try:
                signature.bind(*args)
            except TypeError as exc:
                raise ToolError(f"tools.{name}(): {exc}") from None
        return self._tools[name](*args)

    def dispatch(self, name: Any, args: Any) -> Any:
        """The host function behind ``tools``: charge the call and run it."""
        self.charge(name)
        return self.run(name, args)

    # -- descriptions ----------------------------------------------------------------
    def describe_tools(self) -> list[dict[str, Any]]:
        """Each tool's name, description and parameters, for a model's prompt."""
        return [_describe(name, fn) for name, fn in self._tools.items()]

    def typescript(self) -> str:
        """TypeScript declarations of ``tools``, for a model writing guest code."""
        lines = ["declare const tools: {"]
        for name, fn in self._tools.items():
            info = _describe(name, fn)
            if info["description"]:
                lines.append(f"  /** {info['description']} */")
            # A rest parameter is never marked optional: TypeScript refuses "...args?".
            params = ", ".join(
                f"{p['name']}{'' if p['required'] or p['name'].startswith('...') else '?'}: {p['type']}"
                for p in info["parameters"]
            )
            lines.append(f"  {name}({params}): Promise<{info['returns']}>;")
        lines.append("};")
        return "\n".join(lines)


def check_namespaces(names: Mapping[str, object]) -> None:
    """No name may be both a tool and a namespace of others (``a`` and ``a.b``): the guest's
    ``tools`` object could hold only one of them. ToolBridge and Code Mode's tool set both
    refuse such a set here."""
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts)):
            prefix = ".".join(parts[:i])
            if prefix in names:
                raise ValueError(f"tool name {prefix!r} is both a tool and the namespace of {name!r}")


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


def _signature(tool: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(tool)
    except (TypeError, ValueError):  # builtins without a signature: let the call decide
        return None


# --- descriptions ---------------------------------------------------------------------------

_SIMPLE: Final[dict[Any, str]] = {
    int: "number",
    float: "number",
    str: "string",
    bool: "boolean",
    bytes: "Uint8Array",
    type(None): "null",
    datetime.datetime: "Date",
    Any: "unknown",
}


def ts_type(hint: Any) -> str:
    """A TypeScript type for a Python type hint (``unknown`` where there is none)."""
    if hint is inspect.Parameter.empty:
        return "unknown"
    if hint is None:
        return "null"
    if hint in _SIMPLE:
        return _SIMPLE[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(dict.fromkeys(ts_type(a) for a in args))
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"{_paren(ts_type(args[0]))}[]"
        return "[" + ", ".join(ts_type(a) for a in args) + "]" if args else "unknown[]"
    if origin is list or hint in (list, tuple):
        return f"{_paren(ts_type(args[0]) if args else 'unknown')}[]"
    if origin in (set, frozenset) or hint in (set, frozenset):
        return f"Set<{ts_type(args[0]) if args else 'unknown'}>"
    if origin in (dict, Mapping) or hint is dict:
        return f"Record<string, {ts_type(args[1]) if len(args) == 2 else 'unknown'}>"
    return "unknown"


def _paren(text: str) -> str:
    return f"({text})" if " | " in text else text


def _describe(name: str, fn: Callable[..., Any]) -> dict[str, Any]:
    doc = inspect.getdoc(fn) or ""
    description = doc.split("\n\n")[0].replace("\n", " ").strip()
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - unresolvable annotations: describe without types
        hints = {}
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        parameters = []
    described = []
    for p in parameters:
        if p.kind in (p.VAR_KEYWORD, p.KEYWORD_ONLY):
            continue  # the guest passes positional arguments only
        described.append(
            {
                "name": p.name if p.kind is not p.VAR_POSITIONAL else f"...{p.name}",
                "type": ts_type(hints.get(p.name, inspect.Parameter.empty))
                + ("[]" if p.kind is p.VAR_POSITIONAL else ""),
                "required": p.default is p.empty and p.kind is not p.VAR_POSITIONAL,
            }
        )
    returns = hints.get("return", inspect.Parameter.empty)
    return {
        "name": name,
        "description": description,
        "parameters": described,
        "returns": ts_type(returns),
        "async": inspect.iscoroutinefunction(fn),
    }
