"""SandboxPool and AsyncSandboxPool: fresh, pre-started workers, against real deno workers.

A checkout hands out a runtime no one has used and closes it afterwards; ``size`` idle
workers are kept ready; ``max_workers`` caps the live ones and a checkout that gets none in
time raises ``CheckoutTimeout`` (kind ``checkout_timeout``, retryable); a start failure
reaches the waiting checkout; closing kills every worker the pool started, also when the
host is interrupted; the retry helpers take a pool.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import psutil
import pytest

import pydeno
from pydeno.host.process import spawner
from pydeno.host.process.child import Child
from pydeno.host.process.spec import Command, WorkerConfig
from pydeno.host.process.worker import WorkerProcess
from tests.support.processes import worker_pids

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

Launcher = Callable[..., None]
BACKENDS = ["asyncio", "trio"]
# The wait given to checkouts that may have to start a worker cold, where the test is not
# about the pool's short checkout_timeout.
COLD = 10.0
# Values pydeno refuses as a pool's checkout_timeout, given to one checkout instead.
BAD_CHECKOUT_TIMEOUTS = [(math.nan, ValueError), (-1, ValueError), ("1", TypeError)]
LANDLOCK_MISSING = "worker failed to start: an OS sandbox is required but landlock is unavailable"


# -- helpers ------------------------------------------------------------------------------
def pid_of(rt: pydeno.Runtime | pydeno.AsyncRuntime) -> int:
    process = rt._sup.process
    assert process is not None
    return process.pid


def kill_worker(rt: pydeno.Runtime | pydeno.AsyncRuntime) -> None:
    """SIGKILL the runtime's worker and wait until it is dead (the runtime itself stays open)."""
    process = rt._sup.process
    assert process is not None
    process.popen.kill()
    process.popen.wait(timeout=10)


def children() -> set[int]:
    """Live processes below this one (zombies count: they are not reaped yet), but for the
    zygote and its spare, which the process keeps between runtimes."""
    return worker_pids()


def poll_until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting until {what}")
        time.sleep(0.01)


async def apoll_until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting until {what}")
        await anyio.sleep(0.01)


def timeout_message(checkout_timeout: float, max_workers: int, checked_out: int, starting: int) -> str:
    return (
        f"no fresh sandbox within checkout_timeout={checkout_timeout}s (max_workers={max_workers}, "
        f"{checked_out} checked out, {starting} starting); nothing ran"
    )


def assert_checkout_timeout(exc: pydeno.CheckoutTimeout, checkout_timeout: float) -> None:
    assert str(exc) == timeout_message(checkout_timeout, 1, 1, 0)
    assert exc.hint == (
        f"retry (nothing ran); or raise max_workers= (now 1) or checkout_timeout= (now {checkout_timeout}) of the pool"
    )
    info = pydeno.classify_error(exc)
    assert info.kind == "checkout_timeout" == exc.kind
    assert info.retryable is True
    assert not isinstance(exc, TimeoutError)


