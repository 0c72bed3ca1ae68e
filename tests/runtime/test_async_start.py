"""Starting and closing workers never holds the event loop: what blocks (staging the worker,
the fork, the handshake's checks, reaping, removing the cgroup) runs off the loop's thread,
and what runs on it between two turns of the loop is short.

A ticker task measures every turn of the loop in the loop thread's own CPU time: the work
done on the loop without yielding. Wall-clock gaps also hold the OS scheduler's and other
threads' share of two busy cores, which no library controls, so they are not what is
asserted; that the blocking steps run on other threads is asserted directly.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final

import anyio
import anyio.abc
import pytest

import pydeno
from pydeno.host.process.supervisor import Supervisor

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# The most the loop's thread may work between two turns of the loop.
TURN: Final = 0.002


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture
def blocking_steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """Which thread ran each step of a worker's life that blocks: (step, thread id)."""
    ran: list[tuple[str, int]] = []
    for step in ("spawn", "started", "close"):
        original = getattr(Supervisor, step)

        def recorded(self: Supervisor, *args: Any, _step: str = step, _original: Any = original) -> Any:
            ran.append((_step, threading.get_ident()))
            return _original(self, *args)

        monkeypatch.setattr(Supervisor, step, recorded)
    yield ran


async def longest_turn(work: Callable[[], Awaitable[None]], tries: int = 3) -> float:
    """Run work beside a ticker, tries times; the most CPU the loop's thread spent between
    two turns, in the try where that was least.

    The kernel charges a thread for work it does while the thread is in a syscall, interrupts
    and wakeups among it, so a loop idling in epoll_wait sometimes shows a turn of a few
    milliseconds that no code ran in. That falls in one try, not in every one; work the
    library does on the loop's thread falls in every try."""
    return min([await _longest_turn_once(work) for _ in range(tries)])


async def _longest_turn_once(work: Callable[[], Awaitable[None]]) -> float:
    longest = 0.0
    done = False

    async def ticker(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        nonlocal longest
        last = time.thread_time()
        task_status.started()
        while not done:
            await anyio.sleep(0)
            now = time.thread_time()
            longest, last = max(longest, now - last), now

    # The test process's own heap (the whole suite's objects) is set aside first: a full
    # collection of it, which can fall in any turn, is the test runner's cost, not the loop's.
    gc.collect()
    gc.freeze()
    try:
        async with anyio.create_task_group() as group:
            await group.start(ticker)
            try:
                await work()
            finally:
                done = True
    finally:
        gc.unfreeze()
    return longest


async def warmed(sandbox: str = "require") -> None:
    # Once first: anyio's own backend import and staging the worker are one-offs of a process.
    async with pydeno.AsyncRuntime(sandbox=sandbox) as rt:
        assert await rt.eval("1") == 1


@pytest.mark.parametrize("sandbox", ["require", "off"])
async def test_starting_and_closing_runtimes_never_holds_the_event_loop(
    sandbox: str, blocking_steps: list[tuple[str, int]]
) -> None:
    await warmed(sandbox)
    blocking_steps.clear()

    async def work() -> None:
        for _ in range(3):
            rt = pydeno.AsyncRuntime(sandbox=sandbox)
            assert await rt.eval("1 + 1") == 2
            await rt.close()
        async with pydeno.AsyncRuntime(sandbox=sandbox) as rt:
            assert await rt.eval("2 + 2") == 4

    assert await longest_turn(work) <= TURN
    loop = threading.get_ident()
    assert sorted({step for step, _ in blocking_steps}) == ["close", "spawn", "started"]
    assert [step for step, thread in blocking_steps if thread == loop] == []


async def test_a_pool_starting_and_replacing_workers_never_holds_the_event_loop(
    blocking_steps: list[tuple[str, int]],
) -> None:
    await warmed()
    blocking_steps.clear()

    async def work() -> None:
        async with pydeno.AsyncSandboxPool(size=2) as pool:
            for i in range(4):
                async with pool.checkout() as rt:
                    assert await rt.eval(f"{i} * 2") == i * 2

    assert await longest_turn(work) <= TURN
    loop = threading.get_ident()
    assert len([step for step, _ in blocking_steps if step == "spawn"]) >= 4
    assert [step for step, thread in blocking_steps if thread == loop] == []


async def test_the_ticker_sees_work_that_holds_the_loop() -> None:
    # The measure's own proof that it can fail: a turn that computes on the loop.
    async def work() -> None:
        spin_until = time.thread_time() + 3 * TURN
        while time.thread_time() < spin_until:
            pass
        await anyio.sleep(0)

    assert await longest_turn(work) > TURN
