"""Starting, talking to and killing one deno worker process.

Platform details live here: locating the deno binary, the worker's command line and
environment, non-blocking pipe I/O, the bounded stderr ring, and a kill that always reaps.
Both runtimes use this class as it is; only how they *wait* on its descriptors differs.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .._errors import WorkerCrashed
from ._wire import clean_text

__all__ = ["WorkerConfig", "WorkerProcess", "find_deno", "worker_entry"]

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

    def v8_flags(self) -> str:
        # V8 sizes its heap from the whole machine unless told; keep the old generation
        # under max_memory so a heap overrun ends in V8's OOM rather than a host kill.
        flags = []
        if self.max_memory is not None:
            flags.append(f"--max-old-space-size={max(16, (self.max_memory * 3 // 4) // MiB)}")
        if self.jitless:
            flags.append("--jitless")
        return ",".join(flags)

    def argv(self, deno: str, entry: Path) -> list[str]:
        settings = json.dumps(
            {
                "max_message_bytes": self.max_message_bytes,
                "max_depth": self.max_depth,
                "max_console_chars": self.max_console_chars,
                "max_inflight_host_calls": self.max_inflight_host_calls,
                "max_console_bytes": self.max_console_bytes,
            }
        )
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


_cache_lock = threading.Lock()
_warm_cache: Path | None = None


def _private_dir(path: Path) -> bool:
    """Whether path is a directory this user owns and no one else can write to."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022


def transpile_cache(deno: str, entry: Path) -> Path:
    """A deno cache directory holding the worker already transpiled, readable by anyone.

    A confined worker can write nowhere, and deno retries a cache write it is refused with
    a growing backoff (hundreds of ms at start-up); given a warm cache it writes nothing.
    The directory is this user's own and writable by no one else, so no other user can
    plant code in it; it is warmed once per process.
    """
    global _warm_cache
    with _cache_lock:
        if _warm_cache is not None:
            return _warm_cache
        base = Path(tempfile.gettempdir()) / f"pydeno-{os.getuid()}"
        with contextlib.suppress(FileExistsError):
            base.mkdir(mode=0o755)
        if not _private_dir(base):
            base = Path(tempfile.mkdtemp(prefix="pydeno-"))
            base.chmod(0o755)
        cache = base / "deno-dir"
        subprocess.run(
            [deno, "cache", "--quiet", "--no-config", "--no-lock", "--no-remote", "--no-npm", str(entry)],
            env={"DENO_DIR": str(cache)},
            cwd="/",
            check=True,
            capture_output=True,
            timeout=60,
        )
        _warm_cache = cache
        return cache


def sandboxed_command(config: WorkerConfig) -> list[str]:
    """The worker's command line behind the sandbox launcher (pydeno/host/_launcher.py):
    what Landlock leaves readable is deno's own directory, the system libraries, the
    worker's files and its warm transpile cache; only deno and its ELF loader may be
    executed."""
    deno = os.path.realpath(find_deno())
    entry = worker_entry()
    cache = transpile_cache(deno, entry)
    loader = os.path.realpath("/lib64/ld-linux-x86-64.so.2")
    spec = {
        "parent": os.getpid(),
        # /proc/self: deno reads its own memory map; only the worker's own entries.
        "read": [
            os.path.dirname(deno),
            "/usr",
            "/lib",
            "/lib64",
            str(entry.parent.resolve()),
            str(cache),
            "/proc/self",
        ],
        "execute": [deno, loader],
        "env": {"DENO_DIR": str(cache)},
        "argv": config.argv(deno, entry),
    }
    launcher = Path(__file__).resolve().with_name("_launcher.py")
    return [sys.executable, "-I", str(launcher), json.dumps(spec)]


def worker_command(config: WorkerConfig) -> list[str]:
    """The command line that starts a worker. Tests replace this function to start hostile
    fake workers instead; the public API has no such switch."""
    return config.argv(find_deno(), worker_entry())


class WorkerProcess:
    """One deno worker: pipes set non-blocking, stderr kept as a bounded ring."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        try:
            command = worker_command(config)
            self.popen = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={},
                cwd="/",
                close_fds=True,
                start_new_session=True,
                bufsize=0,
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
        if self.popen.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                self.popen.kill()
            # SIGKILL cannot be ignored; the bound only guards against a kernel that stalls.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=10)

    def close(self) -> None:
        """Kill, reap and close every descriptor."""
        if self.closed:
            return
        self.closed = True
        self.kill()
        self.drain_stderr()
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

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
