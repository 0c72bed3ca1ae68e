"""Generated from pydeno/_pools/_async.py by scripts/unasync.py: edit that file, not this one.

The sandbox pools: fresh workers, started, handshaken and self-tested before anyone asks.

``async with pool.checkout() as rt:`` (``with`` for the sync ``SandboxPool``) hands out a
runtime no one has used and closes it afterwards: a worker never serves two checkouts. A
background replenisher (a task in the pool's own task group for ``AsyncSandboxPool``, which
``async with AsyncSandboxPool(...) as pool:`` starts; a thread for ``SandboxPool``) keeps
``size`` idle workers ready and never more than ``max_workers`` alive (idle, starting and
checked out); a checkout that gets none within ``checkout_timeout`` raises
:class:`~pydeno.CheckoutTimeout`. A worker that died while idle is replaced, not handed out.
The rules are :class:`~pydeno._pools.core.PoolCore`'s; this file is the source of both pools
(pydeno/_pools/_sync.py is generated from it), which only start runtimes and wait.

``setup=`` runs on each new worker after its warm-up and before it can be checked out, so
a checkout costs the same with it: once per worker, never on one that served a checkout
(those are closed). A worker whose setup fails is closed and replaced; setups that keep
failing (:data:`~pydeno._pools.core.SETUP_ATTEMPTS` in a row) give the waiting checkouts the
setup's error.

``stats()`` sums the figures of every worker the pool started and handed out or kept ready:
a closed one's as it ended, a live one's (idle or checked out) read when it is called
(docs/observability.md). A start or a setup that failed is logged (logger ``pydeno.pool``,
WARNING, with its ``kind``); setups that failed are counted as ``setup_failures``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, Unpack

from .._base.checks import NeedsWith
from .._base.errors import PydenoError
from .._base.failures import start_failed
from .._base.kinds import classify_error
from .._base.options import RuntimeKwargs, checked_options
from .._base.stats import Stats
from .._runtime._sync import Runtime
from .._runtime.backends import sync as backend
from .core import (
    WARM_UP,
    PoolCore,
    SetupFailed,
    alive,
    checked_setup,
    refuse_awaitable,
    starters,
)

__all__ = ["SandboxPool"]

log = logging.getLogger("pydeno.pool")

# Whether setup= may be an async function: the async pool awaits what it returns, the sync
# one runs plain functions only.
_AWAITS_SETUP = False


class SandboxPool(NeedsWith):
    """``SandboxPool(size=2, max_workers=None, checkout_timeout=30.0, setup=None, **runtime_kwargs)``.

    ``size`` workers are kept idle and ready; ``max_workers`` caps the live ones (``None``:
    no cap). ``setup(rt)``, if given, prepares each new worker before it can be checked out
    (add modules, bind functions, evaluate code): a plain function taking the runtime, or
    for the async pool an async one too, whose result is awaited. Use it as a context manager, or call
    :meth:`close`: closing kills every worker the pool started, checked out, idle or still
    starting.
    """

    # What each new worker evaluates before anyone checks it out (a subclass that knows its
    # workers' first commands may warm more: a SessionPool's warms top-level await's path).
    _warm_code = WARM_UP

    def __init__(
        self,
        size: int = 2,
        *,
        max_workers: int | None = None,
        checkout_timeout: float = 30.0,
        setup: Callable[[Runtime], Any] | None = None,
        **runtime_kwargs: Unpack[RuntimeKwargs],
    ) -> None:
        checked_options(type(self), runtime_kwargs)  # a bad option fails here, not in the background
        self._core: PoolCore[Runtime] = PoolCore(size, max_workers, checkout_timeout)
        self._setup = checked_setup(setup, can_await=_AWAITS_SETUP)
        self._options = runtime_kwargs
        self._cond = backend.Condition()
        # Workers mid-start: close() kills them too, without waiting for the replenisher.
        self._starting: set[Runtime] = set()
        # The workers that started, until closed, and the figures of those closed: under a
        # plain lock, never held across an await, as stats() may come from any thread.
        self._figures_lock = threading.Lock()
        self._workers: set[Runtime] = set()
        self._retired = Stats()
        # The teardowns of workers closed after their checkout (killed at once, reaped in the
        # background): close() waits for them, so no worker outlives the pool.
        self._ending: set[Future[None]] = set()
        # Replenishers, each starting one worker at a time.
        self._background = backend.Background(self._replenish, "pydeno-pool", starters(size))
        self._background.start()

    def __enter__(self) -> SandboxPool:
        self._background.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
        self._background.leave()

    @contextlib.contextmanager
    def checkout(self, *, timeout: float | None = None) -> Iterator[Runtime]:
        """A fresh runtime for this block, closed when it ends."""
        self._background.check_started("use the pool as `with SandboxPool(...) as pool:`")
        rt = self._take(self._core.wait_for(timeout))
        try:
            yield rt
        finally:
            # The block's caller does not wait for the kernel to tear the worker down.
            self._retire(rt, wait=False)
            with backend.shielded(), self._cond:
                self._core.release(rt)
                self._cond.notify_all()

    def _take(self, limit: tuple[str, float]) -> Runtime:
        core = self._core
        started = time.monotonic()
        deadline = started + limit[1]
        dead: list[Runtime] = []
        waited = False
        try:
            with self._cond:
                core.check_open()
                core.waiting += 1
                core.requests += 1
                request = core.requests
                try:
                    while True:
                        rt, found = core.take(alive)
                        dead += found
                        if rt is not None:
                            return rt
                        # Only a checkout that has to wait wakes the replenisher: waking a
                        # thread costs the waker tens of microseconds. The spare this checkout
                        # took is refilled when the checkout ends, or when the replenisher
                        # next looks (PRUNE_INTERVAL), REFILL_DELAY at the soonest. It wakes it
                        # once: woken again by another waiting checkout's call, it would wake
                        # that one in turn, and the two would take a CPU between them.
                        if not waited:
                            self._cond.notify_all()
                        core.check_open()
                        if core.failure is not None and core.failed_for >= request:
                            # A start that began once this checkout asked failed: its answer.
                            raise core.failure
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise core.timeout(limit)
                        waited = True
                        backend.wait(self._cond, left)
                finally:
                    core.waiting -= 1
                    if waited:
                        core.waits.record_queue_wait(time.monotonic() - started)
        finally:
            for worker in dead:
                self._retire(worker)

    def _replenish(self) -> None:
        core = self._core
        while True:
            dead: list[Runtime] = []
            with self._cond:
                while not core.closed and core.wanted(time.monotonic()) == 0:
                    backend.wait(self._cond, core.next_look(time.monotonic()))
                    dead += core.prune(alive)
                if core.closed:
                    return
                core.starting += 1
                asked = core.requests
            for worker in dead:
                self._retire(worker)
            new = self._start()
            started: Runtime | PydenoError | SetupFailed = new
            if not isinstance(new, PydenoError) and self._setup is not None:
                started = self._set_up(new, self._setup)
            with self._cond:
                core.starting -= 1
                if isinstance(started, SetupFailed) and (core.closed or not core.setup_failed(started.error)):
                    # Its worker is closed: the pool is ending, or another starts at once.
                    continue
                if isinstance(started, (PydenoError, SetupFailed)):
                    failure = started.error if isinstance(started, SetupFailed) else started
                    # Another starts only when a checkout asks that had not when this one
                    # began (see PoolCore.wanted): a machine that refuses workers must not be
                    # hammered in the background. A streak of failed setups is the answer of
                    # every checkout waiting now, whenever it asked: the setup is what fails.
                    core.failure = failure
                    core.failed_for = core.requests if isinstance(started, SetupFailed) else asked
                    self._cond.notify_all()
                    continue
                rt = started
                core.failure = None
                core.setup_streak = 0
                if not core.closed:
                    core.idle.append(rt)
                    self._cond.notify_all()
                    continue
            self._retire(rt)

    def _start(self) -> Runtime | PydenoError:
        """A new worker, handshaken and warmed (its first evaluation's cold paths), or why
        none could start: the replenisher must never die of it."""
        try:
            rt = Runtime(**self._options)
        except PydenoError as exc:
            return _start_failed(exc)
        except Exception as exc:  # noqa: BLE001 - reported to the checkouts that wait
            return _start_failed(start_failed(type(exc).__name__))
        self._starting.add(rt)
        try:
            rt._steps.warm_up(self._warm_code)
        except BaseException as exc:
            rt.close()
            if not isinstance(exc, Exception):
                raise
            failure = exc if isinstance(exc, PydenoError) else start_failed(type(exc).__name__)
            # close() kills a worker that is still starting: that is the pool ending, not a
            # start that failed, so nothing is logged for it.
            return failure if self._core.closed else _start_failed(failure)
        finally:
            self._starting.discard(rt)
        with self._figures_lock:
            self._workers.add(rt)
        return rt

    def _set_up(self, rt: Runtime, setup: Callable[[Runtime], Any]) -> Runtime | SetupFailed:
        """rt once setup ran on it, or what setup raised: its worker is then closed, never
        handed out half set up. close() kills a worker mid-setup too."""
        self._starting.add(rt)
        try:
            result = setup(rt)
            if inspect.isawaitable(result):
                refuse_awaitable(result, can_await=_AWAITS_SETUP)
            if not alive(rt):
                # A setup that caught its runtime's failure (a timeout, say) left it closed.
                raise start_failed("the pool's setup= left the worker closed or dead")
            self._check_set_up(rt)
        except BaseException as exc:
            self._retire(rt)
            if not isinstance(exc, Exception):
                raise
            if not self._core.closed:
                kind = classify_error(exc).kind
                log.warning(
                    "pydeno: the pool's setup failed on a new worker, which was closed: %s",
                    kind,
                    extra={"kind": kind, "pid": None},
                )
            return SetupFailed(exc)
        finally:
            self._starting.discard(rt)
        return rt

    def _check_set_up(self, rt: Runtime) -> None:
        """Raise if what setup left on rt cannot serve this pool's checkouts (a subclass's
        rule: a session pool's)."""

    def _retire(self, rt: Runtime, *, wait: bool = True) -> None:
        """Close a worker, and keep its figures (once) in the pool's. ``wait=False``: it is
        killed now and reaped in the background; close() waits for that."""
        if wait:
            rt.close()
        else:
            ending = rt._steps.retire()
            if ending is not None:
                with self._figures_lock:
                    self._ending.add(ending)
                ending.add_done_callback(self._ended)
        with self._figures_lock:
            if rt in self._workers:
                self._workers.discard(rt)
                self._retired.merge(rt._steps.stats())

    def close(self) -> None:
        """Stop replenishing and kill every worker the pool started. Idempotent."""
        with backend.shielded():
            with self._cond:
                self._core.closed = True
                workers = [*self._core.idle, *self._core.checked_out, *self._starting]
                self._core.idle.clear()
                self._cond.notify_all()
            for rt in workers:
                self._retire(rt)
            with self._figures_lock:
                ending = list(self._ending)
            if ending:
                backend.blocking(lambda: concurrent.futures.wait(ending))
        self._background.join()

    def _ended(self, ending: Future[None]) -> None:
        with self._figures_lock:
            self._ending.discard(ending)

    @property
    def closed(self) -> bool:
        return self._core.closed

    def stats(self) -> dict[str, Any]:
        """The pool's figures as a new JSON-ready dict (docs/observability.md): the keys of
        ``Runtime.stats()`` summed over the workers it started (a live one's read now), its
        checkout waits as ``queue_wait_seconds``, and ``checkouts``, ``size``,
        ``max_workers``, ``idle`` and ``live``. Readable after close()."""
        with self._figures_lock:
            workers = self._retired.copy()
            for rt in list(self._workers):
                workers.merge(rt._steps.stats())
        return self._core.stats(workers)


def _start_failed(exc: PydenoError) -> PydenoError:
    """A start failure, logged (its kind only: its message may hold the worker's text)."""
    kind = classify_error(exc).kind
    log.warning("pydeno: the pool could not start a worker: %s", kind, extra={"kind": kind, "pid": None})
    return exc
