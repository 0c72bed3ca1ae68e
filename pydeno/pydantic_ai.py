"""Code Mode for pydantic-ai agents: ``CodeModeToolset`` gives an agent one code tool.

It needs the ``pydantic-ai`` extra (``pip install -e '.[pydantic-ai]'`` in a checkout, or
``pip install 'pydeno[pydantic-ai]'`` where this pydeno is installed; without it, importing
this module says so); ``import pydeno`` never imports this module. The agent's model sees
a single tool (``run_code`` unless named otherwise) whose description is the Code Mode
prompt (:meth:`~pydeno.AsyncCodeMode.describe`: how to write a program, and the tools'
TypeScript declarations). The tools given to the toolset (plain functions,
:class:`~pydeno.Tool` objects and pydantic-ai toolsets such as a ``FunctionToolset``) are
what the program calls as ``tools.<name>(...)``; the model never calls them directly. Each
run of an agent gets its own worker, started at the first program and killed when the run
ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Sequence
from typing import Any, Final, Unpack

import anyio

from ._base.checks import NeedsAsyncWith
from ._base.errors import ToolError
from ._base.options import RuntimeKwargs
from ._code_mode._async import AsyncCodeMode
from ._code_mode.api import as_tools
from ._code_mode.result import DEFAULT_MAX_OUTPUT_CHARS
from ._code_mode.tool import CodeTool, invalid_arguments, parameters, tool_failed
from ._tools.approval import ApprovePolicy
from ._tools.mcp import js_name
from ._tools.tool import Tool
from ._version import missing_extra

try:
    import pydantic
    from pydantic_ai import RunContext
    from pydantic_ai import Tool as AgentTool
    from pydantic_ai.exceptions import ModelRetry, ToolFailed
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset, FunctionToolset
    from pydantic_ai.toolsets.abstract import ToolsetTool
    from pydantic_core import SchemaValidator, core_schema
except ImportError as exc:
    missing = missing_extra(
        exc, "pydeno.pydantic_ai", "pydantic-ai", frozenset({"pydantic_ai", "pydantic", "pydantic_core"})
    )
    if missing is None:
        raise
    raise missing from exc

__all__ = ["CodeModeToolset"]

# The code tool's arguments, {"code": string} (parameters()), as pydantic-ai validates them.
_VALIDATOR: Final = SchemaValidator(
    core_schema.typed_dict_schema(
        {"code": core_schema.typed_dict_field(core_schema.str_schema())}, extra_behavior="forbid"
    )
)


class CodeModeToolset(AbstractToolset[Any], NeedsAsyncWith):
    """``CodeModeToolset(tools=(), *, name="run_code", description=None, id=None,
    max_retries=1, max_tool_calls=None, max_output_chars=20000,
    approve=None, **runtime_kwargs)``: one code tool for a pydantic-ai agent.

    ``tools`` are plain functions, :class:`~pydeno.Tool` objects, pydantic-ai ``Tool``
    objects and pydantic-ai toolsets (a ``FunctionToolset``, say); a toolset's tools are
    listed once per run, with the run's context, and called with it. ``description`` is put
    before the Code Mode prompt in the code tool's description. The rest (``timeout=`` bounds
    each program) configures the :class:`~pydeno.AsyncCodeMode` behind the tool; ``approve``
    may be ``None``, ``"read_only"``, a callable or a mapping, but not ``"ask"`` (a tool call
    cannot pause inside a model's tool call: wrap the toolset in ``.approval_required()`` to
    have a person approve whole programs instead).

    The model receives the text form of each :class:`~pydeno.ExecutionResult`, a failure
    included; only misuse raises.
    """

    def __init__(
        self,
        tools: Sequence[Any] = (),
        *,
        name: str = "run_code",
        description: str | None = None,
        id: str | None = None,  # noqa: A002 - pydantic-ai's own name for it
        max_retries: int = 1,
        max_tool_calls: int | None = None,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        approve: ApprovePolicy = None,
        **runtime_kwargs: Unpack[RuntimeKwargs],
    ) -> None:
        self._spec = CodeTool(
            type(self),
            tools,
            name=name,
            description=description,
            max_tool_calls=max_tool_calls,
            max_output_chars=max_output_chars,
            approve=approve,
            runtime_kwargs=runtime_kwargs,
            also=", pydantic-ai tools and toolsets",
            approve_instead="wrap the toolset in .approval_required() to approve whole programs",
        )
        if id is not None and not isinstance(id, str):
            raise TypeError(f"id must be a str or None, got {type(id).__name__}")
        if not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        self._toolsets = [t for t in tools if isinstance(t, AbstractToolset)]
        agent_tools = [t for t in tools if isinstance(t, AgentTool)]
        if agent_tools:
            self._toolsets.append(FunctionToolset(agent_tools))
        self._tools = as_tools([t for t in tools if not isinstance(t, (AbstractToolset, AgentTool))])
        self.name = name
        self._id = id
        self.max_retries = max_retries
        # The toolsets' tools are known only once a run lists them.
        self._spec.check(self._tools, more_later=bool(self._toolsets))
        self._cm: AsyncCodeMode | None = None
        self._ctx: RunContext[Any] | None = None
        self._entered = 0
        self._stack: contextlib.AsyncExitStack | None = None
        self._lock = anyio.Lock()

    # -- the toolset's identity and lifecycle --------------------------------------------------
    @property
    def id(self) -> str | None:
        return self._id

    async def for_run(self, ctx: RunContext[Any]) -> CodeModeToolset:
        """A copy for one agent run, with its own worker: what one run's programs leave in
        ``globalThis`` never reaches another run's."""
        copy = object.__new__(CodeModeToolset)
        copy.__dict__.update(self.__dict__)
        copy._toolsets = [await t.for_run(ctx) for t in self._toolsets]
        copy._cm, copy._ctx, copy._entered, copy._stack = None, None, 0, None
        copy._lock = anyio.Lock()
        return copy

    async def __aenter__(self) -> CodeModeToolset:
        if self._entered == 0:
            stack = contextlib.AsyncExitStack()
            try:
                for toolset in self._toolsets:
                    await stack.enter_async_context(toolset)
            except BaseException:
                await stack.aclose()
                raise
            self._stack = stack
        self._entered += 1
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        self._entered -= 1
        if self._entered <= 0:
            self._entered = 0
            await self.aclose()
        return None

    async def aclose(self) -> None:
        """Kill the worker and leave the inner toolsets; the next program starts afresh."""
        cm, self._cm = self._cm, None
        stack, self._stack = self._stack, None
        try:
            if cm is not None:
                await cm.close()
        finally:
            if stack is not None:
                await stack.aclose()

    # -- the one tool ----------------------------------------------------------------------
    async def code_mode(self, ctx: RunContext[Any]) -> AsyncCodeMode:
        """The Code Mode behind the tool, made at the first use from the tools and the inner
        toolsets' tools as ctx lists them."""
        if self._cm is None:
            tools = list(self._tools)
            for toolset in self._toolsets:
                for listed in (await toolset.get_tools(ctx)).values():
                    tools.append(self._forwarder(toolset, listed))
            self._cm = self._spec.code_mode(tools)
        return self._cm

    def _forwarder(self, toolset: AbstractToolset[Any], listed: ToolsetTool[Any]) -> Tool:
        """A pydeno Tool that calls a toolset's tool with the current run's context."""
        original = listed.tool_def.name
        name = js_name(original)

        async def forward(arguments: dict[str, Any]) -> Any:
            ctx = self._ctx
            if ctx is None:
                raise ToolError(f"tools.{name}() can only run inside a call of {self.name}")
            call_ctx = dataclasses.replace(ctx, tool_name=original)
            try:
                validated = listed.args_validator.validate_python(arguments, context=ctx.validation_context)
                if listed.args_validator_func is not None:
                    checked = listed.args_validator_func(call_ctx, **validated)
                    if inspect.isawaitable(checked):
                        await checked
                return await toolset.call_tool(original, validated, call_ctx, listed)
            except pydantic.ValidationError as exc:
                raise invalid_arguments(name, exc.errors()) from None
            except (ModelRetry, ToolFailed) as exc:
                raise tool_failed(name, exc.message) from None

        return Tool(
            name,
            forward,
            description=listed.tool_def.description or "",
            input_schema=listed.tool_def.parameters_json_schema,
        )

    def describe(self, cm: AsyncCodeMode) -> str:
        """The code tool's description: the Code Mode prompt, after ``description=`` if given."""
        return self._spec.describe(cm)

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        cm = await self.code_mode(ctx)
        definition = ToolDefinition(name=self.name, parameters_json_schema=parameters(), description=self.describe(cm))
        return {
            self.name: ToolsetTool(
                toolset=self, tool_def=definition, max_retries=self.max_retries, args_validator=_VALIDATOR
            )
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> str:
        if name != self.name:
            raise ValueError(f"{type(self).__name__} has one tool, {self.name!r}, not {name!r}")
        cm = await self.code_mode(ctx)
        # One program at a time, each calling the tools with its own call's context.
        async with self._lock:
            self._ctx = ctx
            try:
                result = await cm.execute(tool_args["code"])
            finally:
                self._ctx = None
        return str(result)
