"""Clients of a real ``pydeno mcp`` server process, shared by the tests that speak to it
politely (tests/features/test_mcp_server.py) and rudely (tests/hostile/test_mcp_hostile.py)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import psutil
from mcp import Client, StdioServerParameters

from tests.support.processes import deno_workers

SERVER = [sys.executable, "-m", "pydeno", "mcp"]


def workers(server: psutil.Process) -> list[psutil.Process]:
    """The server's deno workers."""
    return deno_workers(server)


def wait_until(condition: Callable[[], Any], what: str, limit: float = 20.0) -> Any:
    """condition's first truthy value: a state of another process, which sends no event."""
    deadline = time.monotonic() + limit
    while not (value := condition()):
        assert time.monotonic() < deadline, f"never saw: {what}"
        time.sleep(0.02)
    return value


async def until(condition: Callable[[], Any], what: str) -> Any:
    """wait_until, letting the test's other tasks run while it waits."""
    return await anyio.to_thread.run_sync(wait_until, condition, what)


def gone(processes: list[psutil.Process]) -> bool:
    _, alive = psutil.wait_procs(processes, timeout=15)
    return not alive


@contextlib.asynccontextmanager
async def http_server(*flags: str, stop: int = signal.SIGTERM) -> AsyncIterator[tuple[str, psutil.Process]]:
    """``pydeno mcp --http`` on a free port: its URL and process; stopped with ``stop`` after,
    which it must answer by exiting 0."""
    proc = subprocess.Popen([*SERVER, "--http", "--port", "0", *flags], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    try:
        line = await anyio.to_thread.run_sync(proc.stderr.readline)
        assert "serving on http://127.0.0.1:" in line, line
        yield line.split("serving on ")[1].strip(), psutil.Process(proc.pid)
    finally:
        proc.send_signal(stop)
        status = proc.wait(30)
        proc.stderr.close()
    assert status == 0


@contextlib.asynccontextmanager
async def stdio_client(*flags: str) -> AsyncIterator[tuple[Client, psutil.Process]]:
    async with Client(StdioServerParameters(command=SERVER[0], args=[*SERVER[1:], *flags])) as client:
        server = next(p for p in psutil.Process().children() if "mcp" in p.cmdline())
        yield client, server


async def run(client: Client, code: str, **arguments: Any) -> Any:
    return await client.call_tool("run_javascript", {"code": code, **arguments})
