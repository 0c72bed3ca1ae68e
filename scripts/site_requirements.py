"""The docs site's build requirements: the ``docs`` extra of pyproject.toml, the one list.

    python scripts/site_requirements.py     # exit 1, naming what is missing, if any is

mkdocs_hooks.py and check_site.py call :func:`check` before they need any of them, so a
build with part of the extra installed stops with one message that names what is missing
and the install, not with an import error from deep inside a plugin. (A missing theme or
plugin that mkdocs itself looks for before it loads the hooks gets mkdocs's own message,
which names it.)
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
INSTALL = "pip install -e '.[docs]'"


def name_of(requirement: str) -> str:
    """The distribution a requirement names, as written (``mkdocstrings[python]>=1`` ->
    ``mkdocstrings``)."""
    found = re.match(r"[A-Za-z0-9._-]+", requirement)
    return found.group(0) if found else requirement


def requirements(project: Path = ROOT / "pyproject.toml") -> list[str]:
    with project.open("rb") as f:
        return list(tomllib.load(f)["project"]["optional-dependencies"]["docs"])


def missing(project: Path = ROOT / "pyproject.toml") -> list[str]:
    """Each requirement of the docs extra (and of the extras it asks of them) that is not
    installed, or installed at a version it does not allow, with what is installed."""
    found: list[str] = []
    pending = [Requirement(text) for text in requirements(project)]
    seen: set[str] = set()
    while pending:
        requirement = pending.pop(0)
        if requirement.name in seen:
            continue
        seen.add(requirement.name)
        try:
            installed = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{requirement} (not installed)")
            continue
        if installed not in requirement.specifier:
            found.append(f"{requirement} (installed: {installed})")
            continue
        for extra in requirement.extras:
            for text in importlib.metadata.requires(requirement.name) or ():
                needed = Requirement(text)
                if needed.marker is not None and needed.marker.evaluate({"extra": extra}):
                    pending.append(needed)
    return found


def message(what: list[str]) -> str:
    return (
        f"the docs site needs the docs extra, and part of it is missing: {', '.join(what)}; "
        f"install it all with {INSTALL} in the checkout"
    )


def check() -> str | None:
    """The message for what is missing, or None when everything is installed."""
    what = missing()
    return message(what) if what else None


if __name__ == "__main__":
    problem = check()
    if problem is not None:
        print(problem, file=sys.stderr)
        sys.exit(1)
