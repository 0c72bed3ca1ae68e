"""Waiting the async way (anyio: asyncio or trio), for the async drivers."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread

from ...host.process.worker import WorkerProcess

__all__ = [
    "Background",
    "Condition",
    "Lock",
    "Pipes",
    "acquirer",
    "blocking",
    "blocking_function",
    "closing",
    "exclusive",
    "resolve_within",
    "shielded",
    "sleep",
    "wait",
]

T = TypeVar("T")

sleep = anyio.sleep
Condition = anyio.Condition

# While the worker's stderr is busy, how often it is drained when only stdout is awaited.
_STDERR_BUSY_WAIT = 0.005
# The longest one wait for a writable stdin lasts before the pipe is looked at again.
_WRITE_WAIT = 0.005


class Lock:
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


def acquirer(lock: Lock) -> Callable[[], Awaitable[bool]]:
    """What takes lock if no other task holds it, else returns False without waiting (see
    _acquire_now); the sync backend has the same function."""
    return functools.partial(_acquire_now, lock)


async def _acquire_now(lock: Lock) -> bool:
    """Take lock if no other task holds it (this one may: it re-enters), else return False
    without waiting; the sync backend has the same function. Taking it passes anyio's
    checkpoint as entering does, so a cancelled task still stops there."""
    if lock._lock.locked() and lock._owner != anyio.get_current_task().id:
        return False
    await lock.__aenter__()
    return True


class Pipes:
    """Waits on one worker's pipes without holding the event loop."""

    def __init__(self) -> None:
        self._stderr_busy = False

    def attach(self, process: WorkerProcess) -> None:
        pass

    async def after_data(self) -> None:
        """Data came: let a cancellation in, and nothing else wait."""
        await anyio.lowlevel.checkpoint_if_cancelled()

    async def look_again(self) -> None:
        """An answer is due any moment: look at the next turn of the loop, other tasks
        running in between."""
        await anyio.lowlevel.checkpoint()

    async def readable(self, process: WorkerProcess, wait: float) -> None:
        """Until stdout has data or wait seconds pass; stderr is drained on the way."""
        if self._stderr_busy:
            # Only stdout is awaited: a worker blocked writing a full stderr pipe is drained
            # every few milliseconds rather than once a tick.
            wait = min(wait, _STDERR_BUSY_WAIT)
        with anyio.move_on_after(wait):
            await anyio.wait_readable(process.stdout_fd)
        self._stderr_busy = process.drain_stderr() > 0

    async def writable(self, process: WorkerProcess, wait: float) -> None:
        """Until stdin takes more or a moment passes; stderr is drained on the way."""
        with anyio.move_on_after(min(wait, _WRITE_WAIT)):
            await anyio.wait_writable(process.stdin_fd)
        process.drain_stderr()


async def resolve_within(seconds: float, result: Any) -> tuple[bool, Any]:
    """(True, a host function's result), awaited for at most ``seconds``; (False, None) if it
    took longer, and then it is cancelled: a function that never returns cannot hold the
    command past its host-wait budget."""
    if not inspect.isawaitable(result):
        return True, result
    with anyio.move_on_after(seconds):
        return True, await result
    return False, None


def exclusive(lock: Lock) -> contextlib.nullcontext[None]:
    """What a plain (not async) method of a driver holds while it reads shared state: here
    nothing, since such a method runs on the loop's thread without yielding, so no other
    task can run in between (and an async lock cannot be taken without awaiting)."""
    return contextlib.nullcontext()


@contextlib.asynccontextmanager
async def closing(runtime: Any) -> AsyncIterator[Any]:
    """runtime, closed when the block ends, even if the block is being cancelled."""
    try:
        yield runtime
    finally:
        with anyio.CancelScope(shield=True):
            await runtime.close()


async def wait(condition: anyio.Condition, timeout: float) -> None:
    """Wait on condition (held) until notified or timeout seconds pass."""
    with anyio.move_on_after(timeout):
        await condition.wait()


def shielded() -> anyio.CancelScope:
    """A block a cancellation does not interrupt: clean-up that must finish."""
    return anyio.CancelScope(shield=True)


class Background:
    """``count`` tasks, each running target, beside their owner for the owner's life: in a task
    group of their own, which ``async with`` on the owner enters (start) and leaves (leave)."""

    def __init__(self, target: Callable[[], Coroutine[Any, Any, None]], name: str, count: int = 1) -> None:
        self._target = target
        self._name = name
        self._count = count
        self._group: anyio.abc.TaskGroup | None = None
        self._started = False

    async def start(self) -> None:
        if not self._started:
            self._started = True
            self._group = anyio.create_task_group()
            await self._group.__aenter__()
            for _ in range(self._count):
                self._group.start_soon(self._target, name=self._name)

    def check_started(self, how: str) -> None:
        if not self._started:
            raise RuntimeError(how)

    def join(self) -> None:
        """The task ends by itself once its owner is closed; leave() waits for it."""

    async def leave(self) -> None:
        # The owner's block's own exception is the caller's: it must not come out wrapped in
        # the task group's exception group, so the group is cancelled and left cleanly.
        if self._group is not None:
            group, self._group = self._group, None
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)


def blocking_function(fn: Callable[..., T]) -> Callable[..., Coroutine[Any, Any, T]]:
    """fn as a host function that runs in a worker thread, so that what blocks in it (a
    network request) does not hold the event loop; a cancelled call is left to finish there."""

    async def call(*args: Any) -> T:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args), abandon_on_cancel=True)

    return call


async def blocking(fn: Callable[[], T]) -> T:
    """fn() in a worker thread, so that what blocks in it does not hold the event loop; a
    cancellation waits for it to return (what it started is then cleaned up by the caller)."""
    return await anyio.to_thread.run_sync(fn)
