"""Shared fixtures. The autouse leak guard fails any test that leaves a worker process,
a thread or a file descriptor behind; only what spawner.infrastructure() names (the zygote,
its socket and the spawner thread) is the process's own, kept between runtimes on purpose."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import psutil
import pytest

from pydeno.host.process import spawner, worker

FAKE_WORKERS = Path(__file__).parent / "fake_workers"


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _fds() -> set[int]:
    # The listing includes the descriptor listdir reads it through, closed again by now; its
    # number moves whenever a lower one is taken (by the zygote's socket, say), so drop it.
    return {fd for fd in map(int, os.listdir("/proc/self/fd")) if _open(fd)}


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _threads() -> set[int]:
    # Trio keeps an idle worker-thread cache ("Trio thread N") that it retires by itself
    # after ten seconds; it belongs to trio, not to anything a test started.
    return {t.ident for t in threading.enumerate() if t.ident is not None and not t.name.startswith("Trio thread")}


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Every process, thread and descriptor a test creates must be gone when it ends."""
    children, fds, threads = _children(), _fds(), _threads()
    yield
    deadline = time.monotonic() + 5.0
    collected = False
    while True:
        kept = spawner.infrastructure()
        left_children = _children() - children - kept.processes
        # A descriptor number reused for something long-lived is still a leak; listdir's
        # own descriptor is closed by the time the set is built.
        left_fds = _fds() - fds - kept.descriptors
        left_threads = _threads() - threads - kept.threads
        if not (left_children or left_fds or left_threads) or time.monotonic() > deadline:
            break
        if not collected:
            # Only when something is left: what a dropped object held goes with its cycle. A
            # full collection after every test would cost more than most tests, late in a run.
            gc.collect()
            collected = True
            continue
        # Short: a runtime's monitor thread ends by itself a sampling period after its last
        # worker, and every test waits for that here.
        time.sleep(0.005)
    problems = []
    if left_children:
        problems.append(f"processes {sorted(left_children)}")
    if left_fds:
        targets = []
        for fd in sorted(left_fds):
            try:
                targets.append(f"{fd}->{os.readlink(f'/proc/self/fd/{fd}')}")
            except OSError:
                targets.append(str(fd))
        problems.append(f"descriptors {targets}")
    if left_threads:
        names = [t.name for t in threading.enumerate() if t.ident in left_threads]
        problems.append(f"threads {names}")
    if problems:
        for pid in left_children:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
        pytest.fail("test leaked " + ", ".join(problems), pytrace=False)


@pytest.fixture
def launch() -> Iterator[Callable[..., None]]:
    """``launch(**changes)``: start the workers of the runtimes made from now on (from any
    thread) with these fields of :class:`pydeno.host.process.worker.Launch` replaced, on top of what
    an earlier call replaced; production's way again once the test ends."""
    with contextlib.ExitStack() as stack:
        current = [worker.Launch()]

        def use(**changes: Any) -> None:
            current.append(current[-1]._replace(**changes))
            stack.enter_context(worker.launching(current[-1]))

        yield use


@pytest.fixture
def fake_worker(launch: Callable[..., None]) -> Callable[..., None]:
    """Make the next runtimes start ``tests/fake_workers/<name>.py`` instead of deno.

    Hostile fake workers speak the wire badly on purpose; they are the only stand-ins for
    a worker that the tests use, and only to test the host's defences.
    """

    def use(name: str, *args: str) -> None:
        script = FAKE_WORKERS / f"{name}.py"
        assert script.is_file(), script
        launch(command=lambda config: [sys.executable, str(script), *args])

    return use


# -- the browser check: deselected, and said so, where there is no browser ----------------

CHROMIUM: Final = Path("/usr/bin/chromium")
_deselected_browser: list[str] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if CHROMIUM.exists():
        return
    browser = [item for item in items if item.get_closest_marker("browser")]
    if browser:
        _deselected_browser.extend(item.nodeid for item in browser)
        items[:] = [item for item in items if not item.get_closest_marker("browser")]
        config.hook.pytest_deselected(items=browser)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _deselected_browser:
        terminalreporter.write_line(
            f"deselected {len(_deselected_browser)} browser tests: {CHROMIUM} is not installed "
            "(apt-get install chromium; .ci/run installs it)",
            yellow=True,
        )
