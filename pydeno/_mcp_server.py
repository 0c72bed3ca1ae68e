"""The ``pydeno mcp`` server: one MCP tool, ``run_javascript``, over stdio or streamable HTTP.

The command line (pydeno/_cli.py) parses the flags into a :class:`ServerConfig` and calls
:func:`serve`; docs/mcp.md is the user's page. A call runs through Code Mode's own execution
(:class:`~pydeno.AsyncCodeMode` with no tools), so its result is an
:class:`~pydeno.ExecutionResult` with the same console capture, value encoding and error kinds.

* Without ``--session`` each call takes a fresh worker from a warm
  :class:`~pydeno.AsyncSandboxPool` and the worker is closed after the call: nothing persists.
* With ``--session`` each MCP session has its own Code Mode in REPL mode: top-level
  declarations persist from call to call, calls of one session run one at a time, and a
  session's worker is closed when the session ends (HTTP DELETE), when it has been idle for
  ``--idle-timeout``, or when the server stops. A call whose client disconnects or cancels
  it is stopped, which kills its worker (a session's next call starts on a fresh one). Over
  stdio the process serves one client, so the whole connection is one session.

This module imports ``mcp``: only ``pydeno mcp`` imports it, never ``import pydeno``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any, Final, cast

import anyio
import uvicorn
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Receive, Scope, Send

from ._async_code_mode import AsyncCodeMode
from ._async_pool import AsyncSandboxPool
from ._checks import optional_size
from ._execution import DEFAULT_MAX_OUTPUT_CHARS, Execution, ExecutionResult, ToolSet
from ._options import DEFAULT_MAX_MEMORY, DEFAULT_TIMEOUT, RuntimeKwargs

__all__ = ["TOOL_NAME", "ServerConfig", "serve"]

TOOL_NAME: Final = "run_javascript"
DEFAULT_PORT: Final = 8765
DEFAULT_POOL_SIZE: Final = 2
DEFAULT_IDLE_TIMEOUT: Final = 600.0
DEFAULT_MAX_CODE_BYTES: Final = 100_000
# Each session holds a worker: the cap is what keeps many clients from holding them all.
DEFAULT_MAX_SESSIONS: Final = 32
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
            "no npm or remote imports: only the language and its standard objects (JSON, Math, Date, Intl, "
            "RegExp, typed arrays, Promise, ...).",
            f"- Limits: {limits}.",
            f"- {state}",
            "- The value comes back as JSON; what JSON cannot hold is a tagged object such as "
            '`{"$type": "undefined"}` or `{"$type": "bytes", "base64": "..."}`.',
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

_NULLABLE_INT: Final = {"type": ["integer", "null"]}
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
                        "kind": {"type": "string"},
                        "retryable": {"type": "boolean"},
                        "retry_with_larger_limits": {"type": "boolean"},
                        "hint": {"type": "string"},
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


def call_result(result: ExecutionResult) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=str(result))],
        structured_content=result.to_dict(),
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


class TooManySessions(ValueError):
    """A --session server already keeps --max-sessions sessions."""


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

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Service]:
        """Serve calls inside the block; at its end every worker is closed, however it ends."""
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(self.close)
            self._pool = await stack.enter_async_context(
                AsyncSandboxPool(self.config.pool_size, **self._options, on_console=_console)
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
        if not self.config.session:
            return await self._run_fresh(code, limit)
        if session is None:
            return refused(
                NoSession(
                    "this server keeps one runtime per MCP session (--session), and this call belongs to no "
                    "session: connect with the session handshake (an initialize request, then Mcp-Session-Id)"
                )
            )
        entry = self._sessions.get(session)
        if entry is None:
            if len(self._sessions) >= self.config.max_sessions:
                return refused(
                    TooManySessions(
                        f"this server already keeps {self.config.max_sessions} sessions (--max-sessions), each with "
                        "its own worker: end a session you no longer need, or wait for an idle one to close "
                        "(--idle-timeout)"
                    )
                )
            entry = _Session(AsyncCodeMode([], **self._options), time.monotonic())
            entry.code_mode._repl = True
            self._sessions[session] = entry
            opening = True
        else:
            opening = False
        entry.active += 1
        token = _console_target.set(entry.code_mode._console)
        try:
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
            return call_result(refused(exc))
        session = session_of(ctx, config.http)
        disconnected = _disconnect_of(ctx)
        if disconnected is None:
            return call_result(await service.run(code, timeout, session))
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
        return call_result(result)

    server: Server[Any] = Server(
        "pydeno",
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


class _Uvicorn(uvicorn.Server):
    # serve() below owns SIGINT and SIGTERM: uvicorn's own handlers would re-raise the signal
    # after shutdown, killing the process before it closes its workers.
    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield


# The scope key of an HTTP request's event that is set when its client disconnects.
_DISCONNECTED: Final = "pydeno.disconnected"


def _disconnect_of(ctx: ServerRequestContext[Any, Any]) -> anyio.Event | None:
    scope = getattr(ctx.request, "scope", None)
    event = scope.get(_DISCONNECTED) if isinstance(scope, dict) else None
    return event if isinstance(event, anyio.Event) else None


def _watch_http(app: ASGIApp, service: Service) -> ASGIApp:
    """app, with each request's disconnect made visible to its call, and a session's worker
    closed as soon as the client's DELETE of it is answered."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        disconnected = anyio.Event()
        scope[_DISCONNECTED] = disconnected

        async def watched() -> Any:
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected.set()
            return message

        await app(scope, watched, send)
        if scope["type"] == "http" and scope.get("method") == "DELETE":
            for name, value in scope.get("headers", []):
                if name.decode("latin-1").lower() == SESSION_HEADER:
                    await service.end_session(value.decode("latin-1"))

    return wrapped


