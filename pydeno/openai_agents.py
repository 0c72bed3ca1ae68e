"""Code Mode for the OpenAI Agents SDK: ``code_mode_tool`` makes one code tool for an agent.

It needs the ``openai-agents`` extra (``pip install -e '.[openai-agents]'`` in a checkout,
or ``pip install 'pydeno[openai-agents]'`` where this pydeno is installed; without it,
importing this module says so); ``import pydeno`` never imports this module. The tool is an
Agents SDK ``FunctionTool``: ``Agent(tools=[...])`` takes it as any other. The model sees a
single tool (``run_code`` unless named otherwise) that takes ``{"code": string}`` (a strict
schema) and whose description is the Code Mode prompt
(:meth:`~pydeno.AsyncCodeMode.describe`). The tools given to it (plain functions,
:class:`~pydeno.Tool` objects and the SDK's ``FunctionTool`` objects, such as those
``@function_tool`` makes) are what the program calls as ``tools.<name>(...)``; the model never
calls them directly.

Each call of the tool runs its program on a worker of its own, killed when the call ends, so
that no program sees what another call's programs left in ``globalThis``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from typing import Any, Final, Unpack

from ._base.errors import ToolError
from ._base.options import RuntimeKwargs
from ._code_mode.result import DEFAULT_MAX_OUTPUT_CHARS
from ._code_mode.tool import CodeTool, invalid_arguments, parameters, program_tools, tool_failed
from ._tools.approval import ApprovePolicy
from ._tools.mcp import js_name
from ._tools.tool import Tool
from ._version import missing_extra

try:
    import pydantic
    from agents import FunctionTool, ModelBehaviorError
    from agents.tool_context import ToolContext
except ImportError as exc:
    missing = missing_extra(
        exc, "pydeno.openai_agents", "openai-agents", frozenset({"agents", "openai", "pydantic", "pydantic_core"})
    )
    if missing is None:
        raise
    raise missing from exc

__all__ = ["code_mode_tool"]

_KINDS: Final = "pydeno.Tool objects, functions or Agents SDK FunctionTools"
# What the model reads when its arguments are not {"code": string}: a raw FunctionTool that
# raised would end the agent's run instead of letting the model write the call again.
_NOT_CODE: Final = 'error: the arguments must be a JSON object with one field, "code": the program as a string'


def code_mode_tool(
    tools: Sequence[Any] = (),
    *,
    name: str = "run_code",
    description: str | None = None,
    max_tool_calls: int | None = None,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    approve: ApprovePolicy = None,
    **runtime_kwargs: Unpack[RuntimeKwargs],
) -> FunctionTool:
    """One code tool for an Agents SDK agent, as a ``FunctionTool``.

    ``tools`` are plain functions, :class:`~pydeno.Tool` objects and ``FunctionTool``
    objects; a ``FunctionTool`` keeps its description and ``params_json_schema``, its name
    made a JavaScript identifier, and a program's call of it goes to its ``on_invoke_tool``
    with a ``ToolContext`` derived from the code tool's (the run's context, the tool's own
    name, the call's JSON arguments). One that sets ``needs_approval``, guardrails or
    ``is_enabled`` is refused: a program's call of it would skip them. ``description`` is
    put before the Code Mode prompt in the tool's description. The rest (``timeout=`` bounds
    each program) configures the :class:`~pydeno.AsyncCodeMode` behind each call;
    ``approve`` may be ``None``, ``"read_only"``, a callable or a mapping, but not ``"ask"``
    (set ``needs_approval=True`` on the returned tool to have a person approve whole
    programs).

    Each call runs its program on a worker of its own, killed when the call ends, and
    returns the text form of its :class:`~pydeno.ExecutionResult`, a failure included; only
    misuse raises.
    """
    spec = CodeTool(
        code_mode_tool,
        tools,
        name=name,
        description=description,
        max_tool_calls=max_tool_calls,
        max_output_chars=max_output_chars,
        approve=approve,
        runtime_kwargs=runtime_kwargs,
        also=" and Agents SDK FunctionTools",
        approve_instead="set needs_approval=True on the code tool to approve whole programs",
    )
    items = program_tools(tools, FunctionTool, _KINDS)
    for item in items:
        if isinstance(item, FunctionTool):
            _check_callable(item)
    cm = spec.check([_converted(t, None) if isinstance(t, FunctionTool) else t for t in items])

    async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
        code = _code(arguments)
        if code is None:
            return _NOT_CODE
        numbers = itertools.count(1)
        made = [_converted(t, ctx, numbers) if isinstance(t, FunctionTool) else t for t in items]
        return await spec.run(made, code)

    return FunctionTool(
        name=name,
        description=spec.describe(cm),
        params_json_schema=parameters(),
        on_invoke_tool=invoke,
        strict_json_schema=True,
    )


def _code(arguments: Any) -> str | None:
    """The program from the model's JSON arguments, or None if they are not ``{"code": str}``."""
    try:
        parsed = json.loads(arguments)
    except (TypeError, ValueError):
        return None
    if not isinstance(parsed, dict) or set(parsed) != {"code"} or not isinstance(parsed["code"], str):
        return None
    return parsed["code"]


def _check_callable(tool: FunctionTool) -> None:
    """Refuse a FunctionTool with a safeguard the SDK applies around a model's call of it
    only: a program's call of it would skip the safeguard."""
    skipped = [
        what
        for what, present in (
            ("needs_approval", tool.needs_approval is not False),
            ("guardrails", bool(tool.tool_input_guardrails or tool.tool_output_guardrails)),
            ("is_enabled", tool.is_enabled is not True),
        )
        if present
    ]
    if skipped:
        raise ValueError(
            f"FunctionTool {tool.name!r} sets {' and '.join(skipped)}, which the SDK applies only around a model's "
            "call of it: a program's call would skip that; give the program tools without it, and set it on the "
            "code tool instead"
        )


def _converted(tool: FunctionTool, ctx: ToolContext[Any] | None, numbers: Iterator[int] | None = None) -> Tool:
    """A FunctionTool as a pydeno Tool that calls it within ctx, the context of the code
    tool's call (None: a Tool made to check and describe, never called). Each call gets a
    ToolContext of its own, its call id the code tool's with the call's number after it."""
    name = js_name(tool.name)

    async def call(arguments: dict[str, Any]) -> Any:
        if ctx is None or numbers is None:
            raise ToolError(f"tools.{name}() can only run inside a call of the code tool")
        encoded = json.dumps(arguments)
        inner = ToolContext.from_agent_context(
            ctx, f"{ctx.tool_call_id}.{next(numbers)}", tool_name=tool.name, tool_arguments=encoded
        )
        try:
            return await tool.on_invoke_tool(inner, encoded)
        except ModelBehaviorError as exc:
            # The SDK's refusal of the arguments, its validator's reasons on the cause.
            if isinstance(exc.__cause__, pydantic.ValidationError):
                raise invalid_arguments(name, exc.__cause__.errors()) from None
            raise tool_failed(name, str(exc)) from None

    return Tool(name, call, description=tool.description, input_schema=tool.params_json_schema)
