"""Where a :class:`~pydeno.SessionPool` keeps its sessions' journals.

A store holds, per session id, one sealed record (the signed journal wrapped with its session
id, owner and version; pydeno/_agents/sessions/core.py seals and opens it) and the facts a pool
asks for without opening records: the version, the owner and the record's size. A store is
not trusted with the records' meaning: the pool checks each record it reads (signature,
session id, version), so a store that hands back an older or foreign record is caught there.

A write names the version it makes and succeeds only over the one before it (compare and
set): two pools that both think they hold a session cannot silently overwrite each other.
A deleted session's record is a tombstone the pool writes like any other record, so a store
needs nothing of its own for deletes.

Both stores also remember the newest version they have held for each session, apart from
the record, and refuse a record older than that (:class:`~pydeno.JournalError`): a row put
back behind the store's back is caught even by a pool that has never seen the session. The
SQLite file keeps that version in a table of its own, maintained by a trigger, so a row put
back with the sqlite3 command line updates it too; a file written by an earlier pydeno gets
the table and the trigger when it is first opened, seeded from the rows it has.

``MemoryJournalStore`` keeps records in this process. ``SQLiteJournalStore(path)`` keeps them
in a SQLite file (WAL mode, every write a transaction, ``synchronous=FULL``), safe for several
processes on one host; a locked file past ``busy_timeout`` is :class:`~pydeno.StoreBusy`, a
file that is not a readable database is :class:`~pydeno.StoreError`, and a failed write leaves
the record before it in place.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final, Protocol, runtime_checkable

from ..._base.checks import seconds
from ..._base.errors import JournalError, StoreBusy, StoreError
from .core import shown

__all__ = ["JournalStore", "MemoryJournalStore", "SQLiteJournalStore"]


@runtime_checkable
class JournalStore(Protocol):
    """What a SessionPool needs of a store. Every method may raise StoreError (StoreBusy
    for a lock held elsewhere); none may change a record it was not asked to."""

    def read(self, session_id: str) -> tuple[int, str | None, bytes] | None:
        """(version, owner, record) of the session, or None if it has none. A store may
        raise JournalError for a record it knows to be older than one it held."""

    def write(self, session_id: str, owner: str | None, version: int, record: bytes) -> bool:
        """Store record as the session's version ``version`` if the stored one is
        ``version - 1`` (no record for version 1); False, changing nothing, otherwise."""

    def delete(self, session_id: str) -> None:
        """Remove the session's row, whatever it holds (nothing if it has none). A pool never
        calls it: SessionPool.delete writes a tombstone record instead, so that the id's
        versions never restart (docs/sessions.md); this is the operator's purge."""

    def owner_bytes(self, owner: str) -> int:
        """The size of every record of owner's sessions, added up."""


class MemoryJournalStore:
    """Journals in this process's memory: gone with it. For tests, and for services whose
    sessions need not outlive the process."""

    def __init__(self) -> None:
        self._records: dict[str, tuple[int, str | None, bytes]] = {}
        # The newest version held per session, kept apart from the records.
        self._newest: dict[str, int] = {}
        self._lock = threading.Lock()

    def read(self, session_id: str) -> tuple[int, str | None, bytes] | None:
        with self._lock:
            stored = self._records.get(session_id)
            _check_newest(session_id, None if stored is None else stored[0], self._newest.get(session_id, 0))
            return stored

    def write(self, session_id: str, owner: str | None, version: int, record: bytes) -> bool:
        with self._lock:
            stored = self._records.get(session_id)
            if (stored[0] if stored is not None else 0) != version - 1:
                return False
            self._records[session_id] = (version, owner, bytes(record))
            self._newest[session_id] = max(self._newest.get(session_id, 0), version)
            return True

    def delete(self, session_id: str) -> None:
        with self._lock:
            self._records.pop(session_id, None)
            self._newest.pop(session_id, None)

    def owner_bytes(self, owner: str) -> int:
        with self._lock:
            return sum(len(r) for _, o, r in self._records.values() if o == owner)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)


def _check_newest(session_id: str, version: int | None, newest: int) -> None:
    """JournalError if the store's row (its version, None: no row) is not the newest it held."""
    if version is None:
        if newest:
            raise JournalError(
                f"the store has no journal of session {shown(session_id)}, whose version {newest} it has held; "
                "a row removed behind the store's back is refused (the store's own delete(session_id) forgets "
                "a session for good)"
            )
        return
    if version < newest:
        raise JournalError(
            f"the stored journal of session {shown(session_id)} is version {version}, older than version "
            f"{newest} the store has held for it; a row put back in the store is refused"
        )


# The result codes that mean "someone else holds the lock" (sqlite3.h); read from the
# exception's code, never its text.
_SQLITE_BUSY: Final = 5
_SQLITE_LOCKED: Final = 6

