"""CPU is charged between commands too.

An eval can return at once and leave work running: Web Workers that spin (and ignore
``terminate()``), timers, pending promises. With no command in flight the worker may use at
most ``cpu_limit`` seconds of CPU (one second when no cpu_limit is set); past that the monitor
stops it, and the next call raises the host's own message, kind ``cpu_limit``.
"""

from __future__ import annotations

import time

import psutil
import pytest

import pydeno

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

SPIN = "while (true) {}"


def web_worker(body: str) -> str:
    return (
        f"new Worker(URL.createObjectURL(new Blob([{body!r}], {{type: 'application/javascript'}})), {{type: 'module'}})"
    )


LEFT_RUNNING = {
    "a spinning Web Worker": f"{web_worker(SPIN)}; 'returned'",
    # Terminated once it says it is about to spin: then terminate() does not stop it.
    "a Web Worker that ignores terminate()": (
        f"const w = {web_worker('postMessage(1); ' + SPIN)}; await new Promise((r) => {{ w.onmessage = r }});"
        " w.terminate(); 'returned'"
    ),
    "a timer loop": ("setInterval(() => { const t = Date.now(); while (Date.now() - t < 20) {} }, 0); 'returned'"),
    "a promise chain": (
        "(function again() { const t = Date.now(); while (Date.now() - t < 20) {} Promise.resolve().then(again) })();"
        " 'returned'"
    ),
}


def next_call_failure(rt: pydeno.Runtime, cpu: float) -> Exception:
    """How the next call fails once the worker has used ``cpu`` more seconds of CPU with no
    command in flight (or has been killed): counted in CPU, not in wall time, so that a busy
    machine, which gives the guest's spinning less of a core, only makes the test wait longer."""
    process = rt._sup.process
    assert process is not None
    try:
        watched = psutil.Process(process.pid)
        start = sum(watched.cpu_times()[:2])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(watched.cpu_times()[:2]) - start < cpu:
            if process.poll() is not None or watched.status() == psutil.STATUS_ZOMBIE:
                break  # killed: what the next call reports
            time.sleep(0.05)
    except psutil.NoSuchProcess:
        pass  # already killed: what the next call reports
    # The monitor samples every 50 ms: let it see the last reading.
    time.sleep(0.3)
    try:
        rt.eval("1")
    except Exception as exc:  # noqa: BLE001 - the failure is what the test inspects
        return exc
    pytest.fail(f"the worker was still allowed to run after {cpu}s of CPU between commands")


@pytest.mark.parametrize("case", list(LEFT_RUNNING))
def test_work_left_running_after_a_command_is_stopped_at_cpu_limit(case: str) -> None:
    with pydeno.Runtime(cpu_limit=0.5, timeout=10) as rt:
        assert rt.eval(LEFT_RUNNING[case]) == "returned"
        exc = next_call_failure(rt, cpu=2.0)
        assert rt.closed
    assert isinstance(exc, pydeno.RuntimeTimeout)
    assert str(exc) == "worker used more than 0.5s of CPU between commands and was killed"
    info = pydeno.classify_error(exc)
    assert (info.kind, info.retryable, info.retry_with_larger_limits) == ("cpu_limit", False, True)


def test_without_a_cpu_limit_work_left_running_is_stopped_after_one_second() -> None:
    with pydeno.Runtime(timeout=10) as rt:
        assert rt.eval(LEFT_RUNNING["a spinning Web Worker"]) == "returned"
        exc = next_call_failure(rt, cpu=2.0)
    assert str(exc) == "worker used more than 1.0s of CPU between commands and was killed"
    assert pydeno.classify_error(exc).kind == "cpu_limit"


def test_a_worker_that_idles_between_commands_is_never_stopped() -> None:
    with pydeno.Runtime(cpu_limit=0.2, timeout=10) as rt:
        for i in range(8):
            assert rt.eval(f"setTimeout(() => {{}}, 10); {i}") == i
            time.sleep(0.25)
        assert not rt.closed


def test_background_work_cannot_hide_behind_frequent_short_commands() -> None:
    with pydeno.Runtime(cpu_limit=0.5, timeout=10) as rt:
        assert rt.eval(LEFT_RUNNING["a spinning Web Worker"]) == "returned"
        with pytest.raises(pydeno.RuntimeTimeout) as info:
            for _ in range(500):
                rt.eval("1")
                time.sleep(0.05)
    assert str(info.value) == "worker used more than 0.5s of CPU between commands and was killed"
