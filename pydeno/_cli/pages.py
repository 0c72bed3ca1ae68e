"""The Markdown page of each error kind, as ``pydeno errors <kind>`` prints it and
scripts/gen_error_docs.py writes it to docs/errors/<kind>.md; the catalog it renders is
:data:`pydeno._base.kinds.Catalog`."""

from __future__ import annotations

from .._base.kinds import Catalog

__all__ = ["kind_page", "yes_no"]


def yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def kind_page(kind: str) -> str:
    """One kind's reference page in Markdown: docs/errors/<kind>.md (written by
    scripts/gen_error_docs.py) and ``pydeno errors <kind>`` both print this."""
    row = Catalog[kind]
    if row.retryable:
        retry = "Yes: the worker died or failed to start, so the same work may succeed on a **fresh** runtime."
    else:
        retry = "No: the same work under the same limits fails the same way."
    larger = (
        "Yes: a larger limit could let the work finish. Whether to grant it is the operator's decision; a "
        "program cannot raise its own limits, so a model is told what the program can change instead."
        if row.retry_with_larger_limits
        else "No."
    )
    return (
        f"# `{kind}`\n\n{row.summary}\n\n"
        f"- **Retryable:** {yes_no(row.retryable)}\n"
        f"- **Retry with larger limits:** {yes_no(row.retry_with_larger_limits)}\n"
        f"- **Raised as:** {row.raised_as}\n\n"
        f"## Retry?\n\n{retry}\n\nA larger limit? {larger}\n\n"
        f"## Fix (for the operator)\n\n{row.fix}\n\n"
        # What Code Mode and MCP results show as error.hint: the program's terms only.
        f"## What the program can change (for a model)\n\n{row.model_fix}\n\n"
        # The example is a call and its outcome in words, not a script; the classifying
        # block needs the exception a reader caught, so it says it is a fragment.
        f"## Example\n\n```text\n{row.example}\n```\n\n"
        f"## Classifying it\n\n```python\n# fragment: exc is what you caught\n"
        f"info = pydeno.classify_error(exc)\nassert info.kind == {kind!r}\n```\n"
    )
