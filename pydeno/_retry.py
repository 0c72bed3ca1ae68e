"""Retry on a fresh runtime: the loop services write, written once.

    result = pydeno.run_with_retry(lambda rt: rt.eval(code), max_attempts=3)

Each attempt gets a new runtime from ``factory`` and closes it afterwards, so a dead worker
is never reused. Only failures the policy accepts are retried: by default exactly the
``retryable`` kinds (the worker died or would not start). ``include``/``exclude`` name
kinds or exception classes; a class name matches its subclasses (``"PydenoError"`` matches
every pydeno error), and ``exclude`` wins.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio

from ._taxonomy import ErrorInfo, classify_error

__all__ = ["RetryPolicy", "run_with_retry", "run_with_retry_async"]

T = TypeVar("T")


def _names(exc: BaseException, info: ErrorInfo) -> set[str]:
    """What a policy entry can match: the kind, and every class in the exception's family."""
    return {info.kind, *(cls.__name__ for cls in type(exc).__mro__)}


@dataclass(frozen=True)
class RetryPolicy:
    """Which failures to retry. Empty ``include`` means: every retryable kind."""

    include: frozenset[str] = field(default_factory=frozenset)
    exclude: frozenset[str] = field(default_factory=frozenset)
    via_agent: bool = False

    @classmethod
    def of(cls, include: Iterable[str] = (), exclude: Iterable[str] = (), *, via_agent: bool = False) -> RetryPolicy:
        for name in (*include, *exclude):
            if not isinstance(name, str):
                raise TypeError(f"include/exclude take kind or exception class names, got {type(name).__name__}")
        return cls(frozenset(include), frozenset(exclude), via_agent)

    def should_retry(self, exc: BaseException) -> bool:
        info = classify_error(exc, via_agent=self.via_agent)
        names = _names(exc, info)
        if names & self.exclude:
            return False
        return bool(names & self.include) if self.include else info.retryable


def _check(max_attempts: int, backoff: float, max_backoff: float) -> None:
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ValueError(f"max_attempts must be an int of at least 1, got {max_attempts!r}")
    for name, value in (("backoff", backoff), ("max_backoff", max_backoff)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")


def _delay(attempt: int, backoff: float, max_backoff: float) -> float:
    return float(min(max_backoff, backoff * 2 ** (attempt - 1)))


def _policy(
    max_attempts: int,
    backoff: float,
    max_backoff: float,
    include: Iterable[str],
    exclude: Iterable[str],
    via_agent: bool,
) -> RetryPolicy:
    """The arguments both helpers share, checked, as the policy they describe."""
    _check(max_attempts, backoff, max_backoff)
    return RetryPolicy.of(include, exclude, via_agent=via_agent)


def _gave_up(exc: BaseException, attempt: int, max_attempts: int) -> None:
    if attempt > 1:
        exc.add_note(f"pydeno: failed on attempt {attempt} of {max_attempts}, each on a fresh runtime")


def _checkout(factory: Callable[[], Any] | None, pool: Any) -> Any:
    """The pool's checkout, if a pool was given (then no factory may be)."""
    if pool is not None and factory is not None:
        raise TypeError("pass factory= or pool=, not both")
    return None if pool is None else pool.checkout


def _source(factory: Callable[[], Any] | None, pool: Any) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """Where each attempt's fresh runtime comes from, as a context manager that closes it."""
    if (checkout := _checkout(factory, pool)) is not None:
        return checkout  # type: ignore[no-any-return]
    if factory is None:
        from ._runtime import Runtime

        factory = Runtime
    return lambda: contextlib.closing(factory())


def _async_source(
    factory: Callable[[], Any] | None, pool: Any
) -> Callable[[], contextlib.AbstractAsyncContextManager[Any]]:
    if (checkout := _checkout(factory, pool)) is not None:
        return checkout  # type: ignore[no-any-return]
    if factory is None:
        from ._async_runtime import AsyncRuntime

        factory = AsyncRuntime

    @contextlib.asynccontextmanager
    async def fresh() -> AsyncIterator[Any]:
        runtime = factory()
        try:
            yield runtime
        finally:
            with anyio.CancelScope(shield=True):
                await runtime.close()

    return fresh


def run_with_retry(
    fn: Callable[[Any], T],
    *,
    factory: Callable[[], Any] | None = None,
    pool: Any = None,
    max_attempts: int = 3,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    backoff: float = 0.0,
    max_backoff: float = 10.0,
    via_agent: bool = False,
    sleep: Callable[[float], Any] = time.sleep,
) -> T:
    """Call ``fn(runtime)`` on a fresh runtime, from ``pool`` (a :class:`~pydeno.SandboxPool`:
    warm) or ``factory`` (default ``pydeno.Runtime``), until it succeeds, the failure is not
    one to retry, or ``max_attempts`` are used. The runtime is closed when fn returns, so
    return plain values, not handles into it."""
    policy = _policy(max_attempts, backoff, max_backoff, include, exclude, via_agent)
    checkout = _source(factory, pool)
    for attempt in range(1, max_attempts + 1):
        try:
            with checkout() as runtime:
                return fn(runtime)
        except Exception as exc:
            if attempt == max_attempts or not policy.should_retry(exc):
                _gave_up(exc, attempt, max_attempts)
                raise
        if backoff:
            sleep(_delay(attempt, backoff, max_backoff))
    raise AssertionError("unreachable")  # pragma: no cover


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
) -> T:
    """The async twin of :func:`run_with_retry`: ``pool`` is an
    :class:`~pydeno.AsyncSandboxPool`, ``factory`` defaults to ``pydeno.AsyncRuntime``, and
    the backoff sleeps with ``anyio.sleep``."""
    policy = _policy(max_attempts, backoff, max_backoff, include, exclude, via_agent)
    checkout = _async_source(factory, pool)
    for attempt in range(1, max_attempts + 1):
        try:
            async with checkout() as runtime:
                return await fn(runtime)
        except Exception as exc:
            if attempt == max_attempts or not policy.should_retry(exc):
                _gave_up(exc, attempt, max_attempts)
                raise
        if backoff:
            await anyio.sleep(_delay(attempt, backoff, max_backoff))
    raise AssertionError("unreachable")  # pragma: no cover