@pytest.fixture
def spawns(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The monotonic time of every worker process start attempted from now on."""
    started: list[float] = []
    original = WorkerProcess.__init__

    def counting(self: WorkerProcess, config: WorkerConfig) -> None:
        started.append(time.monotonic())
        original(self, config)

    monkeypatch.setattr(WorkerProcess, "__init__", counting)
    return started


@pytest.fixture
def slow_starts(launch: Launcher) -> None:
    """Every worker's process starts half a second later (in the spawner thread), so that a
    test can act while a worker is starting: one the zygote started ahead is otherwise ready
    in milliseconds."""

    def start(command: Command, environment: dict[str, str]) -> Child:
        time.sleep(0.5)
        return spawner.spawner().start_process(command, environment)

    launch(start=start)


# -- SandboxPool ----------------------------------------------------------------------------
def test_each_checkout_gets_a_fresh_worker_that_is_closed_after_its_block() -> None:
    with pydeno.SandboxPool(size=1) as pool:
        with pool.checkout() as first:
            assert first.eval("globalThis.marker = 1; marker + 1") == 2
            first_pid = pid_of(first)
        assert first.closed
        with pool.checkout() as second:
            assert second.eval("typeof marker") == "undefined"
            assert pid_of(second) != first_pid
        assert second.closed
        assert second is not first
        assert pool._core.checked_out == set()


def test_the_pool_keeps_size_idle_workers_ready_and_refills_after_a_checkout() -> None:
    size = 2
    with pydeno.SandboxPool(size=size) as pool:
        core = pool._core
        poll_until(lambda: len(core.idle) == size and core.starting == 0, f"{size} workers are idle")
        ready = {pid_of(rt) for rt in core.idle}
        assert all(rt._sup.hello is not None for rt in core.idle), "idle workers are handshaken"
        with pool.checkout() as rt:
            assert pid_of(rt) in ready, "a checkout hands out a worker that was already started"
            poll_until(lambda: len(core.idle) == size and core.starting == 0, "the pool refilled during the checkout")
            refilled = {pid_of(idle) for idle in core.idle}
            assert pid_of(rt) not in refilled
            assert len(refilled - ready) == 1
        assert core.live == size, "no more than size workers when no one waits"


@pytest.mark.parametrize(("cpus", "together"), [(1, 1), (2, 2), (8, 3)])
def test_a_pool_starts_as_many_workers_at_once_as_it_keeps_ready_up_to_one_per_cpu(
    monkeypatch: pytest.MonkeyPatch, cpus: int, together: int
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))
    lock = threading.Lock()
    setting_up = [0]
    most: list[int] = []

    def setup(rt: pydeno.Runtime) -> None:
        # Held long enough for every start that runs beside this one to reach here too.
        with lock:
            setting_up[0] += 1
            most.append(setting_up[0])
        time.sleep(0.5)
        with lock:
            setting_up[0] -= 1

    with pydeno.SandboxPool(size=3, setup=setup) as pool:
        poll_until(lambda: len(pool._core.idle) == 3, "three workers are ready", timeout=COLD)
    assert max(most) == together


def test_replenishing_never_blocks_a_checkout_of_an_idle_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The second start is held at a gate; a checkout must still get the first, idle worker."""
    gate = threading.Event()
    starts: list[int] = []
    original = pydeno.Runtime

    def gated(**options: Any) -> pydeno.Runtime:
        starts.append(1)
        if len(starts) > 1:
            gate.wait(10)
        return original(**options)

    monkeypatch.setattr("pydeno._pools._sync.Runtime", gated)
    pool = pydeno.SandboxPool(size=2)
    try:
        core = pool._core
        poll_until(lambda: len(core.idle) == 1 and core.starting == 1, "one worker is idle and one starting")
        began = time.monotonic()
        with pool.checkout(timeout=3.0) as rt:
            assert rt.eval("'served'") == "served"
        assert time.monotonic() - began < 2.0
        assert not gate.is_set()
    finally:
        gate.set()
        pool.close()


def test_max_workers_caps_live_workers_and_a_checkout_over_the_cap_times_out() -> None:
    with pydeno.SandboxPool(size=0, max_workers=1, checkout_timeout=0.3) as pool:
        with pool.checkout(timeout=COLD) as held:
            assert held.eval("1 + 1") == 2
            began = time.monotonic()
            with pytest.raises(pydeno.CheckoutTimeout) as info, pool.checkout():
                pytest.fail("a second worker was handed out over max_workers=1")
            waited = time.monotonic() - began
            assert 0.29 <= waited < 3.0
            assert_checkout_timeout(info.value, 0.3)
            assert pool._core.live == 1
        with pool.checkout(timeout=COLD) as again:
            assert again.eval("'after release'") == "after release"
            assert pid_of(again) != pid_of(held)


def test_a_checkout_waiting_at_the_cap_is_served_when_the_held_worker_is_released() -> None:
    results: list[Any] = []
    with pydeno.SandboxPool(size=0, max_workers=1, checkout_timeout=10.0) as pool:

        def waiter() -> None:
            try:
                with pool.checkout() as rt:
                    results.append(rt.eval("'waited'"))
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                results.append(exc)

        thread = threading.Thread(target=waiter)
        with pool.checkout():
            thread.start()
            poll_until(lambda: pool._core.waiting == 1, "the second checkout waits")
        thread.join(10)
        assert not thread.is_alive()
        assert results == ["waited"]


# What the process may spend in CPU while checkouts wait half a second for a worker: the
# monitor's and the replenisher's looks, nowhere near a busy loop's half second.
IDLE_WAIT_CPU = 0.1


def test_checkouts_waiting_together_sleep_instead_of_waking_each_other() -> None:
    with pydeno.SandboxPool(size=0, max_workers=1, checkout_timeout=10.0) as pool:

        def waiter() -> None:
            with pool.checkout() as rt:
                rt.eval("1")

        threads = [threading.Thread(target=waiter) for _ in range(2)]
        with pool.checkout(timeout=COLD):
            for thread in threads:
                thread.start()
            poll_until(lambda: pool._core.waiting == 2, "both checkouts wait")
            spent = time.process_time()
            time.sleep(0.5)
            spent = time.process_time() - spent
        for thread in threads:
            thread.join(COLD)
        assert spent < IDLE_WAIT_CPU


@pytest.mark.parametrize("max_workers", [None, 1])
def test_a_worker_that_died_while_idle_is_not_handed_out(max_workers: int | None) -> None:
    with pydeno.SandboxPool(size=1, max_workers=max_workers, checkout_timeout=10.0) as pool:
        core = pool._core
        poll_until(lambda: len(core.idle) == 1, "a worker is idle")
        dead = core.idle[0]
        dead_pid = pid_of(dead)
        kill_worker(dead)
        with pool.checkout() as rt:
            assert rt is not dead
            assert pid_of(rt) != dead_pid
            assert rt._sup.process is not None and rt._sup.process.poll() is None
            assert rt.eval("'alive'") == "alive"
        assert dead.closed, "the dead worker found on the way was closed"
        assert dead not in core.idle


def test_a_worker_that_died_while_idle_is_replaced_in_the_background_without_a_checkout() -> None:
    with pydeno.SandboxPool(size=1) as pool:
        core = pool._core
        poll_until(lambda: len(core.idle) == 1, "a worker is idle")
        dead = core.idle[0]
        kill_worker(dead)
        poll_until(
            lambda: len(core.idle) == 1 and core.idle[0] is not dead and pydeno._pools._sync.alive(core.idle[0]),
            "a live replacement is idle",
        )
        assert dead.closed


def test_a_start_failure_reaches_the_waiting_checkout_and_is_not_retried_in_a_loop(
    launch: Launcher, spawns: list[float]
) -> None:
    launch(missing_layers={"landlock": "simulated"})
    with pydeno.SandboxPool(size=2, checkout_timeout=10.0) as pool:
        began = time.monotonic()
        with pytest.raises(pydeno.WorkerCrashed) as info, pool.checkout():
            pytest.fail("a worker started although landlock is missing")
        assert time.monotonic() - began < 5.0, "the failure, not the checkout timeout, ended the wait"
        assert str(info.value).startswith(LANDLOCK_MISSING)
        assert pydeno.classify_error(info.value).kind == "sandbox_unavailable"
        # The pool's two first starts side by side (none had failed yet), then one for the
        # checkout: after a failure, one start per checkout that asks.
        assert 1 <= len(spawns) <= 3
        before = len(spawns)
        time.sleep(0.5)  # nothing asks: nothing may start in this interval
        assert len(spawns) == before, f"the pool kept starting workers: {len(spawns) - before} more in 0.5 s"
        # The next checkout asks again, and again gets the failure rather than a timeout.
        with pytest.raises(pydeno.WorkerCrashed, match=f"^{LANDLOCK_MISSING}"), pool.checkout():
            pytest.fail("a worker started although landlock is missing")
        assert len(spawns) - before == 1
        # Once workers can start again, so can checkouts.
        launch(missing_layers={})
        with pool.checkout() as rt:
            assert rt.eval("'recovered'") == "recovered"


def test_close_kills_every_worker_it_started_checked_out_or_idle() -> None:
    baseline = children()
    pool = pydeno.SandboxPool(size=2)
    try:
        with pool.checkout() as held:
            poll_until(lambda: len(pool._core.idle) == 2, "two workers are idle")
            idle = list(pool._core.idle)
            assert len(children() - baseline) == 3
            pool.close()
            assert pool.closed
            assert held.closed
            assert all(rt.closed for rt in idle)
            assert children() - baseline == set()
            with pytest.raises(RuntimeError, match=r"^runtime is closed\nKind: closed "):
                held.eval("1")
        with pytest.raises(RuntimeError, match=r"^the pool is closed$"), pool.checkout():
            pytest.fail("a closed pool handed out a runtime")
        pool.close()  # idempotent
        assert pool.closed
    finally:
        pool.close()


@pytest.mark.usefixtures("slow_starts")
def test_close_kills_a_worker_that_is_still_starting() -> None:
    baseline = children()
    with pydeno.SandboxPool(size=1) as pool:
        poll_until(lambda: pool._core.starting == 1, "a worker is starting")
        pool.close()
        assert children() - baseline == set()
        assert not pool._core.idle


def test_close_wakes_a_waiting_checkout_with_the_pool_is_closed() -> None:
    results: list[BaseException] = []
    with pydeno.SandboxPool(size=0, max_workers=1, checkout_timeout=10.0) as pool:

        def waiter() -> None:
            try:
                with pool.checkout():
                    pass
            except Exception as exc:  # noqa: BLE001 - checked below
                results.append(exc)

        thread = threading.Thread(target=waiter)
        with pool.checkout():
            thread.start()
            poll_until(lambda: pool._core.waiting == 1, "the second checkout waits")
            began = time.monotonic()
            pool.close()
            thread.join(5)
        assert not thread.is_alive()
        assert time.monotonic() - began < 3.0
    assert len(results) == 1
    assert type(results[0]) is RuntimeError
    assert str(results[0]) == "the pool is closed"


def test_a_keyboard_interrupt_in_the_pool_block_kills_everything() -> None:
    baseline = children()
    idle: list[pydeno.Runtime] = []
    held: list[pydeno.Runtime] = []
    with pytest.raises(KeyboardInterrupt), pydeno.SandboxPool(size=2) as pool, pool.checkout() as rt:
        held.append(rt)
        poll_until(lambda: len(pool._core.idle) == 2, "two workers are idle")
        idle.extend(pool._core.idle)
        raise KeyboardInterrupt
    assert pool.closed
    assert held[0].closed
    assert len(idle) == 2 and all(rt.closed for rt in idle)
    assert children() - baseline == set()
    assert not any(thread.is_alive() for thread in pool._background._threads)


def test_a_sigint_while_a_checkout_waits_interrupts_it_and_the_pool_kills_everything() -> None:
    baseline = children()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    sender: threading.Thread | None = None
    try:
        with (
            pytest.raises(KeyboardInterrupt),
            pydeno.SandboxPool(size=0, max_workers=1, checkout_timeout=20.0) as pool,
            pool.checkout() as held,
        ):

            def interrupt() -> None:
                deadline = time.monotonic() + 10
                while pool._core.waiting == 0 and time.monotonic() < deadline:
                    time.sleep(0.01)
                os.kill(os.getpid(), signal.SIGINT)

            sender = threading.Thread(target=interrupt)
            sender.start()
            began = time.monotonic()
            with pool.checkout():
                pytest.fail("a second worker was handed out over max_workers=1")
    finally:
        if sender is not None:
            sender.join()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - began < 10.0
    assert pool.closed and held.closed
    assert pool._core.waiting == 0
    assert children() - baseline == set()


@pytest.mark.parametrize("pool_class", [pydeno.SandboxPool, pydeno.AsyncSandboxPool])
@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"size": -1}, ValueError, "size must be at least 0, got -1"),
        ({"size": "2"}, TypeError, "size must be an int, got str"),
        ({"size": True}, TypeError, "size must be an int, got bool"),
        ({"size": 2.0}, TypeError, "size must be an int, got float"),
        ({"size": 0, "max_workers": 0}, ValueError, "max_workers must be at least 1 and at least size=0, got 0"),
        ({"size": 3, "max_workers": 2}, ValueError, "max_workers must be at least 1 and at least size=3, got 2"),
        ({"max_workers": "4"}, TypeError, "max_workers must be an int or None, got str"),
        ({"max_workers": True}, TypeError, "max_workers must be an int or None, got bool"),
        (
            {"checkout_timeout": 0},
            ValueError,
            "checkout_timeout must be a positive, finite number of seconds, got 0",
        ),
        (
            {"checkout_timeout": -1.5},
            ValueError,
            "checkout_timeout must be a positive, finite number of seconds, got -1.5",
        ),
        (
            {"checkout_timeout": math.inf},
            ValueError,
            "checkout_timeout must be a positive, finite number of seconds, got inf",
        ),
        (
            {"checkout_timeout": math.nan},
            ValueError,
            "checkout_timeout must be a positive, finite number of seconds, got nan",
        ),
        ({"checkout_timeout": "1"}, TypeError, "checkout_timeout must be a number of seconds, got str"),
        ({"checkout_timeout": None}, TypeError, "checkout_timeout must be a number of seconds, got NoneType"),
        ({"timeout": -1}, ValueError, "timeout must be a positive, finite number of seconds, got -1"),
        ({"sandbox": "on"}, ValueError, "sandbox must be 'require' (every OS layer, or refuse to start), "),
    ],
)
def test_bad_arguments_are_refused_at_construction_before_anything_starts(
    pool_class: Any, kwargs: dict[str, Any], error: type[Exception], message: str, spawns: list[float]
) -> None:
    threads = threading.active_count()
    with pytest.raises(error) as info:
        pool_class(**kwargs)
    assert type(info.value) is error
    if message.endswith(" "):
        assert str(info.value).startswith(message)
    else:
        assert str(info.value) == message
    assert spawns == []
    assert threading.active_count() == threads


