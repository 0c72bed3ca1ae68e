"""``AsyncAgentSandbox``: :class:`pydeno.AgentSandbox` with ``await``, under asyncio or trio.

Same session core (:mod:`pydeno._agent`); this driver only awaits its
:class:`~pydeno.AsyncRuntime`. The worker starts in the constructor and the session is set
up before the first run, so ``AsyncAgentSandbox(...)`` and ``async with`` both work.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Unpack

import anyio

from ._agent import DEFAULT_MAX_JOURNAL_BYTES, Action, PausedToolCall, RunRecord, SessionCore, decode_journal
from ._agent_sandbox import check_runtime_kwargs
from ._async_runtime import AsyncRuntime
from ._errors import JavaScriptError, ReplayDivergence
from ._tools import ToolBridge
from .host._core import Command, RuntimeKwargs
from .host._wire import HostCall

__all__ = ["AsyncAgentSandbox"]


class AsyncAgentSandbox:
    """The async twin of :class:`pydeno.AgentSandbox`: ``await s.run(code)``,
    ``await s.start(code)``, ``await paused.resume(...)``, ``await AsyncAgentSandbox.load(...)``."""

    def __init__(
        self,
        tools: Mapping[str, Callable[..., Any]] | None = None,
        *,
        max_tool_calls: int | None = None,
        max_pause: float | None = None,
        **runtime_kwargs: Unpack[RuntimeKwargs],
    ) -> None:
        self._setup(tools, max_tool_calls, max_pause, dict(runtime_kwargs), None, None)

    def _setup(
        self,
        tools: Mapping[str, Callable[..., Any]] | None,
        max_tool_calls: int | None,
        max_pause: float | None,
        runtime_kwargs: dict[str, Any],
        seed: int | None,
        clock_ms: int | None,
    ) -> None:
        self._bridge = ToolBridge(tools or {}, max_calls=max_tool_calls)
        options = check_runtime_kwargs(runtime_kwargs, max_pause)
        self._session = SessionCore(
            self._bridge, expose_errors=bool(options.get("expose_host_errors", False)), seed=seed, clock_ms=clock_ms
        )
        self._lock = anyio.Lock()
        self._paused: PausedToolCall | None = None
        self._waiting: tuple[Command, HostCall] | None = None
        self._closed = False
        self._set_up = False
        self._rt = AsyncRuntime(**options)

    async def _ready(self) -> None:
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
        return await self._execute(code, pause=False)

    async def start(self, code: str) -> Any:
        return await self._execute(code, pause=True)

    @property
    def paused(self) -> PausedToolCall | None:
        return self._paused

    @property
    def tool_calls_made(self) -> int:
        return self._bridge.calls_made

    def describe_tools(self) -> list[dict[str, Any]]:
        return self._bridge.describe_tools()

    def typescript(self) -> str:
        return self._bridge.typescript()

    def dump(self, key: bytes) -> bytes:
        self._check_open()
        return self._session.dump(key)

    @classmethod
    async def load(
        cls,
        journal: bytes,
        *,
        key: bytes,
        tools: Mapping[str, Callable[..., Any]] | None = None,
        max_pause: float | None = None,
        max_journal_bytes: int = DEFAULT_MAX_JOURNAL_BYTES,
        **runtime_kwargs: Unpack[RuntimeKwargs],
    ) -> AsyncAgentSandbox:
        parsed = decode_journal(journal, key, max_journal_bytes)
        self = cls.__new__(cls)
        self._setup(tools, parsed.max_tool_calls, max_pause, dict(runtime_kwargs), parsed.seed, parsed.clock_ms)
        try:
            for run in parsed.runs:
                await self._replay(run, parsed.pending)
            if self._bridge.calls_made != parsed.spent:
                raise ReplayDivergence(
                    f"the replay spent {self._bridge.calls_made} tool calls, the journal recorded {parsed.spent}"
                )
        except BaseException:
            await self.close()
            raise
        return self

    async def close(self) -> None:
        self._closed = True
        self._paused = None
        await self._rt.close()

    @property
    def closed(self) -> bool:
        return self._closed or self._rt.closed

    async def __aenter__(self) -> AsyncAgentSandbox:
        async with self._lock:
            await self._ready()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- the driver (the steps of AgentSandbox's, awaited) -------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("the session is closed")

    async def _execute(self, code: str, *, pause: bool, replay: RunRecord | None = None) -> Any:
        code = self._rt._core.check_code(code)
        async with self._lock:
            self._check_open()
            await self._ready()
            if self._paused is not None:
                raise RuntimeError("a run is paused at a tool call: resume it (or close the session) first")
            rt = self._rt
            async with rt._lock:
                rid, data = rt._core.connection.eval(code)
                command = await rt._begin(rid, data, None)
            self._session.begin_run(code, replay)
            return await self._drive(command, pause)

    async def _drive(self, command: Command, pause: bool) -> Any:
        rt, session = self._rt, self._session
        try:
            while True:
                async with rt._lock:
                    step = await rt._advance(command)
                if step is None:
                    try:
                        value = rt._core.finish(command)
                    except JavaScriptError as exc:
                        session.finish_run(error=exc)
                        raise
                    session.finish_run(value)
                    return value
                call = step[0]
                action = session.on_call(call.args, pause=pause)
                if action.kind == "pause":
                    self._paused = PausedToolCall(self, action.name, action.args)
                    self._waiting = (command, call)
                    return self._paused
                await self._answer(command, call, action)
        except JavaScriptError:
            raise
        except BaseException:
            session.abandon_run()
            if rt._core.commands:
                await rt.close()
            raise

    async def _answer(self, command: Command, call: HostCall, action: Action) -> None:
        rt, session = self._rt, self._session
        if action.kind == "answer":
            async with rt._lock:
                await rt._answer(command, call, action.value, action.error)
            return
        try:
            result = session.call_tool(action)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:  # noqa: BLE001 - the guest receives it as an Error
            session.record(action.name, action.args, error=exc)
            async with rt._lock:
                await rt._answer(command, call, error=exc)
        else:
            session.record(action.name, action.args, result)
            async with rt._lock:
                await rt._answer(command, call, result)

    async def _resume(self, paused: PausedToolCall, value: Any, error: Exception | None) -> Any:
        async with self._lock:
            if paused is not self._paused or self._waiting is None:
                raise RuntimeError("this tool call was already answered")
            self._check_open()
            command, call = self._waiting
            self._paused, self._waiting = None, None
            self._session.record(paused.name, paused.args, value, error)
            try:
                async with self._rt._lock:
                    await self._rt._answer(command, call, value, error)
            except BaseException:
                self._session.abandon_run()
                raise
            return await self._drive(command, pause=True)

    async def _replay(self, run: RunRecord, pending: tuple[str, list[Any]] | None) -> None:
        if not run.complete:
            self._session.pending_replay = pending
            if not isinstance(await self._execute(run.code, pause=True, replay=run), PausedToolCall):
                raise ReplayDivergence("replaying the paused run: it finished instead of reaching its paused call")
            return
        with contextlib.suppress(JavaScriptError):
            await self._execute(run.code, pause=False, replay=run)
