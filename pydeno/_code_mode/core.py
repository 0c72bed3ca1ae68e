"""What one Code Mode execution records and decides, shared by ``CodeMode`` and
``AsyncCodeMode``: its console output, its tool calls (each looked up, budgeted, approved,
run and recorded), and the result it becomes.

The drivers (pydeno/_code_mode/_async.py and its generated twin) only start the runtime and
run a program; what a program may call is pydeno/_code_mode/api.py's, the result a model reads
pydeno/_code_mode/result.py's.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, Literal, NoReturn, Protocol

from .._base import tracing
from .._base.errors import JavaScriptError, ToolError, TypeCheckError, guest_error
from .._base.kinds import classify_error
from .._runtime.checking import program_place
from .._runtime.json_values import jsonable
from .._runtime.syntax import compile_failure, locate, place_error, top_level_return
from .._tools.approval import Approval
from .._tools.tool import Tool
from .api import CodeModeTools
from .result import ExecutionResult, model_hint

__all__ = ["CONSOLE", "Execution", "PendingCall", "function_program", "program", "route_console"]

_STDERR_LEVELS: Final = frozenset({"warn", "error"})
# Where a guest frame points: the worker names an eval's frames "guest:eval".
_FRAME: Final = re.compile(r"\bat (?:.*\()?guest:eval:(\d+):(\d+)\)?")


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


# The console handler of the Code Mode whose program is running in this context: a Code Mode
# sets it while it runs a program, so a runtime started elsewhere (a pool's warm worker) whose
# on_console is route_console hands each line to that program's execution. A runtime calls
# its handler in the task (or thread) that steps its command.
CONSOLE: contextvars.ContextVar[Callable[[str, str], None] | None] = contextvars.ContextVar(
    "pydeno_code_mode_console", default=None
)


def route_console(level: str, text: str) -> None:
    """The on_console of a runtime a Code Mode did not start itself."""
    target = CONSOLE.get()
    if target is not None:
        target(level, text)


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

    def __init__(
        self, tools: CodeModeTools, max_output_chars: int, *, expose: bool = False, code: str = "", replay: bool = False
    ) -> None:
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
        self.budget = tools.set.budget()
        self.approval = Approval(tools.approve)
        self.started = time.monotonic()
        self._lock = threading.Lock()
        # Set by the driver once the program's worker is ready; None: no worker ran it.
        self.usage: Usage | None = None
        # Its span (None: nobody traces), current while the driver runs it, ended with the result.
        # A session's program run again to restore it (replay) is marked so.
        self.span = tracing.begin("pydeno.execute", {"pydeno.replay": True} if replay else None, code=code)

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
        tool = self.toolset.set.get(name)
        arguments = tool.arguments(args)
        record: dict[str, Any] = {"name": tool.name, "arguments": arguments, "outcome": "ok", "error": None}
        with self._lock:
            self.tool_calls.append(record)
        pending = PendingCall(tool, arguments, record, time.monotonic())
        record["duration_s"] = 0.0
        try:
            self.budget.charge()
            decision = self.approval.decide(tool, arguments)
            if decision is False:
                record["outcome"] = "refused"
                raise ToolError(f"tools.{tool.name}() was refused by the approval policy")
        except BaseException as exc:
            self._failed(record, exc, pending.started)
            raise
        pending.decision = "ask" if decision == "ask" else "run"
        return pending

    def answered(self, name: str, args: list[Any], error: BaseException | None) -> None:
        """Record a call a session answered without running its tool: from its journal during
        a replay, or refused before any tool ran (its budget spent, no such tool)."""
        record: dict[str, Any] = {
            "name": name,
            "arguments": args[0] if len(args) == 1 else args,
            "outcome": "ok" if error is None else "error",
            "error": None,
            "duration_s": 0.0,
        }
        if error is not None:
            kind, message = guest_error(error, expose=self.expose, where=f"tools.{name}()")
            record["error"] = f"{kind}: {message}"
        with self._lock:
            self.tool_calls.append(record)

    def refuse(self, pending: PendingCall, message: str) -> NoReturn:
        """Refuse a call that waited for approval: the guest gets a ToolError."""
        pending.record["outcome"] = "refused"
        error = ToolError(message)
        self._failed(pending.record, error, pending.started)
        raise error

    def run(self, pending: PendingCall) -> Any:
        """Run a decided call: its result as the wire carries it, or an awaitable of it."""
        return tracing.around("pydeno.tool_call", {"pydeno.tool.name": pending.tool.name}, lambda: self._run(pending))

    def _run(self, pending: PendingCall) -> Any:
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
        if self.span is not None:
            self.ended(
                error,
                {
                    "pydeno.tool_calls": len(self.tool_calls),
                    "pydeno.host_calls": host_calls,
                    "pydeno.worker.cpu_seconds": cpu_seconds,
                    "pydeno.worker.peak_rss_bytes": peak_rss_bytes,
                },
            )
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

    @contextlib.contextmanager
    def running(self, console: Callable[[str, str], None]) -> Iterator[None]:
        """This execution as the one running in this context while the block runs: console
        (its Code Mode's handler) is where route_console sends the worker's lines, and its
        span is the parent of the spans started meanwhile."""
        console_token = CONSOLE.set(console)
        span_token = tracing.activate(self.span)
        try:
            yield
        finally:
            tracing.deactivate(span_token)
            CONSOLE.reset(console_token)

    def ended(self, error: BaseException | None, attributes: dict[str, Any] | None = None) -> None:
        """End the execution's span (once): with its result, or abandoned (a paused program
        whose Code Mode was closed)."""
        span, self.span = self.span, None
        tracing.end(span, error, attributes)

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
            line, column = program_place(exc)
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
            "hint": model_hint(exc, info.kind),
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
