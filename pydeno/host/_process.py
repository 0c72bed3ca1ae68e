"""Starting, talking to and killing one deno worker process.

Platform details live here: locating the deno binary, the worker's command line and
environment, non-blocking pipe I/O, the bounded stderr ring, and a kill that always reaps.
Both runtimes use this class as it is; only how they *wait* on its descriptors differs.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import marshal
import os
import re
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Final, Literal, Protocol

from .._budget import DEFAULT_DECODE_RATIO
from .._errors import WorkerCrashed
from ._cgroup import WorkerGroup
from ._launcher import EXIT_UNAVAILABLE, PREFIX, SKIPPED
from ._mailbox import Mailbox
from ._wire import clean_text

__all__ = [
    "SANDBOX_MODES",
    "Confined",
    "SandboxMode",
    "WorkerConfig",
    "WorkerProcess",
    "find_deno",
    "infrastructure",
    "start_process",
    "worker_entry",
]

SandboxMode = Literal["require", "best_effort", "off"]
SANDBOX_MODES: Final[tuple[SandboxMode, ...]] = ("require", "best_effort", "off")

# Test seam, not public API: layers the launcher treats as refused by the kernel
# ({layer: reason}), so tests can run "require" and "best_effort" on a simulated kernel.
SIMULATED_MISSING: dict[str, str] = {}
# Test seam too: layers the launcher skips without reporting them, as a kernel that accepts a
# layer without enforcing it would; the self-test must catch what they let through.
SIMULATED_SILENT: set[str] = set()
# The port the self-test tries to connect to on 127.0.0.1: reaching it, or being refused by
# a live network stack, is a breach; only a refusal to create or route the socket is not.
SELFTEST_PORT: Final = 9
# The worker exits with this code, after a line starting with WORKER_PREFIX on stderr, when a
# permission granted for the self-test is still granted after it revoked them all.
EXIT_PERMISSION_KEPT: Final = 72
WORKER_PREFIX: Final = "pydeno worker: "
# The environment variable the worker's settings travel in. Not on the command line: the
# guest can read that back (Deno.args in a Web Worker, process.argv), and the self-test's
# targets and the mailbox's path in it would tell it where the host keeps its files.
SETTINGS_VARIABLE: Final = "PYDENO_WORKER_SETTINGS"

STDERR_RING_BYTES: Final = 8192
_ANSI: Final = re.compile(r"\x1b\[[0-9;]*m")
_READ_CHUNK: Final = 1 << 20
_PIPE_BYTES: Final = 1 << 20
MiB: Final = 1 << 20


def find_deno() -> str:
    """The deno binary: ``$PYDENO_DENO`` if set, else the one the ``deno`` wheel installed."""
    override = os.environ.get("PYDENO_DENO")
    if override:
        return override
    try:
        import deno
    except ImportError as exc:  # pragma: no cover - deno is a dependency
        raise FileNotFoundError("the deno package is not installed: pip install deno") from exc
    return str(deno.find_deno_bin())


def worker_entry() -> Path:
    """The worker's main.ts: inside the wheel (pydeno/_worker) or the source tree (worker/)."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "_worker" / "main.ts", here.parent / "worker" / "main.ts"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"pydeno's worker program is missing (looked in {here / '_worker'})")


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    max_memory: int | None
    max_message_bytes: int
    jitless: bool
    max_depth: int
    max_inflight_host_calls: int = 32
    max_decode_ratio: int = DEFAULT_DECODE_RATIO
    max_console_bytes: int = 1 << 20
    max_console_chars: int = 16 * 1024
    sandbox: SandboxMode = "require"
    max_threads: int | None = None
    # The worker's mailbox file (pydeno/host/_mailbox.py); set by WorkerProcess.
    mailbox: str | None = None
    # Whether the worker has a cgroup of its own (pydeno/host/_cgroup.py), whose caps the
    # kernel enforces; else the zygote holds a confined worker to its caps. Set by WorkerProcess.
    own_cgroup: bool = False

    def v8_flags(self) -> str:
        # V8 sizes its heap from the whole machine unless told; keep the old generation
        # under max_memory so a heap overrun ends in V8's OOM rather than a host kill.
        flags = []
        if self.max_memory is not None:
            flags.append(f"--max-old-space-size={max(16, (self.max_memory * 3 // 4) // MiB)}")
        if self.jitless:
            flags.append("--jitless")
        return ",".join(flags)

    def settings(self, selftest: dict[str, Any] | None = None) -> str:
        """What the worker reads from SETTINGS_VARIABLE: its limits, the self-test's targets
        and the mailbox."""
        return json.dumps(
            {
                "max_message_bytes": self.max_message_bytes,
                "max_depth": self.max_depth,
                "max_decode_ratio": self.max_decode_ratio,
                "max_console_chars": self.max_console_chars,
                "max_inflight_host_calls": self.max_inflight_host_calls,
                "max_console_bytes": self.max_console_bytes,
                "selftest": selftest,
                "mailbox": self.mailbox,
            }
        )

    def environment(self, cache: Path, selftest: dict[str, Any] | None = None) -> dict[str, str]:
        """The worker's whole environment: deno's, and the worker's settings."""
        return {**deno_environment(cache), SETTINGS_VARIABLE: self.settings(selftest)}

    def argv(self, deno: str, entry: Path, selftest: dict[str, Any] | None = None) -> list[str]:
        """deno's command line. With ``selftest`` (what the sandbox self-test probes), deno
        starts with the permissions the probes need, so that each meets the OS layers rather
        than Deno's own checks; the worker revokes them all before it reports ready."""
        if selftest:
            grants = ["--allow-read", "--allow-write", "--allow-net", "--allow-run", "--allow-env"]
        else:
            # Only to read the settings and open the mailbox; revoked with the rest before the
            # handshake.
            grants = [f"--allow-env={SETTINGS_VARIABLE}"]
            if self.mailbox:
                grants.append(f"--allow-read={self.mailbox}")
        return [
            deno,
            "run",
            "--quiet",
            "--no-prompt",
            "--no-config",
            "--no-lock",
            "--no-remote",
            "--no-npm",
            # Deno's V8 code cache (a SQLite file in the cache directory) serves evalContext
            # too: every eval hashed its source and queried the file, and every eval of new
            # code had its script serialized to be stored there. Where the worker may write
            # (sandbox="off") each one was written, a disk write per eval of a guest's code into
            # a file every runtime of this user shares, and each Web Worker's blob: or data:
            # module added a row for good; elsewhere the write failed after the serializing.
            # The worker's own two modules compile from source instead, a one-time cost.
            "--no-code-cache",
            # Without it, a Worker given deno.permissions (which may only narrow what the
            # code that starts it has) ends the whole process instead of the constructor call.
            "--unstable-worker-options",
            # Only the inspector, for REPL-mode evaluation; the worker revokes it before
            # it reads the first command.
            "--allow-sys=inspector",
            *grants,
            *([f"--v8-flags={flags}"] if (flags := self.v8_flags()) else []),
            str(entry),
        ]


