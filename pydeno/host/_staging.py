"""Where a worker's files come from: the deno binary, the worker's TypeScript, and a warm
transpile cache (``deno cache``), all placed where a confined worker can read them."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Staged",
    "deno_environment",
    "find_deno",
    "reachable_by_others",
    "runnable_deno",
    "stage",
    "staged",
    "worker_entry",
]


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


def runnable_deno() -> str:
    """find_deno(), resolved, or the OSError an execve of it would meet: a launcher would
    only fail later, at its execve, where a direct start says it at once."""
    deno = os.path.realpath(find_deno())
    if not os.access(deno, os.X_OK):
        if os.path.exists(deno):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), deno)
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), deno)
    return deno


def worker_entry() -> Path:
    """The worker's main.ts: inside the wheel (pydeno/_worker) or the source tree (worker/)."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "_worker" / "main.ts", here.parent / "worker" / "main.ts"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"pydeno's worker program is missing (looked in {here / '_worker'})")


def deno_environment(cache: Path) -> dict[str, str]:
    """The whole environment deno runs with: pydeno's own cache, never the host user's, and
    no update check (without it every deno process looks up its download server in the
    background: a DNS query per worker from the host's network under sandbox="off")."""
    return {"DENO_DIR": str(cache), "DENO_NO_UPDATE_CHECK": "1"}


@dataclass(frozen=True, slots=True)
class Staged:
    """Where a confined worker finds deno, its entry module and its warm transpile cache."""

    deno: str
    entry: Path
    cache: Path


_stage_lock = threading.Lock()
_staged: dict[tuple[str, Path, Path | None], Staged] = {}


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


def stage(deno: str, entry: Path, root: Path | None = None) -> Staged:
    """Deno, the worker and a warm transpile cache, all where the confined worker can read them.

    The base is ``<root>/pydeno-<uid>`` (root: the temporary directory), this user's own and
    writable by no one else (else a fresh private directory), so no other user can plant code
    in it. A worker that will run as another user (the host is root) cannot reach files under
    a directory only root may search, such as ``/root``: those are copied (or hard-linked)
    into the base. The cache matters for speed: a confined worker can write nowhere, and deno
    retries a refused cache write with a growing backoff (hundreds of ms at start-up). Done
    once per process for each deno, entry and root.
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


def staged(entry: Path | None = None) -> Staged:
    """This process's staging of find_deno() and entry (the installed worker by default)."""
    return stage(os.path.realpath(find_deno()), entry if entry is not None else worker_entry())
