"""Tools made inside a function, whose hints name types local to it, under postponed
annotations (this module has ``from __future__ import annotations``, so every hint is a
string): they resolve from the decorating caller's frame, as pydantic resolves them."""

from __future__ import annotations

import dataclasses
import gc
import weakref
from typing import Any, NotRequired, TypedDict

import pydantic

import pydeno


def test_a_tool_made_inside_a_function_resolves_its_local_types_and_a_program_calls_it() -> None:
    seen: list[Any] = []

    @dataclasses.dataclass
    class Label:
        name: str

    class Issue(TypedDict):
        title: str
        labels: list[Label]
        note: NotRequired[str]

    class Owner(pydantic.BaseModel):
        login: str

    @pydeno.tool
    def file_issue(issue: Issue, owner: Owner | None = None) -> Issue:
        """File an issue."""
        seen.append((issue, owner))
        return issue

    schema = file_issue.input_schema
    assert schema["$defs"]["Issue"]["required"] == ["title", "labels"]
    assert schema["$defs"]["Issue"]["properties"]["labels"] == {"type": "array", "items": {"$ref": "#/$defs/Label"}}
    assert schema["$defs"]["Label"]["properties"] == {"name": {"type": "string"}}
    with pydeno.CodeMode([file_issue]) as cm:
        result = cm.execute(
            "await tools.file_issue({issue: {title: 't', labels: [{name: 'bug'}]}, owner: {login: 'ann'}})"
        )
    assert result.value == {"title": "t", "labels": [{"name": "bug"}]}, str(result)
    assert seen == [({"title": "t", "labels": [Label("bug")]}, Owner(login="ann"))]


def test_every_way_of_making_a_tool_resolves_local_types() -> None:
    @dataclasses.dataclass
    class Point:
        x: int

    def move(p: Point) -> int:
        return p.x + 1

    made = [
        pydeno.tool(name="named")(move),
        pydeno.tool(move),
        pydeno.Tool("direct", move),
    ]
    for t in made:
        assert t.input_schema["$defs"]["Point"]["properties"] == {"x": {"type": "integer"}}
    with pydeno.CodeMode([move]) as cm:
        result = cm.execute("await tools.move({p: {x: 1}})")
    assert result.value == 2, str(result)


def test_a_name_that_resolves_nowhere_is_still_refused_with_the_name() -> None:
    def broken(p: Nowhere) -> None:  # type: ignore[name-defined]  # noqa: F821 - the misuse under test
        ...

    try:
        pydeno.Tool("broken", broken)
    except TypeError as exc:
        assert str(exc) == "tool 'broken': its type hints cannot be resolved (name 'Nowhere' is not defined)"
    else:
        raise AssertionError("a hint naming nothing was accepted")


def test_a_tool_keeps_its_resolved_types_but_none_of_its_makers_other_locals() -> None:
    class Big:
        pass

    def make() -> tuple[pydeno.Tool, weakref.ref[Big]]:
        big = Big()

        @dataclasses.dataclass
        class Point:
            x: int

        @pydeno.tool
        def shift(p: Point) -> int:
            return p.x + 1

        return shift, weakref.ref(big)

    shift, big = make()
    gc.collect()
    assert big() is None
    with pydeno.CodeMode([shift]) as cm:
        result = cm.execute("await tools.shift({p: {x: -0}})")
    assert result.value == 1, str(result)