def _last_line(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    # ANSI colour sequences from deno's own error output are noise after the host prefix.
    text = _ANSI.sub("", text)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return clean_text(lines[-1])[:500] if lines else ""


@dataclass(frozen=True, slots=True)
class Staged:
    """Where a confined worker finds deno, its entry module and its warm transpile cache."""

    deno: str
    entry: Path
    cache: Path


_stage_lock = threading.Lock()
_staged: dict[tuple[str, Path], Staged] = {}


def _private_dir(path: Path) -> bool:
    """Whether path is a directory this user owns and no one else can write to."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022


def reachable_by_others(path: str, mode: int) -> bool:
    """Whether a user with no relation to the owner (the worker after the privilege drop) can
    search every directory down to path and has ``mode`` (S_IROTH, S_IXOTH) on it."""
    real = Path(os.path.realpath(path))
    try:
        if not real.stat().st_mode & mode:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in real.parents)
    except OSError:
        return False


def _install_copy(source: Path, target: Path, mode: int) -> None:
    """Copy source to target (a hard link when the filesystem allows), atomically: another
    process may be staging the same file at the same time."""
    if target.exists():
        return
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        os.link(source, temporary)
    except OSError:
        shutil.copyfile(source, temporary)
        temporary.chmod(mode)
    os.replace(temporary, target)


def _no_web_storage(cache: Path) -> None:
    """Make ``<DENO_DIR>/location_data`` a plain file, so that deno can never create the
    directory where localStorage and the Cache API would keep a guest's data: otherwise,
    where the worker may write (sandbox="off"), one guest could leave data on the host's disk,
    without bound, for a later guest to read. Every use then fails inside the guest."""
    cache.mkdir(mode=0o755, exist_ok=True)
    blocker = cache / "location_data"
    if blocker.is_dir() and not blocker.is_symlink():
        shutil.rmtree(blocker)
    elif blocker.is_symlink():
        blocker.unlink()
    if not blocker.exists():
        blocker.write_bytes(b"")
    blocker.chmod(0o444)


def stage(deno: str, entry: Path) -> Staged:
    """Deno, the worker and a warm transpile cache, all where the confined worker can read them.

    The base is ``$TMP/pydeno-<uid>``, this user's own and writable by no one else (else a
    fresh private directory), so no other user can plant code in it. A worker that will run
    as another user (the host is root) cannot reach files under a directory only root may
    search, such as ``/root``: those are copied (or hard-linked) into the base. The cache
    matters for speed: a confined worker can write nowhere, and deno retries a refused cache
    write with a growing backoff (hundreds of ms at start-up). Done once per process.
    """
    key = (deno, entry)
    with _stage_lock:
        if key in _staged:
            return _staged[key]
        base = Path(tempfile.gettempdir()) / f"pydeno-{os.getuid()}"
        with contextlib.suppress(FileExistsError):
            base.mkdir(mode=0o755)
        if not _private_dir(base):
            base = Path(tempfile.mkdtemp(prefix="pydeno-"))
        base.chmod(0o755)
        drops = os.geteuid() == 0
        if drops and not reachable_by_others(deno, stat.S_IXOTH):
            info = os.stat(deno)
            target = base / f"deno-{info.st_size}-{info.st_mtime_ns}"
            _install_copy(Path(deno), target, 0o755)
            deno = str(target)
        if drops and not reachable_by_others(str(entry), stat.S_IROTH):
            sources = sorted(entry.parent.glob("*.ts"))
            digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in sources)).hexdigest()[:16]
            folder = base / f"worker-{digest}"
            with contextlib.suppress(FileExistsError):
                folder.mkdir(mode=0o755)
            for source in sources:
                _install_copy(source, folder / source.name, 0o644)
            entry = folder / entry.name
        cache = base / "deno-dir"
        _no_web_storage(cache)
        subprocess.run(
            [deno, "cache", "--quiet", "--no-config", "--no-lock", "--no-remote", "--no-npm", str(entry)],
            env=deno_environment(cache),
            cwd="/",
            check=True,
            capture_output=True,
            timeout=60,
        )
        _staged[key] = Staged(deno, entry, cache)
        return _staged[key]


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    """The directories holding the C libraries deno links against (resolved: on merged-/usr
    systems /lib is a link into /usr/lib)."""
    found: list[str] = []
    for candidate in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"):
        if os.path.exists(os.path.join(candidate, "libc.so.6")):
            real = os.path.realpath(candidate)
            if real not in found:
                found.append(real)
    return tuple(found)


def deno_environment(cache: Path) -> dict[str, str]:
    """The whole environment deno runs with: pydeno's own cache, never the host user's, and
    no update check (without it every deno process looks up its download server in the
    background: a DNS query per worker from the host's network under sandbox="off")."""
    return {"DENO_DIR": str(cache), "DENO_NO_UPDATE_CHECK": "1"}


def selftest_targets(cache: Path, worker_dir: str) -> dict[str, Any]:
    """What the self-test tries to reach: host files and directories (among them this very
    module's), the temporary directory, the transpile cache and the worker's own
    files for writing, 127.0.0.1, and the exact environment the worker should have."""
    return {
        # Not /proc/<host>/...: Deno refuses those itself, so they would never meet the OS.
        "read": ["/etc/passwd", os.path.realpath(__file__), os.path.realpath(sys.executable)],
        "list": ["/", os.path.dirname(os.path.realpath(__file__))],
        "write": [tempfile.gettempdir(), str(cache), worker_dir],
        # deno itself adds the last two, pointing PATH at its node shims inside the cache.
        "env": {**deno_environment(cache), "PATH": f"{cache}/node_compat_bin", "DENO_NODE_SHIM_ACTIVE": "1"},
        "port": SELFTEST_PORT,
        # Signalled as well as the worker's parent (the zygote, when one starts it).
        "host": os.getpid(),
    }


_LAUNCHER: Final = Path(__file__).resolve().with_name("_launcher.py")


def _interpreter() -> str:
    """The Python that runs the launcher. A venv's ``python`` is a link to its base
    interpreter; under ``-I -S`` both see the same standard library and no site-packages
    (the venv only adds those, through site), and the real binary skips the venv lookup."""
    return os.path.realpath(sys.executable)


@dataclass(frozen=True, slots=True)
class Confined:
    """A worker the launcher starts: the spec it confines the worker by (see _launcher.py)."""

    spec: dict[str, Any]

    def command(self) -> list[str]:
        """The one-off launcher's command line, for when no zygote can serve."""
        return [_interpreter(), "-I", "-S", str(_LAUNCHER), marshal.dumps(self.spec).hex()]


def confined(config: WorkerConfig) -> Confined:
    """The worker behind the sandbox launcher (pydeno/host/_launcher.py).

    What Landlock leaves readable: the C library directories, the worker's files, its warm
    transpile cache and its own /proc entry; deno and the ELF loader may also be executed.
    Nothing is writable. The worker's self-test probes :func:`selftest_targets`.
    """
    deno = os.path.realpath(find_deno())
    if not os.access(deno, os.X_OK):
        # The launcher would only fail later at execve; say it now, as a direct start does.
        if os.path.exists(deno):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), deno)
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), deno)
    # The zygote starts (once per process) while this thread stages deno (the first time, a
    # `deno cache` run): the two take about as long, and neither needs the other.
    _spawner.warm()
    staged = stage(deno, worker_entry())
    deno, entry, cache = staged.deno, staged.entry, staged.cache
    loader = os.path.realpath("/lib64/ld-linux-x86-64.so.2")
    worker_dir = str(entry.parent.resolve())
    targets = selftest_targets(cache, worker_dir)
    return Confined(
        {
            "parent": os.getpid(),
            "mode": config.sandbox,
            # /proc/self: deno reads its own memory map; only the worker's own entries.
            "read": [*_library_dirs(), worker_dir, str(cache), "/proc/self"],
            "execute": [deno, loader],
            "env": config.environment(cache, targets),
            # Without a cgroup of its own, the zygote holds the worker to its caps.
            "memory_cap": None if config.own_cgroup else watcher_memory_cap(config.max_memory),
            "thread_cap": None if config.own_cgroup else config.max_threads,
            "argv": config.argv(deno, entry, targets),
            "simulate": dict(SIMULATED_MISSING),
            "silent": sorted(SIMULATED_SILENT),
        }
    )


