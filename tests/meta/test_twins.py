"""The sync drivers are generated from their async source (scripts/unasync.py): a stale
twin fails here, so the two cannot drift apart."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "unasync.py"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["unasync"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_every_sync_twin_is_what_its_async_source_generates() -> None:
    assert generator().stale() == []


def test_the_rewrite_takes_async_away_and_renames_the_async_names() -> None:
    source = '"""Doc of AsyncRuntime."""\n' + (
        "from .backends import anyio as backend\n"
        "from .._runtime._async import AsyncRuntime\n"
        "class AsyncRuntime:\n"
        "    async def __aenter__(self) -> AsyncRuntime:\n"
        "        async with self._lock:\n"
        "            await self._ready()\n"
        "        # unasync: self._ready()\n"
        "        await anyio.lowlevel.checkpoint()  # async-only\n"
        "        return self\n"
    )
    assert generator().unasync(source, "_x/_async.py") == (
        '"""Generated from pydeno/_x/_async.py by scripts/unasync.py: edit that file, not this one.\n\n'
        'Doc of AsyncRuntime."""\n'
        "from .backends import sync as backend\n"
        "from .._runtime._sync import Runtime\n"
        "class Runtime:\n"
        "    def __enter__(self) -> Runtime:\n"
        "        with self._lock:\n"
        "            self._ready()\n"
        "        self._ready()\n"
        "        return self\n"
    )


def test_the_twin_of_a_source_is_the_sync_module_beside_it() -> None:
    assert generator().target_of("_pools/retry/_async.py") == "_pools/retry/_sync.py"


def test_each_generated_twin_names_its_source() -> None:
    unasync = generator()
    for source in unasync.sources():
        twin = unasync.PACKAGE / unasync.target_of(source)
        assert twin.read_text(encoding="utf-8").startswith(f'"""Generated from pydeno/{source} by')
