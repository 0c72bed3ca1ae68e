"""The one JSON dialect for values outside Python (pydeno/_runtime/json_values.py), and its
one description in docs/values.md."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

import pydeno
from pydeno._runtime.json_values import TAGS, jsonable, value_json

DOCS = Path(__file__).resolve().parents[2] / "docs"
UTC = dt.UTC


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (pydeno.undefined, {"$type": "undefined"}),
        (True, True),
        (2**70, 2**70),
        (1.5, 1.5),
        (math.nan, {"$type": "number", "value": "NaN"}),
        (-math.inf, {"$type": "number", "value": "-Infinity"}),
        (b"\x00\xff", {"$type": "bytes", "base64": "AP8="}),
        (
            dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
            {"$type": "date", "iso": "2024-01-02T03:04:05.678000+00:00"},
        ),
        ({3, "b", 1, None}, {"$type": "set", "values": ["b", 1, 3, None]}),
        (
            [pydeno.undefined, {"k": math.inf}],
            [{"$type": "undefined"}, {"k": {"$type": "number", "value": "Infinity"}}],
        ),
        ({1: "a", "1": "b"}, {"$type": "map", "entries": [[1, "a"], ["1", "b"]]}),
    ],
)
def test_values_as_json(value: Any, expected: Any) -> None:
    rendered = jsonable(value)
    assert rendered == expected
    assert value_json(value) == json.dumps(rendered, ensure_ascii=False, allow_nan=False)


def _section(page: str, title: str) -> str:
    text = (DOCS / page).read_text(encoding="utf-8")
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_docs_list_every_tag_the_dialect_writes_and_no_other() -> None:
    documented = set(re.findall(r'"\$type": "(\w+)"', _section("values.md", "Values as JSON")))
    assert documented == {*TAGS, "truncated"}


def test_the_tags_are_listed_once_in_the_docs() -> None:
    """Other pages link to the section instead of listing the tags again: an example may show
    one tag, a second one on a page is a list that will drift."""
    listing = re.compile(r'"\$type": "(' + "|".join(TAGS) + r')"')
    pages = {path.name: set(listing.findall(path.read_text(encoding="utf-8"))) for path in DOCS.glob("*.md")}
    assert {name: tags for name, tags in pages.items() if len(tags) > 1 and name != "values.md"} == {}
