"""The monitor samples a quiescent worker less often, and a guest cannot use that.

An idle worker that neither runs nor grows is sampled at doubling intervals up to
QUIET_INTERVAL, so an idle pool costs the host next to nothing. A guest that waits for the
monitor to slow down and then strikes (a timer that fires after the host stopped looking, a
command sent to a slowed worker) must meet the same limits as one that strikes at once.
"""

from __future__ import annotations

import time

import pytest

import pydeno
from pydeno.host.process.monitor import INTERVAL, QUIET_INTERVAL, Watch

# Each waits for the monitor to slow down, which takes seconds.
pytestmark = pytest.mark.slow


def watch_of(rt: pydeno.Runtime) -> Watch:
    watch = rt._sup.watch
    assert watch is not None
    return watch


def wait_until_quiet(watch: Watch) -> None:
    deadline = time.monotonic() + 30
    while watch.interval < QUIET_INTERVAL:
        assert time.monotonic() < deadline, f"the monitor still samples every {watch.interval} s"
        time.sleep(0.05)


def test_an_idle_worker_is_sampled_ever_less_often_down_to_the_quiet_interval() -> None:
    with pydeno.Runtime() as rt:
        rt.eval("1 + 1")
        watch = watch_of(rt)
        wait_until_quiet(watch)
        assert watch.due - time.monotonic() <= QUIET_INTERVAL


def test_a_command_sent_to_a_quiescent_worker_is_watched_at_the_full_rate_from_its_start() -> None:
    with pydeno.Runtime() as rt:
        watch = watch_of(rt)
        rt.bind_function("interval", lambda: watch.interval)
        rt.eval("1 + 1")
        wait_until_quiet(watch)
        assert rt.eval("interval()") == INTERVAL


def test_a_guest_timer_that_wakes_a_quiescent_worker_brings_it_back_to_the_full_rate() -> None:
    with pydeno.Runtime() as rt:
        watch = watch_of(rt)
        # The timer fires well after the monitor has slowed down, then keeps a core busy.
        rt.eval("setTimeout(() => { while (true) {} }, 4000); 'armed'")
        wait_until_quiet(watch)
        deadline = time.monotonic() + 60
        while watch.interval != INTERVAL:
            assert time.monotonic() < deadline, "the monitor never saw the timer run"
            time.sleep(0.01)
        # Seen running before it used its allowance, and then stopped at that allowance.
        assert watch.verdict is None
        while watch.verdict is None:
            assert time.monotonic() < deadline, "the spinning timer was never stopped"
            time.sleep(0.05)
        with pytest.raises(pydeno.RuntimeTimeout) as info:
            rt.eval("1")
        assert pydeno.classify_error(info.value).kind == "cpu_limit"
        assert str(info.value) == "worker used more than 1.0s of CPU between commands and was killed"


def test_a_guest_that_allocates_once_the_monitor_slowed_down_is_still_stopped_at_its_memory_limit() -> None:
    with pydeno.Runtime(max_memory="256 MiB") as rt:
        watch = watch_of(rt)
        rt.eval(
            "globalThis.keep = [];"
            " setTimeout(() => { while (true) keep.push(new Uint8Array(16 << 20).fill(1)) }, 4000); 'armed'"
        )
        wait_until_quiet(watch)
        with pytest.raises(pydeno.WorkerCrashed) as info:
            for _ in range(600):
                rt.eval("1")
                time.sleep(0.1)
        assert pydeno.classify_error(info.value).kind == "memory_limit"
