"""Waiting the blocking way, in the calling thread, for the sync drivers: ``poll()`` on the
worker's pipes, no event loop and no thread hop on the warm path."""

from __future__ import annotations

import contextlib
import functools
import math
import select
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

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

_IN = select.POLLIN | select.POLLHUP | select.POLLERR
_OUT = select.POLLOUT | select.POLLHUP | select.POLLERR

T = TypeVar("T")

sleep = time.sleep
Condition = threading.Condition
# Nothing interrupts a blocking call but the caller's own exception.
shielded = contextlib.nullcontext
# runtime, closed when the block ends.
closing = contextlib.closing

# Calls from several threads are serialised; a host function that evaluates on the same
# runtime (through a JsFunction, say) runs inside the command that called it.
Lock = threading.RLock


def acquirer(lock: threading.RLock) -> Callable[[], bool]:
    """What takes lock if no other thread holds it (this one may: it re-enters), else returns
    False at once; the anyio backend has the same function. A partial of the lock's own
    method: taking the runtime's lock unopposed, on every command, adds no Python frame."""
    return functools.partial(lock.acquire, False)


def exclusive(lock: threading.RLock) -> threading.RLock:
    """What a plain method of a driver holds while it reads shared state: the driver's own
    lock, since another thread may be running a command meanwhile."""
    return lock


class Pipes:
    """Waits on one worker's stdout and stderr with one poll object."""

    def __init__(self) -> None:
        self._poll = select.poll()
        self._stderr_polled = False

    def attach(self, process: WorkerProcess) -> None:
        self._poll.register(process.stdout_fd, _IN)
        self._poll.register(process.stderr_fd, _IN)
        self._stderr_polled = True

    def readable(self, process: WorkerProcess, wait: float) -> None:
        """Until stdout has data or wait seconds pass; stderr is drained on the way."""
        for fd, _ in self._poll.poll(math.ceil(wait * 1000)):
            if fd == process.stderr_fd:
                self._drain_stderr(process)

    def writable(self, process: WorkerProcess, wait: float) -> None:
        """Until stdin takes more or wait seconds pass; stderr is drained on the way."""
        self._poll.register(process.stdin_fd, _OUT)
        try:
            self._poll.poll(math.ceil(wait * 1000))
        finally:
            self._poll.unregister(process.stdin_fd)
        self._drain_stderr(process)

    def _drain_stderr(self, process: WorkerProcess) -> None:
        process.drain_stderr()
        # A closed stderr polls readable forever: stop polling it, or every wait would spin.
        if process.stderr_eof and self._stderr_polled:
            self._stderr_polled = False
            self._poll.unregister(process.stderr_fd)


def resolve_within(seconds: float, result: Any) -> tuple[bool, Any]:
    """(True, a host function's result); (False, None) if an async one took more than
    ``seconds`` (it is cancelled). A plain function cannot be interrupted in its thread: it
    has returned by now, and the monitor killed the worker at the budget meanwhile."""
    import inspect  # not with the package: it loads the ast module, a share of its import

    if not inspect.isawaitable(result):
        return True, result
    # Loaded by the first async host function, not with the package.
    import asyncio

    timeout = None if math.isinf(seconds) else max(seconds, 0.0)

    async def bounded() -> tuple[bool, Any]:
        scope = asyncio.timeout(timeout)
        try:
            async with scope:
                return True, await result
        except TimeoutError:
            if scope.expired():
                return False, None
            raise  # the function's own

    finished: tuple[bool, Any] = _await_sync(bounded())
    return finished


def _await_sync(awaitable: Awaitable[Any]) -> Any:
    """Run an async host function to completion from synchronous code."""
    import asyncio

    async def main() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    # Called from inside a running loop's thread: that loop cannot be re-entered.
    box: list[Any] = []

    def target() -> None:
        try:
            box.append((True, asyncio.run(main())))
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            box.append((False, exc))

    thread = threading.Thread(target=target, name="pydeno-host-call")
    thread.start()
    thread.join()
    ok, value = box[0]
    if not ok:
        raise value
    return value


def blocking_function(fn: Callable[..., T]) -> Callable[..., T]:
    """fn itself: a blocking driver runs a host function in the calling thread."""
    return fn


def blocking(fn: Callable[[], T]) -> T:
    """fn(), here: a blocking driver blocks in the calling thread."""
    return fn()


def wait(condition: threading.Condition, timeout: float) -> None:
    """Wait on condition (held) until notified or timeout seconds pass."""
    condition.wait(timeout)


class Background:
    """``count`` daemon threads, each running target, beside their owner for the owner's life,
    from its start."""

    def __init__(self, target: Callable[[], None], name: str, count: int = 1) -> None:
        self._threads = [threading.Thread(target=target, name=name, daemon=True) for _ in range(count)]

    def start(self) -> None:
        for thread in self._threads:
            if thread.ident is None:
                thread.start()

    def check_started(self, how: str) -> None:
        """Always started, in the owner's constructor."""

    def join(self) -> None:
        """Wait for the threads to end (their owner is closed), but for the calling one."""
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()

    def leave(self) -> None:
        pass
