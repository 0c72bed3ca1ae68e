"""Results of real programs in real workers, bounded for the model that reads them: many tool
calls are cut whole, and every result a program gives matches the MCP server's output schema.
The bounds themselves, without a worker, are tests/unit/test_mcp_results.py."""

from __future__ import annotations

import json

import pytest

import pydeno


@pytest.mark.slow
def test_many_tool_calls_are_cut_whole_and_the_text_shows_the_first_errors_only() -> None:
    def fail(n: int) -> int:
        raise pydeno.ToolError(f"no {n}")

    with pydeno.CodeMode([pydeno.Tool("fail", fail)], sandbox="best_effort") as cm:
        result = cm.execute(
            "for (let n = 0; n < 500; n++) { try { await tools.fail({ n }) } catch {} }; 'done'", timeout=60
        )
    assert len(result.tool_calls) == 500
    data = json.loads(result.to_json(max_chars=5000))
    assert "tool_calls" in data["truncated"]
    assert 0 < len(data["tool_calls"]) < 500
    assert data["tool_calls"] == result.to_dict()["tool_calls"][: len(data["tool_calls"])]
    assert data["value"] == "done"
    assert len([line for line in str(result).splitlines() if line.startswith("  fail: ")]) == 20


@pytest.mark.parametrize(
    "code",
    ["let a = 1;\nlet b = ;\na", "throw {code: 42}", "null.x", "[1, 2]"],
    ids=["does-not-compile", "throws-a-value", "throws", "ok"],
)
def test_every_result_a_program_gives_matches_the_output_schema_and_names_each_error_field(code: str) -> None:
    import jsonschema

    from pydeno._cli.mcp_tool import OUTPUT_SCHEMA

    with pydeno.CodeMode([]) as cm:
        data = cm.execute(code).to_dict()
    jsonschema.validate(data, OUTPUT_SCHEMA)
    if data["error"] is not None:
        declared = OUTPUT_SCHEMA["properties"]["error"]["anyOf"][1]["properties"]
        assert set(data["error"]) <= set(declared)
