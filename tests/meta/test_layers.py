"""The package's import graph: no circle anywhere, and layers, one per folder, that point one way.

Imports are read from the source (every ``import`` and ``from ... import``, inside functions
and ``TYPE_CHECKING`` blocks too), so a circle hidden behind a lazy import still counts.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Final

import pytest

PACKAGE: Final = Path(__file__).resolve().parents[2] / "pydeno"

# The layers, bottom first, each named by its folders (a folder holds its subfolders): a module
# imports only from its own layer and the layers below it.
LAYERS: Final = (
    # The foundation: errors and kinds, checks, options, values, stats, deno and npm packages;
    # and the project's name and version, a leaf the kinds' notes and the CLI read.
    ("pydeno._base", "pydeno._version"),
    # Sans-IO: the protocol table, the decode budget, the codec, the connection, the core.
    ("pydeno.host.wire",),
    # One deno process and its confinement, up to the supervisor that owns it.
    ("pydeno.host.process",),
    # The drivers (AsyncRuntime and its twin), how each flavour waits, sandbox_status().
    ("pydeno._runtime",),
    ("pydeno._tools",),
    ("pydeno._pools",),
    ("pydeno._agents",),
    ("pydeno._code_mode",),
    # Session pools serve agent sandboxes and Code Mode alike: above both.
    ("pydeno._agents.sessions",),
    ("pydeno._cli",),
    # The public faces: what users import by name.
    ("pydeno", "pydeno.__main__", "pydeno.ray", "pydeno.pydantic_ai", "pydeno.langchain", "pydeno.openai_agents"),
)
# Where today's code imports a layer above its own: each edge, and why. Only with a reason.
EXCEPTIONS: Final = {
    ("pydeno._base.options", "pydeno.host.wire.protocol"): (
        "the default max_decode_ratio is the wire table's, a leaf that imports nothing"
    ),
}
# In no layer: the host package itself, the parent of two layers, which holds only its docstring.
UNLAYERED: Final = frozenset({"pydeno.host"})
# The top of pydeno/: the public faces and subpackages, nothing else.
TOP: Final = frozenset(
    {"__init__.py", "__main__.py", "_version.py", "py.typed", "pydantic_ai.py", "langchain.py", "openai_agents.py"}
)
# Packages whose __init__ is a public face; every other one holds only its docstring.
FACES: Final = frozenset({"pydeno", "pydeno.ray"})
# The sans-IO folder: none of it starts a process or a thread, or reads a clock or a file.
NO_IO: Final = frozenset({"os", "select", "selectors", "threading", "subprocess", "time"})


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


@functools.cache
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
    assert "pydeno.host.wire.core" in edges
    assert "pydeno.host.wire.connection" in edges["pydeno.host.wire.core"]


def test_a_circle_is_found_when_there_is_one() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_of_pydeno_imports_itself_back_through_others() -> None:
    assert circles(graph()) == []


def layer_of(name: str) -> int | None:
    """The index in LAYERS of the layer module ``name`` is in: its longest folder there."""
    found: tuple[int, int] | None = None
    for index, folders in enumerate(LAYERS):
        for folder in folders:
            # pydeno alone is the package's face, not the folder of everything.
            inside = name == folder or (folder != "pydeno" and name.startswith(f"{folder}."))
            if inside and (found is None or len(folder) > found[1]):
                found = (index, len(folder))
    return None if found is None else found[0]


def upward(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The imports of a layer above the importer's own."""
    found = set()
    for name, imported in edges.items():
        for other in imported:
            here, there = layer_of(name), layer_of(other)
            if here is not None and there is not None and there > here:
                found.add((name, other))
    return found


def test_every_module_is_in_one_layer() -> None:
    assert sorted(name for name in modules() if layer_of(name) is None and name not in UNLAYERED) == []


def test_every_folder_of_the_layers_exists() -> None:
    for folders in LAYERS:
        for folder in folders:
            assert folder in modules(), folder


def test_an_import_of_a_layer_above_is_found() -> None:
    edges = {"pydeno._base.kinds": {"pydeno._runtime._async"}, "pydeno._runtime._async": {"pydeno._base.kinds"}}
    assert upward(edges) == {("pydeno._base.kinds", "pydeno._runtime._async")}


@pytest.mark.parametrize("name", sorted(set(modules()) - UNLAYERED))
def test_each_module_imports_only_its_own_layer_and_the_layers_below(name: str) -> None:
    above = {(name, other) for other in graph()[name] if (name, other) in upward(graph())} - EXCEPTIONS.keys()
    assert not above, f"{name} imports from a layer above its own: {sorted(other for _, other in above)}"


def test_every_exception_to_the_layers_is_still_an_import_of_a_layer_above() -> None:
    assert EXCEPTIONS.keys() <= upward(graph()), "remove the exceptions the code no longer needs"


def test_features_reach_a_worker_only_through_the_runtime_layer() -> None:
    # Tools, pools, agents, Code Mode, the CLI and the public faces step a runtime through
    # rt._steps (pydeno/_runtime/stepping.py): none imports the wire, the process or the core.
    features = {name for name in modules() if (layer_of(name) or 0) > layer_of("pydeno._runtime._async")}  # type: ignore[operator]
    reached = sorted((name, other) for name in features for other in graph()[name] if other.startswith("pydeno.host"))
    assert reached == []


def test_the_host_package_itself_imports_nothing() -> None:
    assert graph()["pydeno.host"] == set()


def test_the_top_of_the_package_holds_only_the_public_faces_and_subpackages() -> None:
    for entry in sorted(PACKAGE.iterdir()):
        if entry.is_dir():
            # A folder without Python (a checkout's leftover caches) is no module of pydeno.
            if any(entry.rglob("*.py")):
                assert (entry / "__init__.py").is_file(), f"pydeno/{entry.name}/ is a folder, not a package"
        else:
            assert entry.name in TOP, f"pydeno/{entry.name} belongs in a subpackage"


@pytest.mark.parametrize("name", sorted(n for n, p in modules().items() if p.name == "__init__.py" and n not in FACES))
def test_a_subpackage_init_holds_only_its_docstring(name: str) -> None:
    body = ast.parse(modules()[name].read_text(encoding="utf-8")).body
    assert len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant), name
    assert isinstance(body[0].value.value, str), name


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
    found = every_import(PACKAGE / "host" / "wire" / "core.py")
    forbidden = {"subprocess", "threading", "selectors", "select", "time", "socket", "os", "signal", "asyncio"}
    forbidden |= {"anyio", "psutil"}
    assert not found & forbidden, sorted(found & forbidden)
    process = {m for m in graph()["pydeno.host.wire.core"] if m.startswith("pydeno.host.process")}
    assert not process, sorted(process)


@pytest.mark.parametrize("path", sorted((PACKAGE / "host" / "wire").glob("*.py")), ids=lambda p: p.name)
def test_the_wire_folder_imports_nothing_that_does_io(path: Path) -> None:
    found = {name.partition(".")[0] for name in every_import(path)}
    assert not found & NO_IO, sorted(found & NO_IO)
