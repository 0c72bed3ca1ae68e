"""The docs site's build requirements live in one place, the ``docs`` extra, and a build
with part of them missing stops saying which and how to install them all."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
site_requirements: Any = importlib.import_module("site_requirements")


def extras() -> dict[str, list[str]]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return dict(tomllib.load(f)["project"]["optional-dependencies"])


def test_the_docs_extra_holds_what_the_site_build_and_its_browser_check_need() -> None:
    names = {site_requirements.name_of(requirement) for requirement in extras()["docs"]}
    assert {"mkdocs", "mkdocs-material", "mkdocstrings", "matplotlib", "playwright"} <= names
    assert "mkdocstrings[python]" in "".join(extras()["docs"]).replace(">=", " ")


def test_dev_takes_the_docs_extra_and_lists_none_of_it_again() -> None:
    dev = extras()["dev"]
    own = [r for r in dev if not r.startswith("pydeno[")]
    (pydeno,) = [r for r in dev if r.startswith("pydeno[")]
    assert "docs" in pydeno.removeprefix("pydeno[").removesuffix("]").split(",")
    docs = {site_requirements.name_of(r) for r in extras()["docs"]}
    assert not docs & {site_requirements.name_of(r) for r in own}


def test_this_environment_has_every_site_requirement() -> None:
    assert site_requirements.missing() == []


def test_a_requirement_not_installed_or_too_old_is_named_with_the_install(tmp_path: Path) -> None:
    project = tmp_path / "pyproject.toml"
    project.write_text(
        textwrap.dedent("""
        [project]
        name = "x"
        [project.optional-dependencies]
        docs = ["mkdocs>=1.0", "pydeno-no-such-docs-plugin>=1", "matplotlib>=999", "mkdocstrings[python]>=1.0"]
        """)
    )
    missing = site_requirements.missing(project)
    installed = importlib.metadata.version("matplotlib")
    assert missing == ["pydeno-no-such-docs-plugin>=1 (not installed)", f"matplotlib>=999 (installed: {installed})"]
    message = site_requirements.message(missing)
    assert message.startswith("the docs site needs the docs extra, and part of it is missing: ")
    assert "pydeno-no-such-docs-plugin>=1 (not installed)" in message
    assert message.endswith("install it all with pip install -e '.[docs]' in the checkout")


HIDE = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "matplotlib":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Hide())
sys.argv = ["mkdocs", "build", "--strict", "--site-dir", sys.argv[1]]
from mkdocs.__main__ import cli
cli()
"""


@pytest.mark.slow
def test_a_build_that_cannot_import_a_site_requirement_stops_naming_the_docs_extra(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", HIDE, str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert done.returncode != 0
    assert "the docs site needs the docs extra, and part of it is missing: matplotlib" in done.stderr
    assert "pip install -e '.[docs]'" in done.stderr
    assert "Traceback" not in done.stderr
