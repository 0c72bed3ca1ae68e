"""Code Mode for LangChain and LangGraph: ``CodeModeTool`` is one code tool for an agent.

It needs the ``langchain`` extra (``pip install -e '.[langchain]'`` in a checkout, or
``pip install 'pydeno[langchain]'`` where this pydeno is installed; without it, importing
this module says so); ``import pydeno`` never imports this module. ``CodeModeTool`` is a
LangChain ``BaseTool``: a chat model's ``bind_tools``, a LangGraph ``ToolNode`` and an agent
take it as any other tool. The model sees a single tool (``run_code`` unless named
otherwise) that takes ``{"code": string}`` and whose description is the Code Mode prompt
(:meth:`~pydeno.AsyncCodeMode.describe`). The tools given to it (plain functions,
:class:`~pydeno.Tool` objects and LangChain tools) are what the program calls as
``tools.<name>(...)``; the model never calls them directly.

Each call of the tool runs its program on a worker of its own, killed when the call ends.
One tool object is commonly shared by many agent runs at once; a worker per call is the one
default that never lets a program see what another run's programs left in ``globalThis``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, Final, Unpack

from ._base.options import RuntimeKwargs
from ._code_mode.result import DEFAULT_MAX_OUTPUT_CHARS
from ._code_mode.tool import CODE_DESCRIPTION, CodeTool, invalid_arguments, parameters, program_tools, tool_failed
from ._tools.approval import ApprovePolicy
from ._tools.mcp import js_name
from ._tools.tool import Tool
from ._version import missing_extra

try:
    import pydantic
    from langchain_core.tools import BaseTool, ToolException
    from langchain_core.tools.base import ArgsSchema
    from langchain_core.utils.function_calling import convert_to_openai_tool
except ImportError as exc:
    missing = missing_extra(
        exc, "pydeno.langchain", "langchain", frozenset({"langchain_core", "pydantic", "pydantic_core"})
    )
    if missing is None:
        raise
    raise missing from exc

__all__ = ["CodeModeTool"]

_KINDS: Final = "pydeno.Tool objects, functions or LangChain tools"


class _Program(pydantic.BaseModel):
    """The code tool's arguments as LangChain validates them: a refused call is a pydantic
    ValidationError, which a ToolNode reports to the model."""

    model_config = pydantic.ConfigDict(extra="forbid")
    code: str = pydantic.Field(description=CODE_DESCRIPTION)


class CodeModeTool(BaseTool):
    """``CodeModeTool(tools=(), *, name="run_code", description=None, max_tool_calls=None,
    max_output_chars=20000, approve=None, **runtime_kwargs)``: one code tool for a LangChain
    or LangGraph agent.

    ``tools`` are plain functions, :class:`~pydeno.Tool` objects and LangChain tools (any
    ``BaseTool``, such as one made by ``@tool``); a LangChain tool keeps its description and
    input schema, its name made a JavaScript identifier, and is called with ``ainvoke`` when
    the code tool runs async and ``invoke`` when it runs sync. ``description`` is put before
    the Code Mode prompt in the tool's description. The rest (``timeout=`` bounds each
    program) configures the :class:`~pydeno.AsyncCodeMode` behind each call; ``approve`` may
    be ``None``, ``"read_only"``, a callable or a mapping, but not ``"ask"``.

    Each call runs its program on a worker of its own, killed when the call ends, and
    returns the text form of its :class:`~pydeno.ExecutionResult`, a failure included; only
    misuse raises.
    """

    # A BaseTool is a pydantic model: what it keeps besides its fields is private, set once
    # the model is made (and shared by its copies).
    _spec: CodeTool = pydantic.PrivateAttr()
    _blocking: list[Tool] = pydantic.PrivateAttr()  # the tools as a sync call (invoke) runs them
    _awaited: list[Tool] = pydantic.PrivateAttr()  # and as an async one (ainvoke)

    def __init__(
        self,
        tools: Sequence[Any] = (),
        *,
        name: str = "run_code",
        description: str | None = None,
        max_tool_calls: int | None = None,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        approve: ApprovePolicy = None,
        **runtime_kwargs: Unpack[RuntimeKwargs],
    ) -> None:
        spec = CodeTool(
            CodeModeTool,
            tools,
            name=name,
            description=description,
            max_tool_calls=max_tool_calls,
            max_output_chars=max_output_chars,
            approve=approve,
            runtime_kwargs=runtime_kwargs,
            also=" and LangChain tools",
            approve_instead=(
                "have a person approve whole programs before the code tool runs (HumanInTheLoopMiddleware, or a "
                "LangGraph interrupt)"
            ),
        )
        blocking: list[Tool] = []
        awaited: list[Tool] = []
        for item in program_tools(tools, BaseTool, _KINDS):
            pair = _converted(item) if isinstance(item, BaseTool) else (item, item)
            blocking.append(pair[0])
            awaited.append(pair[1])
        cm = spec.check(awaited)
        super().__init__(name=name, description=spec.describe(cm), args_schema=_Program)
        self._spec = spec
        self._blocking = blocking
        self._awaited = awaited

    @property
    def tool_call_schema(self) -> ArgsSchema:
        """What the model is told the tool takes: ``{"code": string}``, as the other
        integrations state it."""
        return parameters()

    def _run(self, code: str) -> str:
        # LangChain calls it with the validated arguments, in the caller's thread (invoke).
        return self._spec.run_sync(self._blocking, code)

    async def _arun(self, code: str) -> str:
        return await self._spec.run(self._awaited, code)


def _converted(tool: BaseTool) -> tuple[Tool, Tool]:
    """A LangChain tool as two pydeno Tools of one name and schema, one calling ``invoke``
    (for a sync run of the code tool) and one ``ainvoke`` (for an async one)."""
    name = js_name(tool.name)
    schema = _input_schema(tool)

    def call(arguments: dict[str, Any]) -> Any:
        with _failures(name):
            return tool.invoke(arguments)

    async def call_async(arguments: dict[str, Any]) -> Any:
        with _failures(name):
            return await tool.ainvoke(arguments)

    return (
        Tool(name, call, description=tool.description, input_schema=schema),
        Tool(name, call_async, description=tool.description, input_schema=schema),
    )


def _input_schema(tool: BaseTool) -> dict[str, Any]:
    """The JSON Schema a model would be given for tool's arguments; refused if the tool takes
    arguments that only a LangGraph ToolNode fills in (its state, store, runtime or call id):
    a program could never call it."""
    stated: dict[str, Any] = convert_to_openai_tool(tool)["function"]["parameters"]
    if not isinstance(tool.args_schema, dict):
        full = tool.get_input_jsonschema().get("properties", {})
        injected = sorted(set(full) - set(stated.get("properties", {})))
        if injected:
            raise TypeError(
                f"LangChain tool {tool.name!r} takes arguments that only a ToolNode fills in "
                f"({', '.join(injected)}); a program cannot call it: give the program a tool without them"
            )
    return stated


@contextlib.contextmanager
def _failures(name: str) -> Iterator[None]:
    """A LangChain tool's own failures as the ToolError a program reads: what it raised on
    purpose (ToolException) and its refusal of the arguments. Anything else reaches the
    program as any failing tool's does (its message hidden unless expose_host_errors=True)."""
    try:
        yield
    except ToolException as exc:
        raise tool_failed(name, str(exc)) from None
    except pydantic.ValidationError as exc:
        raise invalid_arguments(name, exc.errors()) from None
