"""The docs site builds with `mkdocs build --strict`, and every hand-written page is in its nav."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

import pydeno._options

# PyYAML comes with mkdocs; imported as Any so that mypy needs no stubs for it.
yaml: Any = importlib.import_module("yaml")

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _untagged(loader: Any, suffix: str, node: Any) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_scalar(node)


# A safe loader that reads any tagged node (`!!python/name:...`, `!ENV`) as plain data:
# mkdocs.yml may name Python objects for Material's extensions, which safe_load refuses.
_AnyTagLoader: Any = type("_AnyTagLoader", (yaml.SafeLoader,), {})
_AnyTagLoader.add_multi_constructor("", _untagged)


def _nav_pages(entries: Any) -> list[str]:
    if isinstance(entries, str):
        return [entries]
    if isinstance(entries, list):
        return [page for entry in entries for page in _nav_pages(entry)]
    if isinstance(entries, dict):
        return [page for value in entries.values() for page in _nav_pages(value)]
    return []


def nav_pages() -> list[str]:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_AnyTagLoader)
    return _nav_pages(config["nav"])


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for page in ["index.html", "quickstart/index.html", "api/index.html", "errors/timeout/index.html"]:
        assert (site / page).is_file(), page
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    for name in pydeno.__all__:
        assert f'id="pydeno.{name}"' in api, f"pydeno.{name} is missing from the API reference"
    performance = (site / "performance" / "index.html").read_text(encoding="utf-8")
    assert "bench_eval.json -->" not in performance


def test_every_hand_written_page_is_in_the_nav() -> None:
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if p.parent.name != "errors"}
    listed = nav_pages()
    assert sorted(pages - set(listed)) == []
    assert sorted(set(listed) - pages - {"errors/index.md"}) == []
    assert "errors/index.md" in listed


def test_the_nav_reader_ignores_python_tags() -> None:
    text = "nav:\n  - Home: index.md\nx: !!python/name:pymdownx.superfences.fence_code_format\ny: !ENV [A, b]\n"
    config = yaml.load(text, Loader=_AnyTagLoader)
    assert _nav_pages(config["nav"]) == ["index.md"]


@pytest.mark.parametrize("option", sorted(typing.get_type_hints(pydeno._options.RuntimeKwargs)))
def test_the_api_page_lists_every_runtime_option(option: str) -> None:
    assert f"| `{option}` |" in (DOCS / "api.md").read_text(encoding="utf-8")
