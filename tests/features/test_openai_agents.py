"""pydeno.openai_agents.code_mode_tool in real Agents SDK runs (Runner.run), driven by a
scripted model (the SDK's own Model interface): no network, no API key, real deno workers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import psutil
import pytest
from agents import (
    Agent,
    FunctionTool,
    ModelResponse,
    RunConfig,
    Runner,
    RunResult,
    ToolGuardrailFunctionOutput,
    Usage,
    function_tool,
    tool_input_guardrail,
)
from agents import _debug as agents_debug
from agents.models.interface import Model
from agents.tool_context import ToolContext
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from pydantic import BaseModel, field_validator

import pydeno
from pydeno.openai_agents import code_mode_tool
from tests.support.processes import worker_pids as workers


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the Agents SDK runs on asyncio


pytestmark = pytest.mark.anyio


def weather(city: str) -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "temp_c": 21}


@pydeno.tool(read_only=True)
def population(city: str) -> int:
    """How many people live in a city."""
    return {"Oslo": 709_000}.get(city, 0)


@function_tool
def forecast(ctx: ToolContext[str], city: str, days: int) -> list[str]:
    """The forecast for a city, one line a day."""
    return [f"{ctx.context}: {city} day {d} ({ctx.tool_name}, {ctx.tool_call_id})" for d in range(days)]


class City(BaseModel):
    name: str

    @field_validator("name")
    @classmethod
    def covered(cls, name: str) -> str:
        if name != "Oslo":
            raise ValueError(f"{name} is not covered")
        return name


@function_tool(failure_error_function=None)
def alerts(city: City) -> list[str]:
    """Weather alerts for a city."""
    raise RuntimeError(f"the alert service for {city.name} is down")


@function_tool
def radar(city: str) -> str:
    """The rain radar for a city (a tool with the SDK's default failure handling)."""
    raise RuntimeError("no radar")


class Scripted(Model):
    """A model that calls the code tool with each program in turn (the programs of one turn
    in one response), then answers with what the last call returned."""

    def __init__(self, *turns: str | list[str], arguments: str | None = None) -> None:
        self.turns = [[t] if isinstance(t, str) else t for t in turns]
        self.arguments = arguments
        self.tools: list[list[Any]] = []
        self.outputs: list[str] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],  # noqa: A002 - the interface's name
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        self.tools.append(tools)
        items = [] if isinstance(input, str) else input
        self.outputs = [
            str(i["output"]) for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        asked = sum(len(turn) for turn in self.turns[: len(self.tools) - 1])
        if len(self.tools) <= len(self.turns):
            calls = [
                ResponseFunctionToolCall(
                    type="function_call",
                    call_id=f"call_{asked + n}",
                    name="run_code",
                    arguments=self.arguments or json.dumps({"code": code}),
                )
                for n, code in enumerate(self.turns[len(self.tools) - 1])
            ]
            return ModelResponse(output=list(calls), usage=Usage(), response_id=None)
        answer = f"answer from: {self.outputs[-1]}" if self.outputs else "no program"
        text = ResponseOutputText(type="output_text", text=answer, annotations=[])
        message = ResponseOutputMessage(id="msg", type="message", role="assistant", status="completed", content=[text])
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests run without streaming")


async def run(model: Scripted, tool: FunctionTool, context: str = "ann") -> RunResult:
    agent: Agent[str] = Agent(name="weather", model=model, tools=[tool])
    # No tracing: it would export to the network from a thread of its own.
    return await Runner.run(agent, "Where is it warm?", context=context, run_config=RunConfig(tracing_disabled=True))


def called(code: str, call_id: str = "call_0", context: str = "ann") -> tuple[ToolContext[str], str]:
    """What the SDK passes to on_invoke_tool for a model's call of the code tool."""
    arguments = json.dumps({"code": code})
    return ToolContext(context, tool_name="run_code", tool_call_id=call_id, tool_arguments=arguments), arguments


async def test_the_model_is_given_one_strict_code_tool_described_by_the_typed_api() -> None:
    model = Scripted()
    tool = code_mode_tool([weather, population, forecast])
    await run(model, tool)
    assert model.tools == [[tool]]
    assert tool.name == "run_code"
    assert tool.strict_json_schema
    assert tool.params_json_schema == {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "The program: TypeScript or JavaScript."}},
        "required": ["code"],
        "additionalProperties": False,
    }
    assert tool.description.startswith("Write a TypeScript (or JavaScript) program.")
    assert "- tools.population({ city }) (read-only): How many people live in a city." in tool.description
    assert "- tools.forecast({ city, days }): The forecast for a city, one line a day." in tool.description
    assert "  forecast(args: ForecastInput): Promise<unknown>;" in tool.description


async def test_a_description_is_put_before_the_code_mode_prompt() -> None:
    tool = code_mode_tool([weather], description="Answer questions about the weather.")
    assert tool.description.startswith("Answer questions about the weather.\n\nWrite a TypeScript")


