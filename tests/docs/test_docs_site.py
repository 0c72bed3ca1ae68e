"""The docs site builds with `mkdocs build --strict`, every hand-written page is in its nav,
and the performance page's figures and charts come from the benchmarks' JSON."""

from __future__ import annotations

import importlib
import io
import json
import os
import re
import stat
import sys
import tarfile
import typing
from pathlib import Path
from typing import Any

import pytest

import pydeno._base.options
from pydeno._base.kinds import Catalog
from pydeno._cli.pages import kind_page

# PyYAML comes with mkdocs; imported as Any so that mypy needs no stubs for it.
yaml: Any = importlib.import_module("yaml")

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# The hooks import scripts/docs_charts.py as mkdocs does: from the scripts directory.
sys.path.insert(0, str(ROOT / "scripts"))
docs_charts: Any = importlib.import_module("docs_charts")
hooks: Any = importlib.import_module("mkdocs_hooks")
check_site: Any = importlib.import_module("check_site")
PluginError: Any = importlib.import_module("mkdocs.exceptions").PluginError


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


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    check_site.build(site)
    for page in ["index.html", "quickstart/index.html", "api/index.html", "errors/timeout/index.html"]:
        assert (site / page).is_file(), page
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    for name in pydeno.__all__:
        assert f'id="pydeno.{name}"' in api, f"pydeno.{name} is missing from the API reference"
    performance = (site / "performance" / "index.html").read_text(encoding="utf-8")
    assert ".json -->" not in performance
    assert "{{" not in performance
    for name in docs_charts.CHARTS:
        for drawn in (name, docs_charts.narrow_name(name)):
            assert (site / "charts" / drawn).read_text(encoding="utf-8").startswith("<?xml"), drawn
            assert f'"../charts/{drawn}"' in performance, drawn
    assert re.search(r'<img src="../charts/ratios.svg" alt="Bar chart[^"]+warm eval', performance)
    concepts = (site / "concepts" / "index.html").read_text(encoding="utf-8")
    assert '<pre class="mermaid">' in concepts
    assert '<script src="../javascripts/mermaid.min.js">' in concepts
    assert (site / "javascripts" / "mermaid.min.js").stat().st_size > 1_000_000
    assert "mermaid.min.js" not in (site / "quickstart" / "index.html").read_text(encoding="utf-8")


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


@pytest.mark.parametrize("option", sorted(typing.get_type_hints(pydeno._base.options.RuntimeKwargs)))
def test_the_api_page_lists_every_runtime_option(option: str) -> None:
    assert f"| `{option}` |" in (DOCS / "api.md").read_text(encoding="utf-8")


# A run of bench_eval.json cut down to what the charts and the tables read.
SMALL_RUN: dict[str, Any] = {
    "ours": {
        "warm_eval": {"p50_us": 16.0, "p90_us": 28.0, "p99_us": 231.0, "min_us": 13.0},
        "host_call": {"p50_us": 34.0, "p90_us": 52.0, "p99_us": 99.0},
        "cold_start": {"p50_ms": 36.3, "p90_ms": 39.1, "p99_ms": 49.3},
        "idle_rss": {"worker_bytes": 43 * 2**20, "shared_bytes": 10 * 2**20},
    },
    "peer": {
        "warm_eval": {"p50_us": 80.0, "p90_us": 131.0, "p99_us": 160.0},
        "host_call": {"p50_us": 224.0, "p90_us": 321.0, "p99_us": 523.0},
        "cold_start": {"p50_ms": 57.3, "p90_ms": 69.3, "p99_ms": 77.0},
        "idle_rss": {"worker_bytes": 64 * 2**20},
    },
    "ratios": {"warm_eval_p50": 0.2},
}


@pytest.fixture(scope="module", autouse=True)
def _fonts_loaded() -> None:
    """matplotlib keeps the font files it measures text with open for the process's life:
    draw once before the leak guard starts counting descriptors."""
    docs_charts.charts(SMALL_RUN)


def test_the_ratio_chart_labels_each_metric_and_the_peers_line() -> None:
    svg, alt = docs_charts.ratios_chart(SMALL_RUN)
    for label in ['warm eval("1+1")', "eval with one host call", "cold start to first result", "idle worker RSS"]:
        assert label.replace('"', "&quot;") in svg or label in svg, label
    assert "peer = 1.0" in svg
    assert "lower is better" in svg
    assert "<title>" in svg
    # The recorded ratio wins; the others come from the two sides' figures.
    assert 'warm eval("1+1") 0.20' in alt
    assert "eval with one host call 0.15" in alt
    assert "20,000-object result" not in svg


def test_the_latency_chart_shows_the_three_percentiles_of_each_latency_metric() -> None:
    svg, alt = docs_charts.latency_chart(SMALL_RUN)
    for label in [
        "eval with one host call",
        "cold start to first result",
        "p50",
        "p90",
        "p99",
        "ours",
        "peer (isolated)",
    ]:
        assert label in svg, label
    assert "idle worker RSS" not in svg
    assert "eval with one host call in µs: ours 34/52/99, peer 224/321/523" in alt


@pytest.mark.slow
def test_the_charts_are_the_same_bytes_every_time_and_carry_no_date() -> None:
    first, again = docs_charts.charts(SMALL_RUN), docs_charts.charts(SMALL_RUN)
    assert first == again
    assert sorted(first) == ["latency-narrow.svg", "latency.svg", "ratios-narrow.svg", "ratios.svg"]
    assert all("<dc:date>" not in svg for svg, _alt in first.values())


