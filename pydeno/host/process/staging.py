"""Where a worker's files come from: the deno binary, the worker's TypeScript, and a warm
transpile cache (``deno cache``), all placed where a confined worker can read them."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Final, NamedTuple

from ..._base.deno import find_deno
from . import platform
from .launcher import WORKER_FILES_FD

__all__ = [
    "SERVE_BY_DESCRIPTOR",
    "Staged",
    "open_base",
    "deno_environment",
    "find_deno",
    "reachable_by_others",
    "runnable_deno",
    "stage",
    "staged",
    "warm_confined",
    "worker_entry",
]

# Where deno finds the worker's files (Linux): through a descriptor for the staging directory,
# as /proc/self/fd/<n>/worker-<digest>/main.ts. Every URL the worker's modules have (their
# import.meta.url, Deno.mainModule, the names of their scripts in the isolate, which a heap
# snapshot lists) then names no directory of the host's; the staging directory itself, under
# the temporary directory and named with the host's user id, stays out of the guest's sight.
SERVE_BY_DESCRIPTOR: Final = sys.platform == "linux" and os.path.isdir("/proc/self/fd")
# deno with nothing but what it is given: no config file, lock file, remote or npm module.
_OFFLINE: Final = ("--quiet", "--no-config", "--no-lock", "--no-remote", "--no-npm")
_CACHE_FLAGS: Final = ("cache", *_OFFLINE)
# What deno starts a worker from: the worker's modules joined into one JavaScript file
# (worker/join.ts says why), made when they are staged.
JOINED: Final = "worker.js"


def runnable_deno() -> str:
    """find_deno(), resolved, or the OSError an execve of it would meet: a launcher would
    only fail later, at its execve, where a direct start says it at once."""
    deno = os.path.realpath(find_deno())
    _check_runnable(deno)
    return deno


def _check_runnable(path: str) -> None:
    """The OSError an execve of path would fail with, raised here."""
    if not os.access(path, os.X_OK):
        if os.path.exists(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)


def worker_entry() -> Path:
    """The worker's main.ts: inside the wheel (pydeno/_worker) or the source tree (worker/)."""
    here = _package_parent()
    for candidate in (here / "_worker" / "main.ts", here.parent / "worker" / "main.ts"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"pydeno's worker program is missing (looked in {here / '_worker'})")


@functools.cache
def _package_parent() -> Path:
    """The directory that holds the pydeno package, resolved once: it does not move while the
    package is imported from it."""
    return Path(__file__).resolve().parents[2]


def deno_environment(cache: Path) -> dict[str, str]:
    """The whole environment deno runs with: pydeno's own cache, never the host user's, and
    no update check (without it every deno process looks up its download server in the
    background: a DNS query per worker from the host's network under sandbox="off")."""
    return {"DENO_DIR": str(cache), "DENO_NO_UPDATE_CHECK": "1"}


class Staged(NamedTuple):
    """Where a confined worker finds deno, its entry module and its warm transpile cache, and
    the staging directory that holds the entry's folder."""

    deno: str
    entry: Path
    cache: Path
    base: Path

    def served(self, fd: int) -> Path:
        """The entry as deno is to open it when ``fd`` is a descriptor for the base."""
        if not SERVE_BY_DESCRIPTOR:
            return self.entry
        return Path(f"/proc/self/fd/{fd}") / self.entry.parent.name / self.entry.name


_stage_lock = threading.Lock()
_staged: dict[tuple[str, Path, Path | None], Staged] = {}
_warmed: set[Staged] = set()


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


def _beside(target: Path) -> Path:
    """A name beside target that no other process or thread staging it uses, to write it under
    before it is moved into place."""
    return target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}")


def _install_copy(source: Path, target: Path, mode: int, *, link: bool = True) -> None:
    """Copy source to target (a hard link when ``link`` and the filesystem allows),
    atomically: another process may be staging the same file at the same time."""
    if target.exists():
        return
    temporary = _beside(target)
    try:
        if not link:
            raise OSError("a copy was asked for")
        os.link(source, temporary)
    except OSError:
        shutil.copyfile(source, temporary)
        temporary.chmod(mode)
    os.replace(temporary, target)


def _install_bytes(data: bytes, target: Path) -> None:
    """Write data to target atomically: another process may be staging it at the same time."""
    temporary = _beside(target)
    temporary.write_bytes(data)
    temporary.chmod(0o644)
    os.replace(temporary, target)


