"""``pydeno mcp --session --store PATH``: the SQLite journal store its sessions are kept in, and
the key that signs them, read from (or, the first time, made in) a file beside the store.

The key file is ``PATH.key``: 32 random bytes, written as 64 hexadecimal digits and a newline,
readable and writable by its owner only (mode 0600). A server that finds it uses it, so a
server started again on the same store (the same key) resumes the sessions kept there; a key
file anyone else may read or write is refused, as is one that holds fewer than 16 bytes. Any
failure here is a :class:`StoreSetupError` whose message names the flag and the file.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path
from typing import Final

from .._agents.journal import MIN_KEY_BYTES
from .._agents.sessions.store import SQLiteJournalStore
from .._base.errors import StoreError

__all__ = ["KEY_SUFFIX", "StoreSetupError", "key_path", "open_store"]

KEY_SUFFIX: Final = ".key"
KEY_BYTES: Final = 32


class StoreSetupError(ValueError):
    """--store names a file the server cannot keep its sessions in, or its key cannot be had."""


def key_path(store: Path) -> Path:
    return store.with_name(store.name + KEY_SUFFIX)


def open_store(path: str) -> tuple[SQLiteJournalStore, bytes]:
    """The store at path (created if missing) and its key (made the first time)."""
    if not path or path.startswith(":") or path.startswith("file:"):
        raise StoreSetupError(f"--store {path!r}: give the path of a SQLite file, kept across restarts")
    store_path = Path(path)
    try:
        store = SQLiteJournalStore(store_path)
    except StoreError as exc:
        raise StoreSetupError(f"--store {path}: {exc}") from None
    try:
        return store, _key(key_path(store_path))
    except BaseException:
        store.close()
        raise


def _key(path: Path) -> bytes:
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    _make_key(path)
    return _read_key(path)


def _read_key(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StoreSetupError(f"the key file {path} of --store cannot be read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise StoreSetupError(f"the key file {path} of --store is not a regular file")
        if info.st_mode & 0o077:
            raise StoreSetupError(
                f"the key file {path} of --store may be read or written by others (mode "
                f"{stat.S_IMODE(info.st_mode):04o}): make it its owner's only, chmod 600 {path}"
            )
        text = file.read(4096)
    try:
        key = bytes.fromhex(text.decode("ascii").strip())
    except ValueError:
        raise StoreSetupError(f"the key file {path} of --store does not hold hexadecimal digits") from None
    if len(key) < MIN_KEY_BYTES:
        raise StoreSetupError(
            f"the key file {path} of --store holds {len(key)} bytes, fewer than {MIN_KEY_BYTES}: "
            f"put {KEY_BYTES * 2} hexadecimal digits in it (or remove it, and its store, to start afresh)"
        )
    return key


def _make_key(path: Path) -> None:
    """Write a new key where none is: whole or not at all, and never over another server's,
    which may be making one for the same store at the same moment."""
    draft = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise StoreSetupError(f"the key file {path} of --store cannot be made: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(secrets.token_hex(KEY_BYTES).encode("ascii") + b"\n")
            file.flush()
            os.fsync(file.fileno())
        # A link fails if the name exists: the first server's key is everyone's.
        with contextlib.suppress(FileExistsError):
            os.link(draft, path)
    except OSError as exc:
        raise StoreSetupError(f"the key file {path} of --store cannot be made: {exc.strerror}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(draft)
