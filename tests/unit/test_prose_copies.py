"""Prose copies of tables, checked against the tables: the frame lists in
pydeno/host/wire/connection.py's docstring (protocol.py's HOST_FRAMES and WORKER_FRAMES) and
the exception trees in pydeno/_base/errors.py's and docs/error-reference.md (the classes
themselves)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pydeno
from pydeno._base import errors
from pydeno.host.wire import connection, protocol

_FRAME_LINE = re.compile(r"^    \[(\d+)(.*?)\]\s+([A-Z_]+)\b", re.MULTILINE)


def _items(text: str) -> int:
    """How many items follow the kind in a frame line's text (", a, [b, c], d | [e]")."""
    depth, count = 0, 0
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            count += 1
    return count


def _documented(block: str) -> dict[int, tuple[str, int]]:
    return {int(kind): (name, _items(rest)) for kind, rest, name in _FRAME_LINE.findall(block)}


def _table(prefix: str, frames: dict[int, tuple[str, ...]]) -> dict[int, tuple[str, int]]:
    names = {value: name.removeprefix(prefix) for name, value in vars(protocol).items() if name.startswith(prefix)}
    return {kind: (names[kind], len(items)) for kind, items in frames.items()}


def test_the_frame_lists_in_the_connection_docstring_match_the_protocol_table() -> None:
    doc = connection.__doc__ or ""
    worker, _, host = doc.partition("Host -> worker")
    assert _documented(worker) == _table("W_", protocol.WORKER_FRAMES)
    assert _documented(host) == _table("H_", protocol.HOST_FRAMES)


def _tree(text: str, margin: str) -> dict[str, str | None]:
    """Each class an exception tree drawn in text names, with its parent (None at the root)."""
    line = re.compile(rf"^{margin}([│ ]*)(?:[├└]── )?([A-Z]\w+)\s", re.MULTILINE)
    documented: dict[str, str | None] = {}
    parents: list[str] = []
    for indent, name in line.findall(text):
        depth = len(indent) // 4 + (0 if name == "PydenoError" else 1)
        del parents[depth:]
        documented[name] = parents[-1] if parents else None
        parents.append(name)
    return documented


def _classes() -> dict[str, str | None]:
    classes: dict[str, Any] = {
        name: cls
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and issubclass(cls, pydeno.PydenoError) and not name.startswith("_")
    }
    return {
        name: next((base.__name__ for base in cls.__bases__ if issubclass(base, pydeno.PydenoError)), None)
        for name, cls in classes.items()
    }


def test_the_exception_tree_in_the_errors_docstring_matches_the_classes() -> None:
    assert _tree(errors.__doc__ or "", "    ") == _classes()


def test_the_exception_tree_in_the_docs_matches_the_classes() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "error-reference.md").read_text(encoding="utf-8")
    assert _tree(text.split("```")[1], "") == _classes()


def test_the_docs_hello_frame_has_the_protocol_tables_items() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text(encoding="utf-8")
    shown = re.findall(r"HELLO `\[0, ([^\]]*)\]`", text)
    assert shown == [", ".join(protocol.WORKER_FRAMES[protocol.W_HELLO])]


def test_the_api_page_documents_every_exception_class() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
    assert set(_classes()) <= set(re.findall(r"^::: pydeno\.(\w+)", text, re.MULTILINE))
