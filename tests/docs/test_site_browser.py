"""The built docs site in a real browser: Debian's Chromium driven by Playwright.

The site is built once, served on 127.0.0.1 from a thread, and every page opened at a
phone's width and a laptop's by scripts/check_site.py, which these tests read. They need
/usr/bin/chromium (``apt-get install chromium``); without it they fail, never pass.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
check_site: Any = importlib.import_module("check_site")


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, shots: Path) -> Any:
    # All of the browser's work happens here, before the leak guard of the first test
    # counts processes, threads and descriptors, and is over when the last one has run.
    if not check_site.CHROMIUM.is_file():
        pytest.fail(f"{check_site.CHROMIUM} is missing: apt-get install chromium")
    site = tmp_path_factory.mktemp("site") / "site"
    check_site.build(site)
    return check_site.check(site, shots)


def test_every_page_of_the_site_is_opened(report: Any) -> None:
    assert len(report.pages) > 40
    assert {"", "concepts/", "performance/", "errors/", "errors/timeout/", "api/"} <= set(report.pages)


def test_every_page_loads_with_no_console_error(report: Any) -> None:
    assert report.bad_status == {}
    assert report.console_errors == {}


def test_no_page_asks_another_host_for_anything(report: Any) -> None:
    assert report.external_requests == {}


def test_no_link_or_image_to_the_site_is_broken(report: Any) -> None:
    assert report.broken_links == []
    assert report.broken_images == []


def test_no_page_is_wider_than_a_phone_or_a_laptop_window(report: Any) -> None:
    assert report.overflow == {}


def test_no_code_line_shows_beside_or_through_its_copy_button(report: Any) -> None:
    assert report.copy_button_overlaps == {}


def test_no_error_kind_page_has_a_table_with_an_empty_header(report: Any) -> None:
    assert {page: n for page, n in report.empty_table_headers.items() if page.startswith("errors/")} == {}


def test_the_architecture_diagram_is_drawn_as_svg_with_its_labels(report: Any) -> None:
    [diagram] = [d for d in report.diagrams if d["page"] == check_site.DIAGRAM_PAGE]
    assert diagram["svg"]
    for label in (*check_site.DIAGRAM_TEXT, "cgroup", "namespaces", "unprivileged user", "monitor"):
        assert label in diagram["text"], label
    assert "Syntax error" not in diagram["text"]


def test_the_performance_charts_load_with_their_alt_text(report: Any) -> None:
    assert sorted(report.charts) == sorted(check_site.CHARTS)
    for chart in report.charts.values():
        assert chart["loaded"]
        assert "ours" in chart["alt"] and "peer" in chart["alt"]


def test_screenshots_of_the_key_pages_are_written_at_both_widths(report: Any, shots: Path) -> None:
    expected = {f"{name}-{width}.png" for name in check_site.SHOTS for width in check_site.WIDTHS}
    assert {Path(path).name for path in report.screenshots} == expected
    assert all((shots / name).stat().st_size > 10_000 for name in expected)
