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
* With ``--session --store PATH`` the sessions are a Code Mode :class:`~pydeno.AsyncSessionPool`'s,
  journaled in the SQLite file PATH (signed with the key beside it, mcp_store): a session's
  worker may be closed (idle, given way, killed by a limit) and its state comes back by replay
  at its next call, and a server started again on the same store resumes a session whose
  client presents its id again (over HTTP its Mcp-Session-Id, see mcp_http; over stdio the one
  session, kept as ``stdio``). A session the client deletes is deleted from the store.

What a client cannot take: more than ``--max-workers`` live workers, more than
``--max-queued`` waiting calls (past both a call is turned away at once, retryably, as a
:class:`ServerBusy`; over HTTP one MCP session gets at most half of each), a message longer
than ``--max-message-bytes`` (read in linear time, discarded as it arrives), a result longer
than ``--max-result-bytes``, or a server that cannot stop because it stopped reading.

This module holds the service (pool, sessions, admission) and the MCP server around it; the
flags' config is in mcp_config, the tool's schemas and result shaping in mcp_tool, and the two
transports in mcp_stdio and mcp_http. They import ``mcp``: only ``pydeno mcp`` imports them,
never ``import pydeno``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any, Final

import anyio
import anyio.lowlevel
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS

from .._agents.sessions._async import AsyncSessionPool
from .._base.errors import CheckoutTimeout, PydenoError, ReplayDivergence, StoreError
from .._base.kinds import Catalog
from .._code_mode._async import AsyncCodeMode
from .._code_mode.core import route_console
from .._code_mode.result import ExecutionResult
from .._pools._async import AsyncSandboxPool
from .._version import __version__
from .mcp_config import STDIO_SESSION, TOOL_NAME, ServerConfig
from .mcp_http import client_session_of, disconnect_of, serve_http
from .mcp_stdio import serve_stdio
from .mcp_tool import call_arguments, call_result, refused, tool

__all__ = ["TOOL_NAME", "ServerConfig", "serve"]

log = logging.getLogger("pydeno.mcp")


# -- running calls -----------------------------------------------------------------------------


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
        # --store: the sessions, journaled in the store.
        self._stored: AsyncSessionPool[AsyncCodeMode] | None = None
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
            if self.config.store is not None:
                stack.callback(self.config.store.close)
                self._stored = await stack.enter_async_context(self._stored_sessions())
            else:
                self._pool = await stack.enter_async_context(
                    AsyncSandboxPool(
                        min(self.config.pool_size, self.config.max_workers),
                        max_workers=self.config.max_workers,
                        **self._options,
                        on_console=route_console,
                    )
                )
            group = await stack.enter_async_context(anyio.create_task_group())
            if self.config.session and self._stored is None:
                group.start_soon(self._reap)
            try:
                yield self
            finally:
                group.cancel_scope.cancel()

    def _stored_sessions(self) -> AsyncSessionPool[AsyncCodeMode]:
        """The pool of stored sessions: --max-sessions live at once (the least recently used
        idle one gives way), each closed after --idle-timeout idle, with --pool-size warm
        workers beside them, all within --max-workers."""
        config = self.config
        assert config.store is not None
        return AsyncSessionPool(
            config.store,
            config.store_key,
            code_mode=True,
            tools=[],
            max_live=config.max_sessions,
            idle_ttl=config.idle_timeout,
            lease_timeout=config.timeout,
            warm_workers=max(0, min(config.pool_size, config.max_workers - config.max_sessions)),
            **self._options,
        )

    async def stored(self, session: str) -> bool:
        """Whether --store keeps the session, for a client that presents its id again."""
        return self._stored is not None and await self._stored._stored(session)

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
        if self._stored is not None:
            return await self._run_stored(code, limit, session)
        try:
            entry, opening = await self._session(session)
        except CheckoutTimeout as exc:
            return refused(exc)
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
            entry.active -= 1
            entry.last_used = time.monotonic()
            self._changed.set()

    async def _run_stored(self, code: str, timeout: float, session: str) -> ExecutionResult:
        """A call of a stored session: one lease of it (restored from the store first if it
        has no worker), whose end writes its journal."""
        assert self._stored is not None
        result: ExecutionResult | None = None
        try:
            async with (
                self._gate.admit(session, self.config.timeout),
                self._stored.lease(session) as code_mode,
            ):
                result = await code_mode.execute(code, timeout=timeout)
        except ReplayDivergence as exc:
            return await self._lost(session, exc)
        except StoreError as exc:
            if result is None:
                return refused(exc)
            # The session keeps its state live, unevicted, and its next call's end writes it.
            log.warning("session %s: its journal is not stored yet: %s", session[:8], exc)
        except Exception as exc:  # noqa: BLE001 - a session the store refused is a result
            return refused(exc)
        assert result is not None
        return result

    async def _lost(self, session: str, exc: ReplayDivergence) -> ExecutionResult:
        """A stored session whose programs did not replay as recorded (one read something a
        fresh worker does not share): it is deleted, so that its next call starts afresh,
        and this call, which did not run, says so."""
        assert self._stored is not None
        log.warning("session %s could not be restored, and is deleted: %s", session[:8], exc)
        with contextlib.suppress(PydenoError):
            await self._stored.delete(session)
        return refused(
            ReplayDivergence(
                f"{exc}; this call did not run, and what the session's earlier calls defined is lost: "
                "its next call starts on an empty runtime"
            )
        )

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
        try:
            async with self._pool.checkout() as rt:
                await code_mode._use(rt)
                return await code_mode.execute(code, timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - no worker to run on is a result too
            return refused(exc)
        finally:
            await code_mode.close()

    async def end_session(self, session: str) -> None:
        """The client ended its session: close its worker now (and, --store, delete it from
        the store)."""
        if self._stored is not None:
            try:
                await self._stored.delete(session)
            except PydenoError as exc:
                log.warning("session %s: its journal could not be deleted from the store: %s", session[:8], exc)
            return
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
    return client_session_of(ctx) if http else STDIO_SESSION


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
        disconnected = disconnect_of(ctx)
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
            serve_http(server, config, service.end_session, stop, service.stored if config.store else None)
            if config.http
            else serve_stdio(server, config, stop)
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
