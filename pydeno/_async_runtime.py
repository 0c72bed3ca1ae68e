"""``AsyncRuntime``: the anyio driver (asyncio and trio).

Same core as :class:`pydeno.Runtime`; this module only waits on the worker's pipes with
``anyio.wait_readable`` and awaits async host functions. The worker is spawned in the
constructor and its handshake is awaited before the first command, so both
``AsyncRuntime()`` and ``async with AsyncRuntime() as rt`` work.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any, Unpack

import anyio
import anyio.lowlevel

from ._checks import code_text
from ._function import JsFunction, function_id
from ._options import RuntimeKwargs, RuntimeOptions
from .host._core import NEED_DATA, Command
from .host._monitor import Watch
from .host._process import WorkerProcess
from .host._supervisor import Supervisor
from .host._wire import Hello, HostCall

__all__ = ["AsyncRuntime"]

_STDERR_BUSY_WAIT = 0.005


class _TaskLock:
    """A lock the owning task may re-enter: a host function that evaluates on the same
    runtime (through a JsFunction, say) runs inside the command that called it."""

    def __init__(self) -> None:
        self._lock = anyio.Lock()
        self._owner: int | None = None
        self._depth = 0

    async def __aenter__(self) -> None:
        me = anyio.get_current_task().id
        if self._owner == me:
            self._depth += 1
            return
        await self._lock.acquire()
        self._owner, self._depth = me, 1

    async def __aexit__(self, *exc_info: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
            self._lock.release()


class AsyncRuntime:
    """The async twin of :class:`pydeno.Runtime`: ``await rt.eval(code)``."""

    def __init__(self, **options: Unpack[RuntimeKwargs]) -> None:
        self._sup = Supervisor(
            RuntimeOptions(**options),
            make_function=lambda fid: JsFunction(self, fid),
            function_id=lambda value: function_id(value, self) if isinstance(value, JsFunction) else None,
        )
        self._core = self._sup.core
        self._lock = _TaskLock()
        self._stderr_busy = False
        self._sup.spawn()
        self._startup_deadline = self._core.startup_deadline()

    # -- public API -------------------------------------------------------------------
    async def eval(self, code: str, *, timeout: float | None = None) -> Any:
        """Evaluate code and return its value (a returned promise is awaited)."""
        code = code_text(code)
        async with self._lock:
            await self._ready()
            rid, data = self._core.connection.eval(code)
            return await self._roundtrip(rid, data, timeout)

    async def bind_function(self, name: str, fn: Callable[..., Any]) -> None:
        """Expose fn (sync or async) to the guest as the global async function ``name``."""
        name = self._core.bind_check(name, fn)
        async with self._lock:
            await self._ready()
            self._core.functions[name] = fn
            rid, data = self._core.connection.bind(name)
            await self._roundtrip(rid, data, None)

    def terminate(self) -> None:
        """Stop the running command from any task or thread: it raises RuntimeTerminated,
        or RuntimeForceKilled if the worker does not acknowledge within terminate_grace.
        Either way the runtime is closed; with no command running it is simply closed."""
        self._sup.terminate()

    async def close(self) -> None:
        """Kill the worker and release everything. Idempotent."""
        self._core.close()

    @property
    def closed(self) -> bool:
        return self._core.closed

    async def __aenter__(self) -> AsyncRuntime:
        async with self._lock:
            await self._ready()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._core.close()

    def __del__(self) -> None:
        core = getattr(self, "_core", None)
        if core is not None and not core.closed:
            core.close()

    # -- the stepping API: package-internal, for the agent sandboxes, tools, pools ---------
    # A command in steps, each under the runtime's lock: start it, advance it to its next
    # host call (which the caller answers, now or later) until it completes, then take its
    # outcome. Nothing outside the runtime touches its other private parts.
    async def _start_eval(self, code: str, timeout: float | None = None) -> Command:
        code = code_text(code)
        async with self._lock:
            await self._ready()
            rid, data = self._core.connection.eval(code)
            return await self._begin(rid, data, timeout)

    async def _next_call(self, command: Command) -> HostCall | None:
        """The command's next host call (its time counts as host wait until answered), or
        None once it completed."""
        async with self._lock:
            step = await self._advance(command)
        return None if step is None else step[0]

    async def _answer_call(
        self, command: Command, call: HostCall, value: Any = None, error: Exception | None = None
    ) -> None:
        async with self._lock:
            await self._answer(command, call, value, error)

    def _outcome(self, command: Command) -> Any:
        """The completed command's value, or raise its error."""
        return self._sup.finish(command)

    @property
    def _in_command(self) -> bool:
        return bool(self._core.commands)

    def _convertible(self, value: Any) -> tuple[str, str] | None:
        """None if value can be a host function's result, else the (name, message) of the
        Error the guest would receive instead."""
        return self._core.connection.convertible(value)

    def _has_function(self, name: str) -> bool:
        return name in self._core.functions

    def _alive(self) -> bool:
        """Open, and its worker still running."""
        process = self._sup.process
        return not self._core.closed and process is not None and process.poll() is None

    def _worker_state(self) -> tuple[WorkerProcess | None, Hello | None, Watch | None]:
        """The worker process, its handshake and its watch, for the sandbox report."""
        return self._sup.process, self._core.connection.hello, self._sup.watch

    # -- the driver ---------------------------------------------------------------------
    async def _ready(self) -> None:
        core = self._core
        core.check_open()
        if core.connection.hello is not None:
            return
        try:
            while core.connection.hello is None:
                await self._step(None, self._startup_deadline)
            self._sup.started()
        except BaseException:
            core.close()
            raise

    async def _call_function(self, fn: JsFunction, args: list[Any], timeout: float | None) -> Any:
        async with self._lock:
            function_id(fn, self)
            await self._ready()
            rid, data = self._core.connection.call(fn._id, args)
            return await self._roundtrip(rid, data, timeout)

    def _release_function(self, function_id: int) -> None:
        self._core.connection.release(function_id)

    async def _roundtrip(self, rid: int, data: bytes, timeout: float | None) -> Any:
        command = await self._begin(rid, data, timeout)
        while (step := await self._advance(command)) is not None:
            await self._call_host(command, *step)
        return self._sup.finish(command)

    # The same steps as Runtime's (see there), awaited.
    async def _begin(self, rid: int, data: bytes, timeout: float | None) -> Command:
        command = self._core.begin(rid, timeout)
        try:
            await self._send(data, command)
        except BaseException as exc:
            self._core.abandon(command, exc)
            raise
        return command

    async def _advance(self, command: Command) -> tuple[HostCall, Callable[..., Any]] | None:
        core = self._core
        try:
            while command.rid not in core.connection.outcomes:
                item = core.pump()
                if item is NEED_DATA:
                    await self._receive(command, math.inf)
                elif isinstance(item, HostCall):
                    target = core.begin_host_call(item)
                    if not isinstance(target, bytes):
                        return item, target
                    await self._send(target, command)
        except BaseException as exc:
            core.abandon(command, exc)
            raise
        return None

    async def _answer(
        self, command: Command, call: HostCall, result: Any = None, error: Exception | None = None
    ) -> None:
        try:
            await self._send(self._core.finish_host_call(call, result, error), command)
        except BaseException as exc:
            self._core.abandon(command, exc)
            raise

    async def _call_host(self, command: Command, call: HostCall, target: Callable[..., Any]) -> None:
        try:
            result = target(*call.args)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:  # noqa: BLE001 - shown to the guest as an Error (Core.finish_host_call)
            await self._answer(command, call, error=exc)
        except BaseException as exc:
            self._core.abandon(command, exc)
            raise
        else:
            await self._answer(command, call, result)

    async def _step(self, command: None, startup_deadline: float) -> None:
        """One step of the handshake, which no host call can interrupt."""
        if self._core.pump() is NEED_DATA:
            await self._receive(command, startup_deadline)

    async def _receive(self, command: Command | None, startup_deadline: float) -> None:
        core = self._core
        process = self._sup.process_open()
        if self._sup.ingest(process.read()):
            # A worker that never stops sending (console output, say) still has a deadline.
            core.remaining(command, startup_deadline)
            await anyio.lowlevel.checkpoint_if_cancelled()
            return
        wait = core.remaining(command, startup_deadline)
        if core.answer_expected():
            # Look again at the next turn of the loop: other tasks run in between.
            await anyio.lowlevel.checkpoint()
            return
        if self._stderr_busy:
            # Only stdout is awaited: a worker blocked writing a full stderr pipe is drained
            # every few milliseconds rather than once a tick.
            wait = min(wait, _STDERR_BUSY_WAIT)
        with anyio.move_on_after(wait):
            await anyio.wait_readable(process.stdout_fd)
        self._stderr_busy = process.drain_stderr() > 0

    async def _send(self, data: bytes, command: Command | None) -> None:
        core = self._core
        # A threading lock held across awaits: only terminate() contends for it, and that
        # never blocks on it (it queues its frame instead).
        with self._sup.write_lock:
            rest = self._sup.push(memoryview(self._sup.outbox(data)))
            while rest is not None:
                process = self._sup.process_open()
                with anyio.move_on_after(min(core.remaining(command), 0.005)):
                    await anyio.wait_writable(process.stdin_fd)
                process.drain_stderr()
                rest = self._sup.push(rest)
