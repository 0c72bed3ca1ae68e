#!/usr/bin/env python3
"""The MCP server's cost: ``run_javascript`` through a real MCP client against ``pydeno mcp``.

Measured in one run, on this machine:

* **round trip**: one client over stdio calls ``run_javascript {"code": "1 + 1"}`` again and
  again (p50 / p90 / p99), with ``--session`` (the session's own worker, as a chat would use
  it) and without (a fresh worker from the server's warm pool for every call);
* **bare**: the same program through ``AsyncCodeMode.execute`` in this process, on one
  worker (what ``--session`` adds to it is the server's overhead: the MCP framing, the
  JSON-RPC round trip over two pipes, and the result's two forms), and through a fresh
  ``AsyncSandboxPool`` checkout per execution (what the pooled server adds);
* **ten clients**: ten clients, each its own server session, calling as fast as they can
  for a fixed number of calls: calls per second over all of them, both modes;
* **launch**: from starting ``pydeno mcp`` to the answer of its first ``tools/call`` (after
  ``initialize``), both modes, p50 of several launches; the client is a few lines of JSON-RPC
  written to the server's stdin, so only the server's start is timed. Beside it, the floor
  of its design: a bare ``python -c "import mcp"``, the SDK's own import.

The reference peer has no MCP server, so there is no ratio here: the figures are ours, and
the overhead is against our own library call. Writes ``benchmarks/results/bench_mcp.json``.

Usage::

    python benchmarks/bench_mcp.py            # full
    python benchmarks/bench_mcp.py --quick    # fewer samples
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common.machine import machine_info  # noqa: E402
from _common.output import write_json  # noqa: E402
from _common.stats import summary  # noqa: E402

import pydeno  # noqa: E402

DEFAULT_OUTPUT = HERE / "results" / "bench_mcp.json"
PROGRAM = "1 + 1"


def server_params(session: bool) -> Any:
    from mcp import StdioServerParameters

    args = ["-m", "pydeno", "mcp"] + (["--session"] if session else [])
    return StdioServerParameters(command=sys.executable, args=args)


def checked(result: Any) -> None:
    content = result.structured_content
    if result.is_error or not isinstance(content, dict) or content.get("value") != 2:
        raise SystemExit(f"run_javascript gave a wrong answer: {result!r}")


async def round_trip(session: bool, calls: int, warmup: int) -> dict[str, float]:
    from mcp import Client

    samples: list[float] = []
    async with Client(server_params(session)) as client:
        for i in range(warmup + calls):
            started = time.perf_counter()
            result = await client.call_tool("run_javascript", {"code": PROGRAM})
            elapsed = time.perf_counter() - started
            checked(result)
            if i >= warmup:
                samples.append(elapsed)
    return summary(samples)


async def bare(calls: int, warmup: int) -> dict[str, float]:
    samples: list[float] = []
    async with pydeno.AsyncCodeMode([]) as cm:
        for i in range(warmup + calls):
            started = time.perf_counter()
            result = await cm.execute(PROGRAM)
            elapsed = time.perf_counter() - started
            if not result.ok or result.value != 2:
                raise SystemExit(f"CodeMode.execute gave a wrong answer: {result!r}")
            if i >= warmup:
                samples.append(elapsed)
    return summary(samples)


async def bare_pooled(calls: int, warmup: int) -> dict[str, float]:
    samples: list[float] = []
    async with pydeno.AsyncSandboxPool(size=2) as pool:
        for i in range(warmup + calls):
            started = time.perf_counter()
            async with pool.checkout() as rt:
                value = await rt.eval(PROGRAM)
            elapsed = time.perf_counter() - started
            if value != 2:
                raise SystemExit(f"a pooled eval gave a wrong answer: {value!r}")
            if i >= warmup:
                samples.append(elapsed)
    return summary(samples)


async def parallel(session: bool, clients: int, calls_each: int) -> dict[str, float]:
    """Each client connects and warms its session first; the clock runs from the moment all
    are ready to the moment the last one has made its calls."""
    from mcp import Client

    ready = 0
    all_ready = anyio.Event()
    finished: list[float] = []

    async def one() -> None:
        nonlocal ready
        async with Client(server_params(session)) as client:
            checked(await client.call_tool("run_javascript", {"code": PROGRAM}))
            ready += 1
            if ready == clients:
                all_ready.set()
            await all_ready.wait()
            for _ in range(calls_each):
                checked(await client.call_tool("run_javascript", {"code": PROGRAM}))
            finished.append(time.perf_counter())

    async with anyio.create_task_group() as group:
        for _ in range(clients):
            group.start_soon(one)
        await all_ready.wait()
        started = time.perf_counter()
    elapsed = max(finished) - started
    total = clients * calls_each
    return {"clients": clients, "calls": total, "seconds": elapsed, "calls_per_s": total / elapsed}


def _line(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


def _answer(proc: subprocess.Popen[bytes], rid: int) -> dict[str, Any]:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("pydeno mcp ended before it answered")
        message = json.loads(line)
        if message.get("id") == rid:
            return dict(message)


def launch(session: bool) -> float:
    """Seconds from starting the server to the answer of its first tools/call."""
    from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS

    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pydeno", "mcp", *(["--session"] if session else [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        hello = {
            "protocolVersion": HANDSHAKE_PROTOCOL_VERSIONS[-1],
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"},
        }
        _line(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
        _answer(proc, 1)
        _line(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = {"name": "run_javascript", "arguments": {"code": PROGRAM}}
        _line(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
        answer = _answer(proc, 2)
        elapsed = time.perf_counter() - started
        if answer.get("result", {}).get("structuredContent", {}).get("value") != 2:
            raise SystemExit(f"the first tools/call gave a wrong answer: {answer!r}")
        return elapsed
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


def sdk_import() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import mcp"], check=True)
    return time.perf_counter() - started


def launches(runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, measure in (
        ("pooled", lambda: launch(False)),
        ("session", lambda: launch(True)),
        ("sdk_import", sdk_import),
    ):
        measure()  # the first start of a kind fills caches (bytecode, staged worker files)
        out[name] = summary([measure() for _ in range(runs)])
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    calls, warmup = (60, 10) if args.quick else (300, 30)
    each = 10 if args.quick else 40
    out: dict[str, Any] = {"machine": machine_info(), "program": PROGRAM}
    out["bare_code_mode"] = await bare(calls, warmup)
    out["mcp_session"] = await round_trip(True, calls, warmup)
    out["bare_pool_checkout"] = await bare_pooled(calls // 3, warmup // 3)
    out["mcp_pooled"] = await round_trip(False, calls // 3, warmup // 3)
    out["parallel_session"] = await parallel(True, 10, each)
    out["parallel_pooled"] = await parallel(False, 10, each // 4)
    out["overhead_session_ms"] = out["mcp_session"]["p50_ms"] - out["bare_code_mode"]["p50_ms"]
    out["overhead_pooled_ms"] = out["mcp_pooled"]["p50_ms"] - out["bare_pool_checkout"]["p50_ms"]
    out["launch_to_first_call"] = await anyio.to_thread.run_sync(launches, 3 if args.quick else 7)
    return out


def report(out: dict[str, Any]) -> str:
    m = out["machine"]
    lines = [
        f"machine: {m['cpu_count']} CPUs ({m.get('cpu_model')}), python {m['python']}, "
        f"load {m.get('loadavg_at_start')}",
        f"bare AsyncCodeMode.execute p50      {out['bare_code_mode']['p50_ms']:8.2f} ms",
        f"run_javascript --session p50        {out['mcp_session']['p50_ms']:8.2f} ms"
        f"   (server overhead {out['overhead_session_ms']:.2f} ms)",
        f"bare pool checkout + eval p50       {out['bare_pool_checkout']['p50_ms']:8.2f} ms",
        f"run_javascript (fresh worker) p50   {out['mcp_pooled']['p50_ms']:8.2f} ms"
        f"   (server overhead {out['overhead_pooled_ms']:.2f} ms)",
        f"10 clients, --session               {out['parallel_session']['calls_per_s']:8.1f} calls/s",
        f"10 clients, fresh worker per call   {out['parallel_pooled']['calls_per_s']:8.1f} calls/s",
        f"launch to first tools/call p50      {out['launch_to_first_call']['pooled']['p50_ms']:8.1f} ms"
        f"   (--session {out['launch_to_first_call']['session']['p50_ms']:.1f} ms;"
        f" the SDK's bare import {out['launch_to_first_call']['sdk_import']['p50_ms']:.1f} ms)",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the JSON goes")
    args = parser.parse_args()
    out = anyio.run(main_async, args)
    print(report(out))
    write_json(args.output, out)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
