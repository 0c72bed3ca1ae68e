"""run_with_retry: retries only what the policy accepts, always on a fresh runtime."""

from __future__ import annotations

import os
import signal
from typing import Any

import anyio
import pytest

import pydeno


class Attempts:
    """A fn for run_with_retry that records each runtime it got and fails as told."""

    def __init__(self, *failures: str) -> None:
        self.failures = list(failures)
        self.runtimes: list[Any] = []
        self.pids: list[int] = []

    def __call__(self, rt: pydeno.Runtime) -> Any:
        self.runtimes.append(rt)
        process = rt._sup.process
        assert process is not None
        self.pids.append(process.pid)
        failure = self.failures.pop(0) if self.failures else None
        if failure == "crash":
            os.kill(process.pid, signal.SIGKILL)
            return rt.eval("1")
        if failure == "js":
            return rt.eval("null.x")
        if failure == "timeout":
            return rt.eval("while (true) {}", timeout=0.2)
        return rt.eval("'done'")


def test_a_success_is_returned_at_once_and_its_runtime_closed() -> None:
    fn = Attempts()
    assert pydeno.run_with_retry(fn) == "done"
    assert len(fn.runtimes) == 1 and fn.runtimes[0].closed


def test_a_dead_worker_is_retried_on_a_fresh_runtime() -> None:
    fn = Attempts("crash")
    assert pydeno.run_with_retry(fn) == "done"
    assert len(set(fn.pids)) == 2
    assert all(rt.closed for rt in fn.runtimes)


@pytest.mark.slow
@pytest.mark.parametrize("failure", ["js", "timeout"])
def test_a_failure_that_is_not_retryable_is_raised_after_one_attempt(failure: str) -> None:
    fn = Attempts(failure, failure)
    with pytest.raises(pydeno.PydenoError) as info:
        pydeno.run_with_retry(fn)
    assert len(fn.runtimes) == 1
    assert not pydeno.classify_error(info.value).retryable


@pytest.mark.slow
def test_after_max_attempts_the_last_error_is_raised_with_a_note() -> None:
    fn = Attempts("crash", "crash", "crash")
    with pytest.raises(pydeno.WorkerCrashed) as info:
        pydeno.run_with_retry(fn, max_attempts=3)
    assert len(set(fn.pids)) == 3
    assert "pydeno: failed on attempt 3 of 3, each on a fresh runtime" in info.value.__notes__


@pytest.mark.slow
def test_include_widens_the_policy_to_a_named_kind() -> None:
    fn = Attempts("timeout")
    assert pydeno.run_with_retry(fn, include=["timeout"]) == "done"
    assert len(fn.runtimes) == 2


@pytest.mark.slow
def test_include_by_class_name_matches_subclasses() -> None:
    fn = Attempts("js")
    assert pydeno.run_with_retry(fn, include=["PydenoError"]) == "done"
    assert len(fn.runtimes) == 2


@pytest.mark.slow
@pytest.mark.parametrize("exclude", [["worker_crashed"], ["WorkerCrashed"], ["PydenoError"]])
def test_exclude_stops_a_retry_the_default_would_make(exclude: list[str]) -> None:
    fn = Attempts("crash")
    with pytest.raises(pydeno.WorkerCrashed):
        pydeno.run_with_retry(fn, exclude=exclude)
    assert len(fn.runtimes) == 1


@pytest.mark.slow
def test_exclude_wins_over_include() -> None:
    fn = Attempts("timeout")
    with pytest.raises(pydeno.RuntimeTimeout):
        pydeno.run_with_retry(fn, include=["timeout"], exclude=["RuntimeTimeout"])
    assert len(fn.runtimes) == 1


@pytest.mark.slow
def test_backoff_doubles_up_to_its_cap() -> None:
    slept: list[float] = []
    fn = Attempts("crash", "crash", "crash", "crash")
    assert pydeno.run_with_retry(fn, max_attempts=5, backoff=0.1, max_backoff=0.3, sleep=slept.append) == "done"
    assert slept == [0.1, 0.2, 0.3, 0.3]


def test_a_runtime_that_cannot_start_for_lack_of_deno_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYDENO_DENO", "/nonexistent/deno")
    calls: list[int] = []

    def factory() -> pydeno.Runtime:
        calls.append(1)
        return pydeno.Runtime()

    with pytest.raises(pydeno.WorkerCrashed) as info:
        pydeno.run_with_retry(lambda rt: rt.eval("1"), factory=factory)
    assert pydeno.classify_error(info.value).kind == "deno_unavailable"
    assert calls == [1]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_attempts": 0}, ValueError),
        ({"max_attempts": 1.5}, ValueError),
        ({"backoff": -1}, ValueError),
        ({"include": [1]}, TypeError),
    ],
)
def test_bad_retry_arguments_are_refused(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        pydeno.run_with_retry(lambda rt: None, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_async_helper_retries_a_dead_worker_on_a_fresh_runtime(backend: str) -> None:
    pids: list[int] = []

    async def fn(rt: pydeno.AsyncRuntime) -> Any:
        await rt.eval("1")
        process = rt._sup.process
        assert process is not None
        pids.append(process.pid)
        if len(pids) == 1:
            os.kill(process.pid, signal.SIGKILL)
        return await rt.eval("'async done'")

    async def main() -> Any:
        return await pydeno.run_with_retry_async(fn, backoff=0.01)

    assert anyio.run(main, backend=backend) == "async done"
    assert len(set(pids)) == 2
