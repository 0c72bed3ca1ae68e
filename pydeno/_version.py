"""This project's name and version: the one place both are written (pyproject reads it too)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Final

__all__ = ["PROJECT", "__version__", "about", "mixed_install"]

__version__ = "0.1.0"
PROJECT: Final = "pydeno: supervised Deno worker processes"


def about() -> dict[str, str]:
    """Who this is, for ``pydeno doctor``: the PyPI name ``pydeno`` belongs to another project,
    which installs under the same import name, so a user needs to see which one is loaded."""
    facts = {"project": PROJECT, "version": __version__, "location": str(Path(__file__).resolve().parent)}
    try:
        installed = importlib.metadata.version("pydeno")
    except importlib.metadata.PackageNotFoundError:
        installed = ""
    # Installed metadata that disagrees with the code means another distribution of the same
    # name was installed over (or under) this one: their files may be mixed.
    facts["installed_metadata"] = installed
    return facts


def mixed_install(facts: dict[str, str]) -> str | None:
    """A warning when the installed metadata names another version than the code that runs."""
    installed = facts["installed_metadata"]
    if not installed or installed == facts["version"]:
        return None
    return (
        f"warning: the installed metadata says pydeno {installed}, this code is {facts['version']}: another "
        "project named pydeno (the one on PyPI) was installed over or under this one; reinstall in a fresh venv"
    )