async def test_a_program_calls_a_function_a_pydeno_tool_and_a_function_tool_and_the_model_answers_from_it() -> None:
    model = Scripted(
        "const w = await tools.weather({city: 'Oslo'});\n"
        "const f = await tools.forecast({city: 'Oslo', days: 2});\n"
        "({temp: w.temp_c, people: await tools.population({city: 'Oslo'}), f})"
    )
    result = await run(model, code_mode_tool([weather, population, forecast]), context="run 1")
    # The function tool ran in the run's context, under its own name and a call id of its own.
    assert result.final_output == (
        'answer from: ok: {"temp": 21, "people": 709000, '
        '"f": ["run 1: Oslo day 0 (forecast, call_0.1)", "run 1: Oslo day 1 (forecast, call_0.1)"]}\n'
        "tool calls (3): weather ok, forecast ok, population ok"
    )


async def test_a_failed_program_is_an_output_the_model_reads_and_the_run_goes_on() -> None:
    model = Scripted("throw new Error('boom')", "40 + 2")
    result = await run(model, code_mode_tool([weather]))
    first, second = model.outputs
    assert first.startswith("error: Error: boom (line 1, column 7)\nkind: js_error (retryable: no)\n")
    assert second == "ok: 42"
    assert result.final_output == "answer from: ok: 42"


async def test_arguments_other_than_one_string_code_are_an_output_the_model_reads() -> None:
    model = Scripted("ignored", arguments=json.dumps({"program": "1"}))
    await run(model, code_mode_tool([weather]))
    assert model.outputs == [
        'error: the arguments must be a JSON object with one field, "code": the program as a string'
    ]
    tool = code_mode_tool([weather])
    for arguments in ("not json", "[]", '{"code": 1}', '{"code": "1", "more": 2}'):
        ctx, _ = called("1")
        assert (await tool.on_invoke_tool(ctx, arguments)).startswith("error: the arguments must be a JSON object")


@pytest.mark.parametrize("redacted", [True, False], ids=["tool data redacted", "tool data logged"])
async def test_a_function_tools_refusal_and_failures_reach_the_program(
    redacted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK's switch (OPENAI_AGENTS_DONT_LOG_TOOL_DATA, read at its import) that keeps the
    # arguments, and its validator's reasons with them, out of its errors.
    monkeypatch.setattr(agents_debug, "DONT_LOG_TOOL_DATA", redacted)
    program = (
        "const seen = [];\n"
        "try { await tools.alerts({city: {name: 'Paris'}}) } catch (e) { seen.push(e.name + ': ' + e.message) }\n"
        "try { await tools.alerts({city: {name: 'Oslo'}}) } catch (e) { seen.push(e.name + ': ' + e.message) }\n"
        "try { await tools.forecast({city: 'Oslo'}) } catch (e) { seen.push(e.message) }\n"
        "seen.push(await tools.radar({city: 'Oslo'}));\n"
        "seen"
    )
    ctx, arguments = called(program)
    text = await code_mode_tool([alerts, forecast, radar]).on_invoke_tool(ctx, arguments)
    refused = (
        "tools.alerts() failed: Invalid JSON input for tool alerts"
        if redacted
        else "tools.alerts(): invalid arguments: city.name: Value error, Paris is not covered"
    )
    assert json.loads(text.splitlines()[0].removeprefix("ok: ")) == [
        # The SDK's validation of the arguments.
        f"ToolError: {refused}",
        # Any other exception, as for any host function: its details stay on the host.
        "RuntimeError: tools.alerts() failed on the host (RuntimeError); its details are hidden from the program",
        # The schema is the SDK's strict one: every parameter is required.
        "tools.forecast(): invalid arguments: the arguments: 'days' is a required property",
        # With the SDK's default failure handling, a failure is a text for the model.
        "An error occurred while running the tool. Please try again.",
    ]


async def test_two_concurrent_runs_share_the_tool_but_not_a_worker_or_each_others_globals() -> None:
    arrived: list[str] = []
    both = asyncio.Event()

    async def meet() -> int:
        """Wait until both programs are here."""
        arrived.append("one")
        if len(arrived) == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 15)
        return len(arrived)

    tool = code_mode_tool([meet])
    first = Scripted("globalThis.a = 1; await tools.meet(); typeof globalThis.b")
    second = Scripted("globalThis.b = 1; await tools.meet(); typeof globalThis.a")
    await asyncio.gather(run(first, tool), run(second, tool))
    assert [first.outputs[0].splitlines()[0], second.outputs[0].splitlines()[0]] == ['ok: "undefined"'] * 2