def watcher_memory_cap(max_memory: int | None) -> int | None:
    """The resident size the zygote kills a worker over (where it has no cgroup): above
    max_memory, where the host's monitor kills and reports, by less than the worker can add
    in a sample period, so that it ends within max_memory + 64 MiB (or + 25%)."""
    if max_memory is None:
        return None
    return max_memory + max(16 * MiB, max_memory // 10)


def worker_command(config: WorkerConfig) -> list[str] | Confined:
    """What starts a worker: deno's command line, or a confined worker for the launcher.
    Tests replace this function to start hostile fake workers instead; the public API has no
    such switch."""
    if config.sandbox == "off":
        staged = _staged_here()
        return config.argv(staged.deno, staged.entry)
    return confined(config)


def _staged_here() -> Staged:
    return stage(os.path.realpath(find_deno()), worker_entry())


def worker_environment(config: WorkerConfig) -> dict[str, str]:
    """The environment the worker process starts with: nothing of the host's. With no OS
    layers it is WorkerConfig.environment(); the launcher sets that itself, after the layers."""
    if config.sandbox != "off":
        return {}
    return config.environment(_staged_here().cache)


class Child(Protocol):
    """A worker's process as the host uses it: a :class:`subprocess.Popen`, or a
    :class:`_ZygoteChild` with the same meaning for each member (``returncode`` negative for
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


# --- the zygote -------------------------------------------------------------------------------
#
# Starting a confined worker used to mean a fresh interpreter per worker (``python -I -S
# _launcher.py``: ~11 ms to start, ~7 ms of imports) before deno even began. The zygote is
# that launcher started once per host process, in serve mode: it forks a child per worker,
# which confines itself exactly as the one-off launcher does and execs deno. It is started
# and retired only by the spawner thread, which its own parent-death signal follows.

# How long the zygote outlives the last worker; a test seam, read each time the spawner waits.
ZYGOTE_IDLE_SECONDS = 30.0
# How long the host waits for the zygote to take a request or answer one before it gives up
# on it (kills it) and starts the worker another way. Fork and reply take about a millisecond.
_ZYGOTE_REPLY_SECONDS: Final = 10.0
# How long a thread waiting for a reply reads before it looks again whether the socket closed.
_READ_SLICE: Final = 0.5
# pidfd_send_signal(2): to the pidfd's process group, not only the process (Linux 6.9).
_PIDFD_SIGNAL_PROCESS_GROUP: Final = 1 << 2
_pidfd_group_signals = True


class _ZygoteGone(Exception):
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


class _Zygote:
    """The host's end of one zygote (``_launcher.py serve``, protocol in its docstring).

    Spawn requests go out from the spawner thread only, releases from any thread. There is no
    reader thread: whichever thread waits for a reply reads everything that has arrived and
    files it (one reader at a time; the others wait on the condition), so a reply meant for
    another thread is found there when that thread looks.
    """

    def __init__(self, on_gone: Callable[[], None]) -> None:
        host_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            channel = zygote_end.fileno()
            self.popen = subprocess.Popen(
                [_interpreter(), "-I", "-S", str(_LAUNCHER), "serve", str(channel), str(os.getpid())],
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
        self._reading = False
        self._reader: int | None = None
        self._replies: deque[tuple[tuple[Any, ...], list[int]]] = deque()
        self._exits: dict[int, int] = {}
        # pid -> the cap the zygote killed it over ("memory" or "threads") and what it read.
        self.overlimits: dict[int, tuple[str, int]] = {}
        self._reaped: set[int] = set()
        self.ready = False
        # No more requests: it died, stopped taking them, or is being stopped.
        self.gone = False
        # Nothing more will arrive: its end of file was read, or the socket is closed. Until
        # then a gone zygote's last reports (exit statuses) can still be read.
        self.drained = False
        self.unavailable: str | None = None

    # -- requests ------------------------------------------------------------------------
    def spawn(self, spec: dict[str, Any]) -> _ZygoteChild:
        """Have the zygote start a confined worker on three new pipes. OSError if it could not
        fork; _ZygoteGone if it died or did not answer (the worker then never started, or
        dies with it)."""
        pipes: list[int] = []
        try:
            for _ in range(3):
                pipes.extend(os.pipe())
        except BaseException:
            _close_fds(pipes)
            raise
        stdin_r, stdin_w, stdout_r, stdout_w, stderr_r, stderr_w = pipes
        ours = [stdin_w, stdout_r, stderr_r]
        try:
            try:
                self._send(("spawn", spec), [stdin_r, stdout_w, stderr_w])
            finally:
                # The zygote holds its own copies now; the worker's ends must not stay here,
                # or the host would never see end of file on them.
                _close_fds([stdin_r, stdout_w, stderr_w])
            self._pump(lambda: bool(self._replies), _ZYGOTE_REPLY_SECONDS)
            with self._cond:
                if not self._replies:
                    raise _ZygoteGone("no reply to a spawn request")
                message, fds = self._replies.popleft()
            if message[0] == "failed":
                _close_fds(fds)
                raise OSError(message[1], message[2])
            if len(fds) != 1:
                _close_fds(fds)
                raise _ZygoteGone("a spawn reply without its pidfd")
            return _ZygoteChild(self, message[1], fds[0], spec["argv"], ours)
        except BaseException:
            _close_fds(ours)
            raise

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
            self._send(("release", pid))
        except _ZygoteGone:
            return
        self._pump(lambda: pid in self._reaped, _ZYGOTE_REPLY_SECONDS)
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
        self._reading = False
        self.gone = self.drained = True
        self.socket.close()

    # -- the socket ----------------------------------------------------------------------
    def _send(self, message: tuple[Any, ...], fds: Sequence[int] = ()) -> None:
        data = marshal.dumps(message)
        deadline = time.monotonic() + _ZYGOTE_REPLY_SECONDS
        with self._send_lock:
            while True:
                if self.gone:
                    raise _ZygoteGone("the zygote is gone")
                try:
                    if fds:
                        socket.send_fds(self.socket, [data], list(fds))
                    else:
                        self.socket.sendmsg([data])
                    return
                except BlockingIOError:
                    remaining = deadline - time.monotonic()
                    if remaining > 0 and _ready(self.fd, select.POLLOUT, remaining):
                        continue
                    self._lost()
                    raise _ZygoteGone("the zygote takes no requests") from None
                except OSError as exc:
                    self._lost()
                    raise _ZygoteGone(f"the zygote is gone: {exc}") from exc

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
            self._replies.append((message, fds))
            return
        _close_fds(fds)
        if kind == "exit":
            self._exits[message[1]] = message[2]
        elif kind == "overlimit":
            self.overlimits[message[1]] = (message[2], message[3])
        elif kind == "reaped":
            self._reaped.add(message[1])
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


class _ZygoteChild:
    """A worker the zygote forked, with :class:`subprocess.Popen`'s meaning for every member
    the host uses. It is signalled through a pidfd and its exit status comes from the zygote,
    which keeps it unreaped (so its pid cannot be reused) until :meth:`release`."""

    def __init__(self, zygote: _Zygote, pid: int, pidfd: int, args: list[str], pipes: list[int]) -> None:
        self.zygote = zygote
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._pidfd = pidfd
        # Held while the pidfd is used or closed: a closed number may be reused at once.
        self._lock = threading.Lock()
        self._released = False
        self.stdin: IO[bytes] | None = open(pipes[0], "wb", buffering=0)  # noqa: SIM115 - closed by _close_pipes
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
        global _pidfd_group_signals
        with self._lock:
            if self.returncode is not None or self._released:
                return
            with contextlib.suppress(ProcessLookupError):
                if _pidfd_group_signals:
                    try:
                        signal.pidfd_send_signal(self._pidfd, sig, None, _PIDFD_SIGNAL_PROCESS_GROUP)
                        return
                    except OSError as exc:
                        if exc.errno != errno.EINVAL:
                            raise
                        _pidfd_group_signals = False
                signal.pidfd_send_signal(self._pidfd, sig)

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


_zygote: _Zygote | None = None
# Why this process starts its workers without a zygote, once one could not start here.
_zygote_refused: str | None = None


def _warm() -> None:
    # A failure to start the zygote is met again, and reported, by the spawn that follows.
    _ensure_zygote()


def _spawn_confined(spec: dict[str, Any]) -> _ZygoteChild | None:
    """A confined worker from the zygote, starting one if needed (in the spawner thread); None
    when no zygote can serve here, and the one-off launcher must."""
    global _zygote_refused
    for _attempt in range(2):
        zygote = _ensure_zygote()
        if zygote is None:
            return None
        try:
            return zygote.spawn(spec)
        except _ZygoteGone as exc:
            if not zygote.ready:
                # It never got as far as serving: it would not the next time either.
                _zygote_refused = zygote.unavailable or f"it ended before it was ready ({exc})"
            _retire_zygote()
    return None


def _ensure_zygote() -> _Zygote | None:
    """The live zygote, started if there is none (in the spawner thread); None when none can
    serve in this process."""
    global _zygote
    if _zygote_refused is not None:
        return None
    if _zygote is not None and _zygote.gone:
        _retire_zygote()
    if _zygote is None:
        _zygote = _Zygote(_spawner_wake)
    return _zygote


def _retire_zygote() -> None:
    global _zygote
    zygote, _zygote = _zygote, None
    if zygote is not None:
        zygote.stop()


def _spawner_wake() -> None:
    _spawner.wake()


def start_process(command: list[str] | Confined, environment: dict[str, str]) -> Child:
    """Start a worker's process (in the spawner thread): a confined worker from the zygote, or
    from a one-off launcher when no zygote can serve; any other command directly."""
    if isinstance(command, Confined):
        child = _spawn_confined(command.spec)
        if child is not None:
            return child
        command = command.command()
    return subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment,
        cwd="/",
        close_fds=True,
        start_new_session=True,
        bufsize=0,
    )


class _Spawner:
    """Starts workers from one long-lived thread, which outlives every worker it started.

    A sandboxed worker's parent-death signal fires when the *thread* that forked it exits, not
    the process: a runtime created in a short-lived thread would lose its worker the moment
    that thread ended. So every worker, and the zygote, is forked here, and this thread exits
    only once no worker it started is alive and the zygote has been idle for
    ZYGOTE_IDLE_SECONDS (it retires the zygote first; the next spawn starts both again).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        # A start with no future is the zygote's warm-up: no one waits for it.
        self._queue: deque[tuple[Callable[[], Child], Future[Child]] | Callable[[], None]] = deque()
        self._live = 0
        self._thread: threading.Thread | None = None

    def spawn(self, start: Callable[[], Child]) -> Child:
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
                    _reap(future.result())
            self.release()
            raise

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
        if _zygote is not None or _zygote_refused is not None:
            return
        with self._cond:
            self._enqueue(_warm)

    def _enqueue(self, job: tuple[Callable[[], Child], Future[Child]] | Callable[[], None]) -> None:
        self._queue.append(job)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pydeno-spawner", daemon=True)
            self._thread.start()
        self._cond.notify()

    def thread(self) -> threading.Thread | None:
        return self._thread

    def _run(self) -> None:
        while True:
            with self._cond:
                job = self._next()
                if job is None and _zygote is None:
                    self._thread = None
                    return
            if job is None:
                # Idle long enough, or found dead: the zygote is retired from this thread, the
                # one its parent-death signal follows, which therefore must not end before it.
                with contextlib.suppress(Exception):
                    _retire_zygote()
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
            zygote = _zygote
            if zygote is not None and zygote.gone:
                return None
            if self._live > 0:
                self._cond.wait()
                idle_since = time.monotonic()
                continue
            if zygote is None:
                return None
            remaining = idle_since + ZYGOTE_IDLE_SECONDS - time.monotonic()
            if remaining <= 0:
                return None
            self._cond.wait(remaining)
        return self._queue.popleft()


def _signal_kill(child: Child) -> None:
    """SIGKILL the process group without waiting for it: from any thread, never raises. A
    zygote's child is signalled through its pidfd (see _ZygoteChild.send_signal)."""
    if isinstance(child, subprocess.Popen):
        # Not yet reaped by us, so the pid (and the group it leads) is still this worker's.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        child.kill()


def _kill(child: Child) -> None:
    """SIGKILL the process group and reap it. Idempotent, never raises."""
    if child.returncode is None:
        _signal_kill(child)
        # SIGKILL cannot be ignored; the bound only guards against a kernel that stalls.
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=10)


