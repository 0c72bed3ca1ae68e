"""The agent sandboxes: a session where a model-written program calls the service's tools.

``AsyncAgentSandbox`` (this file) drives its :class:`~pydeno.AsyncRuntime` under asyncio
or trio; ``AgentSandbox`` (pydeno/_agents/_sync.py, generated from this file) drives a
:class:`~pydeno.Runtime`. The session's state (globals, tool budget) persists across runs.
``run(code)`` calls the tools directly; ``start(code)`` stops at every tool call and hands
it to the caller as a :class:`PausedToolCall` (an approval flow). ``dump(key)`` signs the
session into a journal that ``load`` replays elsewhere without calling a tool again. All
rules live in :mod:`pydeno._agents.core`; these drivers only move runs forward on a runtime.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, Unpack

from .._base import tracing
from .._base.checks import NeedsAsyncWith, code_text, size
from .._base.errors import JavaScriptError, ReplayDivergence
from .._base.options import RuntimeKwargs, check_option_names
from .._runtime._async import AsyncRuntime
from .._runtime.backends import anyio as backend
from .._runtime.stepping import GuestCall, Pending
from .._tools.approval import PausedToolCall
from .core import Action, SessionDriver
from .journal import DEFAULT_MAX_JOURNAL_BYTES, Journal, RunRecord, check_mode, decode_journal

__all__ = ["AsyncAgentSandbox"]

# A runtime option a session does not take: it bounds tool waits with max_pause=.
_NOT_HERE = ("max_host_wait",)


class AsyncAgentSandbox(SessionDriver, NeedsAsyncWith):
    """``AsyncAgentSandbox(tools=..., max_tool_calls=None, max_pause=None, **runtime_kwargs)``.

    ``max_tool_calls`` bounds the session's tool calls (a journal carries what is spent);
    ``max_pause`` bounds how long one run may wait on tool answers, paused or running, in
    seconds (past it the run fails with the host-wait timeout, which
    ``classify_error(exc, via_agent=True)`` reports as ``max_pause``).
    """

    def __init__(
        self,
        tools: Mapping[str, Callable[..., Any]] | None = None,
        *,
        max_tool_calls: int | None = None,
        max_pause: float | None = None,
        **runtime_kwargs: Unpack[RuntimeKwargs],
    ) -> None:
        check_option_names(type(self), runtime_kwargs, without=_NOT_HERE)
        self._setup(tools, max_tool_calls, max_pause, dict(runtime_kwargs))

    @classmethod
    async def _on(
        cls,
        runtime: AsyncRuntime,
        tools: Mapping[str, Callable[..., Any]] | None,
        max_tool_calls: int | None,
        max_pause: float | None,
        runtime_kwargs: dict[str, Any],
    ) -> AsyncAgentSandbox:
        """A new session on a runtime already started (see _setup), which it then owns."""
        self = cls.__new__(cls)
        try:
            self._setup(tools, max_tool_calls, max_pause, runtime_kwargs, runtime=runtime)
        except BaseException:
            await runtime.close()
            raise
        return self

    def _start_runtime(self, options: dict[str, Any], runtime: AsyncRuntime | None) -> None:
        self._lock = backend.Lock()
        self._set_up = False
        # The current run's span (None: nobody traces, or no run), open across its pauses,
        # and the worker's CPU seconds when it began.
        self._span: Any = None
        self._span_cpu = 0.0
        self._rt = runtime if runtime is not None else AsyncRuntime(**options)
        # unasync: self._ready()

    async def _ready(self) -> None:
        """Set the session up in its runtime, once: the prelude, then the tools."""
        if self._set_up:
            return
        try:
            await self._rt.eval(self._session.prelude())
            await self._bridge.attach(self._rt)
        except BaseException:
            await self._rt.close()
            raise
        self._set_up = True

    # -- public API -------------------------------------------------------------------
    async def run(self, code: str) -> Any:
        """Run code to completion, calling tools directly; return its value."""
        return await self._execute(code, pause=False)

    async def start(self, code: str) -> Any:
        """Run code until its first tool call: return that as a PausedToolCall, or the
        value if it finishes without one."""
        return await self._execute(code, pause=True)

    def dump(self, key: bytes) -> bytes:
        """The session as a signed journal (a snapshot if a run is paused)."""
        with backend.exclusive(self._lock):
            self._check_open()
            return self._session.dump(key)

    def _journal(self, key: bytes) -> bytes:
        """The session as a signed journal even once its worker is gone: the runs it
        finished, and every tool call it was charged (a SessionPool keeps what a lease did
        before its worker died)."""
        with backend.exclusive(self._lock):
            return self._session.dump(key)

    @classmethod
    async def load(
        cls,
        journal: bytes,
        *,
        key: bytes,
        tools: Mapping[str, Callable[..., Any]] | None = None,
        max_pause: float | None = None,
        max_journal_bytes: int | str = DEFAULT_MAX_JOURNAL_BYTES,
        **runtime_kwargs: Unpack[RuntimeKwargs],
    ) -> AsyncAgentSandbox:
        """Restore a dumped session on a fresh worker by replaying its runs with the recorded
        tool results (no tool is called). A snapshot comes back paused at the same call."""
        check_option_names(cls.load, runtime_kwargs, without=_NOT_HERE)
        parsed = decode_journal(journal, key, size("max_journal_bytes", max_journal_bytes, 1))
        return await cls._replayed(parsed, tools, max_pause, dict(runtime_kwargs))

    @classmethod
    async def _replayed(
        cls,
        parsed: Journal,
        tools: Mapping[str, Callable[..., Any]] | None,
        max_pause: float | None,
        runtime_kwargs: dict[str, Any],
        runtime: AsyncRuntime | None = None,
    ) -> AsyncAgentSandbox:
        """A session restored from a decoded journal, on runtime if given (see _setup)."""
        self = cls.__new__(cls)
        try:
            check_mode(parsed, code_mode=False)
            self._setup(tools, parsed.max_tool_calls, max_pause, runtime_kwargs, parsed.seed, parsed.clock_ms, runtime)
        except BaseException:
            if runtime is not None:
                await runtime.close()
            raise
        try:
            for run in parsed.runs:
                await self._replay(run, parsed.pending)
            self._check_replayed(parsed)
        except BaseException:
            await self.close()
            raise
        return self

    async def close(self) -> None:
        """Kill the session's worker. Idempotent."""
        self._closed = True
        self._paused = None
        self._end_span(None, {"pydeno.abandoned": True})
        await self._rt.close()

    async def __aenter__(self) -> AsyncAgentSandbox:
        async with self._lock:
            await self._ready()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- the driver ---------------------------------------------------------------------
    async def _execute(self, code: str, *, pause: bool, replay: RunRecord | None = None) -> Any:
        code = code_text(code)
        async with self._lock:
            self._check_open()
            await self._ready()
            self._check_idle()
            self._span = tracing.begin("pydeno.eval", None if replay is None else {"pydeno.replay": True}, code=code)
            if self._span is not None:
                self._span_cpu = self._rt._steps.worker_cpu()
            token = tracing.activate(self._span)
            try:
                command = await self._rt._steps.start(code)
                self._session.begin_run(code, replay)
                return await self._drive(command, pause)
            except BaseException as exc:
                self._end_span(exc)
                raise
            finally:
                tracing.deactivate(token)

    def _end_span(self, error: BaseException | None, attributes: dict[str, Any] | None = None) -> None:
        """End the current run's span, if it has one still open."""
        span, self._span = self._span, None
        if span is not None:
            tracing.end(span, error, {**self._rt._steps.span_attributes(self._span_cpu), **(attributes or {})})

    async def _drive(self, command: Pending, pause: bool) -> Any:
        rt, session = self._rt, self._session
        try:
            while True:
                call = await rt._steps.next_call(command)
                if call is None:
                    try:
                        value = rt._steps.outcome(command)
                    except JavaScriptError as exc:
                        session.finish_run(error=exc)
                        raise
                    session.finish_run(value)
                    self._end_span(None)
                    return value
                action = session.on_call(call.args, pause=pause)
                if action.kind == "pause":
                    return self._pause(action, command, call)
                await self._answer(command, call, action)
        except JavaScriptError:
            raise
        except BaseException:
            session.abandon_run()
            if rt._steps.in_command:
                # Left mid-command (a divergence, an interrupted tool): its state is unknown.
                await rt.close()
            raise

    async def _answer(self, command: Pending, call: GuestCall, action: Action) -> None:
        rt, session = self._rt, self._session
        if action.kind == "answer":
            await rt._steps.answer(command, call, action.value, action.error)
            return
        try:
            result = await rt._steps.resolve(command, call, session.call_tool(action))
        except Exception as exc:  # noqa: BLE001 - the guest receives it as an Error
            value, error = session.settle(action.name, error=exc, convertible=rt._steps.convertible)
        else:
            value, error = session.settle(action.name, result, convertible=rt._steps.convertible)
        await rt._steps.answer(command, call, value, error)

    async def _resume(self, paused: PausedToolCall, value: Any, error: Exception | None) -> Any:
        async with self._lock:
            command, call, value, error = self._take_waiting(paused, value, error)
            token = tracing.activate(self._span)
            try:
                try:
                    await self._rt._steps.answer(command, call, value, error)
                except BaseException:
                    self._session.abandon_run()
                    raise
                return await self._drive(command, pause=True)
            except BaseException as exc:
                self._end_span(exc)
                raise
            finally:
                tracing.deactivate(token)

    async def _replay(self, run: RunRecord, pending: tuple[str, list[Any]] | None) -> None:
        if not run.complete:
            self._session.pending_replay = pending
            if not isinstance(await self._execute(run.code, pause=True, replay=run), PausedToolCall):
                raise ReplayDivergence("replaying the paused run: it finished instead of reaching its paused call")
            return
        # A run recorded as failing fails again; finish_run has checked it is the same error.
        with contextlib.suppress(JavaScriptError):
            await self._execute(run.code, pause=False, replay=run)