_TABLES: Final = (
    """CREATE TABLE IF NOT EXISTS pydeno_journals (
    session_id TEXT PRIMARY KEY NOT NULL,
    owner TEXT,
    version INTEGER NOT NULL,
    size INTEGER NOT NULL,
    record BLOB NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS pydeno_journals_owner ON pydeno_journals (owner)",
)
# The newest version the file has held per session, kept by triggers so that any writer
# (a row put back with the sqlite3 command line too) updates it; added to a file written by
# an earlier pydeno, which had only pydeno_journals, when it is first opened.
_NEWEST: Final = (
    "CREATE TABLE pydeno_journal_versions (session_id TEXT PRIMARY KEY NOT NULL, newest INTEGER NOT NULL)",
    *(
        f"""CREATE TRIGGER pydeno_journals_{event.split()[0].lower()} AFTER {event} ON pydeno_journals BEGIN
    INSERT INTO pydeno_journal_versions (session_id, newest) VALUES (NEW.session_id, NEW.version)
    ON CONFLICT (session_id) DO UPDATE SET newest = max(newest, excluded.newest);
END"""
        for event in ("INSERT", "UPDATE OF version")
    ),
    "INSERT INTO pydeno_journal_versions (session_id, newest) SELECT session_id, version FROM pydeno_journals",
)


class SQLiteJournalStore:
    """``SQLiteJournalStore(path, *, busy_timeout=5.0)``: journals in a SQLite file, created
    if missing, shared safely by the processes of one host (no server to run).

    ``busy_timeout`` is how long an operation waits for a lock another process holds before
    it fails with :class:`~pydeno.StoreBusy` (nothing written). Use it as a context manager,
    or call :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 5.0) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike naming a SQLite file, got {type(path).__name__}")
        self.path = Path(path)
        self.busy_timeout = seconds("busy_timeout", busy_timeout)
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        with self._guard():
            # isolation_level=None: transactions are the explicit BEGINs below, nothing implicit.
            db = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=FULL")
                # One transaction: processes opening the same file at once see either none of
                # it or all of it, and the first of them creates (or migrates) it.
                db.execute("BEGIN IMMEDIATE")
                for statement in _TABLES:
                    db.execute(statement)
                found = db.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'pydeno_journal_versions'"
                ).fetchone()
                if found is None:
                    for statement in _NEWEST:
                        db.execute(statement)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                db.close()
                raise
            self._db = db

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """The store's one seam from sqlite3's errors to pydeno's."""
        try:
            yield
        except sqlite3.Error as exc:
            code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
            if code in (_SQLITE_BUSY, _SQLITE_LOCKED):
                raise StoreBusy(
                    f"journal store {self.path} is locked by another process; waited busy_timeout={self.busy_timeout}s"
                ) from None
            raise StoreError(f"journal store {self.path} failed: {type(exc).__name__}: {exc}") from None

    @contextlib.contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._guard():
            if self._db is None:
                raise RuntimeError("journal store is closed")
            yield self._db

    def read(self, session_id: str) -> tuple[int, str | None, bytes] | None:
        with self._connection() as db:
            # One read transaction: the row and the newest version from the same snapshot.
            db.execute("BEGIN")
            try:
                row = db.execute(
                    "SELECT version, owner, record FROM pydeno_journals WHERE session_id = ?", (session_id,)
                ).fetchone()
                seen = db.execute(
                    "SELECT newest FROM pydeno_journal_versions WHERE session_id = ?", (session_id,)
                ).fetchone()
            finally:
                if db.in_transaction:
                    db.execute("ROLLBACK")
        newest = 0 if seen is None else seen[0]
        if type(newest) is not int:
            raise StoreError(f"journal store {self.path} failed: the newest version of a session is not an integer")
        if row is None:
            _check_newest(session_id, None, newest)
            return None
        version, owner, record = row
        if type(version) is not int or not (owner is None or isinstance(owner, str)) or not isinstance(record, bytes):
            raise StoreError(f"journal store {self.path} failed: the row of a session has columns of the wrong types")
        _check_newest(session_id, version, newest)
        return version, owner, record

    def write(self, session_id: str, owner: str | None, version: int, record: bytes) -> bool:
        with self._connection() as db:
            # IMMEDIATE: the write lock is taken before the version is read, so no other
            # process can write between the check and the write.
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT version FROM pydeno_journals WHERE session_id = ?", (session_id,)).fetchone()
                if (row[0] if row is not None else 0) != version - 1:
                    db.execute("ROLLBACK")
                    return False
                db.execute(
                    "INSERT OR REPLACE INTO pydeno_journals (session_id, owner, version, size, record) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (session_id, owner, version, len(record), bytes(record)),
                )
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            return True

    def delete(self, session_id: str) -> None:
        with self._connection() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM pydeno_journals WHERE session_id = ?", (session_id,))
                db.execute("DELETE FROM pydeno_journal_versions WHERE session_id = ?", (session_id,))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    def owner_bytes(self, owner: str) -> int:
        with self._connection() as db:
            (total,) = db.execute(
                "SELECT COALESCE(SUM(size), 0) FROM pydeno_journals WHERE owner = ?", (owner,)
            ).fetchone()
        return int(total)

    def close(self) -> None:
        """Close the file. Idempotent."""
        with self._lock:
            if self._db is not None:
                db, self._db = self._db, None
                db.close()

    def __enter__(self) -> SQLiteJournalStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteJournalStore({str(self.path)!r})"
