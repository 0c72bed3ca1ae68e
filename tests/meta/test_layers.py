"""The package's import graph: no circle anywhere, and layers that point one way.

Imports are read from the source (every ``import`` and ``from ... import``, inside functions
and ``TYPE_CHECKING`` blocks too), so a circle hidden behind a lazy import still counts.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

import pytest

PACKAGE: Final = Path(__file__).resolve().parents[2] / "pydeno"
# Modules every layer may use: they import nothing of pydeno above themselves.
FOUNDATION: Final = frozenset(
    {
        "pydeno._errors",
        "pydeno._taxonomy",
        "pydeno._checks",
        "pydeno._options",
        "pydeno._values",
        "pydeno._determinism",
        # The figures stats() adds up: plain counting, read by the supervisor and the pools.
        "pydeno._stats",
        # Where deno is, and the npm packages a runtime option names (their bundler runs deno).
        "pydeno._deno",
        "pydeno._packages",
        # The project's name and version, for the CLI and the notes.
        "pydeno._version",
        # The wire's table: a leaf that imports nothing (tests/meta/test_protocol.py).
        "pydeno.host._protocol",
    }
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The pydeno modules that module ``name`` imports (a ``from package import name`` that
    names a submodule counts as that submodule)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    # A package's own __init__ is what "import pydeno.x" runs first; it is not an edge of x.
    return {name: imports_of(name, path, known) - {"pydeno"} for name, path in mods.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_is_read_from_every_module() -> None:
    edges = graph()
    assert "pydeno.host._core" in edges
    assert "pydeno.host._wire" in edges["pydeno.host._core"]


def test_a_circle_is_found_when_there_is_one() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_of_pydeno_imports_itself_back_through_others() -> None:
    assert circles(graph()) == []


@pytest.mark.slow
def test_the_foundation_imports_nothing_above_it() -> None:
    edges = graph()
    for name in sorted(FOUNDATION):
        assert edges[name] <= FOUNDATION, f"{name} imports {sorted(edges[name] - FOUNDATION)}"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(n for n in modules() if n.startswith("pydeno.host.")))
def test_the_host_layer_imports_only_itself_and_the_foundation(name: str) -> None:
    above = {m for m in graph()[name] if not m.startswith("pydeno.host") and m not in FOUNDATION}
    assert not above, f"{name} imports from above the host layer: {sorted(above)}"


def every_import(path: Path) -> set[str]:
    """Every module name an import statement in path names (relative ones as written)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add("." * node.level + (node.module or ""))
    return found


def test_the_core_imports_nothing_that_does_io_or_waits() -> None:
    # It takes bytes and the time in: no process, thread, lock, selector, clock or sleep.
    found = every_import(PACKAGE / "host" / "_core.py")
    forbidden = {"subprocess", "threading", "selectors", "select", "time", "socket", "os", "signal", "asyncio"}
    forbidden |= {"anyio", "psutil", "._process", "._supervisor", "._monitor", "._cgroup", "._mailbox"}
    assert not found & forbidden, sorted(found & forbidden)
