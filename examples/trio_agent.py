"""The approval agent and a pool of evaluations, concurrently, under trio (through anyio).

``pydeno.AsyncAgentSandbox`` is ``AgentSandbox`` with ``await``; ``pydeno.AsyncSandboxPool``
and ``pydeno.run_with_retry_async`` are the pool and the retry loop for ``AsyncRuntime``.
All three run on anyio, so the same code runs under asyncio or trio: here, trio. The agent
(its program, tools and approval policy are those of ``approval_agent.py``) and four
pool-backed evaluations run at the same time in one task group.

Run it with ``.venv/bin/python examples/trio_agent.py``.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import sniffio
from approval_agent import PROGRAM, TOOLS, review

import pydeno

# Evaluated on the pool, each on its own fresh worker. The last one never ends: its worker
# is killed at the deadline, and classify_error says it is not worth retrying.
EXPRESSIONS = [
    "[1, 2, 3].map((x) => x * x)",
    "await Promise.all([10, 20].map(async (x) => x + 1))",
    "Object.entries({ from: 'OSL', to: 'LIS' }).map(([k, v]) => `${k}=${v}`).join('&')",
    "(() => { while (true) {} })()",
]


async def run_agent() -> None:
    """The approval flow of approval_agent.py, awaited."""
    async with pydeno.AsyncAgentSandbox(TOOLS, max_tool_calls=5, max_pause=60, timeout=5.0) as agent:
        step = await agent.start(PROGRAM)
        while isinstance(step, pydeno.PausedToolCall):
            call = f"tools.{step.name}({json.dumps(step.args)[1:-1]})"
            reason = review(step.name, step.args)
            if reason is None:
                print(f"agent: approved: {call}")
                step = await step.resume(value=TOOLS[step.name](*step.args))
            else:
                print(f"agent: rejected: {call}: {reason}")
                step = await step.resume(error=pydeno.ToolError(reason))
        print("agent: result:", json.dumps(step))


async def evaluate(pool: pydeno.AsyncSandboxPool, code: str) -> dict[str, Any]:
    """One evaluation on a warm worker, retried on another only if a retry could help."""

    async def attempt(rt: pydeno.AsyncRuntime) -> Any:
        return await rt.eval(code)

    try:
        value = await pydeno.run_with_retry_async(attempt, pool=pool, max_attempts=3)
    except pydeno.PydenoError as exc:
        info = pydeno.classify_error(exc)
        return {"ok": False, "kind": info.kind, "retryable": info.retryable}
    return {"ok": True, "value": value}


async def main() -> None:
    print("running under", sniffio.current_async_library())
    results: dict[int, dict[str, Any]] = {}

    async def evaluate_into(pool: pydeno.AsyncSandboxPool, index: int) -> None:
        results[index] = await evaluate(pool, EXPRESSIONS[index])

    # The pool's replenishing task lives in its `async with` block; leaving it kills every
    # worker the pool started. The task group ends when the agent and every evaluation have.
    async with (
        pydeno.AsyncSandboxPool(size=2, max_workers=4, timeout=1.0, max_memory=128 * 1024 * 1024) as pool,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(run_agent)
        for index in range(len(EXPRESSIONS)):
            tg.start_soon(evaluate_into, pool, index)
    # Printed in a fixed order, whatever order the evaluations finished in.
    for index, code in enumerate(EXPRESSIONS):
        print("eval:", json.dumps({"code": code, **results[index]}))


if __name__ == "__main__":
    anyio.run(main, backend="trio")
