"""Code Mode: one execution through each side's structured-result API, and (ours) what two of
its parts cost."""

from __future__ import annotations

import statistics
import time
from typing import Any

from ..config import CODE_MODE_CODE, CODE_MODE_ITEMS, CODE_MODE_SCHEMA
from ..context import Context
from ..runtimes import WrongValue


def code_mode(ctx: Context) -> None:
    import pydeno

    side, params = ctx.side, ctx.params

    def items(args: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"id": i, "name": f"item {i}"} for i in range(args["n"])]

    def count(args: dict[str, Any]) -> int:
        return int(args["n"]) + 1

    fns = {"items": items, "count": count, "echo": count}
    if side == "ours":
        tools = [pydeno.Tool(name, fn, input_schema=CODE_MODE_SCHEMA) for name, fn in fns.items()]
        runner: Any = pydeno.CodeMode(tools)
    else:
        # The peer's API, which this file is not type-checked against.
        peer_api: Any = pydeno
        tools = [peer_api.SchemaTool(name, f"{name}.", CODE_MODE_SCHEMA, fn) for name, fn in fns.items()]
        runner = peer_api.AgentSandbox(tools=tools)
    code = CODE_MODE_CODE[side]
    try:
        samples: list[int] = []
        for i in range(params.warmup // 4 + params.iterations // 8):
            t0 = time.perf_counter_ns()
            outcome = runner.execute(code)
            t1 = time.perf_counter_ns()
            value = outcome.value if side == "ours" else outcome.result
            if not isinstance(value, list) or len(value) != CODE_MODE_ITEMS or value[-1]["b"] != 3:
                raise WrongValue(f"the Code Mode execution gave {str(value)[:200]!r}")
            if i >= params.warmup // 4:
                samples.append(t1 - t0)
        ctx.record("code_mode", samples)
        if side == "ours":
            ctx.result["code_mode_costs"] = _costs(ctx, tools)
    finally:
        runner.close()


def _costs(ctx: Context, tools: list[Any]) -> dict[str, float]:
    # What two of its parts cost: validating the three calls' arguments on the host, and
    # stripping the program's types in the worker (a TypeScript eval against the same
    # JavaScript one).
    params = ctx.params
    t0 = time.perf_counter_ns()
    for _ in range(1000):
        for t, n in zip(tools, (1000, 1, 2), strict=True):
            t.validate({"n": n})
    validation_us = (time.perf_counter_ns() - t0) / 1000 / 1000
    strip: dict[str, list[int]] = {"js": [], "ts": []}
    with ctx.make() as rt:
        for i in range(params.warmup + params.iterations):
            lang = "ts" if i % 2 else "js"
            t0 = time.perf_counter_ns()
            rt.eval("{ const a = 1; const b = [a, 2, 3].map((x) => x * 2); b.length }", lang=lang)
            if i >= params.warmup:
                strip[lang].append(time.perf_counter_ns() - t0)
    return {
        "validation_us": round(validation_us, 1),
        "strip_us": round((statistics.median(strip["ts"]) - statistics.median(strip["js"])) / 1000, 1),
    }
