"""The test suite's own layout: every test file sits in the folder of what it needs, none is
over 1,000 lines, and no two share a name."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Final

TESTS: Final = Path(__file__).resolve().parents[1]
# What a test needs, by folder. Helpers and the data they use (support/, fake_workers/,
# mcp_servers/, ...) sit beside these folders and hold no test file.
FOLDERS: Final = {
    "unit": "no deno process at all",
    "runtime": "real workers, through the runtime's own API",
    "features": "real workers, through a feature built on the runtime",
    "security": "escape and red-team batteries, hostile guests",
    "hostile": "hostile fake workers, clients and servers",
    "docs": "the docs pages, examples and site",
    "meta": "the project's tooling",
}
MAX_LINES: Final = 1000


def suite_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_every_test_file_sits_in_the_folder_of_what_it_needs() -> None:
    misplaced = [p.relative_to(TESTS).as_posix() for p in suite_files() if p.relative_to(TESTS).parts[0] not in FOLDERS]
    assert misplaced == [], f"a test file belongs in one of {sorted(FOLDERS)}"


def test_each_folder_holds_tests() -> None:
    used = {p.relative_to(TESTS).parts[0] for p in suite_files()}
    assert used == set(FOLDERS)


def test_no_test_file_is_over_1000_lines() -> None:
    lines = {p.relative_to(TESTS).as_posix(): len(p.read_text().splitlines()) for p in suite_files()}
    long = {name: n for name, n in lines.items() if n > MAX_LINES}
    assert long == {}, "split a long test file into files of one suite each"


def test_no_two_test_files_share_a_name() -> None:
    # The folders are not packages, so pytest imports each test file by its name alone: a second
    # file of the same name elsewhere would fail to import.
    names = Counter(p.name for p in suite_files())
    assert [name for name, count in names.items() if count > 1] == []
