"""Where a reader of an error is sent for its kind's page: ``exc.docs`` and the note's lines.

The pointer is ``pydeno errors <kind>``, plus the page's URL when the installed package's
metadata names a docs site; reading that metadata is this module's business, not the
classifier's.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from .._version import __version__
from .kinds import ErrorInfo

if TYPE_CHECKING:
    import importlib.metadata

__all__ = ["docs_page", "docs_site", "note_for"]


def note_for(info: ErrorInfo, hint: str) -> str:
    """The PEP 678 note pydeno's exceptions carry: kind, what a retry can do, fix, page."""
    if info.retryable:
        retry = "retryable: yes, on a fresh runtime"
    elif info.retry_with_larger_limits:
        retry = "retryable: no; a larger limit may let it finish"
    else:
        retry = "retryable: no"
    return f"Kind: {info.kind} ({retry})\nFix: {hint}\nDocs: {docs_page(info.kind)}"


def docs_page(kind: str) -> str:
    """Where a user reads a kind's page from anywhere (``exc.docs``, the note's ``Docs:``):
    the command that prints it, ``pydeno errors <kind>``, then ``or <url>`` of the page on the
    docs site when the installed package's metadata names one."""
    site = docs_site()
    command = f"pydeno errors {kind}"
    return f"{command} or {site}/errors/{kind}/" if site else command


def _installed_metadata() -> importlib.metadata.PackageMetadata | None:
    """The installed distribution's metadata (what tests replace to fake one)."""
    # Read at the first error that needs it, not with the package: importing the metadata
    # machinery costs an eval-only service more than its import of pydeno otherwise does.
    import importlib.metadata

    try:
        return importlib.metadata.metadata("pydeno")
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def docs_site() -> str | None:
    """The docs site's URL, without a trailing slash: the ``Project-URL: Documentation, ...``
    of the installed metadata, read once, at the first error that needs it. None without one,
    and for metadata of another version than this code: another project is named pydeno on
    PyPI, and its site is not this one's."""
    try:
        found = _installed_metadata()
        if found is None or found["Version"] != __version__:
            return None
        for entry in found.get_all("Project-URL") or []:
            label, _, url = str(entry).partition(",")
            if label.strip().lower() == "documentation" and url.strip():
                return url.strip().rstrip("/")
    except Exception:  # noqa: BLE001 - a pointer to the docs never fails the error it explains
        return None
    return None
