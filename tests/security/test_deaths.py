"""A guest cannot choose a retryable death.

``worker_crashed`` is the one kind that tells a service to run the same work again on a fresh
runtime, so a guest that could end its worker that way would be run again and again by every
retry loop. Where the kernel allows, the guest loses the means (the seccomp filter refuses
every fatal signal to itself); where it keeps them, the host's rule for a death is based on
evidence: an exit, a crash or an abort after the handshake is the guest's own doing
(``guest_crashed``, never retried), and a kill is from outside only where the guest could not
have sent it.
"""

from __future__ import annotations

import json
import re
import signal
from typing import Any

import pytest

import pydeno
from pydeno.host.process import monitor

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

GUEST_DIED = "worker died running guest code ("


def in_web_worker(body: str) -> str:
    """Run ``body`` as a module Web Worker and give it a moment to act once it has started
    (a Worker takes a while to start, longer on a busy machine)."""
    return (
        f"const source = {json.dumps(body + '; postMessage(1)')};"
        "const url = URL.createObjectURL(new Blob([source], {type: 'application/javascript'}));"
        "const worker = new Worker(url, {type: 'module'});"
        "await new Promise((resolve) => {"
        "  worker.onmessage = resolve;"
        "  worker.onerror = (e) => { e.preventDefault(); resolve() };"
        "});"
        "await new Promise((resolve) => setTimeout(resolve, 300)); 'survived'"
    )


def self_signal(name: str) -> str:
    return in_web_worker(f"import p from 'node:process'; p.kill(p.pid, {json.dumps(name)})")


def failure(rt: pydeno.Runtime, code: str) -> Exception:
    try:
        rt.eval(code)
    except Exception as exc:  # noqa: BLE001 - the failure is what the test inspects
        return exc
    pytest.fail("the eval did not fail")


SIGNALS = ["SIGKILL", "SIGTERM", "SIGABRT", "SIGSEGV", "SIGTRAP", "SIGSTOP", "SIGUSR1", "SIGHUP"]


@pytest.mark.parametrize("name", SIGNALS)
def test_under_the_os_sandbox_a_guest_cannot_send_its_worker_a_fatal_signal(name: str) -> None:
    with pydeno.Runtime(timeout=10) as rt:
        assert rt.eval(self_signal(name)) == "survived"
        assert rt.eval("1 + 1") == 2


# Not SIGSEGV or SIGUSR1: deno handles them (V8 for WebAssembly traps), so a guest survives them.
@pytest.mark.parametrize("name", ["SIGKILL", "SIGTERM", "SIGABRT", "SIGTRAP"])
def test_without_the_os_sandbox_a_guest_that_signals_its_worker_is_a_guest_crash(name: str) -> None:
    with pydeno.Runtime(timeout=10, sandbox="off") as rt:
        exc = failure(rt, self_signal(name))
        assert rt.closed
    assert isinstance(exc, pydeno.WorkerCrashed)
    assert str(exc).startswith(f"{GUEST_DIED}killed by {name})")
    info = pydeno.classify_error(exc)
    assert (info.kind, info.retryable) == ("guest_crashed", False)


@pytest.mark.parametrize("sandbox", ["require", "off"])
def test_a_guest_that_closes_the_workers_output_is_a_guest_crash(sandbox: str) -> None:
    with pydeno.Runtime(timeout=10, sandbox=sandbox) as rt:
        exc = failure(rt, "(await import('node:fs')).closeSync(1); 1")
    assert str(exc).startswith(f"{GUEST_DIED}exit code 0)")
    assert pydeno.classify_error(exc).kind == "guest_crashed"


@pytest.mark.parametrize("sandbox", ["require", "off"])
def test_a_guest_that_closes_the_workers_input_and_lives_on_is_a_guest_crash(sandbox: str) -> None:
    with pydeno.Runtime(timeout=10, sandbox=sandbox) as rt:
        # Closing stdin ends the worker's read loop; a timer keeps the process from exiting.
        rt.eval("(await import('node:fs')).closeSync(0); setInterval(() => {}, 1000); 1")
        exc = failure(rt, "1")
    assert pydeno.classify_error(exc).kind == "guest_crashed"


