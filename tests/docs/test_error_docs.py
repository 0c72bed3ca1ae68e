"""docs/errors is generated from the catalog: no kind without a page, no page without a
kind, no stale page."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pydeno

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gen_error_docs", ROOT / "scripts" / "gen_error_docs.py")
assert spec is not None and spec.loader is not None
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)


def test_every_kind_has_a_page_and_every_page_a_kind_and_none_is_stale() -> None:
    assert gen.problems() == []


def test_the_pages_are_exactly_the_kinds_plus_an_index() -> None:
    pages = {p.stem for p in (ROOT / "docs" / "errors").glob("*.md")}
    assert pages == set(pydeno.KINDS) | {"index"}


def test_a_changed_catalog_entry_is_reported_stale() -> None:
    from pydeno._base import kinds

    row = kinds.Catalog["timeout"]
    kinds.Catalog["timeout"] = row._replace(fix=row.fix + " (changed)")
    try:
        assert gen.problems() == ["stale docs/errors/timeout.md"]
    finally:
        kinds.Catalog["timeout"] = row


def test_a_changed_text_for_the_model_is_reported_stale_too() -> None:
    from pydeno._base import kinds

    row = kinds.Catalog["memory_limit"]
    kinds.Catalog["memory_limit"] = row._replace(model_fix=row.model_fix + " (changed)")
    try:
        assert gen.problems() == ["stale docs/errors/memory_limit.md"]
    finally:
        kinds.Catalog["memory_limit"] = row
