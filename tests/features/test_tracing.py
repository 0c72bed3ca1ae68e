"""Traces: spans through OpenTelemetry's global tracer provider, recorded here by the SDK's
in-memory exporter, against real workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import pydeno
from pydeno._base import tracing
from tests.support.otel import reset_global_provider

SECRET = "the guest wrote this"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reset_global_provider()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        reset_global_provider()
        provider.shutdown()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def one(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    found = named(exporter, name)
    assert len(found) == 1, [s.name for s in exporter.get_finished_spans()]
    return found[0]


def everything_said(span: ReadableSpan) -> str:
    """All a span carries that an exporter would send: attributes, events, status."""
    return json.dumps(
        [
            dict(span.attributes or {}),
            [[e.name, dict(e.attributes or {})] for e in span.events],
            span.status.description,
        ],
        default=str,
    )


def test_no_span_is_made_and_opentelemetry_is_not_imported_when_no_provider_is_set() -> None:
    code = (
        "import sys, pydeno\n"
        "with pydeno.Runtime() as rt: rt.eval('1 + 1')\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_a_provider_named_in_the_environment_is_used() -> None:
    code = (
        "import opentelemetry.trace\n"
        "from pydeno._base import tracing\n"
        "print(type(tracing.tracer()).__module__.split('.')[:3])"
    )
    env = {**os.environ, "OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60, env=env)
    assert out.stdout.strip() == "['opentelemetry', 'sdk', 'trace']"


def test_with_the_api_loaded_but_no_provider_set_there_is_no_tracer() -> None:
    reset_global_provider()
    assert tracing.tracer() is None
    with pydeno.Runtime() as rt:
        assert rt.eval("1 + 1") == 2


def test_an_eval_is_a_span_with_the_workers_pid_cpu_and_peak_rss(spans: InMemorySpanExporter) -> None:
    with pydeno.Runtime() as rt:
        # Long enough to take several of the kernel's 10 ms CPU ticks, which is all /proc counts.
        assert rt.eval("let n = 0; for (let i = 0; i < 1e6; i++) n += i; n") == 499999500000
        pid = rt._sup.process.pid  # type: ignore[union-attr]
    span = one(spans, "pydeno.eval")
    attributes = dict(span.attributes or {})
    assert attributes["pydeno.worker.pid"] == pid
    assert 0 < attributes["pydeno.worker.cpu_seconds"] < 5
    assert attributes["pydeno.worker.peak_rss_bytes"] > 10 << 20
    assert span.status.status_code is StatusCode.UNSET
    assert "pydeno.code" not in attributes


def test_a_worker_start_is_a_span_of_its_own(spans: InMemorySpanExporter) -> None:
    with pydeno.Runtime(sandbox="off") as rt:
        pid = rt._sup.process.pid  # type: ignore[union-attr]
    span = one(spans, "pydeno.worker_start")
    assert span.attributes is not None
    assert span.attributes["pydeno.worker.pid"] == pid
    assert span.attributes["pydeno.sandbox"] == "off"
    assert span.attributes["pydeno.worker.cpu_seconds"] > 0


def test_a_host_call_is_a_child_of_the_eval_that_made_it(spans: InMemorySpanExporter) -> None:
    with pydeno.Runtime() as rt:
        rt.bind_function("add", lambda a, b: a + b)
        assert rt.eval("(await add(1, 2)) + (await add(3, 4))") == 10
    evaluated = one(spans, "pydeno.eval")
    calls = named(spans, "pydeno.host_call")
    assert len(calls) == 2
    for call in calls:
        assert call.parent is not None and call.parent.span_id == evaluated.context.span_id
        assert call.attributes == {"pydeno.function.name": "add"}


def test_a_failed_eval_is_recorded_by_its_kind_without_the_guests_text(spans: InMemorySpanExporter) -> None:
    with pydeno.Runtime() as rt, pytest.raises(pydeno.JavaScriptError):
        rt.eval(f"throw new Error({SECRET!r})")
    span = one(spans, "pydeno.eval")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "js_error"
    assert span.attributes is not None
    assert span.attributes["error.type"] == "js_error"
    assert span.attributes["pydeno.error.retryable"] is False
    assert [e.name for e in span.events] == ["exception"]
    assert span.events[0].attributes == {"exception.type": "pydeno.JavaScriptError", "pydeno.error.kind": "js_error"}
    assert SECRET not in everything_said(span)


def test_the_guests_text_is_in_spans_only_when_the_operator_asks(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(tracing.GUEST_TEXT_VARIABLE, "1")
    code = f"throw new Error({SECRET!r})"
    with pydeno.Runtime() as rt, pytest.raises(pydeno.JavaScriptError):
        rt.eval(code)
    span = one(spans, "pydeno.eval")
    assert span.attributes is not None and span.attributes["pydeno.code"] == code
    assert SECRET in (span.status.description or "")
    assert any(SECRET in str((e.attributes or {}).get("exception.message")) for e in span.events)


def test_a_timeout_is_recorded_as_retryable_with_larger_limits(spans: InMemorySpanExporter) -> None:
    with pydeno.Runtime(timeout=0.2) as rt, pytest.raises(pydeno.RuntimeTimeout):
        rt.eval("while (true) {}")
    span = one(spans, "pydeno.eval")
    assert span.attributes is not None
    assert span.attributes["pydeno.error.kind"] == "timeout"
    assert span.attributes["pydeno.error.retry_with_larger_limits"] is True
    assert span.events[0].attributes == {"exception.type": "pydeno.RuntimeTimeout", "pydeno.error.kind": "timeout"}


@pydeno.tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


@pydeno.tool
def broken(key: str) -> str:
    """Always fails."""
    raise pydeno.ToolError(f"no such key: {key}")


def test_a_code_mode_execution_holds_its_eval_and_its_tool_calls(spans: InMemorySpanExporter) -> None:
    with pydeno.CodeMode([lookup, broken]) as cm:
        result = cm.execute(
            f"const a = await tools.lookup({{key: 'x'}});\n"
            f"try {{ await tools.broken({{key: {SECRET!r}}}); }} catch {{}}\n"
            "a"
        )
    assert result.ok and result.value == "X"
    execution = one(spans, "pydeno.execute")
    assert execution.attributes is not None
    assert execution.attributes["pydeno.tool_calls"] == 2
    assert execution.attributes["pydeno.host_calls"] == 2
    assert execution.attributes["pydeno.worker.cpu_seconds"] > 0
    # The evals of the execution (the program's, and the one that installs `tools` in a new
    # worker) are its children.
    evals = {s.context.span_id for s in named(spans, "pydeno.eval")}
    assert len(evals) == 2
    assert all(
        s.parent is not None and s.parent.span_id == execution.context.span_id for s in named(spans, "pydeno.eval")
    )
    calls = {s.attributes["pydeno.tool.name"]: s for s in named(spans, "pydeno.tool_call") if s.attributes}
    assert set(calls) == {"lookup", "broken"}
    for call in calls.values():
        # Inside the host call that carried it, inside an eval of the program's.
        assert call.parent is not None
        host_call = next(s for s in named(spans, "pydeno.host_call") if s.context.span_id == call.parent.span_id)
        assert host_call.parent is not None and host_call.parent.span_id in evals
    assert calls["lookup"].status.status_code is StatusCode.UNSET
    assert calls["broken"].attributes is not None and calls["broken"].attributes["error.type"] == "tool_failed"
    assert SECRET not in everything_said(calls["broken"])


def test_a_failed_program_ends_its_execution_span_with_the_kind(spans: InMemorySpanExporter) -> None:
    with pydeno.CodeMode([lookup], timeout=0.3) as cm:
        result = cm.execute("while (true) {}")
    assert not result.ok
    execution = one(spans, "pydeno.execute")
    assert execution.attributes is not None and execution.attributes["pydeno.error.kind"] == "timeout"


def test_a_paused_program_ends_its_span_when_its_code_mode_closes(spans: InMemorySpanExporter) -> None:
    with pydeno.CodeMode([lookup], approve="ask") as cm:
        paused = cm.start("return await tools.lookup({key: 'y'})")
        assert isinstance(paused, pydeno.PausedToolCall)
        assert named(spans, "pydeno.execute") == []
    execution = one(spans, "pydeno.execute")
    assert execution.attributes is not None and execution.attributes["pydeno.abandoned"] is True


def test_a_paused_and_resumed_program_is_one_span_with_its_tool_call_inside(spans: InMemorySpanExporter) -> None:
    with pydeno.CodeMode([lookup], approve="ask") as cm:
        paused = cm.start("return await tools.lookup({key: 'y'})")
        assert isinstance(paused, pydeno.PausedToolCall)
        result = paused.resume()
    assert isinstance(result, pydeno.ExecutionResult) and result.value == "Y"
    execution = one(spans, "pydeno.execute")
    call = one(spans, "pydeno.tool_call")
    assert call.context.trace_id == execution.context.trace_id
    assert call.parent is not None and call.parent.span_id == execution.context.span_id


def test_a_tool_bridges_and_an_agents_tool_calls_are_spans(spans: InMemorySpanExporter) -> None:
    with pydeno.Runtime() as rt:
        pydeno.ToolBridge({"double": lambda x: 2 * x}).attach(rt)
        assert rt.eval("await tools.double(4)") == 8
    with pydeno.AgentSandbox(tools={"triple": lambda x: 3 * x}) as agent:
        assert agent.run("await tools.triple(2)") == 6
    names = [s.attributes["pydeno.tool.name"] for s in named(spans, "pydeno.tool_call") if s.attributes]
    assert sorted(names) == ["double", "triple"]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_async_runtimes_nest_host_calls_under_their_eval(spans: InMemorySpanExporter, backend: str) -> None:
    async def main() -> Any:
        async def fetch(x: int) -> int:
            await anyio.sleep(0)
            return x + 1

        async with pydeno.AsyncRuntime() as rt:
            await rt.bind_function("fetch", fetch)
            return await rt.eval("await fetch(await fetch(1))")

    assert anyio.run(main, backend=backend) == 3
    evaluated = one(spans, "pydeno.eval")
    calls = named(spans, "pydeno.host_call")
    assert len(calls) == 2
    assert all(c.parent is not None and c.parent.span_id == evaluated.context.span_id for c in calls)
    # The async runtime starts its worker at its first use, under whatever span is current.
    assert one(spans, "pydeno.worker_start").attributes is not None


def test_an_agent_run_is_an_eval_span_holding_its_tool_calls(spans: InMemorySpanExporter) -> None:
    with pydeno.AgentSandbox(tools={"triple": lambda x: 3 * x}) as agent:
        spans.clear()  # the session's set-up
        assert agent.run("(await tools.triple(2)) + (await tools.triple(3))") == 15
    run = one(spans, "pydeno.eval")
    assert run.attributes is not None and run.attributes["pydeno.worker.cpu_seconds"] > 0
    calls = named(spans, "pydeno.tool_call")
    assert len(calls) == 2
    assert all(c.parent is not None and c.parent.span_id == run.context.span_id for c in calls)


def test_an_agent_run_that_pauses_is_one_span_until_it_finishes(spans: InMemorySpanExporter) -> None:
    with pydeno.AgentSandbox(tools={"triple": lambda x: 3 * x}) as agent:
        spans.clear()
        step = agent.start("(await tools.triple(2)) + (await tools.triple(3))")
        while isinstance(step, pydeno.PausedToolCall):
            assert named(spans, "pydeno.eval") == []
            step = step.resume(value=3 * step.args[0])
        assert step == 15
    run = one(spans, "pydeno.eval")
    assert run.status.status_code is StatusCode.UNSET


def test_a_restored_sessions_replayed_runs_are_marked_as_replays(spans: InMemorySpanExporter) -> None:
    key = b"k" * 32
    with pydeno.AgentSandbox(tools={"triple": lambda x: 3 * x}) as agent:
        agent.run("globalThis.t = await tools.triple(2)")
        journal = agent.dump(key)
    spans.clear()
    with pydeno.AgentSandbox.load(journal, key=key, tools={"triple": lambda x: 3 * x}) as restored:
        assert restored.run("t") == 6
    replays = [s for s in named(spans, "pydeno.eval") if s.attributes and s.attributes.get("pydeno.replay")]
    assert len(replays) == 1
    # A replay answers from the journal: no tool ran.
    assert named(spans, "pydeno.tool_call") == []


def test_a_restored_code_mode_sessions_replayed_programs_are_marked_as_replays(spans: InMemorySpanExporter) -> None:
    triple = pydeno.Tool("triple", lambda x: 3 * x)
    with pydeno.SessionPool(pydeno.MemoryJournalStore(), b"k" * 32, code_mode=True, tools=[triple], max_live=1) as pool:
        with pool.lease("a") as cm:
            assert cm.execute("let t = await tools.triple({ x: 2 }); t").value == 6
        with pool.lease("b"):
            pass
        spans.clear()
        with pool.lease("a") as cm:
            assert cm.execute("t").value == 6
    executions = named(spans, "pydeno.execute")
    assert [bool(s.attributes and s.attributes.get("pydeno.replay")) for s in executions] == [True, False]
    # A replay answers from the journal: no tool ran.
    assert named(spans, "pydeno.tool_call") == []
