"""A pool's ``setup=``, against real deno workers.

``setup(rt)`` prepares each new worker (modules added, functions bound, code evaluated)
before it can be checked out, once per worker, never on a worker that served a checkout. A
setup that fails closes its worker, which is never handed out, and is logged with its kind
and counted; setups that keep failing give the waiting checkout the setup's own error
rather than a wait until ``checkout_timeout``. The async pool awaits an async setup.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

import pydeno
from pydeno._pools.core import SETUP_ATTEMPTS

# Real workers by the dozen: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

BACKENDS = ["asyncio", "trio"]
# The wait given to checkouts whose workers start cold, where the test is not about the
# pool's checkout_timeout: long enough for every failing setup the test expects.
COLD = 30.0
LIBRARY = "export const twice = (x) => 2 * x;"
KEY = b"k" * 32
USE_BOTH = "(async () => { const { twice } = await import('lib'); return twice(await add(ready, 1)); })()"


def run(backend: str, main: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(main, backend=backend)


def pool_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "pydeno.pool" and r.levelno == logging.WARNING]


def full_setup(seen: list[tuple[pydeno.Runtime, str]]) -> Callable[[pydeno.Runtime], None]:
    """A setup that adds a module, binds a function and evaluates code, after noting the
    runtime it was given and whether that runtime held a tenant's state."""

    def setup(rt: pydeno.Runtime) -> None:
        seen.append((rt, rt.eval("typeof globalThis.tenant")))
        rt.add_module("lib", LIBRARY)
        rt.bind_function("add", lambda a, b: a + b)
        rt.eval("globalThis.ready = 41")

    return setup


# -- SandboxPool --------------------------------------------------------------------------
def test_a_module_added_and_a_function_bound_by_setup_are_usable_right_after_checkout() -> None:
    seen: list[tuple[pydeno.Runtime, str]] = []
    with pydeno.SandboxPool(size=1, setup=full_setup(seen)) as pool, pool.checkout() as rt:
        assert [worker for worker, _ in seen] == [rt], "setup ran on the worker handed out, before the checkout"
        assert rt.eval(USE_BOTH) == 84
        assert rt.eval_module("import { twice } from 'lib'; export const v = twice(3);") == {"v": 6}


def test_setup_runs_once_per_worker_and_never_on_a_worker_that_served_a_checkout() -> None:
    seen: list[tuple[pydeno.Runtime, str]] = []
    served: list[pydeno.Runtime] = []
    with pydeno.SandboxPool(size=1, setup=full_setup(seen)) as pool:
        for _ in range(3):
            with pool.checkout() as rt:
                assert rt.eval("typeof tenant") == "undefined", "a tenant's state reached the next one"
                rt.eval("globalThis.tenant = 'secret'; globalThis.ready = 0")
                served.append(rt)
            assert rt.closed
    workers = [worker for worker, _ in seen]
    assert len(set(map(id, workers))) == len(workers), "setup ran twice on one worker"
    assert workers[: len(served)] == served
    assert {state for _, state in seen} == {"undefined"}, "setup was given a worker a tenant had used"


def test_setup_failures_is_zero_in_stats_while_setups_succeed() -> None:
    with pydeno.SandboxPool(size=1, setup=full_setup([])) as pool:
        with pool.checkout() as rt:
            rt.eval("1")
        assert pool.stats()["setup_failures"] == 0