def _join(deno: str, entry: Path, cache: Path) -> bytes:
    """The worker's modules from entry on, joined into one JavaScript file (worker/join.ts)."""
    folder = entry.parent
    done = subprocess.run(
        [deno, "run", *_OFFLINE, f"--allow-read={folder}", str(folder / "join.ts"), str(entry)],
        env={**deno_environment(cache), "NO_COLOR": "1"},
        cwd="/",
        capture_output=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0 or not done.stdout:
        # An OSError: the runtime reports it as a failure to start its worker.
        said = done.stderr.decode(errors="replace").strip()
        raise OSError(errno.ENOEXEC, f"the worker's modules could not be joined into one program: {said}")
    return done.stdout


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


def open_base(base: Path) -> int:
    """A descriptor for the staging directory, which deno reads the worker's files through
    (see SERVE_BY_DESCRIPTOR): it gives no access of its own (O_PATH)."""
    return os.open(base, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


def stage(deno: str, entry: Path, root: Path | None = None) -> Staged:
    """Deno, the worker and a warm transpile cache, all where the confined worker can read them.

    The base is ``<root>/pydeno-<uid>`` (root: the temporary directory), this user's own and
    writable by no one else (else a fresh private directory), so no other user can plant code
    in it. A worker that will run as another user (the host is root) cannot reach files under
    a directory only root may search, such as ``/root``: deno is then copied (or hard-linked)
    into the base. The worker's own files always are, into a folder named by a hash of their
    contents, which deno is handed through a descriptor for the base (:meth:`Staged.served`),
    so that no URL of theirs names a host directory. The cache, warmed for the URLs a confined
    worker uses, matters for speed: a confined worker can write nowhere, and deno retries a
    refused cache write with a growing backoff (hundreds of ms at start-up). Done once per
    process for each deno, entry and root.
    """
    key = (deno, entry, root)
    with _stage_lock:
        if key in _staged:
            return _staged[key]
        parent = root if root is not None else Path(tempfile.gettempdir())
        base = parent / f"pydeno-{os.getuid()}"
        with contextlib.suppress(FileExistsError):
            base.mkdir(mode=0o755)
        if not _private_dir(base):
            base = Path(tempfile.mkdtemp(prefix="pydeno-", dir=parent))
        base.chmod(0o755)
        if os.geteuid() == 0 and not reachable_by_others(deno, stat.S_IXOTH):
            info = os.stat(deno)
            target = base / f"deno-{info.st_size}-{info.st_mtime_ns}"
            _install_copy(Path(deno), target, 0o755)
            deno = str(target)
        sources = sorted(entry.parent.glob("*.ts"))
        sources_entry = entry.name
        import hashlib  # not with the package: OpenSSL's bindings load slowly, for one hash

        digest = hashlib.sha256()
        for source in sources:
            digest.update(source.name.encode() + b"\0" + source.read_bytes())
        folder = base / f"worker-{digest.hexdigest()[:16]}"
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o755)
        for source in sources:
            # Copied, never linked: the folder is named by these contents, and a link would
            # change with a source edited in place, under the name of the contents it had.
            _install_copy(source, folder / source.name, 0o644, link=False)
        cache = base / "deno-dir"
        _no_web_storage(cache)
        entry = folder / JOINED
        if not entry.exists():
            _install_bytes(_join(deno, folder / sources_entry, cache), entry)
        found = Staged(deno, entry, cache, base)
        # Where deno reads the worker's files by their own path, the cache is warmed for them
        # here; served through a descriptor, it is warmed for the URLs a confined worker has
        # when the first one starts (warm_confined), and an unconfined worker, which may
        # write, fills it for its own.
        if not SERVE_BY_DESCRIPTOR:
            _warm_cache([deno, *_CACHE_FLAGS, str(entry)], cache, ())
        _staged[key] = found
        return found


def warm_confined(found: Staged) -> None:
    """The transpile cache, warmed for the URLs of the worker's files as a confined worker
    has them (through WORKER_FILES_FD), once per process: that worker can write no cache."""
    with _stage_lock:
        if found in _warmed or not SERVE_BY_DESCRIPTOR:
            return
        # An interpreter in front of deno (below) would turn deno's own refusal into an exit
        # status: the error it would meet, raised here.
        _check_runnable(found.deno)
        # A small interpreter puts the base descriptor where the launcher will: a threaded host
        # cannot choose its numbers, and a POSIX shell only redirects descriptors up to 9.
        trampoline = (
            f"import os, sys; os.dup2(int(sys.argv[1]), {WORKER_FILES_FD}); os.execv(sys.argv[2], sys.argv[2:])"
        )
        served = str(found.served(WORKER_FILES_FD))
        fd = open_base(found.base)
        try:
            command = [
                platform.interpreter(),
                "-I",
                "-S",
                "-c",
                trampoline,
                str(fd),
                found.deno,
                *_CACHE_FLAGS,
                served,
            ]
            _warm_cache(command, found.cache, (fd,))
        finally:
            os.close(fd)
        _warmed.add(found)


def _warm_cache(command: list[str], cache: Path, fds: tuple[int, ...]) -> None:
    subprocess.run(
        command,
        env=deno_environment(cache),
        cwd="/",
        check=True,
        capture_output=True,
        timeout=60,
        pass_fds=fds,
    )


def staged(entry: Path | None = None) -> Staged:
    """This process's staging of find_deno() and entry (the installed worker by default)."""
    return stage(os.path.realpath(find_deno()), entry if entry is not None else worker_entry())
