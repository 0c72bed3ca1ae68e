"""The Ray actor behind :mod:`pydeno.ray`: a warm :class:`~pydeno.SandboxPool` on its node.

Each actor owns one local pool and runs each command on a fresh worker from it, as a local
pool's checkout would; several commands at once, one per thread of a threaded actor (the
driver admits at most ``max_inflight`` of them, and Ray's ``max_concurrency`` is the same
number, so a command never waits inside the actor for a thread). Its ``info``, ``stats`` and
``close`` run in a concurrency group of their own, so a busy actor still answers them.

Failures are raised as they are: Ray carries the pydeno exception back as the ``cause`` of
its ``RayTaskError``, pickled with its attributes, and the driver raises that cause.

A command's checkout does not end when the command does: its worker is stopped at once
(SIGSTOP: the guest runs nothing more, and the worker serves no other command) and is held
until the driver, once it holds the reply, sends :meth:`SandboxActor.end` for it. Ending a
checkout kills the worker and starts its replacement, and the kernel's teardown of a worker
is heavy: done while Ray sends the reply, it competed with that on the node's CPUs and
delayed the reply. The driver's word says when the reply has gone; :data:`HOLD_LIMIT` ends
a checkout the driver never ends (a lost driver, a lost message), and close() ends every one
still held.

Worker starts are spaced (:class:`StartSpacing`): at most ``rate`` per second, and a start
the limit holds back waits a random extra moment, so that actors warming up together (a new
pool, or a node that killed many workers at once) do not start their workers in lockstep.

Imported only by pydeno/ray/__init__.py, once it knows Ray is installed.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any, Final, Unpack

import psutil
import ray

from .._base.errors import PydenoError
from .._base.failures import start_failed
from .._base.options import RuntimeKwargs
from .._code_mode._sync import CodeMode
from .._code_mode.api import CodeModeTools
from .._code_mode.core import Execution, route_console
from .._code_mode.result import ExecutionResult
from .._pools._sync import SandboxPool
from .._runtime._sync import Runtime
from .._runtime.function import JsFunction

__all__ = ["CONTROL", "ENDS", "HOLD_LIMIT", "Held", "SandboxActor", "SpacedPool", "StartSpacing"]

# The concurrency group of the calls that must not queue behind commands.
CONTROL: Final = "control"
# The concurrency group of the driver's end() calls: one thread, never behind a command.
ENDS: Final = "ends"
# The longest a used worker is held, stopped, waiting for the driver's end() (seconds). The
# driver sends it as soon as it holds the reply, well within this; the limit is for an end
# that never comes (the driver died, a lost message, a caller that never took the reply).
# Short, as a held worker still counts against the pool's max_workers and holds its memory.
HOLD_LIMIT: Final = 1.0
# How many worker start times an actor keeps, for info().
_KEPT_STARTS: Final = 256

_NO_FUNCTIONS: Final = (
    "the value holds a function handle (JsFunction), which ends with the worker that made it: "
    "a pool's command returns plain data"
)


def _holds_function(value: Any) -> bool:
    """Whether a result holds a JsFunction anywhere (the containers a result can have)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, JsFunction):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


class StartSpacing:
    """When the next worker start may begin: ``interval`` seconds after the one before began,
    at the soonest. A start the limit holds back (and an actor's first, which may coincide
    with every other actor's) waits up to ``jitter`` seconds more, at random; a start the
    limit does not hold back begins at once. Used from one thread (the pool's replenisher)."""

    def __init__(self, rate: float | None, jitter: float, rng: random.Random | None = None) -> None:
        self.interval = 0.0 if rate is None else 1.0 / rate
        self.jitter = jitter
        self._rng = rng if rng is not None else random.Random()
        self._next: float | None = None

    def delay(self, now: float) -> float:
        """How long a start asked for at ``now`` waits."""
        if self._next is not None and now >= self._next:
            return 0.0
        base = now if self._next is None else self._next
        return base - now + (self._rng.uniform(0.0, self.jitter) if self.jitter else 0.0)

    def began(self, at: float) -> None:
        """A start began at ``at``: the next one is reckoned from it."""
        self._next = at + self.interval


