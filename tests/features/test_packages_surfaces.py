"""Packages in every surface that takes runtime options: pools, agents, Code Mode, session
pools and the MCP server (RayPool: tests/features/test_ray.py)."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

import pydeno
from tests.packages_cache import DATE_FNS_FORMAT, LODASH, ZOD, packages, xdg_cache_home

pytestmark = pytest.mark.slow

USE_LODASH = '(await import("lodash-es")).sum([1, 2, 3])'


def test_a_pool_hands_out_workers_that_have_the_packages() -> None:
    with pydeno.SandboxPool(size=1, packages=packages(LODASH)) as pool:
        for _ in range(2):
            with pool.checkout() as rt:
                assert rt.eval(USE_LODASH) == 6


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_async_pool_hands_out_workers_that_have_the_packages(anyio_backend: str) -> None:
    async with pydeno.AsyncSandboxPool(size=1, packages=packages(LODASH)) as pool, pool.checkout() as rt:
        assert await rt.eval(USE_LODASH) == 6


def test_an_agent_sandbox_imports_packages_and_calls_tools() -> None:
    with pydeno.AgentSandbox(tools={"double": lambda x: 2 * x}, packages=packages(LODASH)) as sb:
        assert sb.run(f"await tools.double({USE_LODASH})") == 12


def test_code_mode_lists_the_packages_and_its_programs_import_them() -> None:
    pkgs = packages(ZOD, DATE_FNS_FORMAT)
    with pydeno.CodeMode([pydeno.Tool("half", lambda x: x / 2)], packages=pkgs) as cm:
        described = cm.describe()
        assert "`zod` (zod@3.23.8), `date-fns/format` (date-fns@3.6.0)" in described
        assert "no npm packages" not in described
        assert 'declare module "zod";' in cm.typescript() and 'declare module "date-fns/format";' in cm.typescript()
        result = cm.execute('const { z } = await import("zod");\nz.number().parse(await tools.half({ x: 8 }))')
        assert result.ok, result.error
        assert result.value == 4


def test_code_mode_without_packages_says_there_are_none() -> None:
    with pydeno.CodeMode([pydeno.Tool("half", lambda x: x / 2)]) as cm:
        assert "no npm packages" in cm.describe() and "declare module" not in cm.typescript()


def test_a_type_checked_program_may_import_a_package() -> None:
    with pydeno.CodeMode([pydeno.Tool("half", lambda x: x / 2)], packages=packages(LODASH)) as cm:
        result = cm.execute('const _ = await import("lodash-es");\n_.sum([1, 2]) as number', typecheck=True)
        assert result.ok, result.error
        assert result.value == 3


def test_a_session_pool_s_agents_have_the_packages_after_a_restore() -> None:
    store = pydeno.MemoryJournalStore()
    key = b"k" * 32
    with pydeno.SessionPool(store, key, max_live=1, packages=packages(LODASH)) as sessions:
        with sessions.lease("a") as agent:
            agent.run(f"globalThis.total = {USE_LODASH}")
        with sessions.lease("b") as other:  # evicts a
            assert other.run(USE_LODASH) == 6
        with sessions.lease("a") as again:
            assert again.run(f"total + {USE_LODASH}") == 12


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_pydeno_mcp_serves_packages_named_with_package(anyio_backend: str, tmp_path: Any) -> None:
    lock = tmp_path / "lock.json"
    # The server's default cache is the shared one: XDG_CACHE_HOME points there.
    env = {"XDG_CACHE_HOME": str(xdg_cache_home()), "PATH": "/usr/bin:/bin"}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "pydeno", "mcp", "--package", LODASH, "--package-lock", str(lock)],
        env=env,
    )
    async with Client(params) as client:
        listed = await client.list_tools()
        assert f"`lodash-es` ({LODASH})" in (listed.tools[0].description or "")
        result = await client.call_tool("run_javascript", {"code": USE_LODASH})
        assert result.structured_content is not None and result.structured_content["value"] == 6
    assert LODASH in json.loads(lock.read_text())["packages"]


def test_pydeno_mcp_refuses_a_bad_package_spec_before_serving() -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "pydeno", "mcp", "--package", "Not A Spec"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert "--package: package spec 'Not A Spec' is not an npm package" in done.stderr