async def _serve_http(server: Server[Any], service: Service, stop: anyio.Event) -> None:
    config = service.config
    app = server.streamable_http_app(
        streamable_http_path=HTTP_PATH,
        session_idle_timeout=config.idle_timeout,
        host=config.host,
    )
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((config.host, config.port))
        port = sock.getsockname()[1]
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
            host = f"[{config.host}]" if family == socket.AF_INET6 else config.host
            print(f"pydeno mcp: serving on http://{host}:{port}{HTTP_PATH}", file=sys.stderr, flush=True)
            await web.serve(sockets=[sock])
            group.cancel_scope.cancel()
    finally:
        sock.close()


class _Lines:
    """The lines of a pipe, read as it becomes readable: the transport's own reader waits in a
    thread that no cancellation reaches, so a signal could not stop a server waiting for input."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""
        self._eof = False

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        while b"\n" not in self._buffer and not self._eof:
            # A descriptor that cannot be polled (a regular file) never blocks for long.
            with contextlib.suppress(OSError):
                await anyio.wait_readable(self._fd)
            chunk = os.read(self._fd, 1 << 16)
            self._eof = not chunk
            self._buffer += chunk
        if not self._buffer:
            raise StopAsyncIteration
        line, newline, self._buffer = self._buffer.partition(b"\n")
        return (line + newline).decode("utf-8", "replace")


async def _serve_stdio(server: Server[Any], stop: anyio.Event) -> None:
    async with anyio.create_task_group() as group:

        async def stop_on_signal() -> None:
            await stop.wait()
            group.cancel_scope.cancel()

        group.start_soon(stop_on_signal)
        stdin = cast("anyio.AsyncFile[str]", _Lines(sys.stdin.fileno()))
        async with stdio_server(stdin=stdin) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
        # stdin closed: the client is gone.
        group.cancel_scope.cancel()


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
            _serve_http(server, service, stop) if config.http else _serve_stdio(server, stop)
        )
        await serving
        group.cancel_scope.cancel()


def serve(config: ServerConfig) -> int:
    """Serve until stdin closes (stdio), or until SIGINT or SIGTERM; every worker is closed
    before it returns. The exit status: 0."""
    anyio.run(_main, config)
    return 0
