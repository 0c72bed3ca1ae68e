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
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from .._errors import WorkerCrashed
from ._launcher import EXIT_UNAVAILABLE, PREFIX, SKIPPED
from ._wire import clean_text

__all__ = ["SANDBOX_MODES", "SandboxMode", "WorkerConfig", "WorkerProcess", "find_deno", "worker_entry"]

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
    max_console_bytes: int = 1 << 20
    max_console_chars: int = 16 * 1024
    sandbox: SandboxMode = "require"

    def v8_flags(self) -> str:
        # V8 sizes its heap from the whole machine unless told; keep the old generation
        # under max_memory so a heap overrun ends in V8's OOM rather than a host kill.
        flags = []
        if self.max_memory is not None:
            flags.append(f"--max-old-space-size={max(16, (self.max_memory * 3 // 4) // MiB)}")
        if self.jitless:
            flags.append("--jitless")
        return ",".join(flags)

    def argv(self, deno: str, entry: Path, selftest: dict[str, Any] | None = None) -> list[str]:
        """deno's command line. With ``selftest`` (what the sandbox self-test probes), deno
        starts with the permissions the probes need, so that each meets the OS layers rather
        than Deno's own checks; the worker revokes them all before it reports ready."""
        settings = json.dumps(
            {
                "max_message_bytes": self.max_message_bytes,
                "max_depth": self.max_depth,
                "max_console_chars": self.max_console_chars,
                "max_inflight_host_calls": self.max_inflight_host_calls,
                "max_console_bytes": self.max_console_bytes,
                "selftest": selftest,
            }
        )
        grants = ["--allow-read", "--allow-write", "--allow-net", "--allow-run", "--allow-env"] if selftest else []
        return [
            deno,
            "run",
            "--quiet",
            "--no-prompt",
            "--no-config",
            "--no-lock",
            "--no-remote",
            "--no-npm",
            # Only the inspector, for REPL-mode evaluation; the worker revokes it before
            # it reads the first command.
            "--allow-sys=inspector",
            *grants,
            *([f"--v8-flags={flags}"] if (flags := self.v8_flags()) else []),
            str(entry),
            settings,
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
            env={"DENO_DIR": str(cache)},
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
        "env": {"DENO_DIR": str(cache), "PATH": f"{cache}/node_compat_bin", "DENO_NODE_SHIM_ACTIVE": "1"},
        "port": SELFTEST_PORT,
    }


def sandboxed_command(config: WorkerConfig) -> list[str]:
    """The worker's command line behind the sandbox launcher (pydeno/host/_launcher.py).

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
    staged = stage(deno, worker_entry())
    deno, entry, cache = staged.deno, staged.entry, staged.cache
    loader = os.path.realpath("/lib64/ld-linux-x86-64.so.2")
    worker_dir = str(entry.parent.resolve())
    spec = {
        "parent": os.getpid(),
        "mode": config.sandbox,
        # /proc/self: deno reads its own memory map; only the worker's own entries.
        "read": [*_library_dirs(), worker_dir, str(cache), "/proc/self"],
        "execute": [deno, loader],
        "env": {"DENO_DIR": str(cache)},
        "argv": config.argv(deno, entry, selftest_targets(cache, worker_dir)),
        "simulate": dict(SIMULATED_MISSING),
        "silent": sorted(SIMULATED_SILENT),
    }
    launcher = Path(__file__).resolve().with_name("_launcher.py")
    return [sys.executable, "-I", "-S", str(launcher), marshal.dumps(spec).hex()]


def worker_command(config: WorkerConfig) -> list[str]:
    """The command line that starts a worker. Tests replace this function to start hostile
    fake workers instead; the public API has no such switch."""
    if config.sandbox == "off":
        staged = _staged_here()
        return config.argv(staged.deno, staged.entry)
    return sandboxed_command(config)


def _staged_here() -> Staged:
    return stage(os.path.realpath(find_deno()), worker_entry())


def worker_environment(config: WorkerConfig) -> dict[str, str]:
    """The environment the worker process starts with: nothing of the host's. With no OS
    layers the one entry is DENO_DIR, so that deno keeps nothing in the host user's own cache
    (the launcher sets it itself, after the layers)."""
    if config.sandbox != "off":
        return {}
    return {"DENO_DIR": str(_staged_here().cache)}


class _Spawner:
    """Starts workers from one long-lived thread, which outlives every worker it started.

    A sandboxed worker's parent-death signal fires when the *thread* that forked it exits, not
    the process: a runtime created in a short-lived thread would lose its worker the moment
    that thread ended. So every worker is forked here, and this thread exits only once no
    worker it started is alive (and starts again with the next one).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: deque[tuple[Callable[[], subprocess.Popen[bytes]], Future[subprocess.Popen[bytes]]]] = deque()
        self._live = 0
        self._thread: threading.Thread | None = None

    def spawn(self, start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        future: Future[subprocess.Popen[bytes]] = Future()
        with self._cond:
            self._live += 1
            self._queue.append((start, future))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pydeno-spawner", daemon=True)
                self._thread.start()
            self._cond.notify()
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

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and self._live > 0:
                    self._cond.wait()
                if not self._queue:
                    self._thread = None
                    return
                start, future = self._queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(start())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                future.set_exception(exc)


def _kill(popen: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group and reap it. Idempotent, never raises."""
    if popen.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            popen.kill()
        # SIGKILL cannot be ignored; the bound only guards against a kernel that stalls.
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=10)


def _close_pipes(popen: subprocess.Popen[bytes]) -> None:
    for stream in (popen.stdin, popen.stdout, popen.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def _reap(popen: subprocess.Popen[bytes]) -> None:
    _kill(popen)
    _close_pipes(popen)


_spawner = _Spawner()


class WorkerProcess:
    """One deno worker: pipes set non-blocking, stderr kept as a bounded ring."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        try:
            command = worker_command(config)
            environment = worker_environment(config)
            self.popen = _spawner.spawn(
                lambda: subprocess.Popen(
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
            )
        except OSError as exc:
            raise WorkerCrashed(f"worker failed to start: {_os_error_text(exc)}") from exc
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
        self.closed = False

    # -- I/O -------------------------------------------------------------------------
    def read(self) -> bytes | None:
        """Whatever stdout has now: bytes, b"" if nothing yet, None at end of file."""
        try:
            data = os.read(self.stdout_fd, _READ_CHUNK)
        except BlockingIOError:
            return b""
        except OSError:
            data = b""
        if not data:
            self.stdout_eof = True
            return None
        return data

    def write(self, data: bytes | memoryview) -> int:
        """Write what the pipe takes now; -1 if the worker closed it."""
        try:
            return os.write(self.stdin_fd, data)
        except BlockingIOError:
            return 0
        except (BrokenPipeError, OSError):
            return -1

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

    def close(self) -> None:
        """Kill, reap and close every descriptor."""
        if self.closed:
            return
        self.closed = True
        self.kill()
        self.drain_stderr()
        _close_pipes(self.popen)
        _spawner.release()

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

    def death_message(self, prefix: str) -> str:
        """``prefix (how it ended): last stderr line``; the worker's text only ever follows."""
        code = self.popen.poll()
        if code is None:
            how = "still running"
        elif code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exit code {code}"
        tail = _last_line(self.stderr_tail())
        return f"{prefix} ({how})" + (f": {tail}" if tail else "")


def _os_error_text(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    what = exc.strerror or type(exc).__name__
    target = f" ({exc.filename})" if exc.filename else ""
    return f"{what}{target}" + (f" [{name}]" if name else "")
