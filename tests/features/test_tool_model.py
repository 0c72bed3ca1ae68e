"""One tool model: a ToolBridge's functions and Code Mode's ``Tool`` objects are the same
type, declared by one emitter, counted by one budget and paused by one approval machinery."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

import pydeno
from pydeno._tools.approval import PausedToolCall
from pydeno._tools.tool import positional_tool
from pydeno.host.process.staging import find_deno


@pydeno.tool
def search(query: str, limit: int = 3) -> list[str]:
    """Search the notes."""
    return [f"{query} {i}" for i in range(limit)]


@pydeno.tool(read_only=True)
def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


def scale(x: int | float, factor: float = 2.0) -> int | float:
    """Scale a number."""
    return x * factor


def test_a_bridge_declares_a_tool_object_exactly_as_code_mode_does() -> None:
    bridge = pydeno.ToolBridge({"search": search})
    assert pydeno.CodeMode([search]).typescript().startswith(bridge.typescript() + "\n")
    assert "search(args: SearchInput): Promise<SearchOutput>;" in bridge.typescript()


def test_a_bridge_function_is_a_positional_tool_whose_schema_titles_its_parameters() -> None:
    made = positional_tool("scale", scale)
    assert made.positional and isinstance(made, pydeno.Tool)
    assert made.input_schema["minItems"] == 1
    assert [item["title"] for item in made.input_schema["prefixItems"]] == ["x", "factor"]


def test_a_union_of_int_and_float_is_declared_as_one_number() -> None:
    assert pydeno.ToolBridge({"scale": scale}).typescript() == (
        "declare const tools: {\n  /** Scale a number. */\n  scale(x: number, factor?: number): Promise<number>;\n};"
    )


def test_dotted_bridge_names_are_declared_as_nested_namespaces() -> None:
    declared = pydeno.ToolBridge({"math.scale": scale, "math.sub.scale": scale}).typescript()
    assert "  math: {\n    /** Scale a number. */\n    scale(x: number, factor?: number)" in declared
    assert "    sub: {\n" in declared


@pytest.mark.slow
def test_nested_bridge_declarations_type_check_with_deno(tmp_path: Path) -> None:
    source = tmp_path / "tools.ts"
    declared = pydeno.ToolBridge({"math.scale": scale, "search": search}).typescript()
    source.write_text(
        declared
        + """
const n: number = await tools.math.scale(2, 3);
const found: string[] = await tools.search({ query: "deno" });
// @ts-expect-error a tool of named arguments takes one object
await tools.search("deno");
export { found, n };
"""
    )
    env = {"DENO_DIR": str(tmp_path / "deno"), "DENO_NO_UPDATE_CHECK": "1", "NO_COLOR": "1", "PATH": "/usr/bin:/bin"}
    checked = subprocess.run(
        [find_deno(), "check", "--quiet", str(source)], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert checked.returncode == 0, checked.stderr


def test_a_tool_object_in_a_bridge_takes_one_object_of_named_arguments_checked_by_its_schema() -> None:
    bridge = pydeno.ToolBridge({"search": search, "scale": scale}, max_calls=5)
    with pydeno.Runtime() as rt:
        bridge.attach(rt)
        assert rt.eval("await tools.search({query: 'deno', limit: 2})") == ["deno 0", "deno 1"]
        assert rt.eval("await tools.scale(2)") == 4.0
        refused = rt.eval("await tools.search({query: 7}).catch((e) => `${e.name}: ${e.message}`)")
        assert refused == "ToolError: tools.search(): invalid arguments: $.query: 7 is not of type 'string'"
        assert rt.eval("await tools.search('deno', 2).catch((e) => e.message)") == (
            "tools.search() takes one object of named arguments"
        )
    assert bridge.calls_made == 4


def test_a_tool_object_listed_under_another_name_is_refused() -> None:
    with pytest.raises(ValueError, match="the tool named 'search' is listed as 'find': list it under its own name"):
        pydeno.ToolBridge({"find": search})


def test_an_agent_sessions_start_pauses_each_call_but_a_read_only_tool_runs_at_once() -> None:
    with pydeno.AgentSandbox(tools={"lookup": lookup, "scale": scale}) as sb:
        paused = sb.start("[await tools.lookup({key: 'a'}), await tools.scale(3)]")
        assert isinstance(paused, PausedToolCall) and paused is sb.paused
        assert (paused.name, paused.args) == ("scale", [3])
        assert paused.resume(value=9) == ["A", 9]


def test_code_mode_and_an_agent_session_pause_with_the_same_type() -> None:
    calls: list[Any] = []

    def note(text: str) -> str:
        calls.append(text)
        return "noted"

    with pydeno.CodeMode([note], approve="ask") as cm:
        paused = cm.start("await tools.note({text: 'x'})")
        assert type(paused) is pydeno.PausedToolCall
        assert paused.resume().value == "noted"
    assert calls == ["x"]
