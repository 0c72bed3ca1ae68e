"""A worker's process as the host holds it, whichever way it was started (a
:class:`subprocess.Popen`, or a :class:`~.zygote.ZygoteChild`), and the one way to kill,
reap and let go of either."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import IO, Protocol

from .zygote import ZygoteChild

__all__ = ["Child", "close_pipes", "kill", "reap", "signal_kill", "signal_stop"]


class Child(Protocol):
    """A worker's process as the host uses it: a :class:`subprocess.Popen`, or a
    :class:`ZygoteChild` with the same meaning for each member (``returncode`` negative for
    the signal that ended it)."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    @property
    def stdin(self) -> IO[bytes] | None: ...
    @property
    def stdout(self) -> IO[bytes] | None: ...
    @property
    def stderr(self) -> IO[bytes] | None: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def kill(self) -> None: ...


def signal_kill(child: Child) -> None:
    """SIGKILL the process group without waiting for it: from any thread, never raises. A
    zygote's child is signalled through its pidfd (see ZygoteChild.send_signal)."""
    if isinstance(child, subprocess.Popen):
        # Not yet reaped by us, so the pid (and the group it leads) is still this worker's.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        child.kill()


def signal_stop(child: Child) -> None:
    """SIGSTOP the process group: it runs nothing more until a SIGKILL ends it (a stopped
    process still dies of that). From any thread, never raises; as signal_kill does, a
    zygote's child is signalled through its pidfd."""
    if isinstance(child, subprocess.Popen):
        if child.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGSTOP)
        return
    if isinstance(child, ZygoteChild):
        with contextlib.suppress(OSError):
            child.send_signal(signal.SIGSTOP)


def kill(child: Child) -> None:
    """SIGKILL the process group and reap it. Idempotent, never raises."""
    if child.returncode is None:
        signal_kill(child)
        # SIGKILL cannot be ignored; the bound only guards against a kernel that stalls.
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=10)


def close_pipes(child: Child) -> None:
    for stream in (child.stdin, child.stdout, child.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def reap(child: Child) -> None:
    """Kill, reap and close: nothing of the worker is left, its pid free for reuse."""
    kill(child)
    close_pipes(child)
    if isinstance(child, ZygoteChild):
        child.release()
