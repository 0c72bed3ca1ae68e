"""A guest program type-checked before it runs, as the runtime layer offers it to features.

The checker itself runs deno in a process confined like a worker (host/process/typecheck.py);
features (Code Mode) ask here, so they import nothing of the process layer. What comes back
is the failure to report instead of running the program: a ``TypeCheckError`` with the
diagnostics, the checker's own failure, or None when the program type-checks.
"""

from __future__ import annotations

from collections.abc import Mapping

from .._base.errors import TypeCheckError
from ..host.process.typecheck import PROGRAM, CheckFailed, check

__all__ = ["program_place", "type_errors"]


def type_errors(
    declared: str, code: str, *, files: Mapping[str, str], imports: Mapping[str, str], sandbox: str, timeout: float
) -> Exception | None:
    """code's type errors against declared (and the packages' files and import map)."""
    try:
        found = check(declared, code, sandbox=sandbox, timeout=timeout, files=files, imports=imports)
    except CheckFailed as exc:
        return exc
    if not found:
        return None
    count_text = "1 type error" if len(found) == 1 else f"{len(found)} type errors"
    message = f"the program did not type-check ({count_text}); nothing ran:\n" + "\n".join(d.text() for d in found)
    return TypeCheckError(
        message,
        diagnostics=tuple(
            {"code": d.code, "message": d.message, "file": d.file, "line": d.line, "column": d.column} for d in found
        ),
    )


def program_place(exc: TypeCheckError) -> tuple[int | None, int | None]:
    """The line and column of the first diagnostic in the program itself (not in the
    declarations it was checked against)."""
    first = next((d for d in exc.diagnostics if d["file"] == PROGRAM), None)
    return (int(str(first["line"])), int(str(first["column"]))) if first else (None, None)
