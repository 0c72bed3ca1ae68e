"""pydeno.langchain.CodeModeTool in real LangChain agent loops and LangGraph graphs, driven by
langchain-core's own fake chat models: no network, no API key, real deno workers."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
import uuid
from collections.abc import Sequence
from typing import Annotated, Any

import psutil
import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool, ToolException, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic import BaseModel, Field, field_validator

import pydeno
from pydeno.langchain import CodeModeTool
from tests.support.processes import worker_pids as workers


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # LangChain's async API runs on asyncio


def weather(city: str) -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "temp_c": 21}


@pydeno.tool(read_only=True)
def population(city: str) -> int:
    """How many people live in a city."""
    return {"Oslo": 709_000}.get(city, 0)


def _forecast(city: str, days: int = 1) -> list[str]:
    return [f"{city} day {d} (invoke)" for d in range(days)]


async def _forecast_async(city: str, days: int = 1) -> list[str]:
    return [f"{city} day {d} (ainvoke)" for d in range(days)]


# A LangChain tool with both paths: what it returns says which one the program's call took.
forecast = StructuredTool.from_function(
    func=_forecast, coroutine=_forecast_async, name="forecast", description="The forecast for a city, one line a day."
)


class AlertArguments(BaseModel):
    city: str = Field(description="A city the alert service covers.")

    @field_validator("city")
    @classmethod
    def covered(cls, city: str) -> str:
        if city not in {"Oslo", "Bergen"}:
            raise ValueError(f"{city} is not covered")
        return city


@tool("weather-alerts", args_schema=AlertArguments)
def alerts(city: str) -> list[str]:
    """Weather alerts for a city."""
    raise ToolException(f"the alert service for {city} is down")


class ScriptedChatModel(GenericFakeChatModel):
    """langchain-core's GenericFakeChatModel (it answers with its messages in turn) that also
    takes tools, as an agent's model node binds them, and keeps what it was told of them."""

    told: list[dict[str, Any]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        self.told.extend(convert_to_openai_tool(t) for t in tools)
        return self


def script(*programs: str, answer: str = "done") -> ScriptedChatModel:
    """A model that calls the code tool with each program in turn, then answers."""
    calls = [
        AIMessage("", tool_calls=[{"name": "run_code", "args": {"code": code}, "id": f"call_{n}", "type": "tool_call"}])
        for n, code in enumerate(programs)
    ]
    return ScriptedChatModel(messages=iter([*calls, AIMessage(answer)]))


def run_agent(model: ScriptedChatModel, tools: list[BaseTool]) -> list[AnyMessage]:
    """A LangChain agent loop: each tool call of the model's reply is run by the tool it names
    and its ToolMessage goes back to the model, until a reply calls no tool."""
    bound = model.bind_tools(tools)
    by_name = {t.name: t for t in tools}
    messages: list[AnyMessage] = [HumanMessage("Where is it warm?")]
    while True:
        reply = bound.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return messages
        messages.extend(by_name[call["name"]].invoke(call) for call in reply.tool_calls)


async def run_agent_async(model: ScriptedChatModel, tools: list[BaseTool]) -> list[AnyMessage]:
    """run_agent, with ainvoke."""
    bound = model.bind_tools(tools)
    by_name = {t.name: t for t in tools}
    messages: list[AnyMessage] = [HumanMessage("Where is it warm?")]
    while True:
        reply = await bound.ainvoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return messages
        messages.extend([await by_name[call["name"]].ainvoke(call) for call in reply.tool_calls])


def graph(model: ScriptedChatModel, code_tool: CodeModeTool) -> CompiledStateGraph[Any, Any, Any, Any]:
    """LangGraph's agent pattern: a model node, and a ToolNode running the code tool."""
    bound = model.bind_tools([code_tool])

    async def agent(state: MessagesState) -> dict[str, list[AnyMessage]]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([code_tool]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


def tool_messages(messages: list[AnyMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


PROGRAM = (
    "const w = await tools.weather({city: 'Oslo'});\n"
    "const f = await tools.forecast({city: 'Oslo', days: 2});\n"
    "({temp: w.temp_c, people: await tools.population({city: 'Oslo'}), f})"
)


def test_the_model_is_told_of_one_tool_that_takes_code_and_is_described_by_the_typed_api() -> None:
    model = script()
    run_agent(model, [CodeModeTool([weather, population, forecast])])
    [told] = model.told
    assert told["function"]["name"] == "run_code"
    assert told["function"]["parameters"] == {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "The program: TypeScript or JavaScript."}},
        "required": ["code"],
        "additionalProperties": False,
    }
    description = told["function"]["description"]
    assert description.startswith("Write a TypeScript (or JavaScript) program.")
    assert "- tools.population({ city }) (read-only): How many people live in a city." in description
    assert "- tools.forecast({ city, days? }): The forecast for a city, one line a day." in description
    assert "  forecast(args: ForecastInput): Promise<unknown>;" in description


def test_a_description_is_put_before_the_code_mode_prompt() -> None:
    code_tool = CodeModeTool([weather], description="Answer questions about the weather.")
    assert code_tool.description.startswith("Answer questions about the weather.\n\nWrite a TypeScript")


def test_a_sync_agent_loop_runs_a_program_that_calls_a_function_a_pydeno_tool_and_a_langchain_tool() -> None:
    messages = run_agent(script(PROGRAM), [CodeModeTool([weather, population, forecast])])
    [result] = tool_messages(messages)
    assert result.tool_call_id == "call_0"
    assert result.content == (
        'ok: {"temp": 21, "people": 709000, "f": ["Oslo day 0 (invoke)", "Oslo day 1 (invoke)"]}\n'
        "tool calls (3): weather ok, forecast ok, population ok"
    )
    assert messages[-1].content == "done"


@pytest.mark.anyio
async def test_an_async_agent_loop_runs_the_program_and_calls_the_langchain_tool_with_ainvoke() -> None:
    messages = await run_agent_async(script(PROGRAM), [CodeModeTool([weather, population, forecast])])
    [result] = tool_messages(messages)
    assert result.content == (
        'ok: {"temp": 21, "people": 709000, "f": ["Oslo day 0 (ainvoke)", "Oslo day 1 (ainvoke)"]}\n'
        "tool calls (3): weather ok, forecast ok, population ok"
    )


@pytest.mark.anyio
async def test_in_a_langgraph_graph_a_failed_program_is_a_tool_message_the_model_reads_and_the_run_goes_on() -> None:
    state = await graph(script("throw new Error('boom')", "40 + 2"), CodeModeTool([weather])).ainvoke(
        {"messages": [HumanMessage("hi")]}
    )
    first, second = tool_messages(state["messages"])
    assert str(first.content).startswith("error: Error: boom (line 1, column 7)\nkind: js_error (retryable: no)\n")
    assert first.status == "success"  # the tool answered; the program is what failed
    assert second.content == "ok: 42"
    assert state["messages"][-1].content == "done"


@pytest.mark.anyio
async def test_a_tool_node_reports_arguments_other_than_one_string_code_to_the_model() -> None:
    bad = AIMessage("", tool_calls=[{"name": "run_code", "args": {"program": "1"}, "id": "bad", "type": "tool_call"}])
    model = ScriptedChatModel(messages=iter([bad, AIMessage("done")]))
    state = await graph(model, CodeModeTool([weather])).ainvoke({"messages": [HumanMessage("hi")]})
    [reported] = tool_messages(state["messages"])
    assert reported.status == "error"
    assert "code: Field required" in str(reported.content)


ERRORS = (
    "const seen = [];\n"
    "try { await tools.weather_alerts({city: 'Oslo'}) } catch (e) { seen.push(e.name + ': ' + e.message) }\n"
    "try { await tools.weather_alerts({city: 'Paris'}) } catch (e) { seen.push(e.message) }\n"
    "try { await tools.forecast({city: 'Oslo', days: 'two'}) } catch (e) { seen.push(e.message) }\n"
    "seen"
)
EXPECTED_ERRORS = [
    "ToolError: tools.weather_alerts() failed: the alert service for Oslo is down",
    "tools.weather_alerts(): invalid arguments: city: Value error, Paris is not covered",
    "tools.forecast(): invalid arguments: $.days: 'two' is not of type 'integer'",
]


def test_a_tool_exception_and_refused_arguments_reach_a_sync_program_as_tool_errors() -> None:
    text = CodeModeTool([alerts, forecast]).invoke({"code": ERRORS})
    assert json.loads(text.splitlines()[0].removeprefix("ok: ")) == EXPECTED_ERRORS


@pytest.mark.anyio
async def test_a_tool_exception_and_refused_arguments_reach_an_async_program_as_tool_errors() -> None:
    text = await CodeModeTool([alerts, forecast]).ainvoke({"code": ERRORS})
    assert json.loads(text.splitlines()[0].removeprefix("ok: ")) == EXPECTED_ERRORS


def test_an_approval_mapping_names_a_langchain_tool_by_its_name_in_the_program() -> None:
    program = (
        "let refused = null;\n"
        "try { await tools.weather({city: 'Oslo'}) } catch (e) { refused = e.message }\n"
        "[await tools.forecast({city: 'Oslo'}), refused]"
    )
    text = CodeModeTool([weather, forecast], approve={"forecast": True}).invoke({"code": program})
    assert text.splitlines()[0] == 'ok: [["Oslo day 0 (invoke)"], "tools.weather() was refused by the approval policy"]'


class Started(BaseCallbackHandler):
    """Which tool runs start, and under which run."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, uuid.UUID, uuid.UUID | None]] = []

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self.runs.append((serialized["name"], run_id, parent_run_id))


@pytest.mark.anyio
@pytest.mark.parametrize("flavour", ["invoke", "ainvoke"])
async def test_a_programs_calls_of_langchain_tools_are_child_runs_of_the_code_tools_run(flavour: str) -> None:
    started = Started()
    code_tool = CodeModeTool([forecast])
    arguments = {"code": "await tools.forecast({city: 'Oslo'})"}
    config: Any = {"callbacks": [started]}
    if flavour == "invoke":
        code_tool.invoke(arguments, config=config)
    else:
        await code_tool.ainvoke(arguments, config=config)
    [(outer, outer_id, outer_parent), (inner, _, inner_parent)] = started.runs
    assert (outer, inner) == ("run_code", "forecast")
    assert outer_parent is None
    assert inner_parent == outer_id


# Each program keeps a value in globalThis, waits until both are running, then looks for
# the other's value: on one shared worker they could not both be running at once.
MEETING = "globalThis.{mine} = 1; await tools.meet(); typeof globalThis.{theirs}"


@pytest.mark.anyio
async def test_two_concurrent_async_calls_run_on_two_workers_and_neither_sees_the_others_globals() -> None:
    arrived: list[str] = []
    both = asyncio.Event()

    async def meet() -> int:
        """Wait until both programs are here."""
        arrived.append("one")
        if len(arrived) == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 15)
        return len(arrived)

    code_tool = CodeModeTool([meet])
    texts = await asyncio.gather(
        code_tool.ainvoke({"code": MEETING.format(mine="a", theirs="b")}),
        code_tool.ainvoke({"code": MEETING.format(mine="b", theirs="a")}),
    )
    assert [t.splitlines()[0] for t in texts] == ['ok: "undefined"', 'ok: "undefined"']


def test_two_concurrent_sync_calls_from_two_threads_run_on_two_workers_and_neither_sees_the_others_globals() -> None:
    barrier = threading.Barrier(2, timeout=15)

    def meet() -> int:
        """Wait until both programs are here."""
        return barrier.wait()

    code_tool = CodeModeTool([meet])
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        calls = [
            pool.submit(code_tool.invoke, {"code": MEETING.format(mine="a", theirs="b")}),
            pool.submit(code_tool.invoke, {"code": MEETING.format(mine="b", theirs="a")}),
        ]
        texts = [call.result() for call in calls]
    assert [t.splitlines()[0] for t in texts] == ['ok: "undefined"', 'ok: "undefined"']


def test_each_call_has_a_worker_of_its_own_which_is_gone_when_the_call_returns() -> None:
    during: list[set[int]] = []

    def snapshot() -> int:
        """The number of worker processes alive now."""
        during.append(workers())
        return len(during[-1])

    code_tool = CodeModeTool([snapshot])
    before = workers()
    first = code_tool.invoke({"code": "globalThis.kept = 'from call 1'; await tools.snapshot()"})
    assert first.startswith("ok: ")
    started = during[0] - before
    assert started, "no worker ran the program"
    psutil.wait_procs([psutil.Process(pid) for pid in started if psutil.pid_exists(pid)], timeout=10)
    assert not (workers() & started)
    assert code_tool.invoke({"code": "typeof globalThis.kept"}) == 'ok: "undefined"'


@pytest.mark.anyio
async def test_a_call_cancelled_mid_program_leaves_no_worker_behind() -> None:
    during: list[set[int]] = []

    async def stall() -> None:
        """Wait for longer than the caller will."""
        during.append(workers())
        await asyncio.sleep(30)

    before = workers()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(CodeModeTool([stall]).ainvoke({"code": "await tools.stall()"}), 2)
    started = during[0] - before
    assert started, "no worker ran the program"
    psutil.wait_procs([psutil.Process(pid) for pid in started if psutil.pid_exists(pid)], timeout=10)
    assert not (workers() & started)


@tool
def with_call_id(city: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """A tool that a ToolNode gives its call's id."""
    return tool_call_id


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        pytest.param(
            {"approve": "ask"}, ValueError, r'approve="ask" cannot pause .* LangGraph interrupt', id="approve ask"
        ),
        pytest.param({"name": "run code"}, ValueError, r"name must be 1 to 64 letters", id="a bad tool name"),
        pytest.param({"description": 3}, TypeError, r"description must be a str or None", id="a bad description"),
        pytest.param(
            {"tools": weather},
            TypeError,
            r"tools must be a list of functions, pydeno.Tool objects and LangChain tools, got function",
            id="tools not a list",
        ),
        pytest.param(
            {"tools": [42]},
            TypeError,
            r"tools must be pydeno.Tool objects, functions or LangChain tools, got int",
            id="a non-tool",
        ),
        pytest.param(
            {"tools": [with_call_id]},
            TypeError,
            r"LangChain tool 'with_call_id' takes arguments that only a ToolNode fills in \(tool_call_id\)",
            id="a tool needing injected arguments",
        ),
        pytest.param(
            {"tools": [weather, StructuredTool.from_function(weather)]},
            ValueError,
            r"two tools are named 'weather'",
            id="two tools of one name",
        ),
        pytest.param({"timeout": -1}, ValueError, r"timeout must be a positive", id="a bad timeout"),
        pytest.param({"max_tool_calls": -1}, ValueError, r"max_tool_calls", id="a bad Code Mode option"),
        pytest.param(
            {"timeot": 5}, TypeError, r"CodeModeTool\(\) got an unexpected keyword argument 'timeot'", id="a typo"
        ),
    ],
)
def test_misuse_is_refused_when_the_tool_is_made(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        CodeModeTool(**kwargs)
