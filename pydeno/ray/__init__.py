"""Sandboxes on a Ray cluster: :class:`RayPool` and :class:`RayCodeMode`.

It needs the ``ray`` extra (``pip install -e '.[ray]'`` in a checkout); ``import pydeno``
never imports this module. Every node needs this pydeno too: docs/ray.md says how to ship
its wheel with a job (never a ``"pip"`` entry naming pydeno: that installs another project).

    import ray
    import pydeno.ray

    ray.init()
    with pydeno.ray.RayPool(actors=2, workers_per_actor=1, timeout=5) as pool:
        pool.eval("1 + 1")                        # 2
        pool.map(["1", "2 * 3"])                  # [1, 6], in order
        ref = pool.submit("40 + 2")               # a ray.ObjectRef
        pool.result(ref)                          # 42 (ray.get(ref) gives it too)

Each actor owns a warm :class:`~pydeno.SandboxPool` on its node and runs each command on a
fresh worker from it, as a local pool does; it asks Ray for one CPU per worker
(``num_cpus=workers_per_actor``). The driver admits at most ``max_inflight_per_actor``
commands per actor at once and queues the rest itself, not in the actors' mailboxes; a
``submit()`` that finds every actor full waits for a place before it returns its reference.

Errors cross the boundary as the pydeno exception the actor raised: same type, message,
``kind``, ``hint``, ``docs``, notes and attributes. Ray raises it wrapped
(``RayTaskError(<class>)``, an instance of both, whose ``str()`` is the remote
traceback); ``eval``, ``map``, ``execute`` and :meth:`RayPool.result` raise the original.
An actor that dies gives :class:`~pydeno.ActorDied` (kind ``actor_died``, retryable), and the
pool replaces the actor before it admits the next command. With ``max_attempts`` above 1,
work that failed with a kind the ``retry`` policy accepts (by default every retryable kind)
runs again on a fresh worker, on any actor. docs/ray.md says how each part was decided.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Any, Final, Unpack

from .._base.checks import NeedsWith, code_text, count, optional_count, optional_seconds, seconds
from .._base.options import RuntimeKwargs, checked_options
from .._code_mode.api import CodeModeTools
from .._code_mode.core import Execution
from .._code_mode.result import DEFAULT_MAX_OUTPUT_CHARS, ExecutionResult, check_output_chars
from .._pools.retry.policy import RetryPolicy, delay, gave_up, retry_policy
from .._tools.approval import ApprovePolicy
from .._version import extra_missing, missing_extra

RAY_EXTRA_MISSING: Final = extra_missing("pydeno.ray", "ray")

try:
    import ray
except ImportError as exc:
    missing = missing_extra(exc, "pydeno.ray", "ray", frozenset({"ray"}))
    if missing is None:
        raise
    raise missing from exc

from ._dispatch import OWN_OPTIONS, ActorClass, Actors, Call, actor_died  # noqa: E402 - it imports ray, checked just above

__all__ = ["RayCodeMode", "RayPool", "actor_died"]


def _number(name: str, value: Any, *, positive: bool, alternative: str = "") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number{alternative}, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be a {'positive' if positive else 'non-negative'}, finite number, got {value!r}")
    return float(value)


class _RayPoolBase(NeedsWith):
    """What RayPool and RayCodeMode share: the arguments, the actors, stats() and close()."""

    _method: str = "eval"
    # How long an actor holds a used worker for the driver's word that it has the reply
    # (pydeno/ray/_actor.py); None: the actor's own limit. Tests set it.
    _hold_limit: float | None = None

    def __init__(
        self,
        *,
        actors: int,
        workers_per_actor: int,
        max_inflight_per_actor: int | None,
        num_cpus_per_actor: float | None,
        worker_start_rate: float | None,
        start_jitter: float,
        max_attempts: int,
        retry: RetryPolicy | None,
        backoff: float,
        max_backoff: float,
        checkout_timeout: float,
        start_timeout: float,
        actor_options: Mapping[str, Any] | None,
        runtime_kwargs: dict[str, Any],
        code_mode: dict[str, Any] | None,
    ) -> None:
        actors = count("actors", actors, 1)
        workers = count("workers_per_actor", workers_per_actor, 1)
        limit = optional_count("max_inflight_per_actor", max_inflight_per_actor, 1) or workers
        cpus = (
            workers if num_cpus_per_actor is None else _number("num_cpus_per_actor", num_cpus_per_actor, positive=False)
        )
        rate = None if worker_start_rate is None else _number("worker_start_rate", worker_start_rate, positive=True)
        jitter = _number("start_jitter", start_jitter, positive=False)
        policy = retry_policy(max_attempts, backoff, max_backoff, (), (), False)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError(f"retry must be a pydeno.RetryPolicy or None, got {type(retry).__name__}")
        self._policy = retry if retry is not None else policy
        self._max_attempts, self._backoff, self._max_backoff = max_attempts, backoff, max_backoff
        checkout_timeout = seconds("checkout_timeout", checkout_timeout)
        start_timeout = seconds("start_timeout", start_timeout)
        if actor_options is not None and not isinstance(actor_options, Mapping):
            raise TypeError(f"actor_options must be a mapping of Ray actor options, got {type(actor_options).__name__}")
        extra = dict(actor_options or {})
        if owned := sorted(OWN_OPTIONS & set(extra)):
            raise ValueError(f"actor_options may not set {', '.join(owned)}: the pool decides them")
        checked_options(type(self), runtime_kwargs)  # a bad option fails here, before any actor starts
        options: dict[str, Any] = {
            "num_cpus": cpus,
            "max_concurrency": limit,
            "max_restarts": 0,
            "max_task_retries": 0,
            "scheduling_strategy": "SPREAD",
            **extra,
        }
        make_actor = ActorClass.options(**options)

        def make(index: int) -> Any:
            return make_actor.remote(
                index,
                runtime_kwargs,
                size=workers,
                max_workers=workers + limit,
                checkout_timeout=checkout_timeout,
                start_rate=rate,
                start_jitter=jitter,
                code_mode=code_mode,
                **({} if self._hold_limit is None else {"hold_limit": self._hold_limit}),
            )

        asks = ", ".join(f"{k}={v}" for k, v in options.items() if k in ("num_cpus", "num_gpus", "memory", "resources"))
        self._actors = Actors(actors, limit, make, start_timeout, asks)

    def _pause(self, attempt: int) -> None:
        if self._backoff:
            time.sleep(delay(attempt, self._backoff, self._max_backoff))

    def _retry(self, exc: BaseException, attempt: int) -> bool:
        """Whether to run failed work again; when not, the failure says how many tries it had."""
        if attempt < self._max_attempts and self._policy.should_retry(exc):
            return True
        gave_up(exc, attempt, self._max_attempts)
        return False

    def stats(self) -> dict[str, Any]:
        """The pool's figures as a new dict: the keys every pydeno ``stats()`` has (the
        workers' figures summed over the actors, with those of actors that are gone as they
        last reported them; ``commands`` is the commands the pool answered, and
        ``queue_wait_seconds`` the waits for admission), and ``actors``,
        ``actors_replaced``, ``inflight``, ``max_inflight_per_actor`` and ``per_actor``
        (each actor's pool's ``stats()``, with its ``index``, ``running``,
        ``peak_running`` and ``held``). Asks every live actor; readable after close()."""
        return self._actors.stats()

    def close(self) -> None:
        """Kill every worker and every actor of the pool. Idempotent. Commands still running
        fail; those waiting for admission raise ``RuntimeError("the pool is closed")``."""
        self._actors.close()

    @property
    def closed(self) -> bool:
        return self._actors.closed


class RayPool(_RayPoolBase):
    """``RayPool(actors=1, workers_per_actor=1, *, max_inflight_per_actor=None,
    num_cpus_per_actor=None, worker_start_rate=20.0, start_jitter=0.05, max_attempts=1,
    retry=None, backoff=0.0, max_backoff=10.0, checkout_timeout=30.0, start_timeout=60.0,
    actor_options=None, **runtime_kwargs)``.

    ``actors`` Ray actors, each with a warm pool of ``workers_per_actor`` fresh workers (the
    rest configures them, as for :class:`~pydeno.Runtime`). ``max_inflight_per_actor``
    (default ``workers_per_actor``) commands run on an actor at once; more wait in the
    driver. Each actor asks Ray for ``num_cpus_per_actor`` CPUs (default: one per worker);
    ``actor_options`` adds Ray actor options (``resources``, ``memory``, ``runtime_env``,
    ``scheduling_strategy``, ...). An actor starts at most ``worker_start_rate`` workers a
    second (``None``: no limit), a start the limit holds back waiting up to ``start_jitter``
    seconds more at random. With ``max_attempts`` above 1, work that failed with a kind
    ``retry`` accepts (default: the retryable kinds) runs again on a fresh worker, waiting
    ``backoff`` seconds (doubling, up to ``max_backoff``) between attempts. The constructor
    waits until every actor is up, at most ``start_timeout`` seconds (then a
    ``TimeoutError``).
    """

    def __init__(
        self,
        actors: int = 1,
        workers_per_actor: int = 1,
        *,
        max_inflight_per_actor: int | None = None,
        num_cpus_per_actor: float | None = None,
        worker_start_rate: float | None = 20.0,
        start_jitter: float = 0.05,
        max_attempts: int = 1,
        retry: RetryPolicy | None = None,
        backoff: float = 0.0,
        max_backoff: float = 10.0,
        checkout_timeout: float = 30.0,
        start_timeout: float = 60.0,
        actor_options: Mapping[str, Any] | None = None,
        **runtime_kwargs: Unpack[RuntimeKwargs],
    ) -> None:
        super().__init__(
            actors=actors,
            workers_per_actor=workers_per_actor,
            max_inflight_per_actor=max_inflight_per_actor,
            num_cpus_per_actor=num_cpus_per_actor,
            worker_start_rate=worker_start_rate,
            start_jitter=start_jitter,
            max_attempts=max_attempts,
            retry=retry,
            backoff=backoff,
            max_backoff=max_backoff,
            checkout_timeout=checkout_timeout,
            start_timeout=start_timeout,
            actor_options=actor_options,
            runtime_kwargs=dict(runtime_kwargs),
            code_mode=None,
        )

    def eval(self, code: str, *, timeout: float | None = None) -> Any:
        """Evaluate code on a fresh worker of one of the actors: its value, or the pydeno
        exception it failed with (ActorDied if the actor died)."""
        code = code_text(code)
        timeout = optional_seconds("timeout", timeout)
        attempt = 1
        while True:
            call = self._actors.dispatch("eval", code, timeout)
            assert call is not None
            value, error = self._actors.settle(call, "eval")
            if error is None:
                return value
            if not self._retry(error, attempt):
                raise error
            self._pause(attempt)
            attempt += 1

    def map(self, codes: Iterable[str], *, timeout: float | None = None, return_exceptions: bool = False) -> list[Any]:
        """Evaluate each of codes, each on a fresh worker, as many at once as admission
        allows: their values, in the order of codes. A failure (after its retries) stops
        the items not yet sent, and once those running have ended, the exception of the
        first failed item (by position) is raised; with ``return_exceptions=True`` every
        item runs and a failed one's exception takes its place in the list."""
        if isinstance(codes, (str, bytes)):
            raise TypeError("codes must be an iterable of str, not a single str")
        items = [code_text(code) for code in codes]
        timeout = optional_seconds("timeout", timeout)
        if not isinstance(return_exceptions, bool):
            raise TypeError(f"return_exceptions must be a bool, got {type(return_exceptions).__name__}")
        results: list[Any] = [None] * len(items)
        failed: dict[int, BaseException] = {}
        todo: deque[tuple[int, int]] = deque((i, 1) for i in range(len(items)))
        later: list[tuple[float, int, int]] = []  # retries waiting out their backoff
        running: dict[Future[Any], tuple[Call, int, int]] = {}
        actors = self._actors
        # Since when each queued item has waited for admission (the waits the pool's stats
        # count): an item waits from the first time one ahead of it, or it, found every actor
        # full, not only from when it reached the head of the queue.
        blocked: dict[int, float] = {}
        while todo or later or running:
            now = time.monotonic()
            for entry in [e for e in later if e[0] <= now]:
                later.remove(entry)
                todo.append(entry[1:])
            while todo and (return_exceptions or not failed):
                head = todo[0][0]
                call = actors.dispatch("eval", items[head], timeout, block=not running, since=blocked.get(head))
                if call is None:
                    for index, _ in todo:
                        blocked.setdefault(index, now)
                    break
                index, attempt = todo.popleft()
                blocked.pop(index, None)
                running[call.future] = (call, index, attempt)
            if not return_exceptions and failed:
                todo.clear()
                later.clear()
            if not running:
                if later:
                    time.sleep(max(0.0, min(e[0] for e in later) - time.monotonic()))
                continue
            actors.wait_for(running, room=bool(todo), until=min((e[0] for e in later), default=None))
            for future in [f for f in running if f.done()]:
                call, index, attempt = running.pop(future)
                value, error = actors.settle(call, "eval")
                if error is None:
                    results[index] = value
                elif self._retry(error, attempt):
                    wait = delay(attempt, self._backoff, self._max_backoff) if self._backoff else 0.0
                    if wait:
                        later.append((time.monotonic() + wait, index, attempt + 1))
                    else:
                        todo.append((index, attempt + 1))
                else:
                    failed[index] = error
        if failed and not return_exceptions:
            raise failed[min(failed)]
        for index, error in failed.items():
            results[index] = error
        return results

    def submit(self, code: str, *, timeout: float | None = None) -> ray.ObjectRef[Any]:
        """Send code to an actor and return the Ray object reference of its value, waiting
        first for a place if every actor is full. ``ray.get(ref)`` gives the value, or raises
        Ray's wrapper of the pydeno exception (an instance of the same class, whose kind,
        hint and attributes are the original's); :meth:`result` raises the original itself,
        and ActorDied for an actor that died. One attempt: eval() and map() retry."""
        code = code_text(code)
        timeout = optional_seconds("timeout", timeout)
        call = self._actors.dispatch("eval", code, timeout)
        assert call is not None
        return call.ref  # type: ignore[no-any-return]

    def result(self, ref: ray.ObjectRef[Any], *, timeout: float | None = None) -> Any:
        """The value behind a reference :meth:`submit` returned, as eval() would give it:
        the pydeno exception itself for a failure, ActorDied for an actor that died. A
        ``timeout`` (seconds) that passes raises Ray's ``GetTimeoutError`` (a TimeoutError)."""
        timeout = optional_seconds("timeout", timeout)
        return self._actors.unwrap(ref, timeout)

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class RayCodeMode(_RayPoolBase):
    """``RayCodeMode(tools, *, actors=1, workers_per_actor=1, max_tool_calls=None,
    max_output_chars=20000, approve=None, ..., **runtime_kwargs)``: Code Mode
    (:class:`~pydeno.CodeMode`) on a Ray pool. ``tools`` (and ``approve``, if a callable)
    are pickled to every actor and run there, in the actor's process on the node where the
    program runs, not in the driver: they must be picklable and must reach what they use
    from that node. Each :meth:`execute` runs on a fresh worker. ``approve="ask"`` cannot
    pause across Ray: such a tool is refused, as ``CodeMode.execute`` refuses it. The pool
    arguments are :class:`RayPool`'s.
    """

    _method = "execute"

    def __init__(
        self,
        tools: Any,
        *,
        actors: int = 1,
        workers_per_actor: int = 1,
        max_tool_calls: int | None = None,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        approve: ApprovePolicy = None,
        max_inflight_per_actor: int | None = None,
        num_cpus_per_actor: float | None = None,
        worker_start_rate: float | None = 20.0,
        start_jitter: float = 0.05,
        max_attempts: int = 1,
        retry: RetryPolicy | None = None,
        backoff: float = 0.0,
        max_backoff: float = 10.0,
        checkout_timeout: float = 30.0,
        start_timeout: float = 60.0,
        actor_options: Mapping[str, Any] | None = None,
        **runtime_kwargs: Unpack[RuntimeKwargs],
    ) -> None:
        packages = runtime_kwargs.get("packages")
        self._tools = CodeModeTools(tools, max_tool_calls=max_tool_calls, approve=approve, packages=packages)
        self.max_output_chars = check_output_chars(max_output_chars)
        self._expose = bool(runtime_kwargs.get("expose_host_errors", False))
        code_mode = {
            "tools": list(self._tools.tools.values()),
            "max_tool_calls": self._tools.max_tool_calls,
            "max_output_chars": self.max_output_chars,
            "approve": self._tools.approve,
        }
        try:
            ray.cloudpickle.dumps(code_mode)  # type: ignore[no-untyped-call]
        except Exception as exc:  # noqa: BLE001 - any pickling failure is the same misuse
            raise TypeError(
                f"tools and approve= must be picklable to run on Ray actors: {type(exc).__name__}: {exc}"
            ) from None
        super().__init__(
            actors=actors,
            workers_per_actor=workers_per_actor,
            max_inflight_per_actor=max_inflight_per_actor,
            num_cpus_per_actor=num_cpus_per_actor,
            worker_start_rate=worker_start_rate,
            start_jitter=start_jitter,
            max_attempts=max_attempts,
            retry=retry,
            backoff=backoff,
            max_backoff=max_backoff,
            checkout_timeout=checkout_timeout,
            start_timeout=start_timeout,
            actor_options=actor_options,
            runtime_kwargs=dict(runtime_kwargs),
            code_mode=code_mode,
        )

    def typescript(self) -> str:
        """The ``.d.ts`` of ``tools``, as :meth:`pydeno.CodeMode.typescript` gives it."""
        return self._tools.typescript()

    def describe(self) -> str:
        """The prompt text, as :meth:`pydeno.CodeMode.describe` gives it."""
        return self._tools.describe()

    def execute(self, code: str, *, timeout: float | None = None, typecheck: bool = False) -> ExecutionResult:
        """Run a program on a fresh worker of one of the actors, as
        :meth:`pydeno.CodeMode.execute` does: the result says what failed and why (an actor
        that died is kind ``actor_died``); raises only for misuse."""
        code = code_text(code)
        timeout = optional_seconds("timeout", timeout)
        if not isinstance(typecheck, bool):
            raise TypeError(f"typecheck must be a bool, got {type(typecheck).__name__}")
        attempt = 1
        while True:
            call = self._actors.dispatch("execute", code, timeout, typecheck)
            assert call is not None
            value, error = self._actors.settle(call, "execute")
            if error is not None:
                result = Execution(self._tools, self.max_output_chars, expose=self._expose).result(error=error)
            else:
                result = value
            failure = result.exception
            if failure is None or not self._retry(failure, attempt):
                return result
            self._pause(attempt)
            attempt += 1

    def __enter__(self) -> RayCodeMode:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
