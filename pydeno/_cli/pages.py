"""What ``pydeno errors`` shows of the kinds catalog (:data:`pydeno._base.kinds.Catalog`): the
table, one kind's row, the kinds nearest a mistyped one, and each kind's Markdown page, which
scripts/gen_error_docs.py also writes to docs/errors/<kind>.md."""

from __future__ import annotations

import difflib
from typing import Any

from .._base.docs_links import docs_page
from .._base.kinds import Catalog

__all__ = ["error_row", "error_table", "kind_page", "nearest_kinds", "yes_no"]


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


def error_table() -> str:
    header = ("kind", "retryable", "larger limits", "summary")
    rows = [(kind, yes_no(k.retryable), yes_no(k.retry_with_larger_limits), k.summary) for kind, k in Catalog.items()]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
    return "\n".join(
        "  ".join([*(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)), row[3]])
        for row in [header, *rows]
    )


def error_row(kind: str, *, full: bool) -> dict[str, Any]:
    row = Catalog[kind]
    out: dict[str, Any] = {
        "kind": kind,
        "retryable": row.retryable,
        "retry_with_larger_limits": row.retry_with_larger_limits,
        "summary": row.summary,
    }
    if full:
        out.update(raised_as=row.raised_as, fix=row.fix, model_fix=row.model_fix, example=row.example)
    out["docs"] = docs_page(kind)
    return out


def nearest_kinds(typed: str) -> str:
    """``did you mean 'a' or 'b'?`` for the kinds nearest to typed (case and - for _ forgiven
    in the comparison, never in what is accepted; those it starts, then difflib's), or ""."""
    wanted = typed.strip().lower().replace("-", "_")
    near = [kind for kind in Catalog if wanted and kind.startswith(wanted)]
    near += difflib.get_close_matches(wanted, list(Catalog), n=3, cutoff=0.6)
    near = list(dict.fromkeys(near))[:3]
    if not near:
        return ""
    quoted = [repr(kind) for kind in near]
    shown = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return f"did you mean {shown}?"
