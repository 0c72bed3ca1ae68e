"""The worker processes a test can see: deno workers below a process, and every process this
one started that is not the spawner's own."""

from __future__ import annotations

import contextlib

import psutil

from pydeno.host.process import spawner


def deno_workers(root: psutil.Process | None = None) -> list[psutil.Process]:
    """The deno workers below root (this process by default): its other descendants are the
    spawner's own, and a ``deno cache`` that stages the worker's code at start."""
    found = []
    for p in (root or psutil.Process()).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if p.name() == "deno" and p.cmdline()[1:2] == ["run"]:
                found.append(p)
    return found


def worker_pids() -> set[int]:
    """The worker processes alive now (the spawner's zygote is kept between runtimes)."""
    kept = spawner.infrastructure().processes
    return {p.pid for p in psutil.Process().children(recursive=True)} - kept
