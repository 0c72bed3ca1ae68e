"""A pool's state and rules, with no I/O (:class:`PoolCore`), shared by both pools: the
async source (pydeno/_pools/_async.py) and its generated sync twin (pydeno/_pools/_sync.py)."""

from __future__ import annotations

import inspect
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar, cast

from .._base.checks import count, optional_count, seconds
from .._base.errors import CheckoutTimeout
from .._base.stats import Stats

__all__ = [
    "PRUNE_INTERVAL",
    "REFILL_DELAY",
    "SETUP_ATTEMPTS",
    "WARM_UP",
    "PoolCore",
    "SetupFailed",
    "alive",
    "checked_setup",
    "refuse_awaitable",
    "starters",
]

# After a checkout, starting a spare waits this long (or until the checkout ends): a worker
# starting up takes a core, and on a small machine it would double the latency of the first
# evaluations of the runtime just handed out (about 2.3 ms instead of 0.8 ms here).
REFILL_DELAY: Final = 0.05


def starters(size: int) -> int:
    """How many workers a pool of ``size`` starts at once: a start keeps about a core busy
    (deno's start-up, the worker's code compiled), so one after another they leave the other
    cores idle while checkouts wait; up to one per CPU this process may run on (a container's
    cpuset, not the machine's count), and no more than the pool keeps ready."""
    return max(1, min(size, len(os.sched_getaffinity(0))))


# How often the replenisher looks for idle workers that died, at most.
PRUNE_INTERVAL: Final = 0.5
# A setup= that fails on this many new workers in a row is taken to fail on every one: its
# error becomes the answer of the checkouts waiting (a start failure's rule), instead of
# the pool starting and closing workers for as long as they wait. One that fails now and
# then only costs a replacement.
SETUP_ATTEMPTS: Final = 3

R = TypeVar("R")


class PoolCore(Generic[R]):
    """A pool's state and rules, with no I/O: how many workers to start, which idle one to
    hand out, when a checkout has waited too long. Callers hold the driver's lock."""

    def __init__(self, size: Any, max_workers: Any, checkout_timeout: Any) -> None:
        self.size = count("size", size, 0)
        # Its lower bound depends on size, so the message names both.
        self.max_workers = optional_count("max_workers", max_workers, None)
        if self.max_workers is not None and self.max_workers < max(1, self.size):
            raise ValueError(f"max_workers must be at least 1 and at least size={size}, got {max_workers}")
        self.checkout_timeout = seconds("checkout_timeout", checkout_timeout)
        self.idle: deque[R] = deque()
        self.starting = 0
        self.checked_out: set[R] = set()
        self.waiting = 0
        self.requests = 0
        self.refill_after = 0.0
        self.closed = False
        # The last start failure, and how many checkouts had asked when the failed start
        # began: a checkout waiting on a start that fails gets that failure rather than a
        # timeout, but not the failure of one that began before it asked (with starts side by
        # side, one can fail after another checkout's start has).
        self.failure: Exception | None = None
        self.failed_for = 0
        # Setups that failed (a worker closed for it each): in all, for stats(), and in a
        # row since the last worker that was set up.
        self.setup_failures = 0
        self.setup_streak = 0
        # For stats(): checkouts served, and the waits of those that found no idle worker
        # (the ones that timed out too).
        self.checkouts = 0
        self.waits = Stats()

    @property
    def live(self) -> int:
        return len(self.idle) + self.starting + len(self.checked_out)

    def wanted(self, now: float) -> int:
        """How many workers to start now: enough for ``size`` idle ones plus every waiting
        checkout, within ``max_workers``. Refilling spares waits a moment after a checkout
        (see REFILL_DELAY) unless a checkout is waiting."""
        if self.closed or (self.waiting == 0 and now < self.refill_after):
            return 0
        want = self.size + self.waiting - len(self.idle) - self.starting
        if self.max_workers is not None:
            want = min(want, self.max_workers - self.live)
        if self.failure is not None:
            # The last start failed: another only for a checkout that has asked since that
            # start began, and one at a time, as a machine that refuses workers gives every
            # start side by side the same answer.
            if self.requests <= self.failed_for:
                return 0
            want = min(want, 1 - self.starting)
        elif self.setup_streak:
            # Setups have been failing: no more side by side than the streak has left, so
            # that the one that makes it SETUP_ATTEMPTS is the last.
            want = min(want, SETUP_ATTEMPTS - self.setup_streak - self.starting)
        return max(0, want)

    def take(self, alive: Any) -> tuple[R | None, list[R]]:
        """An idle worker to hand out (or None), and the dead ones found on the way, which the
        caller closes. ``alive(worker)`` says whether a worker is still usable."""
        dead: list[R] = []
        while self.idle:
            worker = self.idle.popleft()
            if alive(worker):
                self.checked_out.add(worker)
                self.checkouts += 1
                self.refill_after = time.monotonic() + REFILL_DELAY
                return worker, dead
            dead.append(worker)
        return None, dead

    def wait_for(self, timeout: Any) -> tuple[str, float]:
        """Which limit a checkout waits under, and for how long: its own ``timeout=``, or the
        pool's ``checkout_timeout``."""
        if timeout is None:
            return "checkout_timeout", self.checkout_timeout
        return "timeout", seconds("timeout", timeout)

    def timeout(self, limit: tuple[str, float]) -> CheckoutTimeout:
        name, wait = limit
        cap = "no cap" if self.max_workers is None else f"max_workers={self.max_workers}"
        return CheckoutTimeout(
            f"no fresh sandbox within {name}={wait}s ({cap}, "
            f"{len(self.checked_out)} checked out, {self.starting} starting); nothing ran",
            hint=(
                f"retry (nothing ran); or raise max_workers= (now {self.max_workers}) or "
                f"{name}= (now {wait}) of the {'pool' if name == 'checkout_timeout' else 'checkout'}"
            ),
        )

    def next_look(self, now: float) -> float:
        """How long the replenisher may sleep: until a deferred refill is due, and at most
        PRUNE_INTERVAL, so that a worker dying while idle is replaced without waiting for a
        checkout to find it."""
        return min(PRUNE_INTERVAL, max(0.0, self.refill_after - now) or PRUNE_INTERVAL)

    def prune(self, alive: Any) -> list[R]:
        """Take the dead workers out of the idle queue; the caller closes them."""
        dead = [worker for worker in self.idle if not alive(worker)]
        for worker in dead:
            self.idle.remove(worker)
        return dead

    def release(self, worker: R) -> None:
        """A checkout ended (its worker is closed): refill now."""
        self.checked_out.discard(worker)
        self.refill_after = 0.0

    def setup_failed(self, error: Exception) -> bool:
        """A new worker's setup failed (the worker is closed): whether that is now the
        answer of the waiting checkouts, as setups have failed SETUP_ATTEMPTS times in a
        row; else the caller starts another worker at once."""
        self.setup_failures += 1
        self.setup_streak += 1
        if self.setup_streak < SETUP_ATTEMPTS:
            return False
        note = (
            f"raised by the pool's setup= on {self.setup_streak} new workers in a row, each closed; "
            "no worker was handed out"
        )
        # A setup may raise one exception object again and again: it gets one such note.
        if not any(str(old).startswith("raised by the pool's setup=") for old in getattr(error, "__notes__", ())):
            error.add_note(note)
        return True

    def check_open(self) -> None:
        if self.closed:
            raise RuntimeError("the pool is closed")

    def stats(self, workers: Stats) -> dict[str, Any]:
        """A pool's stats() dict: the figures of its workers, its own checkout waits as
        queue_wait_seconds (a runtime's own lock waits are not a pool's), and its state."""
        total = workers.copy()
        total.queue_wait_count = self.waits.queue_wait_count
        total.queue_wait_total = self.waits.queue_wait_total
        total.queue_wait_max = self.waits.queue_wait_max
        return {
            **total.as_dict(),
            "checkouts": self.checkouts,
            "size": self.size,
            "max_workers": self.max_workers,
            "idle": len(self.idle),
            "live": self.live,
            "setup_failures": self.setup_failures,
        }


