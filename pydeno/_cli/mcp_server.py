"""The ``pydeno mcp`` server: one MCP tool, ``run_javascript``, over stdio or streamable HTTP.

The command line (pydeno/_cli/main.py) parses the flags into a :class:`ServerConfig` and calls
:func:`serve`; docs/mcp.md is the user's page. A call runs through Code Mode's own execution
(:class:`~pydeno.AsyncCodeMode` with no tools), so its result is an
:class:`~pydeno.ExecutionResult` with the same console capture, value encoding and error kinds.

* Without ``--session`` each call takes a fresh worker from a warm
  :class:`~pydeno.AsyncSandboxPool` and the worker is closed after the call: nothing persists.
* With ``--session`` each MCP session has its own Code Mode in REPL mode: top-level
  declarations persist from call to call, calls of one session run one at a time, and a
  session's worker is closed when the session ends (HTTP DELETE), when it has been idle for
  ``--idle-timeout``, when it is the least recently used idle session and a new one needs
  its place (``--max-sessions``), or when the server stops. A call whose client disconnects
  or cancels it is stopped, which kills its worker (a session's next call starts on a fresh
  one). Over stdio the process serves one client, so the whole connection is one session.

What a client cannot take: more than ``--max-workers`` live workers, more than
``--max-queued`` waiting calls (past both a call is turned away at once, retryably, as a
:class:`ServerBusy`; over HTTP one MCP session gets at most half of each), a message longer
than ``--max-message-bytes`` (read in linear time, discarded as it arrives), a result longer
than ``--max-result-bytes``, or a server that cannot stop because it stopped reading.

This module imports ``mcp``: only ``pydeno mcp`` imports it, never ``import pydeno``.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import dataclasses
import fcntl
import ipaddress
import json
import logging
import math
import os
import re
import select
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any, Final, cast

import anyio
import anyio.lowlevel
import uvicorn
from anyio.streams.memory import MemoryObjectSendStream
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Receive, Scope, Send

from .._base.checks import optional_size
from .._base.errors import CheckoutTimeout
from .._base.kinds import Catalog
from .._base.options import DEFAULT_MAX_MEMORY, DEFAULT_TIMEOUT, RuntimeKwargs
from .._base.packages import prompt_line
from .._code_mode._async import AsyncCodeMode
from .._code_mode.core import DEFAULT_MAX_OUTPUT_CHARS, Execution, ExecutionResult, ToolSet, _cut_text
from .._pools._async import AsyncSandboxPool
from .._version import __version__

__all__ = ["TOOL_NAME", "ServerConfig", "serve"]

log = logging.getLogger("pydeno.mcp")

TOOL_NAME: Final = "run_javascript"
DEFAULT_PORT: Final = 8765
DEFAULT_POOL_SIZE: Final = 2
# A one-shot client (the TypeScript SDK's) leaves without ending its session: two minutes
# without a call gives its worker back, while a model's slow turn between two calls of one
# conversation still finds its declarations. Under pressure the least recently used idle
# session gives way sooner (--max-sessions).
DEFAULT_IDLE_TIMEOUT: Final = 120.0
DEFAULT_MAX_CODE_BYTES: Final = 100_000
# The most deno workers alive at once, warm spares and sessions' workers included.
DEFAULT_MAX_WORKERS: Final = 16
# Each session holds a worker: the cap is what keeps many clients from holding them all.
DEFAULT_MAX_SESSIONS: Final = 16
# Calls that may wait for a worker (or for their session's running call) at once.
DEFAULT_MAX_QUEUED: Final = 32
# One JSON-RPC message: far over --max-code-bytes, the size of the SDK's own HTTP body cap.
DEFAULT_MAX_MESSAGE_BYTES: Final = 4 * 2**20
# One tool result, text and structured content together: well under the 10 MiB at which the
# TypeScript SDK drops a stdio message (and the connection with it).
DEFAULT_MAX_RESULT_BYTES: Final = 2**20
HTTP_PATH: Final = "/mcp"
SESSION_HEADER: Final = "mcp-session-id"
# How long a stopping HTTP server waits for open streams before it cuts them.
_GRACEFUL_SHUTDOWN: Final = 2


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """What ``pydeno mcp``'s flags chose; ``runtime`` holds the workers' limits."""

    http: bool = False
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    session: bool = False
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    pool_size: int = DEFAULT_POOL_SIZE
    max_code_bytes: int = DEFAULT_MAX_CODE_BYTES
    max_sessions: int = DEFAULT_MAX_SESSIONS
    max_workers: int = DEFAULT_MAX_WORKERS
    max_queued: int = DEFAULT_MAX_QUEUED
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    allow_hosts: tuple[str, ...] = ()
    timeout: float = DEFAULT_TIMEOUT
    runtime: RuntimeKwargs = dataclasses.field(default_factory=RuntimeKwargs)


# -- the tool ----------------------------------------------------------------------------------


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"


def tool_description(config: ServerConfig) -> str:
    """What a model reads about run_javascript: what a program can do and what comes back."""
    memory = optional_size("max_memory", config.runtime.get("max_memory", DEFAULT_MAX_MEMORY), 0)
    limits = f"at most {config.timeout:g} s per call (the `timeout` argument may lower it, never raise it)"
    if memory is not None:
        limits += f", {_size(memory)} of memory"
    limits += f", programs up to {config.max_code_bytes} bytes"
    state = (
        "Top-level declarations (`let`, `const`, `function`, `class`) and globals persist from call to call in "
        "this session, so a later call can use what an earlier one defined. A call that hits a limit loses them: "
        "the next call starts on a fresh runtime."
        if config.session
        else "Each call runs on a fresh runtime: nothing persists between calls, so send everything a program "
        "needs in that program."
    )
    return "\n".join(
        [
            "Run a JavaScript or TypeScript program (types are stripped, not checked) in a sandboxed Deno "
            "worker and get back its result.",
            "- The result is the value of the program's last expression; top-level `await` works. A top-level "
            "`return` works too: the program then runs as an async function body, whose declarations never persist.",
            "- console.log / info / debug output comes back as `stdout`, console.warn / error as `stderr` "
            f"(each cut at {DEFAULT_MAX_OUTPUT_CHARS} characters).",
            "- No network, no file system, no environment, no subprocesses, no `Deno`, `process` or `require`, "
            f"no remote imports, {prompt_line(config.runtime.get('packages'))}: only the language and its standard "
            "objects (JSON, Math, Date, Intl, RegExp, typed arrays, Promise, ...).",
            f"- Limits: {limits}.",
            f"- {state}",
            "- The value comes back as JSON; what JSON cannot hold is a tagged object such as "
            '`{"$type": "undefined"}` or `{"$type": "bytes", "base64": "..."}`. A whole result is at most '
            f'{_size(config.max_result_bytes)}: a bigger value comes back as `{{"$type": "truncated", ...}}` with a '
            "preview, so return what you need, not everything.",
            "- A failed run (an exception, a syntax error, a limit) is an error result: `error.kind` says what "
            "failed (js_error, timeout, memory_limit, ...), `error.message` and `error.line` where, and "
            "`error.hint` how to fix it.",
        ]
    )


INPUT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "code": {
            "type": "string",
            "description": "The program: TypeScript or JavaScript. Its last expression's value is the result.",
        },
        "timeout": {
            "type": "number",
            "exclusiveMinimum": 0,
            "description": "Seconds this call may take; lowers the server's limit, never raises it.",
        },
    },
    "required": ["code"],
    "additionalProperties": False,
}

_NULLABLE_INT: Final = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
OUTPUT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean", "description": "True when the program finished and `value` is its result."},
        "value": {"description": "The program's value as JSON (null when it failed)."},
        "stdout": {"type": "string"},
        "stderr": {"type": "string"},
        "error": {
            "description": "Null when ok; else what failed.",
            "anyOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "message": {"type": "string"},
                        "line": _NULLABLE_INT,
                        "column": _NULLABLE_INT,
                        "excerpt": {
                            "anyOf": [{"type": "string"}, {"type": "null"}],
                            "description": "For a program that did not compile: its line as written, a caret "
                            "under the place.",
                        },
                        "kind": {"type": "string"},
                        "retryable": {"type": "boolean"},
                        "retry_with_larger_limits": {"type": "boolean"},
                        "hint": {"type": "string", "description": "What the program can change."},
                        "value": {"description": "What the program threw, when it is not an Error."},
                    },
                    "required": ["name", "message", "kind", "retryable", "retry_with_larger_limits", "hint"],
                },
            ],
        },
        "tool_calls": {"type": "array", "items": {"type": "object"}},
        "duration_s": {"type": "number"},
        "truncated": {"type": "array", "items": {"type": "string"}},
        "cpu_seconds": {"type": "number", "description": "CPU time (user + system) the worker used for the run."},
        "peak_rss_bytes": {
            "type": "integer",
            "description": "The worker's largest resident memory sampled during the run, or at its end.",
        },
        "host_calls": {"type": "integer", "description": "Host-function calls the run made."},
    },
    "required": [
        "ok",
        "value",
        "stdout",
        "stderr",
        "error",
        "tool_calls",
        "duration_s",
        "truncated",
        "cpu_seconds",
        "peak_rss_bytes",
        "host_calls",
    ],
}


def tool(config: ServerConfig) -> types.Tool:
    return types.Tool(
        name=TOOL_NAME,
        title="Run JavaScript",
        description=tool_description(config),
        input_schema=INPUT_SCHEMA,
        output_schema=OUTPUT_SCHEMA,
        annotations=types.ToolAnnotations(
            title="Run JavaScript",
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=not config.session,
            open_world_hint=False,
        ),
    )


def call_arguments(arguments: Any, max_code_bytes: int) -> tuple[str, float | None]:
    """The call's ``code`` and ``timeout``; a TypeError or ValueError says what was wrong."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        raise TypeError(f"{TOOL_NAME} takes an object of arguments {{code, timeout?}}, got {type(arguments).__name__}")
    extra = sorted(str(k) for k in arguments if k not in ("code", "timeout"))
    if extra:
        raise ValueError(
            f"{TOOL_NAME} got unknown argument(s) {', '.join(map(repr, extra))}: it takes only 'code' and 'timeout'"
        )
    if "code" not in arguments:
        raise ValueError(f"{TOOL_NAME} needs the argument 'code': the program, as a string")
    code = arguments["code"]
    if not isinstance(code, str):
        raise TypeError(f"{TOOL_NAME}: 'code' must be a string (TypeScript or JavaScript), got {type(code).__name__}")
    size = len(code.encode("utf-8", "surrogatepass"))
    if size > max_code_bytes:
        raise ValueError(
            f"{TOOL_NAME}: 'code' is {size} bytes (UTF-8), over this server's limit of {max_code_bytes} "
            "(--max-code-bytes): send a shorter program"
        )
    timeout = arguments.get("timeout")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError(f"{TOOL_NAME}: 'timeout' must be a number of seconds, got {type(timeout).__name__}")
        if not math.isfinite(timeout) or timeout <= 0:
            raise ValueError(f"{TOOL_NAME}: 'timeout' must be a positive number of seconds, got {timeout!r}")
        timeout = float(timeout)
    return code, timeout