def test_an_unknown_runtime_option_is_refused_at_construction() -> None:
    options: dict[str, Any] = {"max_wrokers": 2}
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'max_wrokers'"):
        pydeno.SandboxPool(**options)


def checkout_in_thread(pool: pydeno.SandboxPool, timeout: Any) -> BaseException | None:
    """What ``pool.checkout(timeout=timeout)`` raised; a checkout that hangs is ended by
    closing the pool, and reported as a failure."""
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            with pool.checkout(timeout=timeout):
                outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    thread = threading.Thread(target=attempt)
    thread.start()
    thread.join(2.0)
    if thread.is_alive():
        pool.close()
        thread.join(5.0)
        pytest.fail(f"pool.checkout(timeout={timeout!r}) hung: still waiting after 2 s")
    return outcome[0]


@pytest.mark.parametrize(
    ("timeout", "error"),
    BAD_CHECKOUT_TIMEOUTS,
)
def test_a_bad_per_checkout_timeout_is_refused_like_a_bad_checkout_timeout(
    timeout: Any, error: type[Exception]
) -> None:
    with pydeno.SandboxPool(size=0, max_workers=1, checkout_timeout=10.0) as pool, pool.checkout():
        raised = checkout_in_thread(pool, timeout)
        assert type(raised) is error, f"checkout(timeout={timeout!r}) raised {raised!r}"
        assert "timeout" in str(raised)


