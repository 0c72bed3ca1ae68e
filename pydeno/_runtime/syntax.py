"""Where code that did not compile failed, shown in the code as its caller wrote it.

The worker gives such a SyntaxError a stack of exactly one frame, its place, marked as no
frame of V8's is (``at guest:eval:L:C (did not compile)``: line and UTF-16 column from 1,
as V8 counts them), and for a JavaScript eval that is TypeScript the mark says so
(``(did not compile; it compiles as TypeScript)``; worker/typescript.ts and main.ts). That is guest
data like any stack: it is read only to show a place, as bounded integers checked against
the code the host sent, and never decides a kind. The excerpt is made here, from the code
as the caller wrote it, so a wrapper the host added (Code Mode's block) never shows.
"""

from __future__ import annotations

import re
from typing import Final

from .._base.errors import JavaScriptError

__all__ = ["Place", "compile_failure", "locate", "place_error", "place_text", "placed", "top_level_return"]

# The header (the message may have lines of its own), then the one frame, marked; nine
# digits bound what int() is given.
_PLACE: Final = re.compile(
    r"\n    at guest:(?:eval|module):([1-9][0-9]{0,8}):([1-9][0-9]{0,8}) "
    r"\(did not compile(; it compiles as TypeScript)?\)\Z"
)
# JavaScript's line terminators, which V8 counts lines by (str.splitlines knows more).
_LINE_BREAK: Final = re.compile("\r\n|[\n\r\u2028\u2029]")
# V8's message for a return outside a function.
_ILLEGAL_RETURN: Final = "Illegal return statement"
_RETURN_AT: Final = re.compile(r"return(?![\w$])")
# An excerpt shows at most this many characters of its line, around the place.
_WIDTH: Final = 100


class Place:
    """A place in code: ``line`` and ``column`` from 1, the column in characters as Python
    counts them; ``excerpt`` the line with a caret under the place (cut around it)."""

    # Not a tuple: what place_error() keeps on an exception is a tuple of four, told by its
    # type and length, and a Place has four fields.
    __slots__ = ("column", "excerpt", "line", "text")

    def __init__(self, line: int, column: int, excerpt: str, text: str) -> None:
        self.line = line
        self.column = column
        self.excerpt = excerpt
        #: The whole line the place is on.
        self.text = text

    def __repr__(self) -> str:
        return f"Place(line={self.line!r}, column={self.column!r}, excerpt={self.excerpt!r}, text={self.text!r})"


def compile_failure(exc: BaseException) -> tuple[int, int, bool] | None:
    """(line, UTF-16 column, whether the code is TypeScript) of a SyntaxError the worker
    placed, or None for any other error."""
    if not isinstance(exc, JavaScriptError) or exc.name != "SyntaxError" or not isinstance(exc.stack, str):
        return None
    found = _PLACE.search(exc.stack)
    if found is None or "\n    at " in exc.stack[: found.start()]:
        return None
    return int(found.group(1)), int(found.group(2)), found.group(3) is not None


def locate(code: str, line: int, column: int, *, shift: int = 0) -> Place | None:
    """The place of (line, UTF-16 column) of a source that is ``shift`` characters of a
    wrapper (on its first line) and then ``code``; None when it is not in the code. A place
    just past the code's last line (a wrapper's closing line) is the end of the code."""
    lines = _LINE_BREAK.split(code)
    if line == 1:
        column -= shift
    if line == len(lines) + 1:
        line, column = len(lines), _units(lines[-1]) + 1
    if not 1 <= line <= len(lines):
        return None
    text = lines[line - 1]
    at = _index(text, max(1, column))
    if at > len(text):
        return None
    return Place(line, at + 1, _excerpt(text, line, at), text)


def _units(text: str) -> int:
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


def _index(text: str, column: int) -> int:
    """The index in text of a UTF-16 column from 1 (past the end: one more than its length)."""
    units = 0
    for i, c in enumerate(text):
        if units >= column - 1:
            return i
        units += 2 if ord(c) > 0xFFFF else 1
    return len(text) if units >= column - 1 else len(text) + 1


def _excerpt(text: str, line: int, at: int) -> str:
    start = max(0, min(at - _WIDTH // 2, len(text) - _WIDTH))
    shown = text[start : start + _WIDTH]
    before = "…" if start > 0 else ""
    after = "…" if start + _WIDTH < len(text) else ""
    # The caret's line keeps the tabs of the code's, so the caret lines up under it.
    pad = "".join("\t" if c == "\t" else " " for c in before + shown[: at - start])
    number = str(line)
    return f"{number} | {before}{shown}{after}\n{' ' * len(number)} | {pad}^"


def place_error(exc: JavaScriptError, code: str, *, typescript: bool, shift: int = 0) -> Place | None:
    """Give exc, a failed run of a source that is ``shift`` characters of a wrapper and then
    code, the place where it did not compile (if the worker placed it): ``.line`` and
    ``.column``, the place in its text, and a note with an excerpt; and, for JavaScript that
    is TypeScript, the option that evaluates it as such. Placed again (a Code Mode placing
    its program, which the runtime placed in its wrapper), the new place replaces the old."""
    found = compile_failure(exc)
    if found is None:
        return None
    line, column, is_typescript = found
    place = locate(code, line, column, shift=shift)
    previous = exc.__dict__.pop("_placed", None)
    if isinstance(previous, tuple):
        exc.args, note = previous[0], previous[1]
        if note in getattr(exc, "__notes__", ()):
            exc.__notes__.remove(note)
    exc.line = exc.column = None
    if place is None:
        return None
    exc.line, exc.column = place.line, place.column
    args = exc.args
    if args and isinstance(args[0], str):
        exc.args = (f"{args[0]} (line {place.line}, column {place.column})", *args[1:])
    typescript_hint = is_typescript and not typescript
    note = place_text(place, 'lang="ts"' if typescript_hint else None, returning=top_level_return(exc, place))
    exc.add_note(note)
    exc._placed = (args, note, place, typescript_hint)  # type: ignore[attr-defined]
    return place


def top_level_return(exc: JavaScriptError, place: Place) -> bool:
    """Whether exc is V8's refusal of a ``return`` outside a function, at a ``return`` the
    code has at place (an ``eval("return 1")`` the code ran fails with the same message, at
    the call)."""
    return exc.message == _ILLEGAL_RETURN and _RETURN_AT.match(place.text, place.column - 1) is not None


def place_text(place: Place, typescript_option: str | None, *, returning: bool = False) -> str:
    """The note for a place; with the option that evaluates code as TypeScript, when the
    code is TypeScript given as JavaScript; and what an eval's value is, for a return."""
    note = f"SyntaxError at line {place.line}, column {place.column}:\n{place.excerpt}"
    if typescript_option is not None:
        note += (
            f"\nThe code is TypeScript (it compiles once its types are stripped): evaluate it with {typescript_option}."
        )
    if returning:
        note += "\nAn eval's value is its last expression: end the code with the value instead of returning it."
    return note


def placed(exc: BaseException) -> tuple[Place, bool] | None:
    """The place :func:`place_error` gave exc, and whether its code is TypeScript given as
    JavaScript; None if it gave none."""
    state = getattr(exc, "_placed", None)
    if not isinstance(state, tuple) or len(state) != 4 or not isinstance(state[2], Place):
        return None
    return state[2], bool(state[3])