class SpacedPool(SandboxPool):
    """A :class:`~pydeno.SandboxPool` whose worker starts are spaced by a
    :class:`StartSpacing`. A close() wakes a start that is waiting its turn; that start then
    starts nothing."""

    def __init__(
        self,
        size: int,
        *,
        max_workers: int | None,
        checkout_timeout: float,
        spacing: StartSpacing,
        **runtime_kwargs: Unpack[RuntimeKwargs],
    ) -> None:
        # Set before the pool's constructor starts the replenisher, which reads them.
        self._spacing = spacing
        self.start_times: deque[float] = deque(maxlen=_KEPT_STARTS)
        super().__init__(size, max_workers=max_workers, checkout_timeout=checkout_timeout, **runtime_kwargs)

    def _start(self) -> Runtime | PydenoError:
        wait = self._spacing.delay(time.monotonic())
        if wait > 0:
            with self._cond:
                self._cond.wait_for(lambda: self._core.closed, wait)
        if self._core.closed:
            # No checkout sees this: close() marked the pool closed before it woke them.
            return start_failed("the pool is closed")
        began = time.monotonic()
        self._spacing.began(began)
        self.start_times.append(began)
        return super()._start()


class Held:
    """The checkouts whose command is over but whose worker is not yet ended, by the token
    the driver gave the command. Each is ended exactly once: by :meth:`end` (the driver's
    word), by the backstop thread once ``limit`` seconds passed, or by :meth:`close`; a
    checkout held after close() is ended at once."""

    def __init__(self, limit: float = HOLD_LIMIT) -> None:
        self.limit = limit
        self._cond = threading.Condition()
        # In the order held, which is the order of their deadlines (one limit for all).
        self._held: dict[int, tuple[float, contextlib.ExitStack]] = {}
        self._closed = False
        self._backstop: threading.Thread | None = None

    def hold(self, token: int, checkout: contextlib.ExitStack) -> None:
        with self._cond:
            if not self._closed:
                was_empty = not self._held
                self._held[token] = (time.monotonic() + self.limit, checkout)
                if self._backstop is None:
                    self._backstop = threading.Thread(target=self._run, name="pydeno-held", daemon=True)
                    self._backstop.start()
                elif was_empty:
                    # Only a backstop with nothing to wait for sleeps without a deadline.
                    self._cond.notify()
                return
        _end(checkout)

    def end(self, token: int) -> bool:
        """End the checkout held for ``token``; False if none is (already ended, or the
        command never checked a worker out)."""
        with self._cond:
            held = self._held.pop(token, None)
        if held is None:
            return False
        _end(held[1])
        return True

    def close(self) -> None:
        """End every held checkout now, and every one held from now on."""
        with self._cond:
            self._closed = True
            held = list(self._held.values())
            self._held.clear()
            self._cond.notify()
        for _, checkout in held:
            _end(checkout)
        if self._backstop is not None:
            self._backstop.join()

    def __len__(self) -> int:
        return len(self._held)

    def _run(self) -> None:
        while True:
            due: list[contextlib.ExitStack] = []
            with self._cond:
                while not self._closed and not due:
                    now = time.monotonic()
                    for token, (deadline, checkout) in list(self._held.items()):
                        if deadline > now:
                            break
                        del self._held[token]
                        due.append(checkout)
                    if not due:
                        first = next(iter(self._held.values()), None)
                        self._cond.wait(None if first is None else first[0] - now)
                if self._closed and not due:
                    return
            for checkout in due:
                _end(checkout)


def _end(checkout: contextlib.ExitStack) -> None:
    # The checkout's end retires its worker and wakes the pool's replenisher: nothing that
    # fails in it is the command's, whose reply has gone.
    with contextlib.suppress(Exception):
        checkout.close()


