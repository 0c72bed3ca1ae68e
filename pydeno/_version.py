"""This project's name and version: the one place both are written (pyproject reads it too)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

__all__ = ["PROJECT", "__version__", "about", "extra_missing", "mixed_install", "missing_extra"]

__version__ = "0.1.0"
PROJECT: Final = "pydeno: supervised Deno worker processes"


def about() -> dict[str, str]:
    """Who this is, for ``pydeno doctor``: the PyPI name ``pydeno`` belongs to another project,
    which installs under the same import name, so a user needs to see which one is loaded."""
    import importlib.metadata  # read for the doctor only, never with the package

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


def extra_missing(what: str, extra: str) -> str:
    """What a feature says when its extra is not installed. ``pip install 'pydeno[x]'``
    where this pydeno is installed keeps it and adds only what the extra needs; in a fresh
    environment it would fetch the other project of that name, so the message says how to
    install this one."""
    return (
        f"{what} needs the {extra} extra: pip install 'pydeno[{extra}]' where this pydeno is installed "
        f"(pip keeps it and adds what the extra needs), or pip install -e '.[{extra}]' in a checkout of it; "
        "the pydeno on PyPI is another project, so install this one from its repository (see README)"
    )


def missing_extra(exc: ImportError, what: str, extra: str, packages: frozenset[str]) -> ModuleNotFoundError | None:
    """The error to raise for exc, if what it says is missing is one of packages (the extra's
    top-level import names), else None: a package missing inside an installed extra for
    another reason is not blamed on the extra."""
    if (exc.name or "").partition(".")[0] not in packages:
        return None
    return ModuleNotFoundError(extra_missing(what, extra), name=exc.name)
