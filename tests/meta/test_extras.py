"""Every optional feature whose extra is missing says how to add it: an ImportError (a
ModuleNotFoundError, naming the missing module) whose message gives the pip command for this
project, which the PyPI name does not install (another project is called pydeno there).

Each case runs in a child interpreter whose import system refuses the extra's packages, as
an environment without them would."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

HIDE = """
import importlib.abc, sys

class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Hide())
"""


def run_without(hidden: set[str], code: str) -> subprocess.CompletedProcess[str]:
    program = f"HIDDEN = {sorted(hidden)!r}\n{HIDE}\n{textwrap.dedent(code)}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def assert_names_the_install(message: str, what: str, extra: str) -> None:
    assert message.startswith(f"{what} needs the {extra} extra: pip install 'pydeno[{extra}]'"), message
    # How to install this project rather than the PyPI one.
    assert f"pip install -e '.[{extra}]'" in message
    assert "another project" in message and "README" in message


IMPORT = """
try:
    import {module}
except ImportError as exc:
    print(type(exc).__name__, exc.name, sep="|")
    print(exc)
else:
    print("imported")
import pydeno
print(pydeno.Runtime.__name__)
"""


@pytest.mark.parametrize(
    ("module", "hidden", "missing", "what", "extra"),
    [
        ("pydeno.pydantic_ai", {"pydantic_ai"}, "pydantic_ai", "pydeno.pydantic_ai", "pydantic-ai"),
        ("pydeno.langchain", {"langchain_core"}, "langchain_core", "pydeno.langchain", "langchain"),
        ("pydeno.openai_agents", {"agents"}, "agents", "pydeno.openai_agents", "openai-agents"),
        ("pydeno.ray", {"ray"}, "ray", "pydeno.ray", "ray"),
    ],
    ids=["pydantic-ai", "langchain", "openai-agents", "ray"],
)
def test_importing_a_module_without_its_extra_says_how_to_install_it(
    module: str, hidden: set[str], missing: str, what: str, extra: str
) -> None:
    done = run_without(hidden, IMPORT.format(module=module))
    assert done.returncode == 0, done.stderr
    kind, message, still = done.stdout.splitlines()
    assert kind == f"ModuleNotFoundError|{missing}"
    assert_names_the_install(message, what, extra)
    # The rest of the package is unaffected.
    assert still == "Runtime"


def test_pydeno_mcp_without_its_extra_exits_2_saying_how_to_install_it() -> None:
    done = run_without({"mcp"}, "from pydeno._cli.main import main\nraise SystemExit(main(['mcp']))\n")
    assert done.returncode == 2
    assert done.stdout == ""
    assert_names_the_install(done.stderr.strip(), "pydeno mcp", "mcp")


def test_mcp_tools_without_the_sdk_works_on_duck_typed_sessions_and_says_how_to_install_it_when_it_needs_it() -> None:
    done = run_without(
        {"mcp"},
        """
        import anyio, pydeno

        class Paged:
            '''A session whose list_tools pages with the SDK's request type.'''
            def __init__(self, pages):
                self.pages = pages
            async def list_tools(self, params=None):
                return self.pages.pop(0)
            async def call_tool(self, name, arguments):
                return {"content": [], "structuredContent": {"ok": True}}

        one = {"tools": [{"name": "ping", "inputSchema": {"type": "object"}}], "nextCursor": None}
        tools = anyio.run(pydeno.mcp_tools, {"srv": Paged([one])})
        print([t.name for t in tools])
        two = {"tools": [], "nextCursor": "next"}
        try:
            anyio.run(pydeno.mcp_tools, {"srv": Paged([two, one])})
        except ImportError as exc:
            print(type(exc).__name__, exc.name, sep="|")
            print(exc)
        """,
    )
    assert done.returncode == 0, done.stderr
    names, kind, message = done.stdout.splitlines()
    assert names == "['srv.ping']"
    assert kind == "ModuleNotFoundError|mcp"
    assert_names_the_install(message, "pydeno.mcp_tools", "mcp")


def test_a_module_missing_inside_an_installed_extra_that_is_not_the_extra_is_not_blamed_on_it() -> None:
    # ray is present; a package it does not bring is what is missing: that error stays as it is.
    done = run_without(
        {"no_such_helper"},
        """
        import sys, types
        sys.modules["ray"] = types.ModuleType("ray")
        exceptions = types.ModuleType("ray.exceptions")
        def fail(name):
            raise ModuleNotFoundError("No module named 'no_such_helper'", name="no_such_helper")
        exceptions.__getattr__ = fail
        sys.modules["ray.exceptions"] = exceptions
        try:
            import pydeno.ray
        except ImportError as exc:
            print(exc.name, exc, sep="|")
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no_such_helper|No module named 'no_such_helper'"