class _Running:
    """How many commands an actor runs at once, and the most it ever ran."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def __enter__(self) -> None:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self.now -= 1


class SandboxActor:
    """One actor of a :class:`pydeno.ray.RayPool` (or ``RayCodeMode``): ``index`` is its
    slot in the pool, ``options`` the runtime options of its workers. ``code_mode`` (the
    tools and Code Mode options) makes it run Code Mode executions too."""

    def __init__(
        self,
        index: int,
        options: dict[str, Any],
        *,
        size: int,
        max_workers: int,
        checkout_timeout: float,
        start_rate: float | None,
        start_jitter: float,
        code_mode: dict[str, Any] | None = None,
        hold_limit: float = HOLD_LIMIT,
    ) -> None:
        self._index = index
        self._running = _Running()
        self._code_mode = code_mode
        pool_options = dict(options)
        self._toolset: CodeModeTools | None = None
        if code_mode is not None:
            self._toolset = CodeModeTools(
                code_mode["tools"],
                max_tool_calls=code_mode["max_tool_calls"],
                approve=code_mode["approve"],
                packages=options.get("packages"),
            )
            # A Code Mode execution's console output is its own: the pooled runtimes hand
            # it to the execution that runs on them (each command runs on a thread of its
            # own, with a context of its own); the caller's handler runs after it.
            pool_options["on_console"] = route_console
        self._cm_options = options
        self._held = Held(hold_limit)
        self._pool = SpacedPool(
            size,
            max_workers=max_workers,
            checkout_timeout=checkout_timeout,
            spacing=StartSpacing(start_rate, start_jitter),
            **pool_options,
        )

    # -- commands (the default concurrency group) -------------------------------------------
    @contextlib.contextmanager
    def _checkout(self, token: int | None) -> Iterator[Runtime]:
        """A fresh worker for one command. With a token, the checkout outlives the block:
        its worker is stopped and held until the driver's end(token) (:class:`Held`)."""
        with self._running:
            if token is None:
                with self._pool.checkout() as rt:
                    yield rt
                return
            checkout = contextlib.ExitStack()
            rt = checkout.enter_context(self._pool.checkout())
            try:
                yield rt
            finally:
                rt._steps.stop()
                self._held.hold(token, checkout)

    def eval(self, code: str, timeout: float | None, token: int | None = None) -> Any:
        with self._checkout(token) as rt:
            value = rt.eval(code, timeout=timeout)
        if _holds_function(value):
            raise TypeError(_NO_FUNCTIONS)
        return value

    def execute(self, code: str, timeout: float | None, typecheck: bool, token: int | None = None) -> ExecutionResult:
        """A Code Mode execution on a fresh worker; never raises for a failure of the program,
        of a limit or of the pool (the result says what failed)."""
        assert self._code_mode is not None and self._toolset is not None
        settings = self._code_mode
        try:
            with self._checkout(token) as rt:
                cm = CodeMode(
                    self._toolset.tools.values(),
                    max_tool_calls=settings["max_tool_calls"],
                    max_output_chars=settings["max_output_chars"],
                    approve=settings["approve"],
                    **self._cm_options,
                )
                try:
                    cm._use(rt)
                    return cm.execute(code, timeout=timeout, typecheck=typecheck)
                finally:
                    cm.close()
        except Exception as exc:  # noqa: BLE001 - no worker to run on is a result too
            execution = Execution(
                self._toolset,
                settings["max_output_chars"],
                expose=bool(self._cm_options.get("expose_host_errors", False)),
            )
            return execution.result(error=exc)

    @ray.method(concurrency_group=ENDS)
    def end(self, token: int) -> None:
        """The driver holds the reply of the command it gave ``token``: end its checkout (kill
        its worker, start the next). Sent without waiting for an answer; nothing for a
        checkout already ended."""
        self._held.end(token)

    # -- control (their own concurrency group) ----------------------------------------------
    @ray.method(concurrency_group=CONTROL)
    def info(self) -> dict[str, Any]:
        """Where this actor runs and what it holds: its pid, node, Ray's resources for it,
        its worker start times (monotonic, this node's clock) and its processes."""
        context = ray.get_runtime_context()
        processes = []
        for child in psutil.Process().children(recursive=True):
            try:
                processes.append({"pid": child.pid, "name": child.name(), "create_time": child.create_time()})
            except psutil.Error:
                continue
        return {
            "index": self._index,
            "pid": os.getpid(),
            "node_id": context.get_node_id(),
            "resources": context.get_assigned_resources(),  # type: ignore[no-untyped-call]
            "start_times": list(self._pool.start_times),
            "processes": processes,
        }

    @ray.method(concurrency_group=CONTROL)
    def stats(self) -> dict[str, Any]:
        """The actor's pool's stats(), with how many commands it runs now and the most it
        ever ran at once."""
        return self._figures()

    @ray.method(concurrency_group=CONTROL)
    def close(self) -> dict[str, Any]:
        """Kill every worker of the pool, those held for an end() first; the last figures,
        for the driver to keep."""
        self._held.close()
        self._pool.close()
        return self._figures()

    def _figures(self) -> dict[str, Any]:
        figures = self._pool.stats()
        figures["running"] = self._running.now
        figures["peak_running"] = self._running.peak
        figures["held"] = len(self._held)
        return figures