async def test_calls_the_model_asks_for_in_one_turn_run_at_once_on_workers_of_their_own() -> None:
    arrived: list[str] = []
    both = asyncio.Event()

    async def meet() -> int:
        """Wait until both programs are here."""
        arrived.append("one")
        if len(arrived) == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 15)
        return len(arrived)

    model = Scripted(
        [
            "globalThis.a = 1; await tools.meet(); typeof globalThis.b",
            "globalThis.b = 1; await tools.meet(); typeof globalThis.a",
        ]
    )
    await run(model, code_mode_tool([meet]))
    assert [o.splitlines()[0] for o in model.outputs] == ['ok: "undefined"'] * 2


async def test_each_call_has_a_worker_of_its_own_which_is_gone_when_the_call_returns() -> None:
    during: list[set[int]] = []

    def snapshot() -> int:
        """The number of worker processes alive now."""
        during.append(workers())
        return len(during[-1])

    tool = code_mode_tool([snapshot])
    before = workers()
    first = await tool.on_invoke_tool(*called("globalThis.kept = 'from call 1'; await tools.snapshot()"))
    assert first.startswith("ok: ")
    started = during[0] - before
    assert started, "no worker ran the program"
    psutil.wait_procs([psutil.Process(pid) for pid in started if psutil.pid_exists(pid)], timeout=10)
    assert not (workers() & started)
    assert await tool.on_invoke_tool(*called("typeof globalThis.kept", "call_1")) == 'ok: "undefined"'


async def test_needs_approval_on_the_code_tool_stops_the_run_before_a_program_runs_until_approved() -> None:
    ran: list[str] = []

    def note(text: str) -> str:
        """Write a note."""
        ran.append(text)
        return text

    tool = code_mode_tool([note])
    tool.needs_approval = True
    model = Scripted("await tools.note({text: 'hello'})")
    agent: Agent[str] = Agent(name="notes", model=model, tools=[tool])
    config = RunConfig(tracing_disabled=True)
    paused = await Runner.run(agent, "Write a note", context="ann", run_config=config)
    [asked] = paused.interruptions
    assert asked.tool_name == "run_code"
    assert ran == []
    state = paused.to_state()
    state.approve(asked)
    finished = await Runner.run(agent, state, run_config=config)
    assert ran == ["hello"]
    assert finished.final_output == 'answer from: ok: "hello"\ntool calls (1): note ok'


@function_tool(needs_approval=True)
def delete_city(city: str) -> str:
    """Delete a city."""
    return city


@tool_input_guardrail
def allow_all(data: Any) -> ToolGuardrailFunctionOutput:
    return ToolGuardrailFunctionOutput.allow()


@function_tool(tool_input_guardrails=[allow_all])
def guarded(city: str) -> str:
    """A tool with a guardrail."""
    return city


@function_tool(is_enabled=lambda ctx, agent: ctx.context == "admin")
def admin_only(city: str) -> str:
    """A tool only some runs have."""
    return city


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        pytest.param({"approve": "ask"}, ValueError, r'approve="ask" cannot pause .* needs_approval=True', id="ask"),
        pytest.param({"name": "run code"}, ValueError, r"name must be 1 to 64 letters", id="a bad tool name"),
        pytest.param({"description": 3}, TypeError, r"description must be a str or None", id="a bad description"),
        pytest.param(
            {"tools": weather},
            TypeError,
            r"tools must be a list of functions, pydeno.Tool objects and Agents SDK FunctionTools, got function",
            id="tools not a list",
        ),
        pytest.param(
            {"tools": [42]},
            TypeError,
            r"tools must be pydeno.Tool objects, functions or Agents SDK FunctionTools, got int",
            id="a non-tool",
        ),
        pytest.param(
            {"tools": [delete_city]},
            ValueError,
            r"FunctionTool 'delete_city' sets needs_approval, which the SDK applies only around a model's call of it",
            id="a tool that needs approval",
        ),
        pytest.param(
            {"tools": [guarded]},
            ValueError,
            r"FunctionTool 'guarded' sets guardrails, which the SDK applies only around a model's call of it",
            id="a tool with guardrails",
        ),
        pytest.param(
            {"tools": [admin_only]},
            ValueError,
            r"FunctionTool 'admin_only' sets is_enabled, which the SDK applies only around a model's call of it",
            id="a tool enabled under a condition",
        ),
        pytest.param(
            {"tools": [weather, function_tool(weather)]},
            ValueError,
            r"two tools are named 'weather'",
            id="two tools of one name",
        ),
        pytest.param({"timeout": -1}, ValueError, r"timeout must be a positive", id="a bad timeout"),
        pytest.param({"max_tool_calls": -1}, ValueError, r"max_tool_calls", id="a bad Code Mode option"),
        pytest.param(
            {"timeot": 5}, TypeError, r"code_mode_tool\(\) got an unexpected keyword argument 'timeot'", id="a typo"
        ),
    ],
)
async def test_misuse_is_refused_when_the_tool_is_made(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        code_mode_tool(**kwargs)
