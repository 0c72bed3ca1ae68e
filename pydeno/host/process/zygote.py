"""The host's end of the zygote: ``launcher.py serve``, one process per host that forks
every confined worker (protocol in the launcher's docstring), and the handle of a worker it
forked.

Starting a confined worker used to mean a fresh interpreter per worker (``python -I -S
launcher.py``: ~11 ms to start, ~7 ms of imports) before deno even began. The zygote is
that launcher started once per host process, in serve mode: it forks a child per worker,
which confines itself exactly as the one-off launcher does and execs deno. It is started
and retired only by the spawner thread (``spawner.py``), which its own parent-death signal
follows.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, Final

from . import platform
from .cgroup import remove_spare_groups
from .spec import LAUNCHER, launcher_command

__all__ = ["REPLY_SECONDS", "Zygote", "ZygoteChild", "ZygoteGone"]

# How long the host waits for the zygote to take a request or answer one before it gives up
# on it (kills it) and starts the worker another way. Fork and reply take about a millisecond.
REPLY_SECONDS: Final = 10.0
# How long a thread waiting for a reply reads before it looks again whether the socket closed.
_READ_SLICE: Final = 0.5


class ZygoteGone(Exception):
    """The zygote died, or did not answer in time."""


def _ready(fd: int, events: int, timeout: float | None) -> bool:
    """Whether fd polls ready for events within timeout seconds (None: no bound)."""
    poller = select.poll()
    poller.register(fd, events)
    return bool(poller.poll(None if timeout is None else max(0, int(timeout * 1000 + 0.999))))


def _close_fds(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class Zygote:
    """The host's end of one zygote (``launcher.py serve``, protocol in its docstring).

    Requests go out from any thread; spawns one at a time, since replies to them come in the
    order asked and carry nothing else to match them by. There is no reader thread: whichever
    thread waits for a reply reads everything that has arrived and files it (one reader at a
    time; the others wait on the condition), so a reply meant for another thread is found
    there when that thread looks.
    """

    def __init__(
        self, on_gone: Callable[[], None], *, launcher: Path = LAUNCHER, reply_seconds: float = REPLY_SECONDS
    ) -> None:
        # How long a release waits for the zygote to say it has reaped the worker; a spawn
        # is given its own bound.
        self.reply_seconds = reply_seconds
        host_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            channel = zygote_end.fileno()
            self.popen = subprocess.Popen(
                launcher_command(launcher, "serve", str(channel), str(os.getpid())),
                stdin=subprocess.DEVNULL,
                # Not the host's stdout or stderr: a caller waiting for their end of file (a
                # parent running this host through pipes) would wait for the zygote as well.
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(channel,),
                env={},
                cwd="/",
                # Out of the host's process group: a Ctrl-C at the terminal is the host's to
                # handle, and the zygote goes when the host does.
                start_new_session=True,
            )
        except BaseException:
            host_end.close()
            raise
        finally:
            zygote_end.close()
        host_end.setblocking(False)
        self.socket = host_end
        self.fd = host_end.fileno()
        self._on_gone = on_gone
        self._cond = threading.Condition()
        # Reentrant, as is the condition's: a runtime's finalizer may close its worker (and
        # send a release) from inside a send or a read, on the same thread.
        self._send_lock = threading.RLock()
        self._spawn_lock = threading.Lock()
        self._reading = False
        self._reader: int | None = None
        self._replies: deque[tuple[tuple[Any, ...], list[int]]] = deque()
        self._exits: dict[int, int] = {}
        # pid -> the cap the zygote killed it over ("memory" or "threads") and what it read.
        self.overlimits: dict[int, tuple[str, int]] = {}
        self._reaped: set[int] = set()
        # The zygote's spares no request has taken yet (launcher.py): processes of its own.
        self.spares: set[int] = set()
        # Whether a spec asked for cgroups: the zygote then makes them for its spares.
        self.groups = False
        self.ready = False
        # No more requests: it died, stopped taking them, or is being stopped.
        self.gone = False
        # Nothing more will arrive: its end of file was read, or the socket is closed. Until
        # then a gone zygote's last reports (exit statuses) can still be read.
        self.drained = False
        self.unavailable: str | None = None

    # -- requests ------------------------------------------------------------------------
    def spawn(self, spec: dict[str, Any], timeout: float) -> ZygoteChild:
        """Have the zygote start a confined worker, waiting up to timeout for it to take the
        request and again to answer it. OSError if it could not fork; ZygoteGone if it died
        or did not answer (the worker then never started, or dies with it)."""
        if spec.get("cgroups"):
            self.groups = True
        with self._spawn_lock:
            self._send(("spawn", spec), timeout)
            self._pump(lambda: bool(self._replies), timeout)
            with self._cond:
                reply = self._replies.popleft() if self._replies else None
            if reply is None:
                # Its reply, arriving later, would be taken as the next request's.
                self._lost()
                raise ZygoteGone("no reply to a spawn request")
        message, fds = reply
        if message[0] == "failed":
            _close_fds(fds)
            raise OSError(message[1], message[2])
        if len(fds) != 4:
            _close_fds(fds)
            raise ZygoteGone("a spawn reply without the worker's pidfd and pipes")
        try:
            return ZygoteChild(self, message[1], fds[0], spec["argv"], fds[1:], message[2])
        except BaseException:
            _close_fds(fds)
            raise

    def spare_pids(self) -> frozenset[int]:
        """The zygote's spares, from what has arrived."""
        self._pump(lambda: False, 0)
        with self._cond:
            return frozenset(self.spares)

    def status(self, pid: int, timeout: float | None) -> int | None:
        """The worker's returncode once the zygote has reported it, waiting up to timeout."""
        self._pump(lambda: pid in self._exits, timeout)
        with self._cond:
            return self._exits.get(pid)

    def overlimit(self, pid: int) -> tuple[str, int] | None:
        """The cap the zygote killed the worker over and its reading, from what has arrived."""
        self._pump(lambda: False, 0)
        with self._cond:
            return self.overlimits.get(pid)

    def release(self, pid: int) -> None:
        """Let the zygote reap the worker, and wait until it has: once a runtime is closed,
        its worker is gone, as it would be with Popen."""
        with self._cond:
            self._exits.pop(pid, None)
            self.overlimits.pop(pid, None)
        try:
            self._send(("release", pid), self.reply_seconds)
        except ZygoteGone:
            return
        self._pump(lambda: pid in self._reaped, self.reply_seconds)
        with self._cond:
            self._reaped.discard(pid)

    def stop(self) -> None:
        """Kill the zygote and reap it (the spawner thread does this); any worker it still has
        dies with it, by its parent-death signal."""
        with self._cond:
            self.gone = True
            self._cond.notify_all()
        with contextlib.suppress(OSError):
            self.popen.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)
        if self.groups:
            # Its spares died with it, and the groups it made for them are left to remove.
            remove_spare_groups()
        # Dead now: what it reported before it died is still to be read, up to its end of file.
        self._pump(lambda: False, 1.0)
        with self._cond:
            self.drained = True
            while self._reading:  # a reader looks at `drained` again within _READ_SLICE
                self._cond.wait()
            for _, fds in self._replies:
                _close_fds(fds)
            self._replies.clear()
        with self._send_lock:
            self.socket.close()

    def abandon(self) -> None:
        """In a child forked from the host: the zygote is the parent's; let go of it without
        touching it, and never wait on a lock some parent thread held at the fork."""
        self._cond = threading.Condition()
        self._send_lock = threading.RLock()
        self._spawn_lock = threading.Lock()
        self._reading = False
        self.gone = self.drained = True
        self.socket.close()

    # -- the socket ----------------------------------------------------------------------
    def _send(self, message: tuple[Any, ...], timeout: float) -> None:
        data = marshal.dumps(message)
        deadline = time.monotonic() + timeout
        with self._send_lock:
            while True:
                if self.gone:
                    raise ZygoteGone("the zygote is gone")
                try:
                    self.socket.sendmsg([data])
                    return
                except BlockingIOError:
                    remaining = deadline - time.monotonic()
                    if remaining > 0 and _ready(self.fd, select.POLLOUT, remaining):
                        continue
                    self._lost()
                    raise ZygoteGone("the zygote takes no requests") from None
                except OSError as exc:
                    self._lost()
                    raise ZygoteGone(f"the zygote is gone: {exc}") from exc

    def _pump(self, until: Callable[[], bool], timeout: float | None) -> None:
        """Read and file the zygote's messages until until() holds, nothing more can arrive
        or timeout passes; a timeout of 0 still reads what has already arrived."""
        deadline = None if timeout is None else time.monotonic() + timeout
        lost = False
        with self._cond:
            while not until() and not self.drained:
                remaining = None if deadline is None else deadline - time.monotonic()
                if self._reading:
                    if self._reader == threading.get_ident():
                        break  # called from a finalizer inside this thread's own read
                    if remaining is not None and remaining <= 0:
                        break
                    self._cond.wait(remaining)
                    continue
                self._reading = True
                self._reader = threading.get_ident()
                received: list[tuple[tuple[Any, ...], list[int]]] = []
                ended = False
                self._cond.release()
                try:
                    wait = _READ_SLICE if remaining is None else min(max(remaining, 0.0), _READ_SLICE)
                    ended = self._receive(received, wait)
                finally:
                    self._cond.acquire()
                    self._reading = False
                    for message, fds in received:
                        self._file(message, fds)
                    if ended:
                        lost = not self.gone
                        self.gone = self.drained = True
                    self._cond.notify_all()
                if remaining is not None and deadline is not None and deadline - time.monotonic() <= 0:
                    break
        if lost:
            self._on_gone()

    def _receive(self, into: list[tuple[tuple[Any, ...], list[int]]], timeout: float) -> bool:
        """Append what has arrived, waiting up to timeout for the first; True at end of file."""
        if not _ready(self.fd, select.POLLIN, timeout):
            return False
        reset = False
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.socket, 1 << 16, 4, socket.MSG_CMSG_CLOEXEC)
            except BlockingIOError:
                return False
            except ConnectionResetError:
                # A zygote that exits with a request of ours unread makes the kernel report the
                # reset first, ahead of the records it sent before exiting: read those still.
                if reset:
                    return True
                reset = True
                continue
            except OSError:
                return True
            if not data:
                _close_fds(fds)
                return True
            into.append((marshal.loads(data), fds))

    def _file(self, message: tuple[Any, ...], fds: list[int]) -> None:
        kind = message[0]
        if kind in ("spawned", "failed"):
            if kind == "spawned":
                self.spares.discard(message[1])
            self._replies.append((message, fds))
            return
        _close_fds(fds)
        if kind == "exit":
            self._exits[message[1]] = message[2]
        elif kind == "overlimit":
            self.overlimits[message[1]] = (message[2], message[3])
        elif kind == "reaped":
            self._reaped.add(message[1])
        elif kind == "spare":
            self.spares.add(message[1])
        elif kind == "spare gone":
            self.spares.discard(message[1])
        elif kind == "ready":
            self.ready = True
        elif kind == "unavailable":
            self.unavailable = str(message[1])

    def _lost(self) -> None:
        with self._cond:
            if self.gone:
                return
            self.gone = True
            self._cond.notify_all()
        self._on_gone()


