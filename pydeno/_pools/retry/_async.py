"""Retry on a fresh runtime: the loop services write, written once.

    result = pydeno.run_with_retry(lambda rt: rt.eval(code), max_attempts=3)
    result = await pydeno.run_with_retry_async(lambda rt: rt.eval(code), max_attempts=3)

Each attempt gets a new runtime and closes it afterwards, so a dead worker is never reused;
which failures are retried is the policy's (pydeno/_pools/retry/policy.py). This file is the
source of ``run_with_retry_async``; ``run_with_retry`` (pydeno/_pools/retry/_sync.py) is generated from it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, TypeVar

from ..._runtime.backends import anyio as backend
from .policy import delay, gave_up, pool_checkout, retry_policy

__all__ = ["run_with_retry_async"]

T = TypeVar("T")


def _source(factory: Callable[[], Any] | None, pool: Any) -> Callable[[], contextlib.AbstractAsyncContextManager[Any]]:
    """Where each attempt's fresh runtime comes from, as a context manager that closes it."""
    if (checkout := pool_checkout(factory, pool)) is not None:
        return checkout  # type: ignore[no-any-return]
    if factory is None:
        from ..._runtime._async import AsyncRuntime

        factory = AsyncRuntime
    made = factory

    @contextlib.asynccontextmanager
    async def fresh() -> AsyncIterator[Any]:
        async with backend.closing(made()) as runtime:
            yield runtime

    return fresh


async def run_with_retry_async(
    fn: Callable[[Any], Awaitable[T]],
    *,
    factory: Callable[[], Any] | None = None,
    pool: Any = None,
    max_attempts: int = 3,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    backoff: float = 0.0,
    max_backoff: float = 10.0,
    via_agent: bool = False,
    sleep: Callable[[float], Awaitable[Any]] = backend.sleep,
) -> T:
    """Call ``fn(runtime)`` on a fresh runtime, from ``pool`` (a :class:`~pydeno.AsyncSandboxPool`:
    warm) or ``factory`` (default ``pydeno.AsyncRuntime``), until it succeeds, the failure is
    not one to retry, or ``max_attempts`` are used; between attempts it waits ``backoff``
    seconds, doubling up to ``max_backoff``, with ``sleep``. The runtime is closed when fn
    returns, so return plain values, not handles into it."""
    policy = retry_policy(max_attempts, backoff, max_backoff, include, exclude, via_agent)
    checkout = _source(factory, pool)
    for attempt in range(1, max_attempts + 1):
        try:
            async with checkout() as runtime:
                return await fn(runtime)
        except Exception as exc:
            if attempt == max_attempts or not policy.should_retry(exc):
                gave_up(exc, attempt, max_attempts)
                raise
        if backoff:
            await sleep(delay(attempt, backoff, max_backoff))
    raise AssertionError("unreachable")  # pragma: no cover