def refused(exc: BaseException) -> ExecutionResult:
    """The result of a call that never ran: the reason, classified like any other failure."""
    return Execution(ToolSet([], max_tool_calls=None, approve=None), DEFAULT_MAX_OUTPUT_CHARS).result(error=exc)


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _json_size(text: str) -> int:
    return _utf8(json.dumps(text, ensure_ascii=False))


# What a result's JSON-RPC message holds besides its text and its structured content.
_ENVELOPE: Final = 512


def call_result(result: ExecutionResult, max_bytes: int = DEFAULT_MAX_RESULT_BYTES) -> types.CallToolResult:
    """The tool result: its text form and its structured content, both together at most
    max_bytes of JSON (the text gets at most a third when they do not fit)."""
    room = max_bytes - _ENVELOPE
    text = str(result)
    structured = result.to_dict()
    text_size = _json_size(text)
    if text_size + _utf8(json.dumps(structured, ensure_ascii=False)) > room:
        if text_size > room // 3:
            note = f"\n... (cut: the result is over this server's limit of {max_bytes} bytes, --max-result-bytes)"
            text = _cut_text(text, room // 3 - _json_size(note), _utf8) + note
            text_size = _json_size(text)
        structured = result._bounded(room - text_size, _utf8, "max_result_bytes")
        if text != str(result):
            structured["truncated"] = sorted({*structured["truncated"], "text"})
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=not result.ok,
    )