@pytest.mark.parametrize(
    ("failure", "kind"),
    [("python", "invalid_input"), ("javascript", "js_error")],
)
def test_a_setup_that_fails_once_is_logged_with_its_kind_and_its_half_set_up_worker_is_closed_not_handed_out(
    failure: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pydeno.pool")
    given: list[pydeno.Runtime] = []

    def setup(rt: pydeno.Runtime) -> None:
        given.append(rt)
        rt.eval("globalThis.half = true")
        if len(given) == 1:
            if failure == "python":
                raise ValueError("the first setup fails")
            rt.eval("throw new Error('the first setup fails')")
        rt.eval("globalThis.whole = true")

    with pydeno.SandboxPool(size=1, setup=setup, checkout_timeout=COLD) as pool:
        with pool.checkout() as rt:
            assert rt is not given[0]
            assert rt.eval("[half, whole]") == [True, True]
        assert given[0].closed
        assert pool.stats()["setup_failures"] == 1
    records = pool_warnings(caplog)
    assert [r.getMessage() for r in records] == [
        f"pydeno: the pool's setup failed on a new worker, which was closed: {kind}"
    ]
    assert records[0].__dict__["kind"] == kind
    assert "the first setup fails" not in caplog.text, "the log carries the kind, not the setup's text"


@pytest.mark.parametrize(
    ("failure", "error", "kind"),
    [("python", KeyError, "unknown"), ("javascript", pydeno.JavaScriptError, "js_error")],
)
def test_a_setup_that_always_fails_makes_the_checkout_raise_its_error_rather_than_wait(
    failure: str, error: type[Exception], kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pydeno.pool")
    given: list[pydeno.Runtime] = []

    def setup(rt: pydeno.Runtime) -> None:
        given.append(rt)
        if failure == "python":
            raise KeyError("setting up")
        rt.eval("throw new Error('setting up')")

    with pydeno.SandboxPool(size=2, setup=setup, checkout_timeout=COLD) as pool:
        with pytest.raises(error) as info, pool.checkout():
            pytest.fail("a worker whose setup failed was handed out")
        assert pydeno.classify_error(info.value).kind == kind
        assert info.value.__notes__[-1] == (
            f"raised by the pool's setup= on {SETUP_ATTEMPTS} new workers in a row, each closed; "
            "no worker was handed out"
        )
        assert len(given) == SETUP_ATTEMPTS
        assert all(rt.closed for rt in given)
        # The next checkout asks again, and gets the failure of the one more setup it caused.
        with pytest.raises(error), pool.checkout():
            pytest.fail("a worker whose setup failed was handed out")
        assert len(given) == SETUP_ATTEMPTS + 1
        assert pool.stats()["setup_failures"] == SETUP_ATTEMPTS + 1
        assert pool.stats()["checkouts"] == 0
    assert len(pool_warnings(caplog)) == SETUP_ATTEMPTS + 1


def test_a_setup_that_times_out_raises_the_timeout_at_checkout_and_its_workers_are_killed() -> None:
    def setup(rt: pydeno.Runtime) -> None:
        rt.eval("for (;;) {}")

    with pydeno.SandboxPool(size=1, setup=setup, checkout_timeout=COLD, timeout=0.3) as pool:
        with pytest.raises(pydeno.RuntimeTimeout) as info, pool.checkout():
            pytest.fail("a worker whose setup timed out was handed out")
        assert pydeno.classify_error(info.value).kind == "timeout"
        stats = pool.stats()
    assert stats["workers_killed"] == {"timeout": SETUP_ATTEMPTS}
    assert stats["setup_failures"] == SETUP_ATTEMPTS


def test_a_setup_that_swallows_its_timeout_leaves_a_closed_worker_which_is_not_handed_out() -> None:
    def setup(rt: pydeno.Runtime) -> None:
        with contextlib.suppress(pydeno.RuntimeTimeout):
            rt.eval("for (;;) {}")

    pool = pydeno.SandboxPool(size=1, setup=setup, checkout_timeout=COLD, timeout=0.3)
    with pool, pytest.raises(pydeno.WorkerCrashed) as info, pool.checkout():
        pytest.fail("a worker closed by its setup was handed out")
    assert str(info.value) == "worker failed to start: the pool's setup= left the worker closed or dead"


def test_closing_the_pool_during_a_setup_kills_its_worker_and_logs_no_failure(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pydeno.pool")
    entered, release = threading.Event(), threading.Event()
    given: list[pydeno.Runtime] = []

    def setup(rt: pydeno.Runtime) -> None:
        given.append(rt)
        entered.set()
        release.wait(COLD)
        rt.eval("1")

    pool = pydeno.SandboxPool(size=1, setup=setup)
    assert entered.wait(COLD)
    # close() kills the worker at once, then waits for the setup to return.
    closer = threading.Thread(target=pool.close)
    closer.start()
    deadline = time.monotonic() + COLD
    while not given[0].closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert given[0].closed
    release.set()
    closer.join(COLD)
    assert not closer.is_alive()
    assert pool_warnings(caplog) == []
    assert pool.stats()["setup_failures"] == 0


def test_a_sync_pool_refuses_an_async_setup_and_a_setup_that_is_not_callable() -> None:
    async def setup(rt: Any) -> None:
        pass

    with pytest.raises(
        TypeError, match=r"^setup of a SandboxPool must be a plain function .*use pydeno\.AsyncSandboxPool"
    ):
        pydeno.SandboxPool(size=0, setup=setup)
    with pytest.raises(TypeError, match=r"^setup must be a function taking the new worker's runtime .*got str$"):
        pydeno.SandboxPool(size=0, setup="rt.eval('1')")  # type: ignore[arg-type]


def test_a_sync_setup_that_returns_an_awaitable_fails_with_a_type_error_saying_so() -> None:
    async def later(rt: Any) -> None:
        pass

    def setup(rt: Any) -> Any:
        return later(rt)

    pool = pydeno.SandboxPool(size=1, setup=setup, checkout_timeout=COLD)
    with pool, pytest.raises(TypeError, match=r"^setup of a SandboxPool returned an awaitable"), pool.checkout():
        pytest.fail("a worker whose setup did not run was handed out")


# -- AsyncSandboxPool ---------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_async_a_module_and_a_function_bound_by_an_async_setup_are_usable_right_after_checkout(backend: str) -> None:
    given: list[pydeno.AsyncRuntime] = []

    async def add(a: int, b: int) -> int:
        await anyio.sleep(0)
        return a + b

    async def setup(rt: pydeno.AsyncRuntime) -> None:
        given.append(rt)
        await rt.add_module("lib", LIBRARY)
        await rt.bind_function("add", add)
        await rt.eval("globalThis.ready = 41")

    async def main() -> None:
        async with pydeno.AsyncSandboxPool(size=1, setup=setup) as pool:
            for _ in range(2):
                async with pool.checkout() as rt:
                    assert rt in given, "setup ran on the worker handed out, before the checkout"
                    assert await rt.eval("typeof tenant") == "undefined"
                    assert await rt.eval(USE_BOTH) == 84
                    await rt.eval("globalThis.tenant = 1")
        assert len(set(map(id, given))) == len(given), "setup ran twice on one worker"

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_a_plain_function_is_a_setup_too(backend: str) -> None:
    given: list[pydeno.AsyncRuntime] = []

    async def main() -> None:
        async with pydeno.AsyncSandboxPool(size=1, setup=given.append) as pool, pool.checkout() as rt:
            assert given[0] is rt

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_a_setup_that_always_fails_makes_the_checkout_raise_its_error(
    backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pydeno.pool")
    given: list[pydeno.AsyncRuntime] = []

    async def setup(rt: pydeno.AsyncRuntime) -> None:
        given.append(rt)
        await rt.eval("throw new TypeError('setting up')")

    async def main() -> None:
        async with pydeno.AsyncSandboxPool(size=1, setup=setup, checkout_timeout=COLD) as pool:
            with pytest.raises(pydeno.JavaScriptError) as info:
                async with pool.checkout():
                    pytest.fail("a worker whose setup failed was handed out")
            assert pydeno.classify_error(info.value).kind == "js_error"
            assert len(given) == SETUP_ATTEMPTS
            assert all(rt.closed for rt in given)
            assert pool.stats()["setup_failures"] == SETUP_ATTEMPTS

    run(backend, main)
    assert {r.__dict__["kind"] for r in pool_warnings(caplog)} == {"js_error"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_a_setup_that_fails_once_is_replaced_by_a_worker_set_up_whole(backend: str) -> None:
    given: list[pydeno.AsyncRuntime] = []

    async def setup(rt: pydeno.AsyncRuntime) -> None:
        given.append(rt)
        await rt.eval("globalThis.half = true")
        if len(given) == 1:
            raise ValueError("the first setup fails")
        await rt.eval("globalThis.whole = true")

    async def main() -> None:
        async with pydeno.AsyncSandboxPool(size=1, setup=setup, checkout_timeout=COLD) as pool:
            async with pool.checkout() as rt:
                assert rt is not given[0]
                assert await rt.eval("[half, whole]") == [True, True]
            assert given[0].closed
            assert pool.stats()["setup_failures"] == 1

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_a_setup_that_times_out_raises_the_timeout_at_checkout(backend: str) -> None:
    async def setup(rt: pydeno.AsyncRuntime) -> None:
        await rt.eval("for (;;) {}")

    async def main() -> None:
        async with pydeno.AsyncSandboxPool(size=1, setup=setup, checkout_timeout=COLD, timeout=0.3) as pool:
            with pytest.raises(pydeno.RuntimeTimeout):
                async with pool.checkout():
                    pytest.fail("a worker whose setup timed out was handed out")
            assert pool.stats()["workers_killed"] == {"timeout": SETUP_ATTEMPTS}

    run(backend, main)


# -- SessionPool --------------------------------------------------------------------------
def module_setup(seen: list[tuple[pydeno.Runtime, str]]) -> Callable[[pydeno.Runtime], None]:
    """A session pool's setup: a module added and code evaluated (a session's host functions
    are its tools)."""

    def setup(rt: pydeno.Runtime) -> None:
        seen.append((rt, rt.eval("typeof globalThis.tenant")))
        rt.add_module("lib", LIBRARY)
        rt.eval("globalThis.ready = 41")

    return setup


USE_MODULE = "const { twice } = await import('lib'); twice(ready)"


@pytest.mark.parametrize("warm_workers", [0, 1])
def test_a_session_pools_setup_prepares_the_worker_of_each_new_and_each_restored_session(warm_workers: int) -> None:
    seen: list[tuple[pydeno.Runtime, str]] = []
    store = pydeno.MemoryJournalStore()
    setup = module_setup(seen)
    with pydeno.SessionPool(store, KEY, max_live=1, warm_workers=warm_workers, setup=setup) as sessions:
        with sessions.lease("a") as agent:
            assert agent.run(USE_MODULE) == 82
            agent.run("globalThis.tenant = 'a'")
        with sessions.lease("b") as other:  # new: evicts a
            assert other.run("[typeof tenant, ready]") == ["undefined", 41]
        assert agent.closed
        with sessions.lease("a") as restored:  # its journal replayed on a worker set up anew
            assert restored.run("[tenant, ready]") == ["a", 41]
            assert restored.run(USE_MODULE) == 82
    used = [rt for rt, _ in seen]
    assert len(set(map(id, used))) == len(used) >= 3, "setup ran once on each session's worker"
    assert {state for _, state in seen} == {"undefined"}


def test_a_session_pools_setup_that_binds_a_function_is_refused_at_the_lease_saying_to_use_tools() -> None:
    def setup(rt: pydeno.Runtime) -> None:
        rt.bind_function("add", lambda a, b: a + b)

    with (
        pydeno.SessionPool(pydeno.MemoryJournalStore(), KEY, setup=setup) as sessions,
        pytest.raises(TypeError, match=r"^the setup of a SessionPool bound host functions \(add\), .*tools="),
        sessions.lease("a"),
    ):
        pytest.fail("a session was made on a worker whose setup bound a function")