def test_a_per_checkout_timeout_is_the_one_its_timeout_error_names() -> None:
    with pydeno.SandboxPool(size=0, max_workers=1, checkout_timeout=30.0) as pool, pool.checkout():
        began = time.monotonic()
        with pytest.raises(pydeno.CheckoutTimeout) as info, pool.checkout(timeout=0.2):
            pytest.fail("a second worker was handed out over max_workers=1")
        assert time.monotonic() - began < 3.0, "timeout=0.2 bounded the wait"
        message = str(info.value)
        assert message.startswith("no fresh sandbox within ")
        assert "0.2s" in message, f"the message does not name the 0.2 s that was waited: {message!r}"
        assert "30.0s" not in message, f"the message names a wait that did not happen: {message!r}"


# -- run_with_retry with a pool --------------------------------------------------------------
def test_run_with_retry_retries_a_crash_on_a_fresh_pooled_runtime() -> None:
    runtimes: list[pydeno.Runtime] = []
    pids: list[int] = []
    with pydeno.SandboxPool(size=1) as pool:

        def fn(rt: pydeno.Runtime) -> Any:
            assert rt in pool._core.checked_out, "the runtime came from the pool"
            runtimes.append(rt)
            pids.append(pid_of(rt))
            if len(runtimes) == 1:
                kill_worker(rt)
            return rt.eval("'done'")

        assert pydeno.run_with_retry(fn, pool=pool) == "done"
        assert len(runtimes) == 2 and len(set(pids)) == 2
        assert all(rt.closed for rt in runtimes)
        assert pool._core.checked_out == set()
        assert not pool.closed


