"""A Code Mode agent loop without a model: a scripted "model" writes TypeScript against a
typed API of three tools, reads each result as a model would, and fixes its program.

The tools: ``issues.search`` (read-only), ``issues.label`` (writes) and ``notify`` (its
service is down, so it always fails). The scripted model's first program passes a number
where the API wants a string: the type check refuses it and says where. The second fixes
that; its notification fails, which it catches and reports. Each turn prints one JSON line.

    .venv/bin/python examples/code_mode.py
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Literal, TypedDict

import pydeno


class Issue(TypedDict):
    id: int
    title: str
    labels: list[str]


ISSUES: list[Issue] = [
    {"id": 1, "title": "crash on start", "labels": ["bug"]},
    {"id": 2, "title": "add dark mode", "labels": []},
    {"id": 3, "title": "crash when saving", "labels": []},
]


@pydeno.tool(name="issues.search", read_only=True)
def search(query: str, limit: int = 10) -> list[Issue]:
    """Find issues whose title contains the query.

    Args:
        query: words the title must contain.
        limit: at most this many issues.
    """
    return [issue for issue in ISSUES if query in issue["title"]][:limit]


@pydeno.tool(name="issues.label")
def label(issue: int, label: Literal["bug", "feature", "duplicate"]) -> Issue:
    """Add a label to an issue; returns the issue."""
    for found in ISSUES:
        if found["id"] == issue:
            if label not in found["labels"]:
                found["labels"].append(label)
            return found
    raise pydeno.ToolNotFoundError(f"there is no issue {issue}")


@pydeno.tool
def notify(channel: str, text: str) -> None:
    """Post a message to a chat channel."""
    raise pydeno.ToolError("the chat service is unavailable")


# What the scripted model writes, turn by turn. A real agent would send cm.describe() and the
# previous result's text to a model and take its reply instead.
PROGRAMS = [
    # Turn 1: `limit` is right, but `query` is given a number: the type check catches it.
    """
const found = await tools.issues.search({ query: 404, limit: 5 });
found.length
""",
    # Turn 2: fixed. Label every crash as a bug, try to tell the team, return a summary.
    """
const crashes = await tools.issues.search({ query: "crash" });
const labelled: number[] = [];
for (const issue of crashes) {
  if (!issue.labels.includes("bug")) {
    await tools.issues.label({ issue: issue.id, label: "bug" });
    labelled.push(issue.id);
  }
}
let notified = true;
try {
  await tools.notify({ channel: "#dev", text: `labelled ${labelled.length} crashes` });
} catch (e) {
  console.warn(`could not notify: ${(e as Error).message}`);
  notified = false;
}
({ crashes: crashes.map((i) => i.id), labelled, notified })
""",
]


def scripted_model(feedback: Iterator[str]) -> Iterator[str]:
    """Yields each program; reads the text of the previous result in between."""
    for program in PROGRAMS:
        yield program
        next(feedback, None)


def main() -> None:
    texts: list[str] = []
    with pydeno.CodeMode([search, label, notify], max_tool_calls=20, timeout=10) as cm:
        prompt = cm.describe()
        assert "tools.issues.search" in prompt
        for turn, program in enumerate(scripted_model(iter(texts)), 1):
            result = cm.execute(program, typecheck=True)
            texts.append(str(result))
            summary = {
                "turn": turn,
                "ok": result.ok,
                "value": result.value,
                "kind": None if result.error is None else result.error["kind"],
                "where": None if result.error is None else [result.error["line"], result.error["column"]],
                "tool_calls": [[c["name"], c["outcome"]] for c in result.tool_calls],
                "stderr": result.stderr,
            }
            print(json.dumps(summary))
    print(json.dumps({"model_read": texts[0].splitlines()[:2]}))


if __name__ == "__main__":
    main()
