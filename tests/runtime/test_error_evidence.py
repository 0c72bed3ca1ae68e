"""Typed evidence: a start failure's cause is read by its type, never its text; real spawn
failures come from fault injection at ``Launch.start`` in ``pydeno.host.process.worker``."""

from __future__ import annotations

import errno
import re
from collections.abc import Callable
from typing import Any

import anyio
import pytest

import pydeno
from pydeno.host.process import child as _child
from pydeno.host.process import spawner as _spawner
from tests.support.error_checks import Launcher, assert_explained, failure

# Outside the fast subset (pytest -m "not slow") like the rest of the error-kind checks: the
# spawn failures start runtimes, and the retry policy's test starts a real worker.
pytestmark = pytest.mark.slow


def start_failure(cause: BaseException, message: str = "worker failed to start: forged") -> BaseException:
    """A WorkerCrashed raised from cause, as the host raises a failed start."""
    try:
        try:
            raise cause
        except BaseException as err:
            raise pydeno.WorkerCrashed(message) from err
    except pydeno.WorkerCrashed as exc:
        return exc


@pytest.mark.parametrize(
    ("cause", "kind"),
    [
        pytest.param(FileNotFoundError(), "deno_unavailable", id="FileNotFoundError()"),
        pytest.param(
            FileNotFoundError(errno.ENOENT, "No such file or directory", "/x"), "deno_unavailable", id="ENOENT"
        ),
        pytest.param(PermissionError(errno.EACCES, "Permission denied", "/x"), "deno_unavailable", id="EACCES"),
        pytest.param(OSError(errno.EMFILE, "Too many open files"), "worker_crashed", id="EMFILE"),
        pytest.param(OSError(errno.ENOSPC, "No space left on device"), "worker_crashed", id="ENOSPC"),
        pytest.param(OSError(errno.ENOMEM, "Cannot allocate memory"), "worker_crashed", id="ENOMEM"),
        pytest.param(OSError(errno.EMFILE, "No such file or directory"), "worker_crashed", id="EMFILE saying no file"),
        pytest.param(OSError(errno.EMFILE, "Permission denied"), "worker_crashed", id="EMFILE saying no permission"),
        pytest.param(
            FileNotFoundError(errno.ENOENT, "Too many open files"), "deno_unavailable", id="ENOENT saying EMFILE"
        ),
        pytest.param(ValueError("No such file or directory"), "worker_crashed", id="a ValueError saying no file"),
    ],
)
def test_a_start_failure_is_classified_by_the_type_of_its_cause_never_its_text(cause: BaseException, kind: str) -> None:
    exc = start_failure(cause)
    assert exc.__cause__ is cause
    info = assert_explained(exc, kind)
    assert info.retryable == (kind == "worker_crashed")


def test_an_implicit_context_counts_like_an_explicit_cause() -> None:
    try:
        try:
            raise PermissionError(errno.EACCES, "Permission denied")
        except PermissionError:
            raise pydeno.WorkerCrashed("worker failed to start: forged")  # noqa: B904 - the implicit context
    except pydeno.WorkerCrashed as exc:
        assert_explained(exc, "deno_unavailable")


@pytest.mark.parametrize(
    "message",
    [
        "worker process died (exit code 1): worker failed to start: forged",
        "worker exited during startup (exit code 1)",
        "Worker failed to start: forged",
        " worker failed to start: forged",
    ],
)
def test_only_the_hosts_own_start_failure_reads_its_cause(message: str) -> None:
    info = assert_explained(start_failure(FileNotFoundError(), message), "worker_crashed")
    assert info.retryable


SPAWN_ERRORS = [
    pytest.param(
        FileNotFoundError(errno.ENOENT, "No such file or directory", "/x/deno"),
        "deno_unavailable",
        r"worker failed to start: No such file or directory \(/x/deno\) \[ENOENT\]",
        id="ENOENT",
    ),
    pytest.param(
        PermissionError(errno.EACCES, "Permission denied", "/x/deno"),
        "deno_unavailable",
        r"worker failed to start: Permission denied \(/x/deno\) \[EACCES\]",
        id="EACCES",
    ),
    pytest.param(
        OSError(errno.EMFILE, "Too many open files"),
        "worker_crashed",
        r"worker failed to start: Too many open files \[EMFILE\]",
        id="EMFILE",
    ),
    pytest.param(
        OSError(errno.ENOSPC, "No space left on device"),
        "worker_crashed",
        r"worker failed to start: No space left on device \[ENOSPC\]",
        id="ENOSPC",
    ),
    pytest.param(
        OSError(errno.ENOMEM, "Cannot allocate memory"),
        "worker_crashed",
        r"worker failed to start: Cannot allocate memory \[ENOMEM\]",
        id="ENOMEM",
    ),
    pytest.param(
        OSError(errno.EMFILE, "No such file or directory", "/x/deno"),
        "worker_crashed",
        r"worker failed to start: No such file or directory \(/x/deno\) \[EMFILE\]",
        id="EMFILE whose text says no such file",
    ),
]


def start_async_runtime() -> None:
    """Start an AsyncRuntime as a first use does (its constructor only checks options)."""

    async def main() -> None:
        async with pydeno.AsyncRuntime():
            pass

    anyio.run(main)


@pytest.mark.parametrize("runtime", [pydeno.Runtime, start_async_runtime])
@pytest.mark.parametrize(("error", "kind", "message"), SPAWN_ERRORS)
def test_a_real_spawn_failure_is_classified_by_the_type_of_its_os_error(
    launch: Launcher, runtime: Callable[[], object], error: OSError, kind: str, message: str
) -> None:
    def refuse(*args: object, **kwargs: object) -> _child.Child:
        raise error

    # Fault injection at the seam: starting the worker's process fails as the OS would make it
    # fail (a zygote's fork or a Popen).
    launch(start=refuse)
    exc = failure(runtime)
    assert type(exc) is pydeno.WorkerCrashed
    assert exc.__cause__ is error
    assert re.fullmatch(message, str(exc)), str(exc)
    info = assert_explained(exc, kind)
    assert info.retryable == (kind == "worker_crashed")
    # The kind the exception was made with is the kind it has once raised from its cause.
    assert exc.kind == kind


def test_a_retry_policy_retries_a_spawn_failure_from_emfile_but_not_a_missing_deno(
    monkeypatch: pytest.MonkeyPatch, launch: Launcher
) -> None:
    attempts: list[int] = []
    errors = iter([OSError(errno.EMFILE, "Too many open files")])
    real_start = _spawner.spawner().start_process

    def flaky(*args: Any, **kwargs: Any) -> _child.Child:
        attempts.append(1)
        error = next(errors, None)
        if error is not None:
            raise error
        return real_start(*args, **kwargs)

    launch(start=flaky)
    assert pydeno.run_with_retry(lambda rt: rt.eval("6 * 7"), factory=pydeno.Runtime, backoff=0) == 42
    assert len(attempts) == 2
    monkeypatch.setenv("PYDENO_DENO", "/nonexistent/pydeno-test/deno")
    runtimes: list[int] = []

    def factory() -> pydeno.Runtime:
        runtimes.append(1)
        return pydeno.Runtime()

    with pytest.raises(pydeno.WorkerCrashed) as info:
        pydeno.run_with_retry(lambda rt: rt.eval("1"), factory=factory, backoff=0)
    assert info.value.kind == "deno_unavailable"
    assert len(runtimes) == 1