def test_run_with_retry_retries_a_checkout_timeout() -> None:
    """The first attempt times out at the cap; the backoff sleep releases the held worker and
    waits until the pool has replaced it, so the second attempt gets a warm one at once."""
    attempts: list[int] = []
    sleeps: list[float] = []
    with pydeno.SandboxPool(size=1, max_workers=1, checkout_timeout=0.2) as pool, contextlib.ExitStack() as stack:
        held = stack.enter_context(pool.checkout(timeout=COLD))

        def sleep(seconds: float) -> None:
            sleeps.append(seconds)
            stack.close()
            poll_until(lambda: len(pool._core.idle) == 1, "the pool replaced the released worker")

        def fn(rt: pydeno.Runtime) -> Any:
            attempts.append(pid_of(rt))
            return rt.eval("'second try'")

        assert pydeno.run_with_retry(fn, pool=pool, backoff=0.01, sleep=sleep) == "second try"
        assert sleeps == [0.01]
        assert len(attempts) == 1 and attempts[0] != pid_of(held)


def test_run_with_retry_gives_up_on_checkout_timeouts_after_max_attempts() -> None:
    with pydeno.SandboxPool(size=0, max_workers=1, checkout_timeout=0.1) as pool, pool.checkout(timeout=COLD):
        with pytest.raises(pydeno.CheckoutTimeout) as info:
            pydeno.run_with_retry(lambda rt: rt.eval("1"), pool=pool, max_attempts=2)
        assert str(info.value) == timeout_message(0.1, 1, 1, 0)
        assert "pydeno: failed on attempt 2 of 2, each on a fresh runtime" in info.value.__notes__


