"""One deno worker's process, as the host talks to it: non-blocking pipes to read and write,
the bounded stderr ring, kill and reap, and what its exit and the launcher's reports say.
Both runtimes use it as it is; only how they *wait* on its descriptors differs. How it is
started comes from the modules below it, through :class:`Launch`, which tests replace."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import subprocess
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from types import MappingProxyType
from typing import Final, NamedTuple

from ..._base.failures import start_failed
from ..wire.connection import clean_text
from ..wire.protocol import EXIT_PERMISSION_KEPT, EXIT_UNAVAILABLE, WORKER_PREFIX
from . import platform
from .cgroup import WorkerGroup
from .child import Child, kill, reap, signal_kill, signal_stop
from .launcher import PREFIX, SELFTEST, SKIPPED
from .mailbox import Mailbox
from .spawner import Spawner
from .spawner import spawner as _process_spawner
from .spec import Command, WorkerConfig, worker_command, worker_environment
from .staging import staged
from .zygote import ZygoteChild

__all__ = ["STDERR_RING_BYTES", "Launch", "WorkerProcess", "launching"]

STDERR_RING_BYTES: Final = 8192
_ANSI: Final = re.compile(r"\x1b\[[0-9;]*m")
_READ_CHUNK: Final = 1 << 20


class Launch(NamedTuple):
    """How a :class:`WorkerProcess` starts its worker, for the parts tests replace; every
    default is production's. A test hands one to WorkerProcess, or, to reach the workers the
    public API starts (which has no such switch), puts one in force with :func:`launching`."""

    # The command line to start instead of deno (a hostile fake worker, say), made from the
    # worker's configuration; None: deno, confined as config.sandbox says.
    command: Callable[[WorkerConfig], list[str]] | None = None
    # What starts the process, in the spawner thread; None: the spawner's start_process.
    start: Callable[[Command, dict[str, str]], Child] | None = None
    # Makes the worker's mailbox in a directory; an OSError means the worker has none.
    mailbox: Callable[[Path], Mailbox] = Mailbox
    # The worker's main.ts; None: the installed one (staging.worker_entry()).
    entry: Path | None = None
    # A simulated kernel (see spec.confined): layers the launcher treats as refused,
    # {layer: reason}, and layers it skips without a word.
    missing_layers: Mapping[str, str] = MappingProxyType({})
    silent_layers: frozenset[str] = frozenset()


_launch = Launch()


@contextlib.contextmanager
def launching(launch: Launch) -> Iterator[None]:
    """Start every worker with launch until the block ends, whichever thread starts it (a
    pool starts its workers from threads of its own)."""
    global _launch
    previous, _launch = _launch, launch
    try:
        yield
    finally:
        _launch = previous


def _last_line(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    # ANSI colour sequences from deno's own error output are noise after the host prefix.
    text = _ANSI.sub("", text)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return clean_text(lines[-1])[:500] if lines else ""


class WorkerProcess:
    """One deno worker: pipes set non-blocking, stderr kept as a bounded ring.

    ``launch`` is how it is started (by default the one in force: production's, unless a test
    put another in force); ``spawner`` the spawner it is started from and counts against (by
    default this process's).
    """

    def __init__(self, config: WorkerConfig, launch: Launch | None = None, spawner: Spawner | None = None) -> None:
        launch = launch if launch is not None else _launch
        self.config = config
        # The spawner this worker counts against (a forked child gets a spawner of its own).
        self._spawner = spawner if spawner is not None else _process_spawner()
        self.mailbox: Mailbox | None = None
        self.cgroup: WorkerGroup | None = None
        with contextlib.suppress(OSError):
            # Without one the worker simply sleeps in read() between commands.
            self.mailbox = launch.mailbox(staged(launch.entry).cache / "mail")
            config = config._replace(mailbox=str(self.mailbox.path))
            self.config = config
        try:
            # Where its cgroup goes, if it gets one: a spare the zygote started for this spec
            # is already in a group there (below).
            cgroups = WorkerGroup.parents(config.max_memory, config.max_threads)
            if cgroups:
                config = self.config = config._replace(cgroups=cgroups)
            command = self._command(config, launch)
            environment = worker_environment(config, launch.entry)
            start = launch.start
            self.popen: Child = (
                self._spawner.spawn_process(command, environment)
                if start is None
                else self._spawner.spawn(lambda: start(command, environment))
            )
        except OSError as exc:
            self._close_mailbox()
            raise start_failed(_os_error_text(exc), exc) from exc
        except BaseException:
            self._close_mailbox()
            raise
        # Its cgroup: a spare's, which it joined before deno started, is adopted; any other
        # worker joins a new one while deno starts. Moving a process between cgroups waits out
        # a kernel grace period (milliseconds), which the spawner thread spends instead of the
        # worker, or for a spare, the zygote's child before anything asked for it. It is done
        # before the first command (see handshaken), so all that guest code allocates is
        # counted.
        self._joined: Future[None] | None = None
        try:
            adopted = self.popen.cgroup if isinstance(self.popen, ZygoteChild) else None
            self.cgroup = WorkerGroup.create(config.max_memory, config.max_threads, adopted) if cgroups else None
        except BaseException as exc:
            reap(self.popen)
            self._spawner.release()
            self._close_mailbox()
            if isinstance(exc, OSError):
                raise start_failed(f"cannot make its cgroup: {_os_error_text(exc)}", exc) from exc
            raise
        if self.cgroup is not None and adopted is None:
            self._joined = self._spawner.later(functools.partial(self.cgroup.add, self.popen.pid))
        assert self.popen.stdin and self.popen.stdout and self.popen.stderr
        self.pid = self.popen.pid
        self.stdin_fd = self.popen.stdin.fileno()
        self.stdout_fd = self.popen.stdout.fileno()
        self.stderr_fd = self.popen.stderr.fileno()
        for fd in (self.stdin_fd, self.stdout_fd, self.stderr_fd):
            os.set_blocking(fd, False)
        # A larger pipe lets a big result cross in a few reads instead of one wake-up per 64 KiB.
        for fd in (self.stdin_fd, self.stdout_fd):
            platform.grow_pipe(fd)
        self._stderr: deque[bytes] = deque()
        self._stderr_size = 0
        self.stdout_eof = False
        self.stderr_eof = False
        # A pipe failure on the host's side (EIO, ...), as opposed to the worker closing its end.
        self.pipe_error: OSError | None = None
        self.closed = False
        # The first frame: the worker's own settings, which a worker started ahead (the
        # zygote's spare) is waiting for. The pipe is empty and holds more than the largest
        # settings frame, so it takes the frame whole; a worker already gone (-1) is found
        # dead at the handshake, with its reason.
        self.write(config.settings())

    def _command(self, config: WorkerConfig, launch: Launch) -> Command:
        if launch.command is not None:
            return launch.command(config)
        return worker_command(
            config,
            launch.entry,
            warm=self._spawner.warm,
            missing_layers=launch.missing_layers,
            silent_layers=launch.silent_layers,
        )

    # -- I/O -------------------------------------------------------------------------
    def read(self) -> bytes | None:
        """Whatever stdout has now: bytes, b"" if nothing yet, None at end of file."""
        try:
            data = os.read(self.stdout_fd, _READ_CHUNK)
        except BlockingIOError:
            return b""
        except OSError as exc:
            self.pipe_error = exc
            data = b""
        if not data:
            self.stdout_eof = True
            return None
        return data

    def write(self, data: bytes | memoryview) -> int:
        """Write what the pipe takes now; -1 if the worker closed it."""
        try:
            n = os.write(self.stdin_fd, data)
        except BlockingIOError:
            return 0
        except BrokenPipeError:
            return -1  # the worker closed its end
        except OSError as exc:
            self.pipe_error = exc
            return -1
        if self.mailbox is not None:
            self.mailbox.posted(n)
        return n

    def handshaken(self) -> None:
        """The worker answered the handshake, so it has its mailbox open: drop the name. It
        must be in its cgroup before any command: wait for that, or raise why it is not."""
        if self.mailbox is not None:
            self.mailbox.unlink()
        if self._joined is not None:
            try:
                self._joined.result(timeout=self._spawner.reply_seconds)
            except (OSError, TimeoutError) as exc:
                reason = _os_error_text(exc) if isinstance(exc, OSError) else "it took too long"
                raise start_failed(f"cannot join its cgroup: {reason}", exc) from exc
            self._joined = None

    def _close_mailbox(self) -> None:
        if self.mailbox is not None:
            self.mailbox.close()

    def _remove_cgroup(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()

    def drain_stderr(self) -> int:
        """Read what stderr has now into the ring; return how many bytes that was."""
        total = 0
        while True:
            try:
                data = os.read(self.stderr_fd, 65536)
            except (BlockingIOError, OSError):
                return total
            if not data:
                # The worker closed its stderr: the descriptor now polls readable forever.
                self.stderr_eof = True
                return total
            total += len(data)
            self._stderr.append(data)
            self._stderr_size += len(data)
            while self._stderr_size > STDERR_RING_BYTES and len(self._stderr) > 1:
                self._stderr_size -= len(self._stderr.popleft())

    def stderr_tail(self) -> bytes:
        self.drain_stderr()
        return b"".join(self._stderr)[-STDERR_RING_BYTES:]

    # -- lifetime --------------------------------------------------------------------
    def poll(self) -> int | None:
        return self.popen.poll()

    def kill(self) -> None:
        """SIGKILL the worker's process group and reap it. Idempotent, never raises."""
        kill(self.popen)

    def signal_kill(self) -> None:
        """SIGKILL the worker's process group without reaping it (the monitor's kill): a
        zygote's child through its pidfd, so a pid that init reaped and handed out again is
        never hit; a child of this process keeps its pid until its owner reaps it."""
        signal_kill(self.popen)

    def signal_stop(self) -> None:
        """SIGSTOP the worker's process group: it runs nothing more, and a kill still ends it."""
        signal_stop(self.popen)

    def close(self, *, wait: bool = True) -> Future[None] | None:
        """Kill, reap and close every descriptor. With ``wait=False`` only the kill is sent
        now: the kernel's teardown of the process (the reap waits on it), the descriptors and
        the cgroup are seen to in the spawner's thread, and the future says when; the worker
        can run nothing more either way."""
        if self.closed:
            return None
        self.closed = True
        if not wait:
            self.signal_kill()
            return self._spawner.later(self._finish_close)
        self._finish_close()
        return None

    def _finish_close(self) -> None:
        self.kill()
        self.drain_stderr()
        reap(self.popen)
        self._close_mailbox()
        self._remove_cgroup()
        self._spawner.release()

    # -- the launcher's reports --------------------------------------------------------
    def _launcher_lines(self) -> list[str]:
        # Only lines from before deno ran: the launcher writes them before its execve, and
        # nothing else in the worker writes that prefix before the handshake.
        text = self.stderr_tail().decode("utf-8", "replace")
        return [clean_text(line)[:300] for line in text.splitlines() if line.startswith(PREFIX)]

    def sandbox_refusal(self) -> str | None:
        """``<layer> is unavailable: <why>`` if the launcher refused to start (sandbox="require")."""
        if self.popen.poll() != EXIT_UNAVAILABLE:
            return None
        refusals = [line for line in self._launcher_lines() if not line.startswith((SKIPPED, SELFTEST))]
        return refusals[-1][len(PREFIX) :] if refusals else None

    def permission_kept(self) -> str | None:
        """What the worker reported when it exited because a Deno permission granted for the
        self-test could not be revoked."""
        if self.popen.poll() != EXIT_PERMISSION_KEPT:
            return None
        text = self.stderr_tail().decode("utf-8", "replace")
        lines = [line for line in text.splitlines() if line.startswith(WORKER_PREFIX)]
        return clean_text(lines[-1][len(WORKER_PREFIX) :])[:300] if lines else "a granted permission was not revoked"

    def selftest_breaches(self, reported: Sequence[str]) -> list[str]:
        """What got through the self-test: the launcher's probes, then ``reported``,
        what the worker's own probes found (its handshake's breaches)."""
        return [*self._launcher_reports(SELFTEST), *reported]

    def sandbox_skipped(self) -> list[str]:
        """``<layer> is unavailable: <why>`` for each layer skipped under sandbox="best_effort"."""
        return self._launcher_reports(SKIPPED)

    def _launcher_reports(self, prefix: str) -> list[str]:
        return [line[len(prefix) :] for line in self._launcher_lines() if line.startswith(prefix)]

    def settled(self, timeout: float) -> bool:
        """Whether the worker has exited by itself, waiting up to timeout for its status."""
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def seccomp_filtered(self) -> bool:
        """Whether a seccomp filter is in force in the worker, as the kernel reports it."""
        try:
            return platform.proc_status(self.pid).get("Seccomp") == platform.SECCOMP_MODE_FILTER
        except OSError:
            return False

    def killed_over_cap(self) -> tuple[str, int] | None:
        """The cap the zygote killed the worker over ("memory", "threads") and its reading."""
        popen = self.popen
        return popen.killed_over_cap() if isinstance(popen, ZygoteChild) else None

    def death_message(self, prefix: str, how: str | None = None) -> str:
        """``prefix (how it ended): last stderr line``; the worker's text only ever follows."""
        tail = _last_line(self.stderr_tail())
        return f"{prefix} ({how or self._how_it_ended()})" + (f": {tail}" if tail else "")

    def _how_it_ended(self) -> str:
        code = self.popen.poll()
        if code is None:
            return "still running"
        if code < 0:
            name = platform.signal_name(-code)
            return f"killed by {name}" if name is not None else f"killed by signal {-code}"
        return f"exit code {code}"


def _os_error_text(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    what = exc.strerror or type(exc).__name__
    target = f" ({exc.filename})" if exc.filename else ""
    return f"{what}{target}" + (f" [{name}]" if name else "")
