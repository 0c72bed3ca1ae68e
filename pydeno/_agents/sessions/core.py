"""The rules of a SessionPool, without I/O: which sessions are live, who holds a lease, which
one to evict, the per-owner caps, and the sealed record a store keeps.

The drivers (pydeno/_agents/sessions/_async.py and its generated twin pydeno/_agents/sessions/_sync.py) start
and close sandboxes and talk to the store; every decision is made here, so it is tested
without a worker (tests/unit/test_sessions_core.py).

Sealed record (version 1): a msgpack array ``["pydeno-session", 1, session_id, owner,
version, journal, mac]``; ``journal`` is the agent's own signed journal, ``mac`` an
HMAC-SHA256, under the pool's key, of the format, the session id, the owner, the version and
the journal. A record is refused (:class:`~pydeno.JournalError`) when it is malformed, not
authentic, sealed for another session (a foreign record), or older than the newest version
this pool has written or read for that session (a store that rolled back).

A deleted session leaves a sealed *tombstone*: the same array with owner and journal nil,
written over the session's last record as its next version. Versions therefore never
restart for an id: a session made again under a deleted id goes on from the tombstone's
version, so every record from before the delete is older than anything the pool has seen
since, and is refused like any rolled-back record. The MAC covers the nil journal, so a
tombstone cannot be made from a record, nor a record from a tombstone, without the key.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import msgpack

from ..._base.checks import count, limit_text, optional_count, optional_seconds, optional_size, seconds
from ..._base.errors import JournalError, LeaseTimeout, SessionLimitError
from ..._base.failures import closed_error

__all__ = ["Entry", "LeaseBook", "check_owner", "check_session_id", "open_record", "other_owner", "seal", "shown"]

MAGIC: Final = "pydeno-session"
FORMAT: Final = 1
MAX_ID_CHARS: Final = 256


def check_session_id(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"session_id must be a str, got {type(value).__name__}")
    if not 0 < len(value) <= MAX_ID_CHARS:
        raise ValueError(f"session_id must be 1 to {MAX_ID_CHARS} characters, got {len(value)}")
    return value


def check_owner(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"owner must be a str or None, got {type(value).__name__}")
    if not 0 < len(value) <= MAX_ID_CHARS:
        raise ValueError(f"owner must be 1 to {MAX_ID_CHARS} characters, got {len(value)}")
    return value


def shown(name: str) -> str:
    """A session id or owner as messages show it: quoted, and cut if long."""
    return repr(name if len(name) <= 60 else name[:57] + "...")


# --- the sealed record ----------------------------------------------------------------------


def _mac(key: bytes, session_id: str, owner: str | None, version: int, journal: bytes | None) -> bytes:
    message = msgpack.packb([MAGIC, FORMAT, session_id, owner, version, journal], use_bin_type=True)
    return hmac.new(key, b"pydeno-session-record\0" + message, hashlib.sha256).digest()


def seal(key: bytes, session_id: str, owner: str | None, version: int, journal: bytes | None) -> bytes:
    """The record of session_id's version ``version``; a journal of None seals its tombstone
    (with no owner: a deleted id belongs to no one)."""
    if journal is None:
        owner = None
    mac = _mac(key, session_id, owner, version, journal)
    return bytes(msgpack.packb([MAGIC, FORMAT, session_id, owner, version, journal, mac], use_bin_type=True))


def open_record(
    key: bytes, session_id: str, record: Any, known: int, max_bytes: int, stored_as: int | None = None
) -> tuple[str | None, int, bytes | None]:
    """(owner, version, journal) of a record read for session_id, checked: authentic, sealed
    for this session, sealed as the version the store keeps it under (``stored_as``, if
    given), and not older than ``known``, the newest version seen for it. The journal is None
    for the tombstone a delete left (and the owner None with it)."""
    who = f"the stored journal of session {shown(session_id)}"
    if not isinstance(record, bytes):
        raise JournalError(f"{who} is malformed: not bytes")
    if len(record) > max_bytes:
        raise JournalError(f"{who} is {len(record)} bytes, over the limit of {max_bytes}")
    try:
        outer = msgpack.unpackb(record, raw=False, strict_map_key=True)
    except Exception as exc:  # noqa: BLE001 - msgpack raises many types for bad input
        raise JournalError(f"{who} is malformed or truncated ({type(exc).__name__})") from None
    if not (isinstance(outer, list) and len(outer) == 7 and outer[0] == MAGIC):
        raise JournalError(f"{who} is malformed: not a pydeno session record")
    _, fmt, sealed_id, owner, version, journal, mac = outer
    if fmt != FORMAT:
        raise JournalError(f"{who} has record format {fmt!r}, which this pydeno does not read (it reads {FORMAT})")
    if not (
        isinstance(sealed_id, str)
        and (owner is None or isinstance(owner, str))
        and type(version) is int
        and (isinstance(journal, bytes) or (journal is None and owner is None))
        and isinstance(mac, bytes)
    ):
        raise JournalError(f"{who} is malformed: bad header")
    if not hmac.compare_digest(_mac(key, sealed_id, owner, version, journal), mac):
        raise JournalError(f"{who} is not authentic: wrong key, or altered since it was signed")
    if sealed_id != session_id:
        raise JournalError(f"{who} was sealed for session {shown(sealed_id)}; a foreign journal is refused")
    if stored_as is not None and version != stored_as:
        # The store's version is what its compare-and-set and its own newest-version check
        # see: a record moved under another number would slip past both.
        raise JournalError(
            f"{who} was sealed as version {version} but is stored as version {stored_as}; "
            "a record moved to another version is refused"
        )
    if version < known:
        raise JournalError(
            f"{who} is version {version}, older than version {known} this pool last wrote or read; "
            "a store that hands back an older journal is refused"
        )
    return owner, version, journal


# --- live sessions and leases ---------------------------------------------------------------


@dataclass
class Entry:
    """One live session: its sandbox (None while it is being restored), its owner, the
    version of its newest stored record, and whether its state is newer than that."""

    session_id: str
    owner: str | None
    sandbox: Any = None
    version: int = 0
    leased: bool = True
    dirty: bool = False
    idle_since: float = 0.0
    # The journal of the newest stored record (None: none yet) and that record's size.
    journal: bytes | None = None
    stored_bytes: int = 0
    # The warm pool's checkout the sandbox's worker came from, ended with the worker.
    checkout: Any = None


Decision = tuple[Literal["live", "restore", "wait"], "Entry | None", list[Entry]]


@dataclass
class LeaseBook:
    """Who holds what. ``live`` is in least-recently-used order: the first idle entry is the
    next to be evicted."""

    max_live: int
    max_live_per_owner: int | None
    max_bytes_per_owner: int | None
    idle_ttl: float | None
    lease_timeout: float
    live: OrderedDict[str, Entry] = field(default_factory=OrderedDict)
    # The newest version written or read per session: what a store's record must not be older than.
    known: dict[str, int] = field(default_factory=dict)
    closed: bool = False
    leases: int = 0
    created: int = 0
    restores: int = 0
    evictions: int = 0
    expirations: int = 0

    @classmethod
    def create(
        cls,
        max_live: Any,
        max_live_per_owner: Any,
        max_bytes_per_owner: Any,
        idle_ttl: Any,
        lease_timeout: Any,
    ) -> LeaseBook:
        return cls(
            count("max_live", max_live, 1),
            optional_count("max_live_per_owner", max_live_per_owner, 1),
            optional_size("max_bytes_per_owner", max_bytes_per_owner, 1),
            optional_seconds("idle_ttl", idle_ttl),
            seconds("lease_timeout", lease_timeout),
        )

    def lease_limit(self, timeout: Any) -> float:
        return self.lease_timeout if timeout is None else seconds("timeout", timeout)

    # -- taking a lease --------------------------------------------------------------------
    def claim(self, session_id: str, owner: str | None) -> Decision:
        """What a lease of session_id by owner does now: take the ``live`` entry, ``restore``
        into a new entry (after closing the evicted ones), or ``wait`` (the entry it waits on,
        or None for a free slot). SessionLimitError if the owner's cap stops it for good."""
        entry = self.live.get(session_id)
        if entry is not None:
            if entry.owner != owner:
                raise other_owner(session_id)
            if entry.leased:
                return ("wait", entry, [])
            entry.leased = True
            self.live.move_to_end(session_id)
            self.leases += 1
            return ("live", entry, [])
        evict: list[Entry] = []
        if owner is not None and self.max_live_per_owner is not None:
            mine = [e for e in self.live.values() if e.owner == owner]
            if len(mine) >= self.max_live_per_owner:
                idle = next((e for e in mine if not e.leased and not e.dirty), None)
                if idle is None:
                    raise SessionLimitError(
                        f"owner {shown(owner)} has {len(mine)} live sessions, all leased or unsaved, "
                        f"the cap max_live_per_owner={self.max_live_per_owner}"
                    )
                evict.append(idle)
        if len(self.live) - len(evict) >= self.max_live:
            idle = next((e for e in self.live.values() if not e.leased and not e.dirty and e not in evict), None)
            if idle is None:
                return ("wait", None, [])
            evict.append(idle)
        for gone in evict:
            del self.live[gone.session_id]
            self.evictions += 1
        entry = Entry(session_id, owner)
        self.live[session_id] = entry
        self.leases += 1
        return ("restore", entry, evict)

    def timed_out(self, session_id: str, waited_on: Entry | None, limit: float) -> LeaseTimeout:
        if waited_on is not None:
            return LeaseTimeout(f"session {shown(session_id)} is leased elsewhere; waited lease_timeout={limit}s")
        return LeaseTimeout(
            f"no live slot for session {shown(session_id)}: all max_live={self.max_live} are leased; "
            f"waited lease_timeout={limit}s"
        )

    def restored(self, entry: Entry, sandbox: Any, version: int, *, new: bool) -> None:
        """The entry has its sandbox: ``new`` (made, after no record or a tombstone of
        version ``version``) or restored from the record of that version."""
        entry.sandbox, entry.version = sandbox, version
        self.known[entry.session_id] = max(self.known.get(entry.session_id, 0), version)
        if new:
            self.created += 1
        else:
            self.restores += 1

    def abandon(self, entry: Entry) -> None:
        """A restore that failed: the slot is free again."""
        if self.live.get(entry.session_id) is entry:
            del self.live[entry.session_id]

    # -- ending a lease --------------------------------------------------------------------
    def written(self, entry: Entry, version: int) -> None:
        entry.version, entry.dirty = version, False
        self.known[entry.session_id] = max(self.known.get(entry.session_id, 0), version)

    def release(self, entry: Entry, now: float, *, keep: bool) -> None:
        """The lease ends: the entry is idle (most recently used), or gone if not kept."""
        entry.leased = False
        entry.idle_since = now
        if self.live.get(entry.session_id) is not entry:
            return
        if keep:
            self.live.move_to_end(entry.session_id)
        else:
            del self.live[entry.session_id]

    def check_bytes(self, owner: str | None, stored: int, old: int, new: int) -> None:
        """SessionLimitError if owner's records would add up to more than its cap: stored is
        what the store holds for owner now, old the size of the record new replaces."""
        if owner is None or self.max_bytes_per_owner is None:
            return
        total = stored - old + new
        if total > self.max_bytes_per_owner:
            raise SessionLimitError(
                f"owner {shown(owner)} would store {total} bytes of journals, over "
                f"max_bytes_per_owner={self.max_bytes_per_owner}; the session's last stored journal is kept",
                hint=(
                    "delete the owner's other sessions, or raise max_bytes_per_owner= "
                    f"(now {limit_text(self.max_bytes_per_owner)}) of the SessionPool"
                ),
            )

    # -- idle sessions ---------------------------------------------------------------------
    def expired(self, now: float) -> list[Entry]:
        """The idle entries past idle_ttl, removed (their sandboxes to close)."""
        if self.idle_ttl is None:
            return []
        gone = [e for e in self.live.values() if not e.leased and not e.dirty and now - e.idle_since >= self.idle_ttl]
        for entry in gone:
            del self.live[entry.session_id]
        self.expirations += len(gone)
        return gone

    def next_expiry(self, now: float) -> float | None:
        """Seconds until the next idle entry expires, or None if none will."""
        if self.idle_ttl is None:
            return None
        times = [e.idle_since + self.idle_ttl - now for e in self.live.values() if not e.leased and not e.dirty]
        return max(0.0, min(times)) if times else None

    def drain(self) -> list[Entry]:
        """Closing: every live entry, removed."""
        self.closed = True
        entries = list(self.live.values())
        self.live.clear()
        return entries

    def check_open(self) -> None:
        if self.closed:
            raise closed_error("the session pool is closed", "close() was called on the session pool")

    def counts(self) -> dict[str, int]:
        leased = sum(1 for e in self.live.values() if e.leased)
        return {
            "live": len(self.live),
            "leased": leased,
            "idle": len(self.live) - leased,
            "leases": self.leases,
            "created": self.created,
            "restores": self.restores,
            "evictions": self.evictions,
            "expirations": self.expirations,
        }


def other_owner(session_id: str) -> ValueError:
    return ValueError(f"session {shown(session_id)} belongs to another owner: lease it with the owner it was made with")