# -- running calls -----------------------------------------------------------------------------

# The Code Mode whose call a pool worker is serving: a pool's workers share one console handler,
# which the worker calls in the task that runs the call.
_console_target: contextvars.ContextVar[Callable[[str, str], None] | None] = contextvars.ContextVar(
    "pydeno_mcp_console", default=None
)


def _console(level: str, text: str) -> None:
    target = _console_target.get()
    if target is not None:
        target(level, text)


@dataclasses.dataclass(eq=False)
class _Session:
    code_mode: AsyncCodeMode
    last_used: float
    active: int = 0
    # The pool checkout that lent the session its first worker, given back when it ends.
    lease: contextlib.AsyncExitStack = dataclasses.field(default_factory=contextlib.AsyncExitStack)
    ready: anyio.Event = dataclasses.field(default_factory=anyio.Event)

    async def close(self) -> None:
        try:
            await self.code_mode.close()
        finally:
            await self.lease.aclose()


class NoSession(ValueError):
    """A --session server got a call that belongs to no MCP session."""


# A call the server turns away because it is full is a CheckoutTimeout: nothing ran, and
# the same call later can succeed. What the model reads says what it can do; the flags are
# the operator's, in the server's log.
_BUSY_HINT: Final = "Nothing ran: send the same call again in a moment, or make fewer calls at once."


class ServerBusy(CheckoutTimeout):
    """The server turned a call away because it was full; its hint is the flags to change,
    for the server's log; its model hint is what a client can do."""

    def __init__(self, message: str, operator_fix: str) -> None:
        super().__init__(f"this server is busy: {message}; nothing ran", hint=operator_fix, model_hint=_BUSY_HINT)