def test_run_with_retry_refuses_both_a_factory_and_a_pool() -> None:
    with pydeno.SandboxPool(size=0) as pool:
        with pytest.raises(TypeError, match=r"^pass factory= or pool=, not both$"):
            pydeno.run_with_retry(lambda rt: rt.eval("1"), factory=pydeno.Runtime, pool=pool)
        assert pool._core.requests == 0, "nothing was checked out"


# -- AsyncSandboxPool ------------------------------------------------------------------------
def run(backend: str, main: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(main, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_each_checkout_gets_a_fresh_worker_that_is_closed_after_its_block(backend: str) -> None:
    async def main() -> None:
        async with pydeno.AsyncSandboxPool(size=1) as pool:
            async with pool.checkout() as first:
                assert await first.eval("globalThis.marker = 1; marker + 1") == 2
                first_pid = pid_of(first)
            assert first.closed
            async with pool.checkout() as second:
                assert await second.eval("typeof marker") == "undefined"
                assert pid_of(second) != first_pid
            assert second.closed
            assert pool._core.checked_out == set()

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_the_pool_keeps_size_idle_workers_ready_and_refills_after_a_checkout(backend: str) -> None:
    async def main() -> None:
        async with pydeno.AsyncSandboxPool(size=2) as pool:
            core = pool._core
            await apoll_until(lambda: len(core.idle) == 2 and core.starting == 0, "2 workers are idle")
            ready = {pid_of(rt) for rt in core.idle}
            async with pool.checkout() as rt:
                assert pid_of(rt) in ready
                await apoll_until(lambda: len(core.idle) == 2 and core.starting == 0, "the pool refilled")
                assert pid_of(rt) not in {pid_of(idle) for idle in core.idle}

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_a_pool_starts_its_workers_side_by_side(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    setting_up = [0]
    most: list[int] = []

    async def setup(rt: pydeno.AsyncRuntime) -> None:
        setting_up[0] += 1
        most.append(setting_up[0])
        await anyio.sleep(0.5)
        setting_up[0] -= 1

    async def main() -> None:
        async with pydeno.AsyncSandboxPool(size=2, setup=setup) as pool:
            await apoll_until(lambda: len(pool._core.idle) == 2, "two workers are ready", timeout=COLD)

    run(backend, main)
    assert max(most) == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_max_workers_caps_live_workers_and_a_checkout_over_the_cap_times_out(backend: str) -> None:
    async def main() -> None:
        async with pydeno.AsyncSandboxPool(size=0, max_workers=1, checkout_timeout=0.3) as pool:
            async with pool.checkout(timeout=COLD) as held:
                assert await held.eval("1 + 1") == 2
                began = time.monotonic()
                with pytest.raises(pydeno.CheckoutTimeout) as info:
                    async with pool.checkout():
                        pytest.fail("a second worker was handed out over max_workers=1")
                assert 0.29 <= time.monotonic() - began < 3.0
                assert_checkout_timeout(info.value, 0.3)
            async with pool.checkout(timeout=COLD) as again:
                assert await again.eval("'after release'") == "after release"

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_checkouts_waiting_together_sleep_instead_of_waking_each_other(backend: str) -> None:
    async def main() -> None:
        async with pydeno.AsyncSandboxPool(size=0, max_workers=1, checkout_timeout=10.0) as pool:

            async def waiter() -> None:
                async with pool.checkout() as rt:
                    await rt.eval("1")

            async with anyio.create_task_group() as tasks, pool.checkout(timeout=COLD):
                tasks.start_soon(waiter)
                tasks.start_soon(waiter)
                await apoll_until(lambda: pool._core.waiting == 2, "both checkouts wait")
                spent = time.process_time()
                await anyio.sleep(0.5)
                spent = time.process_time() - spent
            assert spent < IDLE_WAIT_CPU

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_a_worker_that_died_while_idle_is_not_handed_out(backend: str) -> None:
    async def main() -> None:
        async with pydeno.AsyncSandboxPool(size=1, checkout_timeout=10.0) as pool:
            await apoll_until(lambda: len(pool._core.idle) == 1, "a worker is idle")
            dead = pool._core.idle[0]
            dead_pid = pid_of(dead)
            kill_worker(dead)
            async with pool.checkout() as rt:
                assert pid_of(rt) != dead_pid
                assert await rt.eval("'alive'") == "alive"
            assert dead.closed

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_a_start_failure_reaches_the_waiting_checkout(
    backend: str, launch: Launcher, spawns: list[float]
) -> None:
    launch(missing_layers={"landlock": "simulated"})

    async def main() -> None:
        async with pydeno.AsyncSandboxPool(size=2, checkout_timeout=10.0) as pool:
            began = time.monotonic()
            with pytest.raises(pydeno.WorkerCrashed, match=f"^{LANDLOCK_MISSING}"):
                async with pool.checkout():
                    pytest.fail("a worker started although landlock is missing")
            assert time.monotonic() - began < 5.0
            before = len(spawns)
            assert 1 <= before <= 2
            await anyio.sleep(0.5)  # nothing asks: nothing may start in this interval
            assert len(spawns) == before

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_close_kills_every_worker_it_started_checked_out_or_idle(backend: str) -> None:
    baseline = children()

    async def main() -> None:
        async with pydeno.AsyncSandboxPool(size=2) as pool:
            async with pool.checkout() as held:
                await apoll_until(lambda: len(pool._core.idle) == 2, "two workers are idle")
                idle = list(pool._core.idle)
                await pool.close()
                assert pool.closed and held.closed
                assert all(rt.closed for rt in idle)
                assert children() - baseline == set()
                with pytest.raises(RuntimeError, match=r"^runtime is closed\nKind: closed "):
                    await held.eval("1")
            with pytest.raises(RuntimeError, match=r"^the pool is closed$"):
                async with pool.checkout():
                    pytest.fail("a closed pool handed out a runtime")
            await pool.close()  # idempotent
        with pytest.raises(RuntimeError, match=r"^the pool is closed$"):
            async with pool.checkout():
                pytest.fail("a closed pool handed out a runtime")

    run(backend, main)
    assert children() - baseline == set()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.usefixtures("slow_starts")
def test_async_close_kills_a_worker_that_is_still_starting(backend: str) -> None:
    baseline = children()
    leftover: list[set[int]] = []

    async def main() -> None:
        async with pydeno.AsyncSandboxPool(size=1) as pool:
            await apoll_until(lambda: pool._core.starting == 1, "a worker is starting")
            await pool.close()
            leftover.append(children() - baseline)

    run(backend, main)
    assert leftover == [set()], "await pool.close() returned while a worker it started was still alive"


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_cancelling_the_pool_block_kills_everything(backend: str) -> None:
    baseline = children()
    seen: list[pydeno.AsyncRuntime] = []

    async def main() -> None:
        with anyio.move_on_after(0.5) as scope:
            async with pydeno.AsyncSandboxPool(size=2) as pool, pool.checkout() as rt:
                seen.append(rt)
                await apoll_until(lambda: len(pool._core.idle) == 2, "two workers are idle")
                seen.extend(pool._core.idle)
                await anyio.sleep_forever()
        assert scope.cancelled_caught
        assert pool.closed

    run(backend, main)
    assert len(seen) == 3 and all(rt.closed for rt in seen)
    assert children() - baseline == set()


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_a_keyboard_interrupt_in_the_pool_block_kills_everything(backend: str) -> None:
    baseline = children()
    seen: list[pydeno.AsyncRuntime] = []

    async def main() -> None:
        async with pydeno.AsyncSandboxPool(size=1) as pool, pool.checkout() as rt:
            seen.append(rt)
            await apoll_until(lambda: len(pool._core.idle) == 1, "a worker is idle")
            seen.extend(pool._core.idle)
            raise KeyboardInterrupt

    raised: BaseException | None = None
    try:
        run(backend, main)
    except BaseException as exc:  # noqa: BLE001 - how it comes out is the next test's subject
        raised = exc
    assert raised is not None
    assert isinstance(raised, KeyboardInterrupt) or (
        isinstance(raised, BaseExceptionGroup) and raised.split(KeyboardInterrupt)[1] is None
    ), repr(raised)
    assert len(seen) == 2 and all(rt.closed for rt in seen)
    assert children() - baseline == set()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("failure", ["keyboard_interrupt", "javascript_error"])
def test_async_an_exception_from_the_pool_block_comes_out_as_itself_not_in_a_group(backend: str, failure: str) -> None:
    async def main() -> None:
        async with pydeno.AsyncSandboxPool(size=1) as pool, pool.checkout() as rt:
            if failure == "keyboard_interrupt":
                raise KeyboardInterrupt
            await rt.eval("null.x")

    expected: type[BaseException] = KeyboardInterrupt if failure == "keyboard_interrupt" else pydeno.JavaScriptError
    raised: BaseException | None = None
    try:
        run(backend, main)
    except BaseException as exc:  # noqa: BLE001 - its type is the subject
        raised = exc
    assert type(raised) is expected, f"expected a bare {expected.__name__}, got {raised!r}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_a_checkout_outside_async_with_is_refused(backend: str) -> None:
    async def main() -> None:
        pool = pydeno.AsyncSandboxPool(size=1, checkout_timeout=1.0)
        with pytest.raises(RuntimeError, match=r"^use the pool as `async with AsyncSandboxPool\(\.\.\.\) as pool:`$"):
            async with pool.checkout():
                pytest.fail("a pool that was never entered handed out a runtime")
        assert pool._core.live == 0

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("timeout", "error"),
    BAD_CHECKOUT_TIMEOUTS,
)
def test_async_a_bad_per_checkout_timeout_is_refused_like_a_bad_checkout_timeout(
    backend: str, timeout: Any, error: type[Exception]
) -> None:
    async def main() -> None:
        async with pydeno.AsyncSandboxPool(size=0, max_workers=1, checkout_timeout=10.0) as pool, pool.checkout():
            with anyio.fail_after(3), pytest.raises(error) as info:
                async with pool.checkout(timeout=timeout):
                    pytest.fail("a second worker was handed out over max_workers=1")
            assert type(info.value) is error
            assert "timeout" in str(info.value)

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_run_with_retry_retries_a_crash_on_a_fresh_pooled_runtime(backend: str) -> None:
    runtimes: list[pydeno.AsyncRuntime] = []

    async def main() -> Any:
        async with pydeno.AsyncSandboxPool(size=1) as pool:

            async def fn(rt: pydeno.AsyncRuntime) -> Any:
                assert rt in pool._core.checked_out, "the runtime came from the pool"
                runtimes.append(rt)
                if len(runtimes) == 1:
                    kill_worker(rt)
                return await rt.eval("'async done'")

            result = await pydeno.run_with_retry_async(fn, pool=pool)
            assert pool._core.checked_out == set()
            return result

    assert run(backend, main) == "async done"
    assert len(runtimes) == 2 and pid_of(runtimes[0]) != pid_of(runtimes[1])
    assert all(rt.closed for rt in runtimes)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_run_with_retry_refuses_both_a_factory_and_a_pool(backend: str) -> None:
    async def main() -> None:
        async with pydeno.AsyncSandboxPool(size=0) as pool:

            async def fn(rt: pydeno.AsyncRuntime) -> Any:
                return await rt.eval("1")

            with pytest.raises(TypeError, match=r"^pass factory= or pool=, not both$"):
                await pydeno.run_with_retry_async(fn, factory=pydeno.AsyncRuntime, pool=pool)
            assert pool._core.requests == 0

    run(backend, main)


def test_a_checkout_ends_before_its_workers_teardown_and_close_waits_for_every_teardown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The real teardown, held back until the test lets it go: the checkout's end must not
    # wait for it, and the pool's close() must.
    gate = threading.Event()
    torn_down: list[int] = []
    original = WorkerProcess._finish_close

    def held(self: WorkerProcess) -> None:
        gate.wait(30)
        original(self)
        torn_down.append(self.pid)

    monkeypatch.setattr(WorkerProcess, "_finish_close", held)
    with pydeno.SandboxPool(size=1) as pool:
        with pool.checkout() as rt:
            assert rt.eval("1 + 1") == 2
            process = rt._sup.process
            assert process is not None
            pid = process.pid
        assert rt.closed and torn_down == []
        with pytest.raises(pydeno.ClosedError):
            rt.eval("1")
        closer = threading.Thread(target=pool.close)
        closer.start()
        closer.join(0.5)
        assert closer.is_alive(), "close() returned before the checked-out worker was torn down"
        gate.set()
        closer.join(30)
        assert not closer.is_alive() and pid in torn_down
    assert not psutil.pid_exists(pid)
