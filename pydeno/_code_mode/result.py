"""What one Code Mode execution gave: ``ExecutionResult``, the form a model reads.

Its text form (``str(result)``) and its JSON (``to_dict``, ``to_json``) each fit a bound,
cutting the longest fields first and saying what was cut.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Final

from .._base.checks import count
from .._base.kinds import Catalog
from .._runtime.json_values import dumps as _dumps
from .._runtime.json_values import jsonable, value_json

__all__ = ["DEFAULT_MAX_OUTPUT_CHARS", "MIN_RESULT_CHARS", "ExecutionResult", "check_output_chars", "model_hint"]

DEFAULT_MAX_OUTPUT_CHARS: Final = 20_000


def model_hint(exc: BaseException, kind: str) -> str:
    """What a model reads of a failure: the exception's own text for the program (it knows
    the limit's value) when it has one, else the kind's."""
    own = getattr(exc, "model_hint", None)
    return own if isinstance(own, str) and own else Catalog[kind].model_fix


class _Truncated:
    """``ExecutionResult.truncated``: the fields the result was made with cut, and ``value``
    when the text form cuts the value's JSON, found on first read (the value's JSON is made
    then, not for every result)."""

    def __get__(self, result: ExecutionResult | None, owner: type | None = None) -> tuple[str, ...]:
        if result is None:
            # No default: dataclasses asks the descriptor for one at class creation.
            raise AttributeError("truncated")
        known = result.__dict__.get("_truncated")
        if known is None:
            given = result.__dict__["_truncated_given"]
            over = len(result._value_text()) > result.max_output_chars
            known = tuple(sorted({*given, "value"})) if over else given
            result.__dict__["_truncated"] = known
        return tuple(known)

    def __set__(self, result: ExecutionResult, value: tuple[str, ...] | list[str]) -> None:
        result.__dict__["_truncated_given"] = tuple(value)
        result.__dict__.pop("_truncated", None)


@dataclasses.dataclass(frozen=True)
class ExecutionResult:
    """What one ``CodeMode.execute`` gave: ``ok``, ``value``, ``stdout``, ``stderr``,
    ``error`` (``None``, or a dict of the guest's ``name`` and ``message``, the ``line`` and
    ``column`` in the program, its ``excerpt`` (for code that did not compile, the line as
    written with a caret under the place; else ``None``), and ``kind``, ``retryable``, ``retry_with_larger_limits`` and
    ``hint`` from :func:`pydeno.classify_error`), ``tool_calls`` (each a dict of ``name``,
    ``arguments``, ``outcome`` (``ok``, ``error`` or ``refused``), ``error`` and
    ``duration_s``), ``duration_s`` and ``truncated`` (the fields the text form ``str(result)``
    cut to ``max_output_chars``: ``stdout``, ``stderr``, ``error``, and ``value`` when its JSON
    is longer; ``to_dict()`` names the fields it cut itself); and what the worker used for it:
    ``cpu_seconds`` (its CPU time, user + system, during the execution), ``peak_rss_bytes``
    (the largest resident size the monitor sampled during it, or the worker's at its end) and
    ``host_calls`` (host-function calls answered: the tool calls, and any other bound
    function's); all three 0 when no worker ran it. ``str(result)`` is the text a model
    should read. A program that threw something other than an Error (``throw {code: 42}``)
    has it in the error dict as ``value``, in to_dict's JSON form."""

    ok: bool
    value: Any
    stdout: str
    stderr: str
    error: dict[str, Any] | None
    tool_calls: tuple[dict[str, Any], ...]
    duration_s: float
    truncated: _Truncated = _Truncated()
    cpu_seconds: float = 0.0
    peak_rss_bytes: int = 0
    host_calls: int = 0
    max_output_chars: int = dataclasses.field(default=DEFAULT_MAX_OUTPUT_CHARS, repr=False)
    #: The exception behind ``error`` (``None`` when ok): ``raise result.exception`` to turn
    #: a failed result into the exception a runtime would have raised.
    exception: BaseException | None = dataclasses.field(default=None, repr=False, compare=False)

    def _value_text(self) -> str:
        """The value's JSON, as the text form writes it; made once, when first needed, since
        a program's result is often read only as ``value``."""
        text = self.__dict__.get("_value_json")
        if text is None:
            text = value_json(self.value) if self.ok else ""
            self.__dict__["_value_json"] = text
        return str(text)

    def to_dict(self, *, max_chars: int | None = None) -> dict[str, Any]:
        """The result as JSON-ready data; values JSON has no form for are objects tagged
        ``"$type"`` (pydeno/_runtime/json_values.py; docs/values.md lists the tags).

        ``max_chars`` bounds the whole: ``to_json(max_chars=n)`` is at most ``n`` characters.
        What does not fit is cut (``stdout``, ``stderr``, ``error.message``, the last
        ``tool_calls``) or, for the value, replaced by ``{"$type": "truncated", "chars": N,
        "preview": "..."}`` (``N``: the length of the value's whole JSON; ``preview``: its
        start). The dict's ``truncated`` names every field cut in it; ``result.value`` stays
        whole."""
        return self._bounded(max_chars, len, "max_chars")

    def to_json(self, *, max_chars: int | None = None) -> str:
        """``to_dict(max_chars=...)`` as JSON text: at most ``max_chars`` characters."""
        return _dumps(self.to_dict(max_chars=max_chars))

    def _bounded(self, limit: int | None, size: Callable[[str], int], name: str) -> dict[str, Any]:
        """to_dict, its JSON text at most ``limit`` by ``size`` (characters, or UTF-8 bytes)."""
        # The text form's cut of the value is its own: this form carries the value whole.
        cut = set(self.truncated) - {"value"}
        value_json = self._value_text()
        data: dict[str, Any] = {
            "ok": self.ok,
            "value": jsonable(self.value),
            "stdout": self.stdout,
            "stderr": self.stderr,
            "error": None if self.error is None else dict(self.error),
            "tool_calls": [{**r, "arguments": jsonable(r["arguments"])} for r in self.tool_calls],
            "duration_s": self.duration_s,
            "truncated": sorted(cut),
            "cpu_seconds": self.cpu_seconds,
            "peak_rss_bytes": self.peak_rss_bytes,
            "host_calls": self.host_calls,
        }
        if limit is None:
            return data
        limit = count(name, limit, MIN_RESULT_CHARS)
        if size(_dumps(data)) <= limit:
            return data
        whole = value_json or _dumps(data["value"])
        target = limit
        while True:
            fitted = _fit(data, whole, target, size)
            over = size(_dumps(fitted)) - limit
            if over <= 0 or target <= 0:
                return fitted
            # What the shares did not count (a marker's own fields): fit again in less.
            target -= over

    def __str__(self) -> str:
        lines: list[str] = []
        if self.ok:
            text = self._value_text()
            if len(text) > self.max_output_chars:
                text = text[: self.max_output_chars] + f"... (cut at {self.max_output_chars} characters)"
            lines.append(f"ok: {text}")
        else:
            assert self.error is not None
            e = self.error
            # A type check's message places each of its errors itself.
            where = (
                f" (line {e['line']}, column {e['column']})" if e.get("line") and e["name"] != "TypeCheckError" else ""
            )
            first, _, rest = str(e["message"]).partition("\n")
            lines.append(f"error: {e['name']}: {first}{where}")
            lines.extend(rest.splitlines())
            if e.get("excerpt"):
                lines.extend(str(e["excerpt"]).splitlines())
            retry = "yes" if e["retryable"] else "no"
            lines.append(f"kind: {e['kind']} (retryable: {retry})")
            lines.append(f"hint: {e['hint']}")
        for field in ("stdout", "stderr"):
            text = getattr(self, field)
            if text:
                suffix = " (cut)" if field in self.truncated else ""
                lines.append(f"{field}{suffix}:")
                lines.extend(f"  {line}" for line in text.splitlines())
        if self.tool_calls:
            shown = ", ".join(f"{r['name']} {r['outcome']}" for r in self.tool_calls[:20])
            more = f", and {len(self.tool_calls) - 20} more" if len(self.tool_calls) > 20 else ""
            lines.append(f"tool calls ({len(self.tool_calls)}): {shown}{more}")
            # The first calls' errors, like their names: a loop of failing calls is one line each.
            for r in self.tool_calls[:20]:
                if r["error"]:
                    lines.append(f"  {r['name']}: {r['error']}")
        return "\n".join(lines)


# The smallest whole bound to_dict(max_chars=) takes: room for every fixed field and a marker.
MIN_RESULT_CHARS: Final = 1000


def _marker(whole: str, preview: str) -> dict[str, Any]:
    return {"$type": "truncated", "chars": len(whole), "preview": preview}


def _cut_text(text: str, room: int, size: Callable[[str], int]) -> str:
    """The longest start of text whose JSON string fits in room (by size)."""
    if size(_dumps(text)) <= room:
        return text
    lo, hi = 0, min(len(text), max(0, room))
    # The JSON of a prefix grows with its length: the longest that fits, by bisection.
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if size(_dumps(text[:mid])) <= room:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def _fit(data: dict[str, Any], value_json: str, limit: int, size: Callable[[str], int]) -> dict[str, Any]:
    """data cut to JSON text of at most limit: the fields that can be long share what the
    fixed ones leave, each small one whole and the long ones an equal part of the rest."""
    error = data["error"]
    pieces: dict[str, Any] = {
        "value": data["value"],
        "stdout": data["stdout"],
        "stderr": data["stderr"],
        "error": None if error is None else error["message"],
        "tool_calls": data["tool_calls"],
    }
    empty: dict[str, Any] = {"value": None, "stdout": "", "stderr": "", "tool_calls": []}
    if error is not None:
        empty["error"] = ""
    skeleton = dict(data, **{k: v for k, v in empty.items() if k != "error"})
    if error is not None:
        skeleton["error"] = dict(error, message="")
    # The worst case of `truncated`: every field that can be cut named in it.
    skeleton["truncated"] = sorted({*data["truncated"], *empty})
    room = limit - size(_dumps(skeleton)) + sum(size(_dumps(v)) for v in empty.values())
    sizes = {k: size(_dumps(pieces[k])) for k in empty}
    out = dict(data)
    cut = set(data["truncated"])
    left = room
    for i, key in enumerate(sorted(empty, key=sizes.__getitem__)):
        share = left // (len(empty) - i)
        if sizes[key] <= share:
            left -= sizes[key]
            continue
        cut.add(key)
        piece: Any
        if key == "value":
            shell = size(_dumps(_marker(value_json, "")))
            piece = _marker(value_json, _cut_text(value_json, share - shell + 2, size))
        elif key == "tool_calls":
            piece, used = [], 2
            for record in pieces[key]:
                grown = used + size(_dumps(record)) + (2 if piece else 0)
                if grown > share:
                    break
                piece.append(record)
                used = grown
        else:
            piece = _cut_text(pieces[key], share, size)
        left -= size(_dumps(piece))
        if key == "error":
            out["error"] = dict(error, message=piece)
        else:
            out[key] = piece
    out["truncated"] = sorted(cut)
    return out


def check_output_chars(value: Any) -> int:
    return count("max_output_chars", value, 1)