def _close_pipes(child: Child) -> None:
    for stream in (child.stdin, child.stdout, child.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def _reap(child: Child) -> None:
    _kill(child)
    _close_pipes(child)
    if isinstance(child, _ZygoteChild):
        child.release()


_spawner = _Spawner()


@dataclass(frozen=True, slots=True)
class Infrastructure:
    """What a host process keeps between runtimes, by design: the zygote's process, the host's
    end of its socket, and the spawner thread (by ident). Only these may outlive a runtime."""

    processes: frozenset[int]
    descriptors: frozenset[int]
    threads: frozenset[int]


def infrastructure() -> Infrastructure:
    zygote, thread = _zygote, _spawner.thread()
    live = zygote is not None and zygote.socket.fileno() >= 0
    return Infrastructure(
        processes=frozenset([zygote.popen.pid] if zygote is not None else []),
        descriptors=frozenset([zygote.fd] if live and zygote is not None else []),
        threads=frozenset([thread.ident] if thread is not None and thread.ident is not None else []),
    )


def _forget_after_fork() -> None:
    """In a child forked from the host: the spawner thread did not come along and the zygote
    is the parent's. Start afresh, as a new process would."""
    global _spawner, _zygote
    _spawner = _Spawner()
    zygote, _zygote = _zygote, None
    if zygote is not None:
        zygote.abandon()


os.register_at_fork(after_in_child=_forget_after_fork)


class WorkerProcess:
    """One deno worker: pipes set non-blocking, stderr kept as a bounded ring."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        # The spawner this worker counts against (a forked child gets a spawner of its own).
        self._spawner = _spawner
        self.mailbox: Mailbox | None = None
        self.cgroup: WorkerGroup | None = None
        with contextlib.suppress(OSError):
            # Without one the worker simply sleeps in read() between commands.
            self.mailbox = Mailbox(_staged_here().cache / "mail")
            config = replace(config, mailbox=str(self.mailbox.path))
            self.config = config
        try:
            self.cgroup = WorkerGroup.create(config.max_memory, config.max_threads)
            if self.cgroup is not None:
                config = self.config = replace(config, own_cgroup=True)
            command = worker_command(config)
            environment = worker_environment(config)
            self.popen: Child = self._spawner.spawn(lambda: start_process(command, environment))
        except OSError as exc:
            self._close_mailbox()
            self._remove_cgroup()
            raise WorkerCrashed(f"worker failed to start: {_os_error_text(exc)}") from exc
        except BaseException:
            self._close_mailbox()
            self._remove_cgroup()
            raise
        # The worker joins its cgroup while deno starts: moving a process between cgroups
        # waits out a kernel grace period (milliseconds), which the spawner thread spends
        # instead of the worker. It is done before the first command (see handshaken), so
        # all that guest code allocates is counted.
        self._joined: Future[None] | None = None
        if self.cgroup is not None:
            self._joined = self._spawner.later(functools.partial(self.cgroup.add, self.popen.pid))
        assert self.popen.stdin and self.popen.stdout and self.popen.stderr
        self.pid = self.popen.pid
        self.stdin_fd = self.popen.stdin.fileno()
        self.stdout_fd = self.popen.stdout.fileno()
        self.stderr_fd = self.popen.stderr.fileno()
        for fd in (self.stdin_fd, self.stdout_fd, self.stderr_fd):
            os.set_blocking(fd, False)
        # A larger pipe lets a big result cross in a few reads instead of one wake-up per
        # 64 KiB; Linux allows up to /proc/sys/fs/pipe-max-size (1 MiB by default) unprivileged.
        for fd in (self.stdin_fd, self.stdout_fd):
            with contextlib.suppress(OSError, AttributeError):
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        self._stderr: deque[bytes] = deque()
        self._stderr_size = 0
        self.stdout_eof = False
        self.stderr_eof = False
        # A pipe failure on the host's side (EIO, ...), as opposed to the worker closing its end.
        self.pipe_error: OSError | None = None
        self.closed = False

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
                self._joined.result(timeout=_ZYGOTE_REPLY_SECONDS)
            except (OSError, TimeoutError) as exc:
                reason = _os_error_text(exc) if isinstance(exc, OSError) else "it took too long"
                raise WorkerCrashed(f"worker failed to start: cannot join its cgroup: {reason}") from exc
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
        _kill(self.popen)

    def signal_kill(self) -> None:
        """SIGKILL the worker's process group without reaping it (the monitor's kill): a
        zygote's child through its pidfd, so a pid that init reaped and handed out again is
        never hit; a child of this process keeps its pid until its owner reaps it."""
        _signal_kill(self.popen)

    def close(self) -> None:
        """Kill, reap and close every descriptor."""
        if self.closed:
            return
        self.closed = True
        self.kill()
        self.drain_stderr()
        _reap(self.popen)
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
        refusals = [line for line in self._launcher_lines() if not line.startswith(SKIPPED)]
        return refusals[-1][len(PREFIX) :] if refusals else None

    def permission_kept(self) -> str | None:
        """What the worker reported when it exited because a Deno permission granted for the
        self-test could not be revoked."""
        if self.popen.poll() != EXIT_PERMISSION_KEPT:
            return None
        text = self.stderr_tail().decode("utf-8", "replace")
        lines = [line for line in text.splitlines() if line.startswith(WORKER_PREFIX)]
        return clean_text(lines[-1][len(WORKER_PREFIX) :])[:300] if lines else "a granted permission was not revoked"

    def sandbox_skipped(self) -> list[str]:
        """``<layer> is unavailable: <why>`` for each layer skipped under sandbox="best_effort"."""
        return [line[len(SKIPPED) :] for line in self._launcher_lines() if line.startswith(SKIPPED)]

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
            with open(f"/proc/{self.pid}/status", "rb") as status:
                text = status.read()
        except OSError:
            return False
        return b"\nSeccomp:\t2\n" in text

    def killed_over_cap(self) -> tuple[str, int] | None:
        """The cap the zygote killed the worker over ("memory", "threads") and its reading."""
        popen = self.popen
        return popen.killed_over_cap() if isinstance(popen, _ZygoteChild) else None

    def death_message(self, prefix: str, how: str | None = None) -> str:
        """``prefix (how it ended): last stderr line``; the worker's text only ever follows."""
        tail = _last_line(self.stderr_tail())
        return f"{prefix} ({how or self._how_it_ended()})" + (f": {tail}" if tail else "")

    def _how_it_ended(self) -> str:
        code = self.popen.poll()
        if code is None:
            return "still running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"


def _os_error_text(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    what = exc.strerror or type(exc).__name__
    target = f" ({exc.filename})" if exc.filename else ""
    return f"{what}{target}" + (f" [{name}]" if name else "")
