"""Code Mode's rules, shared by ``CodeMode`` and ``AsyncCodeMode``: the tool set, its
declarations and prompt, what one execution records, and the result a model reads.

The drivers (pydeno/_code_mode/_async.py and its generated twin) only start the runtime and
run a program; everything an execution decides lives here, once.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal, NoReturn, Protocol

from .._base.checks import count, optional_count
from .._base.errors import (
    JavaScriptError,
    ToolBudgetError,
    ToolError,
    ToolNotFoundError,
    TypeCheckError,
    guest_error,
)
from .._base.kinds import Catalog, classify_error
from .._base.packages import Packages, checker_inputs, declarations, prompt_line
from .._runtime.json_values import dumps as _dumps
from .._runtime.json_values import jsonable, value_json
from .._runtime.syntax import compile_failure, locate, place_error, top_level_return
from .._tools.bridge import budget_message, check_namespaces
from .._tools.schema import doc_comment, object_body, ts_name, ts_of
from .._tools.tool import Tool
from ..host.process.typecheck import PROGRAM, CheckFailed, check

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "ApprovePolicy",
    "Execution",
    "ExecutionResult",
    "PendingCall",
    "ToolSet",
    "function_program",
    "program",
]

DEFAULT_MAX_OUTPUT_CHARS: Final = 20_000
# approve=: None runs every tool; "read_only" refuses the others; a callable is asked; a
# mapping decides per tool (True, False or a callable; a tool it does not name is refused).
Approver = Callable[[str, Any], bool]
ApprovePolicy = None | Literal["read_only", "ask"] | Approver | Mapping[str, 'bool | Literal["ask"] | Approver']
_STDERR_LEVELS: Final = frozenset({"warn", "error"})
# Where a guest frame points: deno names a classic eval "guest:eval", the inspector's
# REPL evaluation "<anonymous>".
_FRAME: Final = re.compile(r"\bat (?:.*\()?(?:guest:eval|<anonymous>):(\d+):(\d+)\)?")


# A program runs as a block, so its let, const and class stay in its execution. The brace
# shares the first line: line numbers are the program's, columns of line 1 are one more.
_OPEN: Final = "{"
# A program with a top-level return (which no block allows) runs as the body of an async
# function instead, whose returned value is its value; only once the block did not compile,
# so nothing of it ran. Its declarations are the function's: they never outlive the run.
_FUNCTION_OPEN: Final = "(async () => {"
_FUNCTION_CLOSE: Final = "\n})()"


def program(code: str) -> str:
    """The source a Code Mode evaluates for a program."""
    return _OPEN + code + "\n}"


def function_program(code: str) -> str:
    """The source a Code Mode evaluates for a program that returns its value."""
    return _FUNCTION_OPEN + code + _FUNCTION_CLOSE


def as_tools(tools: Any) -> list[Tool]:
    """tools= as a list of Tool: Tool objects, or plain functions made into tools."""
    if isinstance(tools, (Tool, str, bytes)) or callable(tools) or not isinstance(tools, Iterable):
        raise TypeError(f"tools must be a list of pydeno.Tool (or functions), got {type(tools).__name__}")
    out: list[Tool] = []
    for item in tools:
        if isinstance(item, Tool):
            out.append(item)
        elif callable(item):
            out.append(Tool(getattr(item, "__name__", ""), item))
        else:
            raise TypeError(f"tools must be pydeno.Tool objects or functions, got {type(item).__name__}")
    return out


def check_policy(approve: Any, names: Iterable[str]) -> ApprovePolicy:
    if approve is None or approve in ("read_only", "ask") or callable(approve):
        return approve  # type: ignore[no-any-return]
    if isinstance(approve, Mapping):
        known = set(names)
        for name, rule in approve.items():
            if name not in known:
                raise ValueError(f"approve= names {name!r}, which is not one of the tools")
            if not isinstance(rule, bool) and not callable(rule) and rule != "ask":
                raise TypeError(f'approve[{name!r}] must be True, False, "ask" or a callable (name, arguments) -> bool')
        return dict(approve)
    raise TypeError(
        'approve must be None, "read_only", "ask", a callable (name, arguments) -> bool, or a mapping of '
        f"tool names to those, got {approve!r}"
    )


class ToolSet:
    """The tools of one Code Mode, by name: their declarations, their prompt, their calls."""

    def __init__(
        self, tools: Any, *, max_tool_calls: int | None, approve: Any, packages: Packages | None = None
    ) -> None:
        self.packages = packages
        self.tools: dict[str, Tool] = {}
        for t in as_tools(tools):
            if t.name in self.tools:
                raise ValueError(f"two tools are named {t.name!r}")
            self.tools[t.name] = t
        check_namespaces(self.tools)
        self.max_tool_calls = optional_count("max_tool_calls", max_tool_calls, 0)
        self.approve = check_policy(approve, self.tools)

    # -- declarations ----------------------------------------------------------------------
    def typescript(self) -> str:
        """A ``.d.ts`` of the whole API: one interface per schema and named type, JSDoc from
        descriptions and annotations, namespaces as nested objects, and the packages a
        program may import (what a package's own declarations export, as a comment)."""
        return "\n".join([*self._tool_lines(), *declarations(self.packages)]) + "\n"

    def checked_against(self) -> tuple[str, dict[str, str], dict[str, str]]:
        """What the type checker reads: the tools' declarations with an ambient module for
        each package that has no declarations of its own, the others' declaration files, and
        the import map that names them."""
        ambient, files, imports = checker_inputs(self.packages)
        return "\n".join([*self._tool_lines(), *ambient]) + "\n", files, imports

    def _tool_lines(self) -> list[str]:
        lines: list[str] = []
        tree: dict[str, Any] = {}
        for t in self.tools.values():
            base = ts_name(t.name.replace(".", "_"))
            refs = {}
            for name in t.input_schema.get("$defs") or {}:
                refs[f"#/$defs/{name}"] = f"{base}_{ts_name(name)}"
            for name in (t.output_schema or {}).get("$defs") or {}:
                refs.setdefault(f"#/$defs/{name}", f"{base}_{ts_name(name)}")
            emitted = set()
            for schema in (t.input_schema, t.output_schema or {}):
                for name, sub in (schema.get("$defs") or {}).items():
                    type_name = refs[f"#/$defs/{name}"]
                    if type_name in emitted:
                        continue
                    emitted.add(type_name)
                    lines.extend(doc_comment(sub.get("description") if isinstance(sub, Mapping) else None, ""))
                    lines.append(_declare(type_name, sub, refs))
                    lines.append("")
            lines.extend(doc_comment(f"Arguments of tools.{t.name}().", ""))
            lines.append(_declare(f"{base}Input", t.input_schema, refs))
            lines.append("")
            output = ts_of(t.output_schema, refs) if t.output_schema is not None else "unknown"
            if t.output_schema is not None:
                lines.extend(doc_comment(f"What tools.{t.name}() returns.", ""))
                lines.append(_declare(f"{base}Output", t.output_schema, refs))
                lines.append("")
                output = f"{base}Output"
            node = tree
            parts = t.name.split(".")
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = (t, f"{base}Input", output)
        lines.append("declare const tools: " + _namespace(tree, "") + ";")
        return lines

    def describe(self) -> str:
        """A compact prompt text: how to write code against the API, and what is not there."""
        lines = [
            "Write a TypeScript (or JavaScript) program. It runs in a sandbox and its result goes back to you.",
            "- The value of the program's last expression is its result (top-level await works; a top-level "
            "`return value` ends the program with that value). Keep the result small: return what you need, "
            "not everything.",
            "- Call tools as `await tools.<name>({ ...arguments })`: each takes one object of named arguments and "
            "returns a promise. A failed call throws an Error you can catch; its message says what was wrong.",
            "- console.log output is returned too, cut to a limit.",
            "- There is no network, no file system, no `Deno`, `process` or `require`, and "
            f"{prompt_line(self.packages)}: only the language, its standard objects and `tools`.",
            "- `let`, `const` and `class` declarations stay in one run; assign to `globalThis` to keep a value "
            "for the next run.",
            "- A run that fails returns an error whose `hint` says what the program can change; the sandbox's "
            "limits (time, memory, calls) are fixed for the program.",
        ]
        if self.max_tool_calls is not None:
            lines.append(f"- At most {self.max_tool_calls} tool calls per run.")
        lines.append("")
        lines.append("Tools:")
        for t in self.tools.values():
            params = _params_line(t)
            marks = " (read-only)" if t.read_only else ""
            lines.append(f"- tools.{t.name}({params}){marks}: {t.description or 'no description'}")
        lines.append("")
        lines.append("TypeScript declarations:")
        lines.append(self.typescript().rstrip())
        return "\n".join(lines) + "\n"


def _declare(name: str, schema: Mapping[str, Any], refs: Mapping[str, str]) -> str:
    if schema.get("type") == "object" and "properties" in schema:
        body = object_body(schema, refs, "")
        # An object with no properties is a Record<...>, which only a type alias can name.
        return f"interface {name} {body}" if body.startswith("{") else f"type {name} = {body};"
    return f"type {name} = {ts_of(schema, refs)};"


def _namespace(tree: Mapping[str, Any], indent: str) -> str:
    inner = indent + "  "
    lines = ["{"]
    for key, node in tree.items():
        if isinstance(node, tuple):
            t, input_type, output = node
            lines.extend(doc_comment(_member_doc(t), inner))
            optional = "?" if not t.input_schema.get("required") else ""
            lines.append(f"{inner}{key}(args{optional}: {input_type}): Promise<{output}>;")
        else:
            lines.append(f"{inner}{key}: {_namespace(node, inner)};")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def _member_doc(t: Tool) -> str | None:
    parts = [t.description] if t.description else []
    if t.read_only:
        parts.append("Read-only: it changes nothing.")
    return "\n".join(parts) or None


def _params_line(t: Tool) -> str:
    properties = t.input_schema.get("properties") or {}
    required = set(t.input_schema.get("required") or [])
    if not properties:
        return ""
    return "{ " + ", ".join(f"{k}{'' if k in required else '?'}" for k in properties) + " }"


# --- Type checking ----------------------------------------------------------------------------


def type_errors(tools: ToolSet, code: str, *, sandbox: str, timeout: float) -> Exception | None:
    """The failure to report instead of running code: its type errors against the tools'
    declarations (a TypeCheckError), the checker's own failure, or None when it type-checks."""
    declared, files, imports = tools.checked_against()
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


# --- One execution ---------------------------------------------------------------------------


class Usage(Protocol):
    """What one execution's worker used, read at its end (the runtime's Meter)."""

    def read(self) -> tuple[float, int, int]:
        """(CPU seconds, peak RSS bytes, host calls) since the execution started."""
        ...


@dataclasses.dataclass(slots=True)
class PendingCall:
    """A tool call the guest made that is recorded and decided but not answered yet."""

    tool: Tool
    arguments: Any
    record: dict[str, Any]
    started: float
    decision: Literal["run", "ask"] = "run"


class Execution:
    """What one run of a program records: console output, tool calls, the budget spent.

    The runtime's host function and console handler feed it from whichever thread the
    driver runs them on; the lock keeps each record whole.
    """

    def __init__(self, tools: ToolSet, max_output_chars: int, *, expose: bool = False, code: str = "") -> None:
        self.toolset = tools
        # The program as written, and how many characters of a wrapper come before it on its
        # first line in the source that runs: where an error is placed.
        self.code = code
        self.shift = len(_OPEN)
        self.expose = expose
        self.max_output_chars = max_output_chars
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._chars = {"stdout": 0, "stderr": 0}
        self.cut: set[str] = set()
        self.tool_calls: list[dict[str, Any]] = []
        self.decided: dict[str, bool] = {}
        self.started = time.monotonic()
        self._lock = threading.Lock()
        # Set by the driver once the program's worker is ready; None: no worker ran it.
        self.usage: Usage | None = None

    def console(self, level: str, text: str) -> None:
        field = "stderr" if level in _STDERR_LEVELS else "stdout"
        with self._lock:
            room = self.max_output_chars - self._chars[field]
            if room <= 0:
                self.cut.add(field)
                return
            if len(text) + 1 > room:
                text = text[: max(0, room - 1)]
                self.cut.add(field)
            self._chars[field] += len(text) + 1
            (self.stdout if field == "stdout" else self.stderr).append(text)

    def returning(self, exc: BaseException) -> str | None:
        """The source to run the program as instead, when exc says its block did not compile
        for a top-level return and nothing of it ran: the program as a function body (its
        errors placed from then on by that wrapper); else None."""
        found = compile_failure(exc)
        if self.shift != len(_OPEN) or found is None:
            return None
        if not isinstance(exc, JavaScriptError):
            return None
        place = locate(self.code, found[0], found[1], shift=self.shift)
        if place is None or not top_level_return(exc, place):
            return None
        # A worker's stack is guest data: a program that only looks as if it did not compile
        # has run, which its calls and its output show; it is not run again.
        with self._lock:
            if self.tool_calls or self.stdout or self.stderr:
                return None
        self.shift = len(_FUNCTION_OPEN)
        return function_program(self.code)

    # -- tool calls ------------------------------------------------------------------------
    def call(self, name: Any, args: Any) -> Any:
        """The host function behind ``tools``: one call, recorded, checked, approved, run.
        A tool whose policy is "ask" is refused here: only CodeMode.start() can pause."""
        pending = self.begin(name, args)
        if pending.decision == "ask":
            self.refuse(
                pending, f"tools.{pending.tool.name}() needs approval: run the program with start() to approve it"
            )
        return self.run(pending)

    def begin(self, name: Any, args: Any) -> PendingCall:
        """Record a call and decide it: raise what the guest gets for an unknown tool,
        malformed arguments, a spent budget or a refusal; else the call and its decision
        ("run" or "ask")."""
        tool = self.toolset.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            raise ToolNotFoundError(f"there is no tool named {name!r}")
        if not isinstance(args, list) or len(args) > 1:
            raise ToolError(f"tools.{tool.name}() takes one object of named arguments")
        arguments = args[0] if args else {}
        record: dict[str, Any] = {"name": tool.name, "arguments": arguments, "outcome": "ok", "error": None}
        with self._lock:
            self.tool_calls.append(record)
            spent = len(self.tool_calls)
        pending = PendingCall(tool, arguments, record, time.monotonic())
        record["duration_s"] = 0.0
        limit = self.toolset.max_tool_calls
        try:
            if limit is not None and spent > limit:
                raise ToolBudgetError(budget_message(limit))
            decision = self._approved(tool, arguments)
            if decision is False:
                record["outcome"] = "refused"
                raise ToolError(f"tools.{tool.name}() was refused by the approval policy")
        except BaseException as exc:
            self._failed(record, exc, pending.started)
            raise
        pending.decision = "ask" if decision == "ask" else "run"
        return pending

    def refuse(self, pending: PendingCall, message: str) -> NoReturn:
        """Refuse a call that waited for approval: the guest gets a ToolError."""
        pending.record["outcome"] = "refused"
        error = ToolError(message)
        self._failed(pending.record, error, pending.started)
        raise error

    def run(self, pending: PendingCall) -> Any:
        """Run a decided call: its result as the wire carries it, or an awaitable of it."""
        tool, record = pending.tool, pending.record
        # Time waiting for approval is not the tool's.
        pending.started = time.monotonic()
        try:
            result = tool.start(pending.arguments)
        except BaseException as exc:
            self._failed(record, exc, pending.started)
            raise
        if tool.is_async or hasattr(result, "__await__"):
            return self._finish_async(tool, record, result, pending.started)
        return self._finish(tool, record, result, pending.started)

    def _approved(self, tool: Tool, arguments: Any) -> bool | Literal["ask"]:
        policy = self.toolset.approve
        if policy is None or tool.read_only:
            return True
        if policy == "read_only":
            return False
        if policy == "ask":
            return "ask"
        if isinstance(policy, Mapping):
            rule = policy.get(tool.name, False)
            if isinstance(rule, bool) or rule == "ask":
                return rule
            policy = rule
        # Asked once per tool and execution: a loop of fifty writes is one decision.
        with self._lock:
            known = self.decided.get(tool.name)
        if known is None:
            assert callable(policy)
            known = bool(policy(tool.name, arguments))
            with self._lock:
                self.decided[tool.name] = known
        return known

    def _finish(self, tool: Tool, record: dict[str, Any], result: Any, started: float) -> Any:
        try:
            out = tool.finish(result)
        except BaseException as exc:
            self._failed(record, exc, started)
            raise
        record["duration_s"] = time.monotonic() - started
        return out

    async def _finish_async(self, tool: Tool, record: dict[str, Any], result: Any, started: float) -> Any:
        try:
            value = await result
        except BaseException as exc:
            self._failed(record, exc, started)
            raise
        return self._finish(tool, record, value, started)

    def _failed(self, record: dict[str, Any], exc: BaseException, started: float) -> None:
        record["duration_s"] = time.monotonic() - started
        if record["outcome"] == "ok":
            record["outcome"] = "error"
        name, message = guest_error(exc, expose=self.expose, where=f"tools.{record['name']}()")
        record["error"] = f"{name}: {message}"

    # -- the result ------------------------------------------------------------------------
    def result(self, *, value: Any = None, error: BaseException | None = None) -> ExecutionResult:
        cut = set(self.cut)
        details = None if error is None else self._error(error, cut)
        cpu_seconds, peak_rss_bytes, host_calls = self.usage.read() if self.usage is not None else (0.0, 0, 0)
        return ExecutionResult(
            ok=error is None,
            value=value,
            stdout="\n".join(self.stdout),
            stderr="\n".join(self.stderr),
            error=details,
            tool_calls=tuple(dict(r) for r in self.tool_calls),
            duration_s=time.monotonic() - self.started,
            truncated=tuple(sorted(cut)),
            cpu_seconds=cpu_seconds,
            peak_rss_bytes=peak_rss_bytes,
            host_calls=host_calls,
            max_output_chars=self.max_output_chars,
            exception=error,
        )

    def _error(self, exc: BaseException, cut: set[str]) -> dict[str, Any]:
        info = classify_error(exc)
        if isinstance(exc, JavaScriptError):
            name, message, stack = exc.name or "Error", exc.message, exc.stack or ""
        else:
            name, message, stack = type(exc).__name__, str(exc), ""
        if len(message) > self.max_output_chars:
            message = message[: self.max_output_chars]
            cut.add("error")
        found = _FRAME.search(stack)
        line = int(found.group(1)) if found else None
        column = int(found.group(2)) if found else None
        if line == 1 and column is not None:
            column = max(1, column - self.shift)
        excerpt = None
        if isinstance(exc, JavaScriptError):
            place = place_error(exc, self.code, typescript=True, shift=self.shift)
            if place is not None:
                line, column, excerpt = place.line, place.column, place.excerpt
        if isinstance(exc, TypeCheckError):
            first = next((d for d in exc.diagnostics if d["file"] == PROGRAM), None)
            line, column = (int(str(first["line"])), int(str(first["column"]))) if first else (None, None)
        error: dict[str, Any] = {
            "name": name,
            "message": message,
            "line": line,
            "column": column,
            "excerpt": excerpt,
            "kind": info.kind,
            "retryable": info.retryable,
            "retry_with_larger_limits": info.retry_with_larger_limits,
            # For the model: what the program can change, never the operator's options
            # (those are in the exception's hint and note, result.exception).
            "hint": _model_hint(exc, info.kind),
        }
        # What the program threw, when it is not an Error: whole, or (over max_output_chars)
        # left out, and the message's rendering of it is what is shown.
        if isinstance(exc, JavaScriptError) and exc.has_value:
            thrown = jsonable(exc.value)
            if len(json.dumps(thrown, ensure_ascii=False)) <= self.max_output_chars:
                error["value"] = thrown
            else:
                cut.add("error")
        return error


def _model_hint(exc: BaseException, kind: str) -> str:
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