class _Gate:
    """Admission of calls: at most ``slots`` run at once and ``queue`` wait for a slot; a
    call past both is turned away at once. Where the transport tells clients apart, one
    client (an MCP session) may hold at most ``client_slots`` of the slots and half the
    queue, so a single session never takes every worker and every place in the queue."""

    def __init__(self, slots: int, queue: int, *, client_slots: int, shared: bool, flags: str, fix: str) -> None:
        self.slots, self.queue = slots, queue
        # The flags behind slots and queue, as the messages name them, and the operator's fix.
        self.flags, self.fix = flags, fix
        self.client_slots = client_slots
        self.shared = shared
        self.client_queue = max(1, -(-queue // 2)) if shared else queue
        self.running = 0
        self.waiting = 0
        # client -> [running, waiting]
        self._clients: dict[str, list[int]] = {}
        self._changed = anyio.Event()

    def _may_run(self, client: str, counts: list[int]) -> bool:
        # Requests that carry no session (the stateless protocol) cannot be told apart: no share.
        return self.running < self.slots and (not client or counts[0] < self.client_slots)

    @contextlib.asynccontextmanager
    async def admit(self, client: str, patience: float) -> AsyncIterator[None]:
        counts = self._clients.setdefault(client, [0, 0])
        try:
            if not self._may_run(client, counts):
                if self.waiting >= self.queue or (client and counts[1] >= self.client_queue):
                    if client and self.shared and counts[1] >= self.client_queue:
                        message = (
                            f"this MCP session already has {counts[0]} calls running and {counts[1]} waiting, "
                            f"its share of what the server takes ({self.flags})"
                        )
                    else:
                        message = (
                            f"{self.running} calls are running and {self.waiting} waiting, the most it takes "
                            f"({self.flags})"
                        )
                    raise ServerBusy(message, self.fix)
                self.waiting += 1
                counts[1] += 1
                try:
                    with anyio.move_on_after(patience) as waited:
                        while not self._may_run(client, counts):
                            await self._changed.wait()
                finally:
                    self.waiting -= 1
                    counts[1] -= 1
                if waited.cancelled_caught:
                    raise ServerBusy(f"the call waited {patience:g} s (--timeout) and its turn did not come", self.fix)
            self.running += 1
            counts[0] += 1
            try:
                yield
            finally:
                self.running -= 1
                counts[0] -= 1
                self._changed.set()
                self._changed = anyio.Event()
        finally:
            if counts == [0, 0]:
                self._clients.pop(client, None)


class Service:
    """Runs calls: on pooled fresh workers, or on one Code Mode per session (whose first
    worker is a pooled fresh one too)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        options: dict[str, Any] = dict(config.runtime)
        options["timeout"] = config.timeout
        self._options = options
        self._sessions: dict[str, _Session] = {}
        self._pool: AsyncSandboxPool | None = None
        self._changed = anyio.Event()
        # Over HTTP each MCP session is a client of its own; over stdio there is one client.
        shared = config.http
        if config.session:
            # A session's calls run one at a time, each session on its own worker.
            self._gate = _Gate(
                config.max_sessions,
                config.max_queued,
                client_slots=1,
                shared=shared,
                flags=f"--max-sessions {config.max_sessions}, one call at a time per session; "
                f"--max-queued {config.max_queued}",
                fix=f"raise --max-queued (now {config.max_queued}), or have clients make fewer calls at once",
            )
        else:
            share = max(1, -(-config.max_workers // 2)) if shared else config.max_workers
            self._gate = _Gate(
                config.max_workers,
                config.max_queued,
                client_slots=share,
                shared=shared,
                flags=f"--max-workers {config.max_workers}, --max-queued {config.max_queued}",
                fix=f"raise --max-workers (now {config.max_workers}) or --max-queued (now {config.max_queued}), "
                "or have clients make fewer calls at once",
            )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Service]:
        """Serve calls inside the block; at its end every worker is closed, however it ends."""
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(self.close)
            self._pool = await stack.enter_async_context(
                AsyncSandboxPool(
                    min(self.config.pool_size, self.config.max_workers),
                    max_workers=self.config.max_workers,
                    **self._options,
                    on_console=_console,
                )
            )
            group = await stack.enter_async_context(anyio.create_task_group())
            if self.config.session:
                group.start_soon(self._reap)
            try:
                yield self
            finally:
                group.cancel_scope.cancel()

    async def run(self, code: str, timeout: float | None, session: str | None) -> ExecutionResult:
        # A call may lower the server's timeout, never raise it.
        limit = self.config.timeout if timeout is None else min(timeout, self.config.timeout)
        client = "" if session is None else session
        if not self.config.session:
            try:
                async with self._gate.admit(client, self.config.timeout):
                    return await self._run_fresh(code, limit)
            except CheckoutTimeout as exc:
                return refused(exc)
        if session is None:
            return refused(
                NoSession(
                    "this server keeps one runtime per MCP session (--session), and this call belongs to no "
                    "session: connect with the session handshake (an initialize request, then Mcp-Session-Id)"
                )
            )
        try:
            entry, opening = await self._session(session)
        except CheckoutTimeout as exc:
            return refused(exc)
        token = _console_target.set(entry.code_mode._console)
        try:
            async with self._gate.admit(client, self.config.timeout):
                if opening:
                    await self._open(entry)
                else:
                    await entry.ready.wait()
                return await entry.code_mode.execute(code, timeout=limit)
        except Exception as exc:  # noqa: BLE001 - a session closed under a waiting call is a result
            return refused(exc)
        finally:
            _console_target.reset(token)
            entry.active -= 1
            entry.last_used = time.monotonic()
            self._changed.set()

    async def _session(self, key: str) -> tuple[_Session, bool]:
        """The session's entry, counted busy (``active``) for the caller; a new one when it has
        none, for which the least recently used idle session gives way when the server keeps
        --max-sessions already. Busy sessions never give way: then the call is turned away."""
        while (entry := self._sessions.get(key)) is None and len(self._sessions) >= self.config.max_sessions:
            idle = [(e.last_used, k) for k, e in self._sessions.items() if not e.active]
            if not idle:
                n = self.config.max_sessions
                raise ServerBusy(
                    f"it keeps {n} sessions (--max-sessions), each with its own worker, and every one is running "
                    "a call",
                    f"raise --max-sessions (now {n}) and --max-workers (now {self.config.max_workers})",
                )
            _, oldest = min(idle)
            victim = self._sessions.pop(oldest)
            log.info("session %s gave way to a new one: it was the least recently used idle session", oldest[:8])
            await victim.close()
        if entry is not None:
            entry.active += 1
            return entry, False
        entry = _Session(AsyncCodeMode([], **self._options), time.monotonic())
        entry.code_mode._repl = True
        entry.active = 1
        self._sessions[key] = entry
        return entry, True

    async def _open(self, entry: _Session) -> None:
        """A new session starts on a warm worker from the pool; one that later dies is
        replaced by the Code Mode itself. Its other calls wait for this."""
        assert self._pool is not None
        try:
            await entry.code_mode._use(await entry.lease.enter_async_context(self._pool.checkout()))
            if entry.code_mode._closed:  # the session ended while its worker was on its way
                await entry.lease.aclose()
        finally:
            entry.ready.set()

    async def _run_fresh(self, code: str, timeout: float) -> ExecutionResult:
        assert self._pool is not None
        code_mode = AsyncCodeMode([], **self._options)
        token = _console_target.set(code_mode._console)
        try:
            async with self._pool.checkout() as rt:
                await code_mode._use(rt)
                return await code_mode.execute(code, timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - no worker to run on is a result too
            return refused(exc)
        finally:
            _console_target.reset(token)
            await code_mode.close()

    async def end_session(self, session: str) -> None:
        """The client ended its session: close its worker now."""
        entry = self._sessions.pop(session, None)
        if entry is not None:
            await entry.close()

    async def _reap(self) -> None:
        """Close the sessions idle for idle_timeout; sleep until the next one could be."""
        while True:
            now = time.monotonic()
            due = math.inf
            expired: list[_Session] = []
            for key, entry in list(self._sessions.items()):
                if entry.active:
                    continue
                expires = entry.last_used + self.config.idle_timeout
                if expires <= now:
                    del self._sessions[key]
                    expired.append(entry)
                else:
                    due = min(due, expires)
            self._changed = anyio.Event()
            for entry in expired:
                await entry.close()
            with anyio.move_on_after(due - time.monotonic()):
                await self._changed.wait()

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        with anyio.CancelScope(shield=True):
            for entry in sessions:
                await entry.close()


# -- the MCP server ----------------------------------------------------------------------------


def session_of(ctx: ServerRequestContext[Any, Any], http: bool) -> str | None:
    """The session a call belongs to: over stdio the one client; over HTTP its Mcp-Session-Id."""
    if not http:
        return "stdio"
    headers = getattr(ctx.request, "headers", None)
    value = headers.get(SESSION_HEADER) if headers is not None else None
    return value if isinstance(value, str) and value else None


# The runtime's keywords that operator advice names, and the flag of this server that sets
# each: over MCP the operator reads the command line, not the Python API.
_FLAGS: Final = {
    "timeout": "--timeout",
    "max_memory": "--max-memory",
    "cpu_limit": "--cpu-limit",
    "sandbox": "--sandbox",
    "max_workers": "--max-workers",
    "size": "--pool-size",
    "checkout_timeout": "--timeout",
}
_KEYWORD: Final = re.compile(r"\b(" + "|".join(_FLAGS) + r")=")
# How much of a failure's message the log keeps: the guest writes it, the log is the operator's.
_LOGGED_CHARS: Final = 300


def operator_fix(exc: BaseException | None, kind: str) -> str:
    """What the operator can change for a failed call, in this server's flags."""
    advice = getattr(exc, "hint", None)
    text = advice if isinstance(advice, str) and advice else Catalog[kind].fix
    return _KEYWORD.sub(lambda m: _FLAGS[m.group(1)], text)


def log_failure(result: ExecutionResult) -> None:
    """One line on the server's log for a failed call: its kind, what failed, the operator's fix."""
    error = result.error or {}
    kind = str(error.get("kind", "unknown"))
    message = f"{error.get('name', 'Error')}: {error.get('message', '')}"
    if len(message) > _LOGGED_CHARS:
        message = message[:_LOGGED_CHARS] + "..."
    log.warning(
        "call failed: kind %s: %s; fix: %s",
        kind,
        json.dumps(message, ensure_ascii=False),
        operator_fix(result.exception, kind),
    )


def build_server(service: Service) -> Server[Any]:
    config = service.config
    listed = tool(config)

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[listed])

    async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Any:
        if params.name != TOOL_NAME:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"unknown tool {params.name!r}: this server has one tool, {TOOL_NAME!r}",
            )
        try:
            code, timeout = call_arguments(params.arguments, config.max_code_bytes)
        except (TypeError, ValueError) as exc:
            return answer(refused(exc))
        session = session_of(ctx, config.http)
        disconnected = _disconnect_of(ctx)
        if disconnected is None:
            return answer(await service.run(code, timeout, session))
        result: ExecutionResult | None = None
        # The transport does not stop a call whose HTTP client went away: stop it here, which
        # kills its worker, rather than let it run to its timeout for no one.
        async with anyio.create_task_group() as group:

            async def stop_when_gone() -> None:
                await disconnected.wait()
                group.cancel_scope.cancel()

            group.start_soon(stop_when_gone)
            result = await service.run(code, timeout, session)
            group.cancel_scope.cancel()
        if result is None:
            result = refused(ConnectionError("the client disconnected during the call; it was stopped"))
        return answer(result)

    def answer(result: ExecutionResult) -> types.CallToolResult:
        if not result.ok:
            log_failure(result)
        return call_result(result, config.max_result_bytes)

    server: Server[Any] = Server(
        "pydeno",
        version=__version__,
        title="pydeno",
        description="Runs JavaScript and TypeScript in sandboxed Deno workers.",
        instructions=f"Call {TOOL_NAME} to compute with a JavaScript or TypeScript program in a sandbox; "
        "its description says what a program can use and what comes back.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    if config.http and config.session:
        # A session lives only in the handshake era (the stateless 2026 era has no
        # Mcp-Session-Id): advertising only that era makes a negotiating client open one.
        async def discover(ctx: ServerRequestContext[Any, Any], params: types.RequestParams) -> types.DiscoverResult:
            return types.DiscoverResult(
                supported_versions=list(HANDSHAKE_PROTOCOL_VERSIONS),
                capabilities=server.get_capabilities(),
                instructions=server.instructions,
            )

        server.add_request_handler("server/discover", types.RequestParams, discover)
    return server


# The scope key of an HTTP request's event that is set when its client disconnects.
_DISCONNECTED: Final = "pydeno.disconnected"


def _disconnect_of(ctx: ServerRequestContext[Any, Any]) -> anyio.Event | None:
    scope = getattr(ctx.request, "scope", None)
    event = scope.get(_DISCONNECTED) if isinstance(scope, dict) else None
    return event if isinstance(event, anyio.Event) else None


def _host_of(host: str) -> str | None:
    """The name in a Host header (or an Origin's host), lower case and without its port;
    None when it is not of the form name, name:port, [v6] or [v6]:port."""
    name = host.strip().lower()
    if name.startswith("["):  # [v6]:port
        end = name.find("]")
        if end < 0 or (name[end + 1 :] and not re.fullmatch(r":\d{1,5}", name[end + 1 :])):
            return None
        return name[1:end]
    if name.count(":") == 1:
        name, _, port = name.partition(":")
        if not re.fullmatch(r"\d{1,5}", port):
            return None
    return name


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _local_name(host: str, allowed: tuple[str, ...] = ()) -> bool:
    """Whether a Host names this machine in a way DNS cannot rebind: an IP address literal,
    localhost, or a name the operator allowed (--allow-host). A rebinding page's requests
    carry its own name."""
    name = _host_of(host)
    return name is not None and (name == "localhost" or name in allowed or _is_ip(name))


def _local_origin(origin: str, host: str, allowed: tuple[str, ...] = ()) -> bool:
    """Whether a browser page of this Origin may call the server reached as Host: a page of
    the server's own origin, of a loopback address (a local tool's page), or of a name the
    operator allowed. A page on another address (another machine of the network, whose
    pages anyone may write) is refused, as a page of a rebinding name is."""
    scheme, sep, rest = origin.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or "/" in rest:
        return False
    name = _host_of(rest)
    if name is None:
        return False
    if name == "localhost" or name in allowed or name == _host_of(host):
        return True
    return _is_ip(name) and ipaddress.ip_address(name).is_loopback


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _watch_http(app: ASGIApp, service: Service) -> ASGIApp:
    """app, behind the Host and Origin checks (for whatever address the server binds), with
    each request's disconnect made visible to its call, and a session's worker closed as soon
    as the transport accepted the client's DELETE of it."""

    allowed = tuple(name.lower() for name in service.config.allow_hosts)

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope.get("headers", [])}
        if not _local_name(headers.get("host", ""), allowed):
            await _plain(send, 421, "Invalid Host header: use the server's IP address or localhost")
            return
        origin = headers.get("origin")
        if origin is not None and not _local_origin(origin, headers["host"], allowed):
            await _plain(send, 403, "Invalid Origin header")
            return
        disconnected = anyio.Event()
        scope[_DISCONNECTED] = disconnected
        status = 0

        async def watched() -> Any:
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected.set()
            return message

        async def sent(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        await app(scope, watched, sent)
        session = headers.get(SESSION_HEADER)
        if scope.get("method") == "DELETE" and session and 200 <= status < 300:
            await service.end_session(session)

    return wrapped


class _Uvicorn(uvicorn.Server):
    # serve() below owns SIGINT and SIGTERM: uvicorn's own handlers would re-raise the signal
    # after shutdown, killing the process before it closes its workers.
    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # Only now is the socket accepting: a client that reads the address can connect.
        if self.started and sockets:
            address = sockets[0].getsockname()
            host = f"[{address[0]}]" if sockets[0].family == socket.AF_INET6 else address[0]
            print(f"pydeno mcp: serving on http://{host}:{address[1]}{HTTP_PATH}", file=sys.stderr, flush=True)


async def _serve_http(server: Server[Any], service: Service, stop: anyio.Event) -> None:
    config = service.config
    app = server.streamable_http_app(
        streamable_http_path=HTTP_PATH,
        session_idle_timeout=config.idle_timeout,
        max_request_body_size=config.max_message_bytes,
        # _watch_http checks Host and Origin for every address; the transport's own check
        # holds only for the loopback names, and refuses a Host without a port.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        host=config.host,
    )
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((config.host, config.port))
        web = _Uvicorn(
            uvicorn.Config(
                _watch_http(app, service),
                log_level="warning",
                timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN,
                lifespan="on",
            )
        )

        async def stop_web() -> None:
            await stop.wait()
            web.should_exit = True

        async with anyio.create_task_group() as group:
            group.start_soon(stop_web)
            await web.serve(sockets=[sock])
            group.cancel_scope.cancel()
    finally:
        sock.close()


@dataclasses.dataclass(frozen=True)
class Oversized:
    """A line over the cap, discarded: its size, and its request id when it could be read."""

    size: int
    ident: int | str | None


# Where a JSON-RPC message's id can be read without the message: first (the Python SDK's
# order, maybe after "jsonrpc") or last (the TypeScript SDK's). A key at the start or the
# end of the text is a key of the outer object, whatever the middle holds.
_ID_VALUE: Final = rb'(-?\d{1,18}|"(?:[^"\\\n]|\\.){0,200}")'
_HEAD_ID: Final = re.compile(rb'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*' + _ID_VALUE + rb"\s*[,}]")
_TAIL_ID: Final = re.compile(rb',\s*"id"\s*:\s*' + _ID_VALUE + rb"\s*\}\s*\Z")
_EDGE: Final = 512


def _ident(head: bytes, tail: bytes) -> int | str | None:
    found = _HEAD_ID.match(head) or _TAIL_ID.search(tail)
    if found is None:
        return None
    with contextlib.suppress(ValueError):
        value = json.loads(found.group(1))
        if isinstance(value, (int, str)):
            return value
    return None


class _LineSplitter:
    """Bytes in, lines out, in work linear in the input: each chunk is scanned once, and a
    line over ``cap`` bytes is dropped as it arrives (only its first and last bytes kept, to
    read its id) rather than buffered whole."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._parts: list[bytes] = []
        self.buffered = 0
        # An oversized line being skipped: its size so far, its start and its end.
        self._skipped: int | None = None
        self._head = b""
        self._tail = b""
        #: Bytes looked at, for the tests: never more than once each.
        self.scanned = 0

    def feed(self, chunk: bytes) -> list[str | Oversized]:
        out: list[str | Oversized] = []
        start = 0
        while start < len(chunk):
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline
            self.scanned += end - start + (newline >= 0)
            piece = chunk[start:end]
            if self._skipped is None and self.buffered + len(piece) > self.cap:
                whole = b"".join(self._parts)
                self._skipped, self._head, self._tail = len(whole), whole[:_EDGE], whole[-_EDGE:]
                self._parts, self.buffered = [], 0
            if self._skipped is not None:
                if len(self._head) < _EDGE:
                    self._head += piece[: _EDGE - len(self._head)]
                self._tail = (self._tail + piece[-_EDGE:])[-_EDGE:]
                self._skipped += len(piece)
            else:
                self._parts.append(piece)
                self.buffered += len(piece)
            if newline < 0:
                break
            out.append(self._end())
            start = newline + 1
        return out

    def finish(self) -> list[str | Oversized]:
        """What is left at the end of the input: a last line without its newline."""
        return [self._end()] if self._parts or self._skipped is not None else []

    def _end(self) -> str | Oversized:
        if self._skipped is not None:
            tail = self._tail.rstrip(b"\r")
            found = Oversized(self._skipped, _ident(self._head, tail))
            self._skipped, self._head, self._tail = None, b"", b""
            return found
        line = b"".join(self._parts)
        self._parts, self.buffered = [], 0
        return (line + b"\n").decode("utf-8", "replace")


class _Lines:
    """The lines of a pipe, read as it becomes readable: the transport's own reader waits in a
    thread that no cancellation reaches, so a signal could not stop a server waiting for input.
    A line over the cap is not handed on: it goes to ``oversized``, to be answered."""

    def __init__(self, fd: int, cap: int, oversized: MemoryObjectSendStream[Oversized]) -> None:
        self._fd = fd
        self._splitter = _LineSplitter(cap)
        self._ready: collections.deque[str | Oversized] = collections.deque()
        self._oversized = oversized
        self.ended = anyio.Event()

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        while True:
            while not self._ready:
                if self.ended.is_set():
                    raise StopAsyncIteration
                # A descriptor that cannot be polled (a regular file) never blocks for long.
                with contextlib.suppress(OSError):
                    await anyio.wait_readable(self._fd)
                chunk = os.read(self._fd, 1 << 16)
                if chunk:
                    self._ready.extend(self._splitter.feed(chunk))
                else:
                    self._ready.extend(self._splitter.finish())
                    self.ended.set()
            item = self._ready.popleft()
            if isinstance(item, str):
                return item
            await self._oversized.send(item)


class _Output:
    """The wire's writing end, written as it becomes writable: a write never blocks the
    process, so a client that stops reading cannot keep the server from stopping."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    async def write(self, text: str) -> None:
        data = memoryview(text.encode("utf-8", "surrogatepass"))
        while data:
            with contextlib.suppress(OSError):
                await anyio.wait_writable(self._fd)
            try:
                # A pipe that polls writable takes PIPE_BUF bytes without blocking.
                data = data[os.write(self._fd, data[: select.PIPE_BUF]) :]
            except BrokenPipeError:
                # The client is gone: nothing will read this; the end of stdin stops the server.
                return

    async def flush(self) -> None:
        await anyio.lowlevel.checkpoint()


def _oversized_error(found: Oversized, cap: int) -> SessionMessage:
    return SessionMessage(
        types.JSONRPCError(
            jsonrpc="2.0",
            id=found.ident,
            error=types.ErrorData(
                code=types.INVALID_REQUEST,
                message=f"message of {found.size} bytes is over this server's limit of {cap} bytes "
                "(--max-message-bytes); it was discarded",
            ),
        )
    )


async def _serve_stdio(server: Server[Any], config: ServerConfig, stop: anyio.Event) -> None:
    # The wire moves to a descriptor of its own, and fd 1 to stderr: what else writes to
    # stdout (a child, a stray print) cannot break a message.
    wire = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    saved = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    os.dup2(2, 1)
    send_oversized, oversized = anyio.create_memory_object_stream[Oversized](1)
    lines = _Lines(sys.stdin.fileno(), config.max_message_bytes, send_oversized)
    try:
        async with anyio.create_task_group() as group, send_oversized, oversized:

            async def stop_on_signal() -> None:
                await stop.wait()
                group.cancel_scope.cancel()

            async def stop_after_input() -> None:
                # The client is gone, or has nothing more to say: what it still reads gets a
                # moment to go out, then the server stops, whether or not it was read.
                await lines.ended.wait()
                await anyio.sleep(_GRACEFUL_SHUTDOWN)
                group.cancel_scope.cancel()

            group.start_soon(stop_on_signal)
            group.start_soon(stop_after_input)
            stdin = cast("anyio.AsyncFile[str]", lines)
            stdout = cast("anyio.AsyncFile[str]", _Output(wire))
            async with stdio_server(stdin=stdin, stdout=stdout) as (read_stream, write_stream):

                async def answer_oversized() -> None:
                    async for found in oversized:
                        log.warning(
                            "discarded a message of %d bytes (--max-message-bytes %d)",
                            found.size,
                            config.max_message_bytes,
                        )
                        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                            await write_stream.send(_oversized_error(found, config.max_message_bytes))

                group.start_soon(answer_oversized)
                await server.run(read_stream, write_stream, server.create_initialization_options())
            # stdin closed: the client is gone.
            group.cancel_scope.cancel()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(wire)


async def _main(config: ServerConfig) -> None:
    service = Service(config)
    stop = anyio.Event()
    async with service.running(), anyio.create_task_group() as group:

        async def watch_signals() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    stop.set()

        group.start_soon(watch_signals)
        server = build_server(service)
        serving: Coroutine[Any, Any, None] = (
            _serve_http(server, service, stop) if config.http else _serve_stdio(server, config, stop)
        )
        await serving
        group.cancel_scope.cancel()


def serve(config: ServerConfig) -> int:
    """Serve until stdin closes (stdio), or until SIGINT or SIGTERM; every worker is closed
    before it returns. The exit status: 0. The server's log (each failed call with its kind
    and the operator's fix, in this server's flags) goes to stderr."""
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("pydeno mcp: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    anyio.run(_main, config)
    return 0
