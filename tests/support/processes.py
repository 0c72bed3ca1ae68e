"""The worker processes a test can see: deno workers below a process, and every process this
one started that is not the spawner's own (its zygote, and the zygote's spare)."""

from __future__ import annotations

import contextlib
import os

import psutil

from pydeno.host.process import spawner


def is_spare(process: psutil.Process) -> bool:
    """Whether process is a zygote's spare, a worker no runtime has taken yet: its parent is a
    zygote (``launcher.py serve``), and holds the other end of its stdin, which it hands to the
    host that takes it. A worker the host started itself (``sandbox="off"``) is no spare,
    though its parent holds its stdin too. It tells a spare from a worker in any process,
    this one or a server's."""
    try:
        parent = psutil.Process(process.ppid())
        if "serve" not in parent.cmdline() or not any(arg.endswith("launcher.py") for arg in parent.cmdline()):
            return False
        stdin = os.readlink(f"/proc/{process.pid}/fd/0")
        return stdin.startswith("pipe:") and any(
            os.readlink(f"/proc/{parent.pid}/fd/{fd}") == stdin for fd in os.listdir(f"/proc/{parent.pid}/fd")
        )
    except (OSError, psutil.Error):
        return False


def is_worker(process: psutil.Process) -> bool:
    """Whether process is a deno worker some runtime has: not a zygote's spare, nor a ``deno
    cache`` that stages the worker's code at start."""
    with contextlib.suppress(psutil.Error):
        return process.name() == "deno" and process.cmdline()[1:2] == ["run"] and not is_spare(process)
    return False


def deno_workers(root: psutil.Process | None = None) -> list[psutil.Process]:
    """The deno workers below root (this process by default): its other descendants are the
    spawner's own (the zygote, its spare), and a ``deno cache`` that stages the worker's code
    at start."""
    return [p for p in (root or psutil.Process()).children(recursive=True) if is_worker(p)]


def worker_pids() -> set[int]:
    """The worker processes alive now (the spawner's zygote and its spare are kept between
    runtimes)."""
    kept = spawner.infrastructure().processes
    return {p.pid for p in psutil.Process().children(recursive=True) if not is_spare(p)} - kept
