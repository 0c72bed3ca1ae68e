"""Which failures a retry loop retries (:class:`RetryPolicy`), and the rules both retry
loops share (pydeno/_pools/retry/_async.py and its generated twin, pydeno/_pools/retry/_sync.py).

Only failures the policy accepts are retried: by default exactly the ``retryable`` kinds (the
worker died or would not start). ``include``/``exclude`` name kinds or exception classes; a
class name matches its subclasses (``"PydenoError"`` matches every pydeno error), and
``exclude`` wins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..._base.kinds import ErrorInfo, classify_error

__all__ = ["RetryPolicy", "delay", "gave_up", "pool_checkout", "retry_policy"]


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


def delay(attempt: int, backoff: float, max_backoff: float) -> float:
    return float(min(max_backoff, backoff * 2 ** (attempt - 1)))


def retry_policy(
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


def gave_up(exc: BaseException, attempt: int, max_attempts: int) -> None:
    if attempt > 1:
        exc.add_note(f"pydeno: failed on attempt {attempt} of {max_attempts}, each on a fresh runtime")


def pool_checkout(factory: Callable[[], Any] | None, pool: Any) -> Any:
    """The pool's checkout, if a pool was given (then no factory may be)."""
    if pool is not None and factory is not None:
        raise TypeError("pass factory= or pool=, not both")
    return None if pool is None else pool.checkout
