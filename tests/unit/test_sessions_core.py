"""The SessionPool's decisions and its sealed record, without a worker or a store."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

import pydeno
from pydeno._agents.sessions.core import LeaseBook, check_session_id, open_record, seal

KEY = b"k" * 32


def book(
    max_live: int = 2, per_owner: int | None = None, max_bytes: int | None = None, ttl: float | None = None
) -> LeaseBook:
    return LeaseBook.create(max_live, per_owner, max_bytes, ttl, 1.0)


def take(b: LeaseBook, session_id: str, owner: str | None = None, now: float = 0.0) -> Any:
    how, entry, evicted = b.claim(session_id, owner)
    if how == "restore":
        assert entry is not None
        b.restored(entry, object(), 0, new=True)
    return how, entry, [e.session_id for e in evicted]


def test_a_new_session_is_restored_into_a_slot_and_then_found_live() -> None:
    b = book()
    how, entry, evicted = take(b, "a")
    assert (how, evicted) == ("restore", [])
    b.release(entry, 1.0, keep=True)
    how, again, _ = take(b, "a")
    assert how == "live" and again is entry


def test_a_leased_session_makes_the_next_claim_wait_on_it() -> None:
    b = book()
    _, entry, _ = take(b, "a")
    assert b.claim("a", None) == ("wait", entry, [])


def test_a_full_book_evicts_the_least_recently_used_idle_session() -> None:
    b = book(max_live=2)
    for name in "ab":
        b.release(take(b, name)[1], 0.0, keep=True)
    b.release(take(b, "a")[1], 1.0, keep=True)  # a is used again: b is now the oldest
    assert take(b, "c")[2] == ["b"]
    assert list(b.live) == ["a", "c"] and b.evictions == 1


def test_a_full_book_with_every_session_leased_waits_for_a_slot() -> None:
    b = book(max_live=1)
    take(b, "a")
    assert b.claim("b", None) == ("wait", None, [])


def test_an_unsaved_session_is_never_evicted_or_expired() -> None:
    b = book(max_live=1, ttl=1.0)
    _, entry, _ = take(b, "a")
    entry.dirty = True
    b.release(entry, 0.0, keep=True)
    assert b.claim("b", None) == ("wait", None, [])
    assert b.expired(100.0) == [] and b.next_expiry(100.0) is None


def test_an_owner_at_its_cap_evicts_its_own_idle_session_before_anyone_elses() -> None:
    b = book(max_live=3, per_owner=1)
    b.release(take(b, "x", "bob")[1], 0.0, keep=True)
    b.release(take(b, "a1", "alice")[1], 1.0, keep=True)
    assert take(b, "a2", "alice")[2] == ["a1"]


def test_an_owner_at_its_cap_with_every_session_leased_is_refused() -> None:
    b = book(max_live=3, per_owner=1)
    take(b, "a1", "alice")
    with pytest.raises(pydeno.SessionLimitError, match=r"^owner 'alice' has 1 live sessions"):
        b.claim("a2", "alice")


def test_a_session_claimed_by_another_owner_is_refused() -> None:
    b = book()
    b.release(take(b, "a", "alice")[1], 0.0, keep=True)
    with pytest.raises(ValueError, match=r"^session 'a' belongs to another owner"):
        b.claim("a", "eve")


def test_idle_sessions_expire_after_idle_ttl_and_the_next_expiry_is_known() -> None:
    b = book(ttl=10.0)
    b.release(take(b, "a")[1], 0.0, keep=True)
    b.release(take(b, "b")[1], 5.0, keep=True)
    assert b.next_expiry(2.0) == 8.0
    assert [e.session_id for e in b.expired(10.0)] == ["a"]
    assert list(b.live) == ["b"] and b.expirations == 1


def test_the_stored_bytes_cap_counts_what_the_new_record_replaces() -> None:
    b = book(max_bytes=100)
    b.check_bytes("alice", stored=90, old=40, new=50)  # 100: at the cap, allowed
    with pytest.raises(
        pydeno.SessionLimitError, match=r"would store 101 bytes of journals, over max_bytes_per_owner=100"
    ):
        b.check_bytes("alice", stored=90, old=40, new=51)
    b.check_bytes(None, stored=10**9, old=0, new=10**9)  # no owner, no cap


def test_a_released_session_not_kept_frees_its_slot() -> None:
    b = book(max_live=1)
    _, entry, _ = take(b, "a")
    b.release(entry, 0.0, keep=False)
    assert take(b, "b")[0] == "restore" and "a" not in b.live


def test_a_closed_book_refuses_with_the_closed_kind() -> None:
    b = book()
    take(b, "a")
    assert [e.session_id for e in b.drain()] == ["a"]
    with pytest.raises(RuntimeError) as info:
        b.check_open()
    assert pydeno.classify_error(info.value).kind == "closed"


# -- the sealed record -------------------------------------------------------------------------
def test_a_sealed_record_opens_as_what_was_sealed() -> None:
    record = seal(KEY, "a", "alice", 3, b"journal")
    assert open_record(KEY, "a", record, 3, 1 << 20) == ("alice", 3, b"journal")


@pytest.mark.parametrize(
    ("record", "known", "message"),
    [
        (seal(KEY, "a", None, 2, b"j"), 3, "is version 2, older than version 3 this pool last wrote or read"),
        (seal(KEY, "b", None, 1, b"j"), 0, "was sealed for session 'b'; a foreign journal is refused"),
        (seal(b"x" * 32, "a", None, 1, b"j"), 0, "is not authentic"),
        (seal(KEY, "a", None, 1, b"j")[:-3], 0, "is malformed or truncated"),
        (msgpack.packb(["pydeno-session", 2, "a", None, 1, b"j", b"m"]), 0, "has record format 2"),
        (msgpack.packb(["something", 1]), 0, "is malformed: not a pydeno session record"),
        (msgpack.packb(["pydeno-session", 1, "a", 5, 1, b"j", b"m"]), 0, "is malformed: bad header"),
        ("not bytes", 0, "is malformed: not bytes"),
        (b"x" * 100, 0, "is 100 bytes, over the limit of 50"),
    ],
    ids=[
        "older",
        "foreign",
        "another key",
        "truncated",
        "a later format",
        "not a record",
        "bad header",
        "a str",
        "too big",
    ],
)
def test_a_record_that_does_not_check_is_refused_as_journal_invalid(record: Any, known: int, message: str) -> None:
    with pytest.raises(pydeno.JournalError) as info:
        open_record(KEY, "a", record, known, 50 if message.endswith("of 50") else 1 << 20)
    assert str(info.value).startswith("the stored journal of session 'a' ")
    assert message in str(info.value)
    assert pydeno.classify_error(info.value).kind == "journal_invalid"


def test_an_altered_owner_or_version_breaks_the_seal() -> None:
    _, fmt, sid, owner, version, journal, mac = msgpack.unpackb(seal(KEY, "a", "alice", 3, b"j"))
    for changed in (
        ["pydeno-session", fmt, sid, "eve", version, journal, mac],
        ["pydeno-session", fmt, sid, owner, 9, journal, mac],
    ):
        with pytest.raises(pydeno.JournalError, match="is not authentic"):
            open_record(KEY, "a", msgpack.packb(changed, use_bin_type=True), 0, 1 << 20)


def test_a_long_session_id_is_cut_in_messages_and_a_too_long_one_refused() -> None:
    with pytest.raises(pydeno.JournalError) as info:
        open_record(KEY, "s" * 200, b"", 0, 1 << 20)
    assert "'" + "s" * 57 + "...'" in str(info.value)
    with pytest.raises(ValueError, match="session_id must be 1 to 256 characters, got 257"):
        check_session_id("s" * 257)


def test_a_tombstone_opens_as_a_deleted_session_with_no_owner_and_no_journal() -> None:
    assert open_record(KEY, "a", seal(KEY, "a", "alice", 5, None), 5, 1 << 20) == (None, 5, None)


def test_a_record_turned_into_a_tombstone_or_back_without_the_key_breaks_the_seal() -> None:
    _, fmt, sid, _, version, journal, mac = msgpack.unpackb(seal(KEY, "a", None, 3, b"j"))
    _, _, _, _, _, _, tomb_mac = msgpack.unpackb(seal(KEY, "a", None, 3, None))
    for changed in (
        ["pydeno-session", fmt, sid, None, version, None, mac],
        ["pydeno-session", fmt, sid, None, version, journal, tomb_mac],
    ):
        with pytest.raises(pydeno.JournalError, match="is not authentic"):
            open_record(KEY, "a", msgpack.packb(changed, use_bin_type=True), 0, 1 << 20)
    # A tombstone names no owner: one that does is not a record this pydeno writes.
    with pytest.raises(pydeno.JournalError, match="is malformed: bad header"):
        open_record(KEY, "a", msgpack.packb(["pydeno-session", fmt, sid, "eve", 3, None, mac]), 0, 1 << 20)
