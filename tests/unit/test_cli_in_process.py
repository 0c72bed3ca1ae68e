"""The command line's parts, in process: the page it prints for a kind is the generated docs
page, values are rendered as JSON, sizes are parsed, and --version names the project. The
command line run for real is tests/features/test_cli.py."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

import pydeno
from pydeno._base.kinds import Catalog
from pydeno._cli import main as _cli
from pydeno._cli.pages import kind_page

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("kind", list(Catalog))
def test_the_page_matches_the_generated_docs(kind: str) -> None:
    generated = (ROOT / "docs" / "errors" / f"{kind}.md").read_text()
    comment, blank, body = generated.split("\n", 2)
    assert comment.startswith("<!-- Generated") and blank == ""
    assert kind_page(kind) == body


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("268435456", 268435456),
        ("256M", 256 * 2**20),
        ("256m", 256 * 2**20),
        ("512MiB", 512 * 2**20),
        ("1.5G", 3 * 2**29),
        ("64K", 64 * 2**10),
        ("1MB", 2**20),
        (" 2g ", 2 * 2**30),
    ],
)
def test_parse_size(text: str, size: int) -> None:
    assert _cli.parse_size(text) == size


@pytest.mark.parametrize("text", ["", "M", "12X", "-1M", "1 T", "0x10"])
def test_parse_size_refuses(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"256M, 1\.5G"):
        _cli.parse_size(text)


@pytest.mark.parametrize(("text", "whole"), [("1.5", "1"), ("1.3M", "1363148")])
def test_parse_size_refuses_a_fraction_of_a_byte_with_the_whole_number_to_give(text: str, whole: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=rf"not a whole number of bytes: give {whole} "):
        _cli.parse_size(text)


def test_version_names_this_project_and_its_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"pydeno: supervised Deno worker processes, version {pydeno.__version__}\n"
