"""The spawner thread: the one long-lived thread that starts every worker's process, and the
zygote with it, and so what a host process keeps between runtimes."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Final, NamedTuple

from .child import Child, reap
from .spec import DENO_ARGV0, LAUNCHER, Command, Confined, Unconfined
from .staging import SERVE_BY_DESCRIPTOR, open_base
from .zygote import REPLY_SECONDS, Zygote, ZygoteChild, ZygoteGone

__all__ = ["IDLE_SECONDS", "Infrastructure", "Spawner", "infrastructure", "spawner"]

# How long the zygote outlives the last worker.
IDLE_SECONDS: Final = 30.0


class Spawner:
    """Starts workers from one long-lived thread, which outlives every worker it started.

    A sandboxed worker's parent-death signal fires when the *thread* that forked it exits, not
    the process: a runtime created in a short-lived thread would lose its worker the moment
    that thread ended. So every worker, and the zygote, is forked here, and this thread exits
    only once no worker it started is alive and the zygote has been idle for ``idle_seconds``
    (it retires the zygote first; the next spawn starts both again).

    ``idle_seconds`` is read each time the thread waits, ``reply_seconds`` (how long the
    zygote may take to answer) each time a zygote is asked or started, ``launcher`` (the
    program run as the zygote and as the one-off launcher) each time one is started.
    """

    def __init__(
        self,
        *,
        idle_seconds: float = IDLE_SECONDS,
        reply_seconds: float = REPLY_SECONDS,
        launcher: Path = LAUNCHER,
    ) -> None:
        self.idle_seconds = idle_seconds
        self.reply_seconds = reply_seconds
        self.launcher = launcher
        # Started and retired only by this spawner's thread; any thread may ask it for a worker.
        self.zygote: Zygote | None = None
        # Why this process starts its workers without a zygote, once one could not start here.
        self.refused: str | None = None
        self._cond = threading.Condition()
        # A start with no future is the zygote's warm-up: no one waits for it.
        self._queue: deque[tuple[Callable[[], Child], Future[Child]] | Callable[[], None]] = deque()
        self._live = 0
        self._thread: threading.Thread | None = None

    # -- from any thread ---------------------------------------------------------------
    def spawn(self, start: Callable[[], Child]) -> Child:
        """Run start in the spawner thread and return what it started (or raise what it
        raised); the worker counts as live until :meth:`release`."""
        future: Future[Child] = Future()
        with self._cond:
            self._live += 1
            self._enqueue((start, future))
        try:
            return future.result()
        except BaseException:
            if not future.cancel():
                # It failed, or the caller was interrupted while the thread was starting it: a
                # process that got started has no other owner, so wait for it and reap it.
                with contextlib.suppress(BaseException):
                    reap(future.result())
            self.release()
            raise

    def spawn_process(self, command: Command, environment: dict[str, str]) -> Child:
        """Start a worker's process as :meth:`start_process` does: from the calling thread when
        a ready zygote serves it, else from the spawner thread (see :meth:`spawn`)."""
        if isinstance(command, Confined):
            # The zygote is the worker's parent, so no thread of this process need outlive the
            # worker; and the hand-over to the spawner thread and back is a part of every
            # start.
            with self._cond:
                zygote = self.zygote
                if zygote is not None and (not zygote.ready or zygote.gone):
                    zygote = None
                if zygote is not None:
                    self._live += 1
            if zygote is not None:
                try:
                    return zygote.spawn(command.spec, self.reply_seconds)
                except ZygoteGone:
                    # Marked gone: the spawner thread retires it and asks a new one.
                    self.release()
                except BaseException:
                    self.release()
                    raise
        return self.spawn(lambda: self.start_process(command, environment))

    def release(self) -> None:
        """One worker this spawner started is gone."""
        with self._cond:
            self._live -= 1
            self._cond.notify()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def later(self, job: Callable[[], None]) -> Future[None]:
        """Run job in the spawner thread after what is queued; its outcome in the future."""
        future: Future[None] = Future()

        def run() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    job()
                except BaseException as exc:  # noqa: BLE001 - handed to whoever waits
                    future.set_exception(exc)
                else:
                    future.set_result(None)

        with self._cond:
            self._enqueue(run)
        return future

    def warm(self) -> None:
        """Start the zygote now, if there is none, without waiting for it: the caller has
        work to do first (staging deno), in which time it can get ready."""
        if self.zygote is not None or self.refused is not None:
            return
        with self._cond:
            self._enqueue(self._warm)

    def thread(self) -> threading.Thread | None:
        return self._thread

    def infrastructure(self) -> Infrastructure:
        zygote, thread = self.zygote, self._thread
        live = zygote is not None and zygote.socket.fileno() >= 0
        return Infrastructure(
            # The zygote, and the spare worker it keeps started ahead of the next request.
            processes=frozenset([zygote.popen.pid, *zygote.spare_pids()] if zygote is not None else []),
            descriptors=frozenset([zygote.fd] if live and zygote is not None else []),
            threads=frozenset([thread.ident] if thread is not None and thread.ident is not None else []),
        )

    # -- in the spawner thread ---------------------------------------------------------
    def start_process(self, command: Command, environment: dict[str, str]) -> Child:
        """Start a worker's process (in the spawner thread): a confined worker from the
        zygote, or from a one-off launcher when no zygote can serve; any other command
        directly."""
        if isinstance(command, Unconfined):
            # The descriptor's number is whatever this process has free (no thread here may
            # pick it): each number's URLs get a transpile of their own, once, which an
            # unconfined worker writes to the cache itself.
            fd = open_base(command.staged.base) if SERVE_BY_DESCRIPTOR else -1
            try:
                argv = command.argv(fd)
                return _popen([DENO_ARGV0, *argv[1:]], environment, executable=argv[0], fds=(fd,) if fd >= 0 else ())
            finally:
                if fd >= 0:
                    os.close(fd)
        if isinstance(command, Confined):
            child = self._spawn_confined(command.spec)
            if child is not None:
                return child
            command = command.command(self.launcher)
        return _popen(command, environment)

    def _warm(self) -> None:
        # A failure to start the zygote is met again, and reported, by the spawn that follows.
        self._ensure_zygote()

    def _spawn_confined(self, spec: dict[str, Any]) -> ZygoteChild | None:
        """A confined worker from the zygote, starting one if needed; None when no zygote can
        serve here, and the one-off launcher must."""
        for _attempt in range(2):
            zygote = self._ensure_zygote()
            if zygote is None:
                return None
            try:
                return zygote.spawn(spec, self.reply_seconds)
            except ZygoteGone as exc:
                if not zygote.ready:
                    # It never got as far as serving: it would not the next time either.
                    self.refused = zygote.unavailable or f"it ended before it was ready ({exc})"
                self._retire_zygote()
        return None

    def _ensure_zygote(self) -> Zygote | None:
        """The live zygote, started if there is none; None when none can serve in this process."""
        if self.refused is not None:
            return None
        if self.zygote is not None and self.zygote.gone:
            self._retire_zygote()
        if self.zygote is None:
            self.zygote = Zygote(self.wake, launcher=self.launcher, reply_seconds=self.reply_seconds)
        return self.zygote

    def _retire_zygote(self) -> None:
        zygote, self.zygote = self.zygote, None
        if zygote is not None:
            zygote.stop()

    def _enqueue(self, job: tuple[Callable[[], Child], Future[Child]] | Callable[[], None]) -> None:
        self._queue.append(job)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pydeno-spawner", daemon=True)
            self._thread.start()
        self._cond.notify()

    def _run(self) -> None:
        while True:
            retiring: Zygote | None = None
            with self._cond:
                job = self._next()
                if job is None and self.zygote is None:
                    self._thread = None
                    return
                if job is None:
                    # Taken away under the lock: a caller that found it here counted its
                    # start as live first, so _next retires none that a start is using.
                    retiring, self.zygote = self.zygote, None
            if job is None:
                # Idle long enough, or found dead: the zygote is retired from this thread, the
                # one its parent-death signal follows, which therefore must not end before it.
                if retiring is not None:
                    with contextlib.suppress(Exception):
                        retiring.stop()
                continue
            if callable(job):
                # This thread must outlive the zygote: nothing a warm-up raises may end it.
                with contextlib.suppress(Exception):
                    job()
                continue
            start, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(start())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                future.set_exception(exc)

    def _next(self) -> tuple[Callable[[], Child], Future[Child]] | Callable[[], None] | None:
        """The next start to run, waiting for one; None when the zygote is to be retired, or
        when there is no zygote and no live worker (this thread may end). Holds the lock."""
        idle_since = time.monotonic()
        while not self._queue:
            zygote = self.zygote
            if zygote is not None and zygote.gone:
                return None
            if self._live > 0:
                self._cond.wait()
                idle_since = time.monotonic()
                continue
            if zygote is None:
                return None
            remaining = idle_since + self.idle_seconds - time.monotonic()
            if remaining <= 0:
                return None
            self._cond.wait(remaining)
        return self._queue.popleft()

    # -- after a fork --------------------------------------------------------------------
    def forked(self) -> Spawner:
        """In a child forked from the host: the spawner thread did not come along and the
        zygote is the parent's. A spawner that starts afresh, as in a new process, with this
        one's settings and what it learnt of the system (a zygote it could not start)."""
        fresh = Spawner(idle_seconds=self.idle_seconds, reply_seconds=self.reply_seconds, launcher=self.launcher)
        fresh.refused = self.refused
        zygote, self.zygote = self.zygote, None
        if zygote is not None:
            zygote.abandon()
        return fresh


class Infrastructure(NamedTuple):
    """What a host process keeps between runtimes, by design: the zygote's process and its
    spare's, the host's end of its socket, and the spawner thread (by ident). Only these may
    outlive a runtime."""

    processes: frozenset[int]
    descriptors: frozenset[int]
    threads: frozenset[int]


_spawner = Spawner()


def spawner() -> Spawner:
    """This process's spawner (a forked child gets one of its own)."""
    return _spawner


def infrastructure() -> Infrastructure:
    return _spawner.infrastructure()


def _forget_after_fork() -> None:
    global _spawner
    _spawner = _spawner.forked()


os.register_at_fork(after_in_child=_forget_after_fork)


def _popen(
    command: list[str], environment: dict[str, str], *, executable: str | None = None, fds: tuple[int, ...] = ()
) -> subprocess.Popen[bytes]:
    """A worker started directly, in a session of its own, with nothing of the host's open
    but its three pipes and fds."""
    return subprocess.Popen(
        command,
        executable=executable,
        pass_fds=fds,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment,
        cwd="/",
        close_fds=True,
        start_new_session=True,
        bufsize=0,
    )
