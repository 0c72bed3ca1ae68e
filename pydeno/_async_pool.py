"""``AsyncSandboxPool``: :class:`pydeno.SandboxPool` for asyncio and trio.

The same bookkeeping (:class:`pydeno._pool.PoolCore`); a task in the pool's own task group
replenishes it. Use it as ``async with AsyncSandboxPool(...) as pool:``, which starts that
task and, on the way out, kills every worker the pool started.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any, Unpack

import anyio
import anyio.abc

from ._async_runtime import AsyncRuntime
from ._errors import PydenoError
from ._options import RuntimeKwargs, RuntimeOptions
from ._pool import WARM_UP, PoolCore, alive

__all__ = ["AsyncSandboxPool"]


class AsyncSandboxPool:
    """``AsyncSandboxPool(size=2, max_workers=None, checkout_timeout=30.0, **runtime_kwargs)``:
    ``async with pool.checkout() as rt:`` hands out a fresh :class:`~pydeno.AsyncRuntime`."""

    def __init__(
        self,
        size: int = 2,
        *,
        max_workers: int | None = None,
        checkout_timeout: float = 30.0,
        **runtime_kwargs: Unpack[RuntimeKwargs],
    ) -> None:
        RuntimeOptions(**runtime_kwargs)
        self._core: PoolCore[AsyncRuntime] = PoolCore(size, max_workers, checkout_timeout)
        self._options = runtime_kwargs
        self._cond = anyio.Condition()
        self._group: anyio.abc.TaskGroup | None = None
        # Workers mid-handshake: close() kills them too, without waiting for the task.
        self._starting: set[AsyncRuntime] = set()

    async def __aenter__(self) -> AsyncSandboxPool:
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._replenish)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        # The block's own exception is the caller's: it must not come out wrapped in the
        # task group's exception group, so the group is cancelled and left cleanly.
        await self.close()
        assert self._group is not None
        self._group.cancel_scope.cancel()
        await self._group.__aexit__(None, None, None)

    @contextlib.asynccontextmanager
    async def checkout(self, *, timeout: float | None = None) -> AsyncIterator[AsyncRuntime]:
        """A fresh runtime for this block, closed when it ends."""
        if self._group is None:
            raise RuntimeError("use the pool as `async with AsyncSandboxPool(...) as pool:`")
        rt = await self._take(self._core.wait_for(timeout))
        try:
            yield rt
        finally:
            await rt.close()
            with anyio.CancelScope(shield=True):
                async with self._cond:
                    self._core.release(rt)
                    self._cond.notify_all()

    async def _take(self, limit: tuple[str, float]) -> AsyncRuntime:
        core = self._core
        dead: list[AsyncRuntime] = []
        try:
            async with self._cond:
                core.check_open()
                core.waiting += 1
                core.requests += 1
                failures = core.failures
                try:
                    self._cond.notify_all()
                    with anyio.move_on_after(limit[1]):
                        while True:
                            rt, found = core.take(alive)
                            dead += found
                            if rt is not None:
                                return rt
                            core.check_open()
                            if core.failures != failures and core.failure is not None:
                                raise core.failure
                            await self._cond.wait()
                    raise core.timeout(limit)
                finally:
                    core.waiting -= 1
        finally:
            for worker in dead:
                await worker.close()

    async def _replenish(self) -> None:
        core = self._core
        while True:
            dead: list[AsyncRuntime] = []
            async with self._cond:
                while not core.closed and core.wanted(time.monotonic()) == 0:
                    with anyio.move_on_after(core.next_look(time.monotonic())):
                        await self._cond.wait()
                    dead += core.prune(alive)
                if core.closed:
                    return
                core.starting += 1
            for worker in dead:
                await worker.close()
            rt: AsyncRuntime | PydenoError
            try:
                rt = AsyncRuntime(**self._options)
                self._starting.add(rt)
                try:
                    await rt.eval(WARM_UP)  # the handshake, and the first evaluation's cold paths
                except BaseException:
                    await rt.close()
                    raise
                finally:
                    self._starting.discard(rt)
            except PydenoError as exc:
                rt = exc
            async with self._cond:
                core.starting -= 1
                if isinstance(rt, PydenoError):
                    core.failure, core.failures = rt, core.failures + 1
                    self._cond.notify_all()
                    requests = core.requests
                    while not core.closed and core.requests == requests:
                        await self._cond.wait()
                    continue
                core.failure = None
                if not core.closed:
                    core.idle.append(rt)
                    self._cond.notify_all()
                    continue
            await rt.close()

    async def close(self) -> None:
        """Stop replenishing and kill every worker the pool started. Idempotent."""
        with anyio.CancelScope(shield=True):
            async with self._cond:
                self._core.closed = True
                workers = [*self._core.idle, *self._core.checked_out, *self._starting]
                self._core.idle.clear()
                self._cond.notify_all()
            for rt in workers:
                await rt.close()

    @property
    def closed(self) -> bool:
        return self._core.closed
