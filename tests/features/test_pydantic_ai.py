"""pydeno.pydantic_ai.CodeModeToolset in real pydantic-ai agent runs, driven by pydantic-ai's
own test models (FunctionModel, TestModel): no network, no API key, real deno workers."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, ClassVar

import psutil
import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai import Tool as AgentTool
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.toolsets import FunctionToolset, WrapperToolset

import pydeno
from pydeno.pydantic_ai import CodeModeToolset
from tests.support.processes import worker_pids as workers

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def weather(city: str) -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "temp_c": 21}


@pydeno.tool(read_only=True)
def population(city: str) -> int:
    """How many people live in a city."""
    return {"Oslo": 709_000}.get(city, 0)


def forecasts() -> FunctionToolset[str]:
    toolset: FunctionToolset[str] = FunctionToolset()

    @toolset.tool
    def forecast(ctx: RunContext[str], city: str, days: int = 1) -> list[str]:
        """The forecast for a city, one line a day."""
        return [f"{ctx.deps}: {city} day {d}" for d in range(days)]

    @toolset.tool_plain
    def alerts(city: str) -> list[str]:
        """Weather alerts for a city."""
        raise ModelRetry(f"no alert service covers {city}")

    return toolset


class Scripted:
    """A FunctionModel's function: the first request calls the code tool with each program
    in turn, then the model answers with what the last call returned."""

    def __init__(self, *programs: str) -> None:
        self.programs = list(programs)
        self.infos: list[AgentInfo] = []
        self.returns: list[str] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.infos.append(info)
        returned = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        self.returns = [str(p.content) for p in returned]
        if len(returned) < len(self.programs):
            code = self.programs[len(returned)]
            return ModelResponse(parts=[ToolCallPart("run_code", {"code": code})])
        return ModelResponse(parts=[TextPart(f"answer from: {self.returns[-1]}" if self.returns else "no program")])


def agent_with(model: Callable[..., ModelResponse], toolset: CodeModeToolset) -> Agent[str, str]:
    return Agent(FunctionModel(model), toolsets=[toolset], deps_type=str)


async def test_the_model_sees_one_code_tool_described_by_the_typed_api() -> None:
    model = Scripted()
    await agent_with(model, CodeModeToolset([weather, population, forecasts()])).run("hi", deps="d")
    [tool] = model.infos[0].function_tools
    assert tool.name == "run_code"
    assert tool.parameters_json_schema["required"] == ["code"]
    assert tool.description is not None
    assert tool.description.startswith("Write a TypeScript (or JavaScript) program.")
    assert "- tools.population({ city }) (read-only): How many people live in a city." in tool.description
    assert "  forecast(args: ForecastInput): Promise<unknown>;" in tool.description
    assert "interface ForecastInput {\n  city: string;\n  /** @default 1 */\n  days?: number;\n}" in tool.description


async def test_a_program_calls_the_agents_tools_and_the_model_answers_from_its_result() -> None:
    model = Scripted(
        "const w = await tools.weather({city: 'Oslo'});\n"
        "const f = await tools.forecast({city: 'Oslo', days: 2});\n"
        "({temp: w.temp_c, people: await tools.population({city: 'Oslo'}), f})"
    )
    result = await agent_with(model, CodeModeToolset([weather, population, forecasts()])).run("hi", deps="run 1")
    assert result.output == (
        'answer from: ok: {"temp": 21, "people": 709000, "f": ["run 1: Oslo day 0", "run 1: Oslo day 1"]}\n'
        "tool calls (3): weather ok, forecast ok, population ok"
    )


async def test_a_failed_program_is_a_result_the_model_reads_and_the_run_goes_on() -> None:
    model = Scripted("throw new Error('boom')", "40 + 2")
    result = await agent_with(model, CodeModeToolset([weather])).run("hi", deps="d")
    first, second = model.returns
    assert first.startswith("error: Error: boom (line 1, column 7)\nkind: js_error (retryable: no)\n")
    assert second == "ok: 42"
    assert result.output == "answer from: ok: 42"


async def test_model_retry_and_bad_arguments_from_a_toolset_tool_reach_the_program_as_tool_errors() -> None:
    model = Scripted(
        "const seen = [];\n"
        "try { await tools.alerts({city: 'Oslo'}) } catch (e) { seen.push(e.name + ': ' + e.message) }\n"
        "try { await tools.forecast({city: 'Oslo', days: 'two'}) } catch (e) { seen.push(e.message) }\n"
        "seen"
    )
    await agent_with(model, CodeModeToolset([forecasts()])).run("hi", deps="d")
    value = json.loads(model.returns[0].splitlines()[0].removeprefix("ok: "))
    assert value == [
        "ToolError: tools.alerts() failed: no alert service covers Oslo",
        "tools.forecast(): invalid arguments: $.days: 'two' is not of type 'integer'",
    ]


async def test_approve_read_only_lets_read_only_tools_run_and_refuses_the_others() -> None:
    model = Scripted(
        "let refused = null;\n"
        "try { await tools.weather({city: 'Oslo'}) } catch (e) { refused = e.message }\n"
        "[await tools.population({city: 'Oslo'}), refused]"
    )
    await agent_with(model, CodeModeToolset([weather, population], approve="read_only")).run("hi", deps="d")
    assert model.returns[0].splitlines()[0] == ('ok: [709000, "tools.weather() was refused by the approval policy"]')


@pytest.mark.slow
async def test_each_run_has_its_own_worker_which_is_gone_when_the_run_ends() -> None:
    during: list[set[int]] = []

    def snapshot() -> int:
        """The number of worker processes alive now."""
        during.append(workers())
        return len(during[-1])

    toolset = CodeModeToolset([snapshot])
    before = workers()
    model = Scripted("globalThis.kept = 'from run 1'; await tools.snapshot()")
    await agent_with(model, toolset).run("hi", deps="d")
    assert during[0] - before, "no worker ran the program"
    gone = [psutil.Process(pid) for pid in during[0] - before if psutil.pid_exists(pid)]
    psutil.wait_procs(gone, timeout=10)
    assert not (workers() & during[0])
    second = Scripted("typeof globalThis.kept")
    await agent_with(second, toolset).run("hi", deps="d")
    assert second.returns[0] == 'ok: "undefined"'


async def test_pydantic_ai_tools_are_called_and_an_approval_mapping_may_name_a_toolsets_tool() -> None:
    model = Scripted(
        "let refused = null;\n"
        "try { await tools.weather({city: 'Oslo'}) } catch (e) { refused = e.message }\n"
        "[await tools.forecast({city: 'Oslo'}), refused]"
    )
    toolset = CodeModeToolset([AgentTool(weather), forecasts()], approve={"forecast": True})
    await agent_with(model, toolset).run("hi", deps="d")
    assert (
        model.returns[0].splitlines()[0]
        == 'ok: [["d: Oslo day 0"], "tools.weather() was refused by the approval policy"]'
    )


class Counted(WrapperToolset[str]):
    """A toolset that counts how often it is entered and left (shared by its per-run copies)."""

    log: ClassVar[list[str]] = []

    async def __aenter__(self) -> Counted:
        self.log.append("enter")
        await super().__aenter__()
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        self.log.append("exit")
        return await super().__aexit__(*args)


async def test_an_inner_toolset_is_entered_for_the_run_and_left_when_it_ends() -> None:
    Counted.log.clear()
    model = Scripted("await tools.forecast({city: 'Oslo'})")
    await agent_with(model, CodeModeToolset([Counted(forecasts())])).run("hi", deps="d")
    assert model.returns[0].startswith('ok: ["d: Oslo day 0"]')
    assert Counted.log == ["enter", "exit"]


async def test_pydantic_ais_test_model_calls_the_code_tool_and_finishes() -> None:
    toolset = CodeModeToolset([weather])
    agent: Agent[None, str] = Agent(TestModel(), toolsets=[toolset])
    result = await agent.run("hi")
    returned = [p for m in result.all_messages() for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    assert [p.tool_name for p in returned] == ["run_code"]
    # TestModel writes "a" as the program: an undefined name, reported to the model.
    assert str(returned[0].content).startswith("error: ReferenceError: a is not defined")
    assert "run_code" in result.output


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        pytest.param({"approve": "ask"}, ValueError, r'approve="ask" cannot pause', id="approve ask"),
        pytest.param({"name": "run code"}, ValueError, r"name must be 1 to 64 letters", id="a bad tool name"),
        pytest.param({"tools": weather}, TypeError, r"tools must be a list", id="tools not a list"),
        pytest.param({"tools": [42]}, TypeError, r"tools must be pydeno.Tool objects or functions", id="a non-tool"),
        pytest.param({"timeout": -1}, ValueError, r"timeout must be a positive", id="a bad timeout"),
        pytest.param({"max_tool_calls": -1}, ValueError, r"max_tool_calls", id="a bad Code Mode option"),
    ],
)
def test_bad_arguments_are_refused_when_the_toolset_is_made(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        CodeModeToolset(**kwargs)