def test_a_chart_with_no_figure_to_show_is_refused() -> None:
    with pytest.raises(ValueError, match="no metric"):
        docs_charts.ratios_chart({"ours": {}, "peer": {}})


def test_an_inline_figure_is_the_value_at_its_path_in_its_format() -> None:
    data = {"bench_x": {"a": {"b": [2**20 * 3, 1234.5678]}}}
    text = "{{ bench_x:a.b.1 | .1f }} and {{ bench_x:a.b.0 | mib }} MiB, {{ bench_x:a.b.1 | ,.0f }}"
    assert hooks.inline(text, data.__getitem__) == "1234.6 and 3.0 MiB, 1,235"


def test_a_figure_or_marker_that_names_nothing_fails_the_build() -> None:
    with pytest.raises(PluginError, match=r"no 'ours\.nothing'"):
        hooks.render("{{ bench_eval:ours.nothing }}")
    with pytest.raises(PluginError, match="names no table"):
        hooks.render("<!-- bench_eval.json: nothing -->")
    with pytest.raises(PluginError, match="names no chart"):
        hooks.render("<!-- chart: nothing.svg -->")


@pytest.mark.slow
def test_the_performance_page_has_every_figure_filled_in_from_the_json() -> None:
    page = hooks.render((DOCS / "performance.md").read_text(encoding="utf-8"))
    assert "{{" not in page
    assert not re.search(r"<!-- ([a-z_]+\.json|chart:)", page)
    ours = json.loads((ROOT / "benchmarks" / "results" / "bench_eval.json").read_text(encoding="utf-8"))["ours"]
    assert f"took {ours['warm_eval']['p50_us']:.0f} µs at the" in page
    assert "| lease | p50 | p90 | p99 |" in page
    assert "| eval number *i* | after 1,000 | after 10,000 | after 100,000 | highest reading |" in page


def test_the_memory_table_gives_both_sandbox_modes_for_each_workload() -> None:
    run = {"growth_bytes": 4 * 2**20}
    data = {
        "params": {"sample_every": 500},
        "sides": {
            "ours": {"workloads": {"distinct": {"checkpoints": {"100000": run}, "peak_growth_bytes": 5 * 2**20}}},
            "ours-off": {"workloads": {"distinct": {"checkpoints": {"100000": {"growth_bytes": 6 * 2**20}}}}},
        },
    }
    table = hooks.memory_table(data)
    assert "| `(i) + 1` | \u2013 / \u2013 | \u2013 / \u2013 | +4.0 / +6.0 | +5.0 / \u2013 |" in table


def test_the_pages_that_link_to_performance_sections_find_them() -> None:
    headings = {
        re.sub(r"[^a-z0-9 -]", "", line[3:].strip().lower()).replace(" ", "-")
        for line in (DOCS / "performance.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("## ")
    }
    linked = {
        anchor
        for page in DOCS.rglob("*.md")
        for anchor in re.findall(r"performance\.md#([a-z0-9-]+)", page.read_text(encoding="utf-8"))
    }
    assert linked and linked <= headings


def test_no_kind_page_opens_with_an_empty_table_header() -> None:
    for kind in Catalog:
        page = kind_page(kind)
        assert not re.search(r"^\|(\s*\|)+\s*$", page, re.MULTILINE), kind
        assert "- **Retryable:** " in page, kind


def test_the_kinds_table_carries_the_class_that_keeps_each_kind_on_one_line() -> None:
    index = (DOCS / "errors" / "index.md").read_text(encoding="utf-8")
    assert '<div class="pydeno-kinds" markdown>' in index
    css = (DOCS / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    assert re.search(r"\.pydeno-kinds td:first-child code \{[^}]*white-space: nowrap", css)


def _fake_npm(bin_dir: Path, payload: bytes) -> None:
    """An npm whose `pack` writes a mermaid tarball holding ``payload`` as the library."""
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        for name, data in (("package/dist/mermaid.min.js", payload), ("package/LICENSE", b"MIT")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    tarball = bin_dir / "mermaid.tgz"
    tarball.write_bytes(archive.getvalue())
    script = bin_dir / "npm"
    script.write_text(
        f"#!/bin/sh\n"
        f'while [ "$1" != "--pack-destination" ]; do shift; done\n'
        f'cp {tarball} "$2/mermaid-{hooks.MERMAID_VERSION}.tgz"\n',
        encoding="utf-8",
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_a_mermaid_package_that_is_not_the_pinned_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_npm(tmp_path, b"globalThis.mermaid = 'not the real one';")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(PluginError, match="not the pinned"):
        hooks.mermaid_files()
    assert not (tmp_path / "cache" / "pydeno-docs").exists()


def test_mermaid_comes_from_the_cache_once_fetched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "pydeno-docs" / f"mermaid-{hooks.MERMAID_VERSION}"
    cache.mkdir(parents=True)
    (cache / "mermaid.min.js").write_text("cached", encoding="utf-8")
    (cache / "LICENSE").write_text("MIT", encoding="utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert hooks.mermaid_files() == (cache / "mermaid.min.js", cache / "LICENSE")