def test_run_with_retry_runs_a_guest_that_ends_its_worker_once_only() -> None:
    attempts: list[int] = []

    def work(rt: pydeno.Runtime) -> Any:
        attempts.append(1)
        return rt.eval("(await import('node:fs')).closeSync(1); 1")

    with pytest.raises(pydeno.WorkerCrashed) as info:
        pydeno.run_with_retry(work, factory=lambda: pydeno.Runtime(timeout=10), max_attempts=3)
    assert len(attempts) == 1
    assert pydeno.classify_error(info.value).kind == "guest_crashed"


def test_a_sigtrap_without_v8s_out_of_memory_line_is_not_a_memory_limit() -> None:
    with pydeno.Runtime(timeout=10, sandbox="off") as rt:
        exc = failure(rt, self_signal("SIGTRAP"))
    assert pydeno.classify_error(exc).kind == "guest_crashed"


def test_a_guest_that_forges_v8s_out_of_memory_line_only_makes_its_death_less_retryable() -> None:
    forged = "\\n#\\n# Fatal JavaScript out of memory: Reached heap limit\\n#\\n"
    code = in_web_worker(
        f"import p from 'node:process'; p.stderr.write('{forged}'); setTimeout(() => p.kill(p.pid, 'SIGTRAP'), 50)"
    )
    with pydeno.Runtime(timeout=10, sandbox="off") as rt:
        exc = failure(rt, code)
    info = pydeno.classify_error(exc)
    assert info.kind == "memory_limit"
    assert not info.retryable


def test_running_out_of_the_v8_heap_is_still_a_memory_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # The monitor reads nothing (as if the host were too busy to sample), so what ends the
    # worker is V8's own heap limit, or the kernel's limit just above max_memory.
    monkeypatch.setattr(monitor, "memory_of", lambda process: 0)
    with pydeno.Runtime(timeout=60, max_memory=256 * 2**20) as rt:
        exc = failure(rt, "const keep = []; while (true) keep.push({a: keep.length, b: [1, 2, 3]})")
    assert re.fullmatch(
        r"worker ran out of its V8 heap \(sized from max_memory=268435456\) and was stopped"
        r"|worker used \d+ bytes, over max_memory=268435456; killed",
        str(exc),
    ), str(exc)
    assert pydeno.classify_error(exc).kind == "memory_limit"


@pytest.mark.parametrize("sandbox", ["require", "off"])
def test_a_worker_killed_from_outside_while_idle_stays_retryable(sandbox: str) -> None:
    with pydeno.Runtime(timeout=10, sandbox=sandbox) as rt:
        assert rt.eval("1") == 1
        process = rt._sup.process
        assert process is not None
        process.popen.kill()
        assert process.popen.wait() == -signal.SIGKILL
        exc = failure(rt, "1")
    info = pydeno.classify_error(exc)
    assert (info.kind, info.retryable) == ("worker_crashed", True)


@pytest.mark.parametrize(
    ("sandbox", "kind"),
    [
        pytest.param("require", "worker_crashed", id="the filter refuses such a kill to the guest: from outside"),
        pytest.param("off", "guest_crashed", id="no filter: the guest could have sent it"),
    ],
)
def test_a_kill_during_a_command_is_retryable_only_where_the_guest_cannot_send_it(sandbox: str, kind: str) -> None:
    with pydeno.Runtime(timeout=10, sandbox=sandbox) as rt:
        process = rt._sup.process
        assert process is not None
        rt.bind_function("kill_me", process.popen.kill)
        exc = failure(rt, "await kill_me(); await new Promise(() => {})")
    info = pydeno.classify_error(exc)
    assert (info.kind, info.retryable) == (kind, kind == "worker_crashed")