class ZygoteChild:
    """A worker the zygote forked, with :class:`subprocess.Popen`'s meaning for every member
    the host uses. It is signalled through a pidfd and its exit status comes from the zygote,
    which keeps it unreaped (so its pid cannot be reused) until :meth:`release`."""

    def __init__(
        self, zygote: Zygote, pid: int, pidfd: int, args: list[str], pipes: list[int], cgroup: str | None = None
    ) -> None:
        self.zygote = zygote
        self.pid = pid
        # The cgroup a spare made for its spec is in (the name of its directories): the host's
        # to adopt. None: the host makes the worker's own.
        self.cgroup = cgroup
        self.args = args
        self.returncode: int | None = None
        self._pidfd = pidfd
        # Held while the pidfd is used or closed: a closed number may be reused at once.
        self._lock = threading.Lock()
        self._released = False
        self.stdin: IO[bytes] | None = open(pipes[0], "wb", buffering=0)  # noqa: SIM115 - closed by child.close_pipes
        self.stdout: IO[bytes] | None = open(pipes[1], "rb", buffering=0)  # noqa: SIM115
        self.stderr: IO[bytes] | None = open(pipes[2], "rb", buffering=0)  # noqa: SIM115

    def poll(self) -> int | None:
        if self.returncode is None and not self._running():
            self._settle(0)
        return self.returncode

    def _running(self) -> bool:
        """True while the pidfd says the worker runs: then there is no status to look for,
        and poll() (a pool checks each worker it hands out) skips the zygote's socket."""
        with self._lock:
            return not self._released and not _ready(self._pidfd, select.POLLIN, 0)

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._settle(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def send_signal(self, sig: int) -> None:
        """Signal the worker's process group (it leads it), or where the kernel cannot address
        a group through a pidfd, the worker itself; the zygote then ends what is left of the
        group when it sees the worker exit."""
        with self._lock:
            if self.returncode is not None or self._released:
                return
            with contextlib.suppress(ProcessLookupError):
                platform.pidfd_signal_group(self._pidfd, sig)

    def killed_over_cap(self) -> tuple[str, int] | None:
        """The cap the zygote killed this worker over ("memory", "threads") and its reading."""
        return self.zygote.overlimit(self.pid)

    def release(self) -> None:
        """The host is done with the worker: the zygote may reap it, freeing its pid."""
        with self._lock:
            if self._released:
                return
            self._released = True
            os.close(self._pidfd)
        self.zygote.release(self.pid)

    def _settle(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        code = self.zygote.status(self.pid, timeout)
        if code is None and self.zygote.drained:
            # The zygote died before it could report: its parent-death signal (SIGKILL) ends
            # the worker, and the exit status died with the zygote.
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            with self._lock:
                if not self._released and _ready(self._pidfd, select.POLLIN, remaining):
                    code = -signal.SIGKILL
        if code is not None and self.returncode is None:
            self.returncode = code