# Evaluated once by the pool on each new worker, before anyone checks it out: the first
# evaluation in a fresh worker pays for code paths that are cold on both sides (about 2 ms
# here, against 0.1 ms warm). It runs no guest code and leaves no state behind.
WARM_UP: Final = "void 0"
# A warm-up for workers whose first commands will use await (a SessionPool's): a worker
# evaluates code with await on another path, whose first use costs several milliseconds.
# Kept here, out of the drivers' source, whose sync twin is generated without awaits.
WARM_UP_AWAIT: Final = "await undefined"


def alive(rt: Any) -> bool:
    """Whether a pooled runtime is still fit to hand out: open, its worker running."""
    return bool(rt._steps.alive())


class SetupFailed:
    """What a new worker's setup raised (the worker is closed), for the replenisher."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


def checked_setup(setup: Any, *, can_await: bool) -> Callable[[Any], Any] | None:
    """setup= of a pool: None, or a callable taking the new worker's runtime; an async
    function only where the pool awaits it (``can_await``: the async pool)."""
    if setup is not None and not callable(setup):
        raise TypeError(
            f"setup must be a function taking the new worker's runtime (or None), got {type(setup).__name__}"
        )
    if not can_await and inspect.iscoroutinefunction(setup):
        raise TypeError(
            "setup of a SandboxPool must be a plain function taking a pydeno.Runtime, got an async function; "
            "use pydeno.AsyncSandboxPool for an async setup"
        )
    return cast("Callable[[Any], Any] | None", setup)


def refuse_awaitable(result: Any, *, can_await: bool) -> None:
    """What a sync pool's setup returned: an awaitable means the setup did not run."""
    if not can_await:
        if inspect.iscoroutine(result):
            result.close()
        raise TypeError(
            "setup of a SandboxPool returned an awaitable, which a sync pool cannot run; "
            "make it a plain function, or use pydeno.AsyncSandboxPool"
        )
