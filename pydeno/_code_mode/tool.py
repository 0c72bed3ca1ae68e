"""One code tool for an agent framework, apart from the framework: what the integrations
(pydeno/pydantic_ai.py, pydeno/langchain.py, pydeno/openai_agents.py) share.

A framework's agent sees one tool that takes ``{"code": string}`` and whose description is
the Code Mode prompt. :class:`CodeTool` checks what every integration takes (the tool's
name, ``description=``, ``tools=`` and the Code Mode's options), builds a Code Mode once
without starting a worker, so that a bad tool or option is refused where the tool is made
and not at a model's first program, writes the tool's description, and runs one program on
a worker of its own. An integration adds only its framework: how the framework's own tools
become :class:`~pydeno.Tool` objects, and how the result's text reaches the model.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from .._base.errors import ToolError
from .._base.options import check_option_names
from .._runtime.backends import anyio as backend
from .._tools.tool import Tool
from ._async import AsyncCodeMode
from ._sync import CodeMode
from .api import as_tools

__all__ = ["CODE_DESCRIPTION", "CodeTool", "invalid_arguments", "parameters", "program_tools", "tool_failed"]

# What model providers accept as a tool name.
_TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")

CODE_DESCRIPTION: Final = "The program: TypeScript or JavaScript."
_PARAMETERS: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": CODE_DESCRIPTION}},
    "required": ["code"],
    "additionalProperties": False,
}


def parameters() -> dict[str, Any]:
    """The code tool's parameters, ``{"code": string}``, as every framework states them to its
    model: a copy of its own, since frameworks rewrite schemas in place (strict mode, say)."""
    return copy.deepcopy(dict(_PARAMETERS))


class CodeTool:
    """The checked arguments of one framework's code tool, and the Code Modes they make.

    ``owner`` is what the user called (a class or a function): an unknown keyword is refused
    in its name. ``also`` ends the list of what ``tools`` may hold (``", pydantic-ai tools and
    toolsets"``); ``approve_instead`` is the framework's own way to have a person approve
    whole programs, which a refused ``approve="ask"`` names. ``tools`` is only checked to be
    a list here: its items become :class:`~pydeno.Tool` objects in the integration, which then
    calls :meth:`check` with them.
    """

    __slots__ = ("description", "name", "options")

    def __init__(
        self,
        owner: Callable[..., Any],
        tools: Any,
        *,
        name: Any,
        description: Any,
        max_tool_calls: Any,
        max_output_chars: Any,
        approve: Any,
        runtime_kwargs: Mapping[str, Any],
        also: str,
        approve_instead: str,
    ) -> None:
        check_option_names(owner, runtime_kwargs)
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise ValueError(f"name must be 1 to 64 letters, digits, _ or -, got {name!r}")
        if description is not None and not isinstance(description, str):
            raise TypeError(f"description must be a str or None, got {type(description).__name__}")
        if isinstance(approve, str) and approve == "ask":
            raise ValueError(
                'approve="ask" cannot pause inside a model\'s tool call; use None, "read_only", a callable or a '
                f"mapping, or {approve_instead}"
            )
        if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
            raise TypeError(f"tools must be a list of functions, pydeno.Tool objects{also}, got {type(tools).__name__}")
        self.name: str = name
        self.description: str | None = description
        self.options: dict[str, Any] = {
            "max_tool_calls": max_tool_calls,
            "max_output_chars": max_output_chars,
            "approve": approve,
            **runtime_kwargs,
        }

    def check(self, tools: Sequence[Tool], *, more_later: bool = False) -> AsyncCodeMode:
        """A Code Mode of tools, made to refuse a bad tool or option now; no worker starts,
        and it needs no closing. ``more_later``: the framework lists more tools at run time
        (pydantic-ai's toolsets), which a mapping of ``approve=`` may name, so only the
        names known now are checked."""
        options = dict(self.options)
        approve = options["approve"]
        if more_later and isinstance(approve, Mapping):
            known = {t.name for t in tools}
            options["approve"] = {k: v for k, v in approve.items() if k in known}
        return AsyncCodeMode(list(tools), **options)

    def describe(self, cm: AsyncCodeMode) -> str:
        """The code tool's description: the Code Mode prompt, after ``description=`` if given."""
        return f"{self.description}\n\n{cm.describe()}" if self.description else cm.describe()

    def code_mode(self, tools: Sequence[Tool]) -> AsyncCodeMode:
        """A new Code Mode of tools with the checked options; its worker starts at its first
        program."""
        return AsyncCodeMode(list(tools), **self.options)

    async def run(self, tools: Sequence[Tool], code: str) -> str:
        """Run one program on a worker of its own, killed when the program ends (cancelled
        too): the text of its result, a failure included."""
        cm = self.code_mode(tools)
        try:
            return str(await cm.execute(code))
        finally:
            # A cancelled call must still not leave its worker behind.
            with backend.shielded():
                await cm.close()

    def run_sync(self, tools: Sequence[Tool], code: str) -> str:
        """:meth:`run`, blocking, on a :class:`~pydeno.CodeMode`: the tools are called in the
        caller's thread."""
        with CodeMode(list(tools), **self.options) as cm:
            return str(cm.execute(code))


def program_tools(tools: Sequence[Any], framework: type | tuple[type, ...], kinds: str) -> list[Any]:
    """tools= in order, each function or :class:`~pydeno.Tool` made a Tool, each of the
    framework's own tools (instances of ``framework``) left as it is for the integration to
    convert; ``kinds`` names all three for the error about an item that is none of them."""
    others = iter(as_tools([t for t in tools if not isinstance(t, framework)], kinds=kinds))
    return [t if isinstance(t, framework) else next(others) for t in tools]


def invalid_arguments(name: str, errors: Sequence[Mapping[str, Any]]) -> ToolError:
    """What a program reads when a framework's own validation refused its arguments for
    ``tools.<name>()``: the first error's place and message (pydantic's ``exc.errors()``)."""
    first = errors[0] if errors else {}
    where = ".".join(str(p) for p in first.get("loc", ())) or "the arguments"
    return ToolError(f"tools.{name}(): invalid arguments: {where}: {first.get('msg', 'refused')}")


def tool_failed(name: str, message: str) -> ToolError:
    """What a program reads when a framework's tool failed on purpose, with its message."""
    return ToolError(f"tools.{name}() failed: {message}")
