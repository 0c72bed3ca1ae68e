"""A griffe extension for the docs site (mkdocs.yml loads it through mkdocstrings).

pydeno's docstrings use reStructuredText roles (``:class:`~pydeno.Runtime```,
``:meth:`terminate```), which Markdown would show as literal text. This turns each role into
Markdown: a cross-reference when it names a public ``pydeno`` object (one the API page
renders), inline code otherwise. The source is not changed.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

import pydeno

_ROLE = re.compile(r":(?:class|meth|func|mod|data|attr|exc|obj):`(~?)([^`]+)`")
_PUBLIC = frozenset(pydeno.__all__)


def _markdown(match: re.Match[str]) -> str:
    short, target = match.group(1) == "~", match.group(2).strip()
    shown = target.rsplit(".", 1)[-1] if short else target
    name = target.removeprefix("pydeno.")
    if "." not in name and name in _PUBLIC:
        return f"[`{shown}`][pydeno.{name}]"
    return f"`{shown}`"


def convert(text: str) -> str:
    """The docstring text with every reST role written as Markdown."""
    return _ROLE.sub(_markdown, text)


class RstRoles(griffe.Extension):
    """Rewrite reST roles in every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = convert(obj.docstring.value)
