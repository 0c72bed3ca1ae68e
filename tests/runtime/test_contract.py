"""No raw internal exception escapes a public entry point: faults injected at the seams
(spawning, pipes, /proc) come out as pydeno errors or documented builtins."""

from __future__ import annotations

import errno
import os
import types
from collections.abc import Callable
from typing import Any

import pytest

import pydeno
from pydeno.host.process import monitor as _monitor
from pydeno.host.process import worker as _process

ALLOWED = (pydeno.PydenoError, TypeError, ValueError, RuntimeError)


def _os_with(**overrides: Callable[..., Any]) -> types.SimpleNamespace:
    """The os module as _process sees it, with some functions replaced."""
    namespace = types.SimpleNamespace(**{name: getattr(os, name) for name in dir(os) if not name.startswith("__")})
    for name, fn in overrides.items():
        setattr(namespace, name, fn)
    return namespace


def _raises(exc: BaseException) -> Callable[..., Any]:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise exc

    return fail


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (OSError(errno.EMFILE, "Too many open files"), "worker_crashed"),
        (OSError(errno.ENOMEM, "Cannot allocate memory"), "worker_crashed"),
        (OSError(errno.ENOSPC, "No space left on device"), "worker_crashed"),
        (FileNotFoundError(errno.ENOENT, "No such file or directory"), "deno_unavailable"),
        (PermissionError(errno.EACCES, "Permission denied"), "deno_unavailable"),
    ],
)
def test_a_spawn_failure_is_worker_crashed_from_its_os_error(
    launch: Callable[..., None], error: OSError, kind: str
) -> None:
    # The seam every worker's process starts through (a zygote's fork or a Popen).
    launch(start=_raises(error))
    with pytest.raises(pydeno.WorkerCrashed) as info:
        pydeno.Runtime()
    assert str(info.value).startswith("worker failed to start: ")
    assert info.value.__cause__ is error
    assert pydeno.classify_error(info.value).kind == kind


@pytest.mark.slow
@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (OSError(errno.EIO, "I/O error"), r"^worker process died \("),
        # A broken pipe to a worker that still runs means it closed its own stdin.
        (BrokenPipeError(errno.EPIPE, "Broken pipe"), r"^worker died running guest code \(closed its pipes\)"),
    ],
)
def test_a_failing_pipe_write_is_a_dead_worker(monkeypatch: pytest.MonkeyPatch, error: OSError, expected: str) -> None:
    with pydeno.Runtime() as rt:
        monkeypatch.setattr(_process, "os", _os_with(write=_raises(error)))
        with pytest.raises(pydeno.WorkerCrashed, match=expected):
            rt.eval("1")
        assert rt.closed


@pytest.mark.slow
def test_a_failing_pipe_read_is_a_dead_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    with pydeno.Runtime() as rt:
        real_read = os.read
        process = rt._sup.process
        assert process is not None
        stdout = process.stdout_fd

        def read(fd: int, n: int) -> bytes:
            if fd == stdout:
                raise OSError(errno.EIO, "I/O error")
            return real_read(fd, n)

        monkeypatch.setattr(_process, "os", _os_with(read=read))
        with pytest.raises(pydeno.WorkerCrashed, match=r"^worker process died \("):
            rt.eval("1")


def test_proc_refusing_the_monitor_never_escapes(monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(pid: int) -> int:
        raise PermissionError(13, "Permission denied", f"/proc/{pid}/stat")

    monkeypatch.setattr(_monitor.platform, "open_stat", denied)
    # sandbox="require" refuses such a worker (tests/runtime/test_sandbox.py); without it, it runs.
    with pydeno.Runtime(cpu_limit=5.0, sandbox="off") as rt:
        assert rt.eval("let s = 0; for (let i = 0; i < 1e5; i++) s += i; s") == 4999950000
    with pytest.raises(pydeno.WorkerCrashed) as info:
        pydeno.Runtime(cpu_limit=5.0)
    assert info.value.kind == "limits_unmeasurable"


@pytest.mark.parametrize(
    "call",
    [
        lambda: pydeno.Runtime(timeout=-1),
        lambda: pydeno.Runtime(max_memory="lots"),
        lambda: pydeno.Runtime(on_console=1),
    ],
)
def test_bad_arguments_raise_only_documented_builtins(call: Callable[[], Any]) -> None:
    with pytest.raises(ALLOWED) as info:
        call()
    assert isinstance(info.value, (TypeError, ValueError))
