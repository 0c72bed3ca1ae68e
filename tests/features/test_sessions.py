"""SessionPool: many sessions, few workers, journals in a real store (real deno workers, a
real SQLite file, a second real process holding its lock). The pool's decisions alone are
tested without workers in tests/unit/test_sessions_core.py."""

from __future__ import annotations

import contextlib
import re
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

import pydeno
from tests.support.processes import deno_workers as workers

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

KEY = b"k" * 32


class Counter:
    """A tool that counts its calls, so a replay can be seen not to call it."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x: int) -> int:
        self.calls += 1
        return x * 10


@pytest.fixture
def store() -> pydeno.MemoryJournalStore:
    return pydeno.MemoryJournalStore()


def test_a_sessions_globals_are_there_on_its_next_lease(store: pydeno.MemoryJournalStore) -> None:
    with pydeno.SessionPool(store, KEY, max_live=2) as sessions:
        with sessions.lease("a") as agent:
            agent.run("globalThis.count = 1")
        with sessions.lease("a") as again:
            assert again is agent
            assert again.run("++count") == 2
        assert sessions.stats()["created"] == 1 and sessions.stats()["restores"] == 0


def test_an_evicted_session_comes_back_with_the_same_globals_without_calling_a_tool_again(
    store: pydeno.MemoryJournalStore,
) -> None:
    tool = Counter()
    with pydeno.SessionPool(store, KEY, max_live=1, tools={"times10": tool}) as sessions:
        with sessions.lease("a") as agent:
            agent.run("globalThis.seen = await tools.times10(4); globalThis.d = new Date(0)")
        with sessions.lease("b") as other:
            other.run("1")
        assert agent.closed  # evicted: its worker is gone
        with sessions.lease("a") as restored:
            assert restored is not agent
            assert restored.run("[seen, d.getTime()]") == [40, 0]
        assert tool.calls == 1
        stats = sessions.stats()
        assert (stats["evictions"], stats["restores"]) == (2, 1)


def test_a_run_paused_at_a_tool_call_is_still_paused_there_after_its_session_was_evicted(
    store: pydeno.MemoryJournalStore,
) -> None:
    tool = Counter()
    with pydeno.SessionPool(store, KEY, max_live=1, tools={"times10": tool}) as sessions:
        with sessions.lease("a") as agent:
            paused = agent.start("const got = await tools.times10(7); `approved: ${got}`")
            assert isinstance(paused, pydeno.PausedToolCall)
        evict(sessions)
        with sessions.lease("a") as restored:
            assert restored.paused is not None and restored.paused.args == [7]
            assert restored.paused.resume(value=70) == "approved: 70"
        assert tool.calls == 0  # the caller answered the call; the tool never ran


def test_no_more_than_max_live_sessions_hold_a_worker(store: pydeno.MemoryJournalStore) -> None:
    with pydeno.SessionPool(store, KEY, max_live=2) as sessions:
        for name in "abcd":
            with sessions.lease(name) as agent:
                agent.run(f"globalThis.me = {name!r}")
            assert len(workers()) <= 2
        assert sessions.stats()["live"] == 2
        for name in "abcd":
            with sessions.lease(name) as agent:
                assert agent.run("me") == name


def wait_for_idle_warm_worker(sessions: pydeno.SessionPool) -> set[int]:
    """The pids of the workers once the warm pool has one ready."""
    done = threading.Event()
    while not (sessions._warm is not None and sessions._warm._core.idle):
        assert not done.wait(0.01) and len(workers()) < 10
    return {p.pid for p in workers()}


PID = "(await import('node:process')).default.pid"


def test_with_warm_workers_a_new_or_evicted_session_starts_on_a_worker_started_before_its_lease(
    store: pydeno.MemoryJournalStore,
) -> None:
    # sandbox="off": no private pid namespace, so the guest reads its worker's real pid. A
    # run that reads it is never replayed here (it would diverge, as it should).
    with pydeno.SessionPool(store, KEY, max_live=1, warm_workers=1, sandbox="off") as sessions:
        with sessions.lease("a") as agent:
            agent.run("globalThis.x = 'a'")
        before = wait_for_idle_warm_worker(sessions)
        with sessions.lease("b") as agent:  # new; evicts a
            assert agent.run(PID) in before
        before = wait_for_idle_warm_worker(sessions)
        with sessions.lease("a") as restored:
            assert restored.run(PID) in before
            assert restored.run("x") == "a"
    assert not workers()


def test_the_least_recently_used_idle_session_is_the_one_evicted(store: pydeno.MemoryJournalStore) -> None:
    with pydeno.SessionPool(store, KEY, max_live=2) as sessions:
        held = {}
        for name in "ab":
            with sessions.lease(name) as agent:
                held[name] = agent
        with sessions.lease("a"):
            pass  # a is now the most recently used
        with sessions.lease("c"):
            pass
        assert held["b"].closed and not held["a"].closed


def test_idle_ttl_closes_an_idle_sessions_worker_and_its_next_lease_restores_it(
    store: pydeno.MemoryJournalStore,
) -> None:
    with pydeno.SessionPool(store, KEY, idle_ttl=0.05) as sessions:
        with sessions.lease("a") as agent:
            agent.run("globalThis.x = 'kept'")
        done = threading.Event()

        def closed() -> None:
            while not agent.closed:
                done.wait(0.01)
            done.set()

        waiter = threading.Thread(target=closed)
        waiter.start()
        assert done.wait(10)
        waiter.join()
        assert sessions.stats()["expirations"] == 1 and sessions.stats()["live"] == 0
        with sessions.lease("a") as restored:
            assert restored.run("x") == "kept"


def test_a_second_lease_of_a_session_waits_for_the_first_to_end(store: pydeno.MemoryJournalStore) -> None:
    with pydeno.SessionPool(store, KEY) as sessions:
        order: list[str] = []
        first_in, second_started = threading.Event(), threading.Event()

        def second() -> None:
            second_started.set()
            with sessions.lease("a") as agent:
                order.append(f"second sees {agent.run('step')}")

        with sessions.lease("a") as agent:
            agent.run("globalThis.step = 1")
            first_in.set()
            thread = threading.Thread(target=second)
            thread.start()
            second_started.wait()
            # The second lease cannot get in while this one holds the session.
            thread.join(0.2)
            assert thread.is_alive()
            agent.run("step = 2")
            order.append("first done")
        thread.join()
        assert order == ["first done", "second sees 2"]


def test_a_second_lease_fails_with_lease_timeout_while_the_first_holds_on(store: pydeno.MemoryJournalStore) -> None:
    with (
        pydeno.SessionPool(store, KEY) as sessions,
        sessions.lease("a"),
        pytest.raises(pydeno.LeaseTimeout) as info,
        sessions.lease("a", timeout=0.1),
    ):
        pass
    assert str(info.value) == "session 'a' is leased elsewhere; waited lease_timeout=0.1s"
    assert pydeno.classify_error(info.value).kind == "lease_timeout"
    assert pydeno.classify_error(info.value).retryable


def test_a_lease_waits_for_a_live_slot_when_every_one_is_leased_then_times_out(
    store: pydeno.MemoryJournalStore,
) -> None:
    with (
        pydeno.SessionPool(store, KEY, max_live=1, lease_timeout=0.1) as sessions,
        sessions.lease("a"),
        pytest.raises(pydeno.LeaseTimeout) as info,
        sessions.lease("b"),
    ):
        pass
    assert str(info.value) == "no live slot for session 'b': all max_live=1 are leased; waited lease_timeout=0.1s"


class RollbackStore(pydeno.MemoryJournalStore):
    """A store that answers a read with a record it held earlier, or another session's."""

    def __init__(self) -> None:
        super().__init__()
        self.history: dict[str, list[bytes]] = {}
        self.answer: tuple[str, int] | None = None

    def write(self, session_id: str, owner: str | None, version: int, record: bytes) -> bool:
        self.history.setdefault(session_id, []).append(record)
        return super().write(session_id, owner, version, record)

    def read(self, session_id: str) -> tuple[int, str | None, bytes] | None:
        stored = super().read(session_id)
        if self.answer is None or stored is None:
            return stored
        other, index = self.answer
        # An older record under the version it was sealed with, as a store rolled back has it.
        return (index + 1 if other == session_id else stored[0], stored[1], self.history[other][index])


def evict(sessions: pydeno.SessionPool, name: str = "evictor") -> None:
    with sessions.lease(name):
        pass


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        pytest.param(
            ("a", 0),
            "the stored journal of session 'a' is version 1, older than version 2 this pool last wrote or read; "
            "a store that hands back an older journal is refused",
            id="an older record of the same session",
        ),
        pytest.param(
            ("b", 0),
            "the stored journal of session 'a' was sealed for session 'b'; a foreign journal is refused",
            id="another session's record",
        ),
    ],
)
def test_a_store_that_hands_back_an_older_or_foreign_journal_is_refused(answer: tuple[str, int], message: str) -> None:
    store = RollbackStore()
    with pydeno.SessionPool(store, KEY, max_live=1) as sessions:
        for step in (1, 2):
            with sessions.lease("a") as agent:
                agent.run(f"globalThis.step = {step}")
        with sessions.lease("b") as agent:
            agent.run("globalThis.step = 'b'")
        store.answer = answer
        with pytest.raises(pydeno.JournalError) as info, sessions.lease("a"):
            pass
        assert str(info.value) == message
        assert pydeno.classify_error(info.value).kind == "journal_invalid"
        store.answer = None
        with sessions.lease("a") as agent:
            assert agent.run("step") == 2


def test_a_store_that_loses_a_journal_is_refused_not_taken_for_a_new_session(store: pydeno.MemoryJournalStore) -> None:
    with pydeno.SessionPool(store, KEY, max_live=1) as sessions:
        with sessions.lease("a") as agent:
            agent.run("globalThis.x = 1")
        evict(sessions)
        store.delete("a")
        missing = r"^the store has no journal of session 'a', whose version 1"
        with pytest.raises(pydeno.JournalError, match=missing), sessions.lease("a"):
            pass


def test_a_record_altered_in_the_store_or_read_with_another_key_is_refused(store: pydeno.MemoryJournalStore) -> None:
    with pydeno.SessionPool(store, KEY, max_live=1) as sessions:
        with sessions.lease("a") as agent:
            agent.run("globalThis.x = 1")
        evict(sessions)
        _version, owner, record = store.read("a") or (0, None, b"")
        store.delete("a")
        store.write("a", owner, 1, record[:-1] + bytes([record[-1] ^ 1]))
        with pytest.raises(pydeno.JournalError, match="is not authentic"), sessions.lease("a"):
            pass
    store.delete("a")
    store.write("a", owner, 1, record)
    with (
        pydeno.SessionPool(store, b"x" * 32) as other,
        pytest.raises(pydeno.JournalError, match="is not authentic"),
        other.lease("a"),
    ):
        pass


def test_an_owner_at_its_live_cap_evicts_its_own_idle_session_or_is_refused_when_all_are_leased(
    store: pydeno.MemoryJournalStore,
) -> None:
    with pydeno.SessionPool(store, KEY, max_live=10, max_live_per_owner=1) as sessions:
        with sessions.lease("a1", owner="alice") as first:
            first.run("1")
            with sessions.lease("b1", owner="bob"):
                pass  # another owner is not held back
            with pytest.raises(pydeno.SessionLimitError) as info, sessions.lease("a2", owner="alice"):
                pass
        with sessions.lease("a2", owner="alice"):
            assert first.closed  # alice's idle session made room for her new one
    assert str(info.value) == ("owner 'alice' has 1 live sessions, all leased or unsaved, the cap max_live_per_owner=1")
    assert pydeno.classify_error(info.value).kind == "session_limit"


def test_an_owner_over_its_stored_bytes_keeps_its_last_stored_journal(store: pydeno.MemoryJournalStore) -> None:
    with pydeno.SessionPool(store, KEY, max_live=1, max_bytes_per_owner=2000) as sessions:
        with sessions.lease("a", owner="alice") as agent:
            agent.run("globalThis.small = 1")
        with pytest.raises(pydeno.SessionLimitError) as info, sessions.lease("a", owner="alice") as agent:
            agent.run("globalThis.big = 'x'.repeat(5000)")
        assert agent.closed
        with sessions.lease("a", owner="alice") as restored:
            assert restored.run("[small, typeof big]") == [1, "undefined"]
    assert str(info.value).startswith("owner 'alice' would store ")
    assert str(info.value).endswith(
        " bytes of journals, over max_bytes_per_owner=2000; the session's last stored journal is kept"
    )


def test_a_journal_that_could_not_be_read_back_is_not_stored_and_the_last_one_is_kept(
    store: pydeno.MemoryJournalStore,
) -> None:
    with pydeno.SessionPool(store, KEY, max_journal_bytes=4000) as sessions:
        with sessions.lease("a") as agent:
            agent.run("globalThis.small = 1")
        with pytest.raises(pydeno.JournalError) as info, sessions.lease("a") as agent:
            agent.run("globalThis.big = 'x'.repeat(5000)")
        with sessions.lease("a") as restored:
            assert restored.run("[small, typeof big]") == [1, "undefined"]
    assert str(info.value).startswith("the journal of session 'a' is ")
    assert str(info.value).endswith(" bytes, over max_journal_bytes=4000; the session's last stored journal is kept")


def test_a_session_leased_by_another_owner_is_refused(store: pydeno.MemoryJournalStore) -> None:
    with pydeno.SessionPool(store, KEY, max_live=1) as sessions:
        with sessions.lease("a", owner="alice"):
            pass
        with (
            pytest.raises(ValueError, match=r"^session 'a' belongs to another owner"),
            sessions.lease("a", owner="eve"),
        ):
            pass
        evict(sessions)
        with pytest.raises(ValueError, match=r"^session 'a' belongs to another owner"), sessions.lease("a"):
            pass


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda s: s.lease(42), TypeError, "session_id must be a str, got int"),
        (lambda s: s.lease(""), ValueError, "session_id must be 1 to 256 characters, got 0"),
        (lambda s: s.lease("a", owner=7), TypeError, "owner must be a str or None, got int"),
        (
            lambda s: s.lease("a", timeout=-1),
            ValueError,
            "timeout must be a positive, finite number of seconds, got -1",
        ),
    ],
    ids=["an id that is not a str", "an empty id", "an owner that is not a str", "a negative timeout"],
)
def test_a_bad_lease_argument_is_a_clear_error_before_anything_starts(call: Any, error: type, message: str) -> None:
    with pydeno.SessionPool(pydeno.MemoryJournalStore(), KEY) as sessions:
        with pytest.raises(error) as info, call(sessions):
            pass
        assert str(info.value) == message
        assert sessions.stats()["live"] == 0 and not workers()


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        (({}, KEY), {}, TypeError, "store must be a journal store"),
        ((pydeno.MemoryJournalStore(), b"short"), {}, ValueError, "key must be at least 16 bytes"),
        ((pydeno.MemoryJournalStore(), KEY), {"max_live": 0}, ValueError, "max_live must be at least 1, got 0"),
        ((pydeno.MemoryJournalStore(), KEY), {"timeot": 1}, TypeError, ""),
        ((pydeno.MemoryJournalStore(), KEY), {"max_host_wait": 1}, TypeError, "an agent session bounds tool waits"),
    ],
    ids=["not a store", "a short key", "no live slot", "a misspelt option", "max_host_wait"],
)
def test_a_bad_pool_argument_is_a_clear_error(args: Any, kwargs: Any, error: type, message: str) -> None:
    with pytest.raises(error, match="^" + message):
        pydeno.SessionPool(*args, **kwargs)


def find_worker() -> psutil.Process:
    (worker,) = workers()
    return worker


def test_a_worker_killed_mid_lease_keeps_the_runs_finished_before_it_and_the_tool_calls_it_spent(
    store: pydeno.MemoryJournalStore,
) -> None:
    tool = Counter()
    with pydeno.SessionPool(store, KEY, tools={"times10": tool}, max_tool_calls=3) as sessions:
        with sessions.lease("a") as agent:
            agent.run("globalThis.kept = await tools.times10(1)")
            worker = find_worker()
            # A run that spends two more calls and then has its worker killed: its state dies
            # with the worker, but the calls stay spent.
            with pytest.raises(pydeno.WorkerCrashed):
                _run_and_kill(agent, worker)
        with sessions.lease("a") as restored:
            assert restored.run("[kept, typeof lost]") == [10, "undefined"]
            assert restored.tool_calls_made == 3
            assert "ToolBudgetError" in restored.run("tools.times10(4).catch(e => e.name)")
        assert tool.calls == 3


def _run_and_kill(agent: pydeno.AgentSandbox, worker: psutil.Process) -> None:
    killer = threading.Timer(0.3, lambda: worker.send_signal(signal.SIGKILL))
    killer.start()
    try:
        agent.run("await tools.times10(2); await tools.times10(3); globalThis.lost = 1; await new Promise(() => {})")
    finally:
        killer.cancel()


# -- SQLite ------------------------------------------------------------------------------------
def test_sessions_survive_a_new_pool_on_the_same_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    with (
        pydeno.SQLiteJournalStore(path) as store,
        pydeno.SessionPool(store, KEY) as sessions,
        sessions.lease("a", owner="alice") as agent,
    ):
        agent.run("globalThis.notes = ['one']")
    with pydeno.SQLiteJournalStore(path) as store, pydeno.SessionPool(store, KEY) as sessions:
        with sessions.lease("a", owner="alice") as agent:
            assert agent.run("notes.push('two'); notes") == ["one", "two"]
        assert store.owner_bytes("alice") > 0
        sessions.delete("a", owner="alice")
        assert store.owner_bytes("alice") == 0


LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("ROLLBACK")
"""


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Another process holds an exclusive lock on the SQLite file for the block."""
    proc = subprocess.Popen([sys.executable, "-c", LOCKER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"locked\n"
        yield
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(10)
        proc.stdout.close()  # type: ignore[union-attr]


def test_a_sqlite_file_locked_by_another_process_is_store_busy_and_the_session_keeps_its_state(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sessions.db"
    with (
        pydeno.SQLiteJournalStore(path, busy_timeout=0.1) as store,
        pydeno.SessionPool(store, KEY, max_live=1) as sessions,
    ):
        with locked(path):
            with pytest.raises(pydeno.StoreBusy) as info, sessions.lease("a") as agent:
                agent.run("globalThis.x = 'not yet stored'")
            # The unsaved session is not evicted: a lease of another session cannot take its slot.
            with pytest.raises(pydeno.LeaseTimeout), sessions.lease("b", timeout=0.1):
                pass
        with sessions.lease("a") as again:
            assert again is agent  # still live, with its state; this lease's end stores it
        evict(sessions)
        with sessions.lease("a") as restored:
            assert restored.run("x") == "not yet stored"
    assert str(info.value) == f"journal store {path} is locked by another process; waited busy_timeout=0.1s"
    assert pydeno.classify_error(info.value).kind == "store_busy"


def test_a_file_that_is_not_a_sqlite_database_is_a_clear_store_error(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    path.write_bytes(b"this is not a database, it is text " * 200)
    with pytest.raises(pydeno.StoreError) as info:
        pydeno.SQLiteJournalStore(path)
    assert str(info.value) == f"journal store {path} failed: DatabaseError: file is not a database"
    assert pydeno.classify_error(info.value).kind == "store_failed"
    assert not pydeno.classify_error(info.value).retryable


def test_a_sqlite_file_whose_pages_are_corrupt_is_a_clear_store_error_when_a_lease_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    with (
        pydeno.SQLiteJournalStore(path) as store,
        pydeno.SessionPool(store, KEY) as sessions,
        sessions.lease("a") as agent,
    ):
        agent.run("globalThis.data = 'x'.repeat(20000)")
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(4096)  # the header page stays: the file still opens as a database
        f.write(b"\xff" * (size - 4096))
    with pydeno.SQLiteJournalStore(path) as store, pydeno.SessionPool(store, KEY) as sessions:
        with pytest.raises(pydeno.StoreError) as info, sessions.lease("a"):
            pass
        assert sessions.stats()["live"] == 0 and not workers()
    assert str(info.value) == f"journal store {path} failed: DatabaseError: database disk image is malformed"


OTHER_PROCESS = """
import sys, pydeno
path, key = sys.argv[1], bytes.fromhex(sys.argv[2])
with pydeno.SQLiteJournalStore(path) as store, pydeno.SessionPool(store, key, max_live=1) as sessions:
    for i in range(4):
        with sessions.lease(f"theirs-{i}") as agent:
            agent.run(f"globalThis.n = {i}")
print("done", flush=True)
"""


def test_two_processes_write_their_sessions_into_one_sqlite_file_at_once(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    with pydeno.SQLiteJournalStore(path) as store:  # the file exists before either writes
        pass
    other = subprocess.Popen(
        [sys.executable, "-c", OTHER_PROCESS, str(path), KEY.hex()], stdout=subprocess.PIPE, text=True
    )
    try:
        with pydeno.SQLiteJournalStore(path) as store, pydeno.SessionPool(store, KEY, max_live=1) as sessions:
            for i in range(4):
                with sessions.lease(f"mine-{i}") as agent:
                    agent.run(f"globalThis.n = {i}")
            assert other.communicate(timeout=60)[0] == "done\n"
            for i in range(4):
                for name in (f"mine-{i}", f"theirs-{i}"):
                    with sessions.lease(name) as agent:
                        assert agent.run("n") == i
    finally:
        other.kill()
        other.wait()


def test_two_pools_on_one_file_cannot_silently_overwrite_each_others_journal(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    with pydeno.SQLiteJournalStore(path) as one, pydeno.SQLiteJournalStore(path) as two:
        with pydeno.SessionPool(one, KEY) as first, pydeno.SessionPool(two, KEY) as second:
            with first.lease("a") as agent:
                agent.run("globalThis.by = 'first'")
            with second.lease("a") as agent:
                assert agent.run("by = 'second'; by") == "second"
            conflict = r"changed in the store since this pool read it"
            with pytest.raises(pydeno.JournalError, match=conflict), first.lease("a") as agent:
                agent.run("by = 'first again'")
        with pydeno.SessionPool(one, KEY) as third, third.lease("a") as agent:
            assert agent.run("by") == "second"


def test_the_pools_stats_count_every_worker_it_started_and_how_they_ended(store: pydeno.MemoryJournalStore) -> None:
    with pydeno.SessionPool(store, KEY, max_live=1, timeout=1) as sessions:
        with sessions.lease("a") as agent:
            agent.run("globalThis.x = 1")
        with pytest.raises(pydeno.RuntimeTimeout), sessions.lease("b") as agent:  # evicts a
            agent.run("while (true) {}")
        with sessions.lease("a") as agent:  # restored
            agent.run("x")
        stats = sessions.stats()
    assert stats["workers_started"] == 3
    assert stats["workers_killed"] == {"timeout": 1}
    assert stats["commands"] >= 4 and stats["cpu_seconds"] > 0 and stats["peak_rss_bytes"] > 0
    assert (stats["leases"], stats["created"], stats["restores"], stats["evictions"]) == (3, 2, 1, 1)
    assert stats["queue_wait_seconds"]["count"] == 3


def test_closing_the_pool_kills_every_worker_and_a_lease_after_it_is_closed(store: pydeno.MemoryJournalStore) -> None:
    sessions = pydeno.SessionPool(store, KEY)
    for name in "ab":
        with sessions.lease(name):
            pass
    assert len(workers()) == 2
    sessions.close()
    assert not workers()
    with pytest.raises(RuntimeError) as info, sessions.lease("a"):
        pass
    assert pydeno.classify_error(info.value).kind == "closed"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_async_pool_leases_evicts_and_restores_under_asyncio_and_trio(backend: str) -> None:
    async def main() -> None:
        async with pydeno.AsyncSessionPool(pydeno.MemoryJournalStore(), KEY, max_live=1) as sessions:
            async with sessions.lease("a") as agent:
                await agent.run("globalThis.x = 'a'")
            async with sessions.lease("b") as agent:
                await agent.run("globalThis.x = 'b'")
            async with sessions.lease("a") as agent:
                assert await agent.run("x") == "a"
            assert sessions.stats()["restores"] == 1

    anyio.run(main, backend=backend)
    assert not workers()


def test_the_async_pool_must_be_entered_before_a_lease() -> None:
    async def main() -> None:
        sessions = pydeno.AsyncSessionPool(pydeno.MemoryJournalStore(), KEY)
        with pytest.raises(RuntimeError, match="async with AsyncSessionPool"):
            async with sessions.lease("a"):
                pass

    anyio.run(main)


# -- a deleted session stays deleted ---------------------------------------------------------------
def row_of(store: Any, session_id: str) -> tuple[Any, ...]:
    """The session's row as the store keeps it: a copy from the real SQLite file (with the
    sqlite3 module, not through the store), or the memory store's own tuple."""
    if isinstance(store, pydeno.SQLiteJournalStore):
        with contextlib.closing(sqlite3.connect(store.path)) as db:
            row = db.execute("SELECT * FROM pydeno_journals WHERE session_id = ?", (session_id,)).fetchone()
        assert row is not None
        return tuple(row)
    return (session_id, *store._records[session_id])


def put_back(store: Any, row: tuple[Any, ...], *, everything: bool = False) -> None:
    """Put a copied row back in the store by hand, over whatever it holds for that session;
    with everything, the store's own newest version of the session too (all the store has
    is then as it was), so that only the pool can tell."""
    session_id, version = row[0], row[-3] if isinstance(store, pydeno.SQLiteJournalStore) else row[1]
    if isinstance(store, pydeno.SQLiteJournalStore):
        with contextlib.closing(sqlite3.connect(store.path, isolation_level=None)) as db:
            marks = ", ".join("?" * len(row))
            db.execute(f"INSERT OR REPLACE INTO pydeno_journals VALUES ({marks})", row)
            if everything:
                db.execute("UPDATE pydeno_journal_versions SET newest = ? WHERE session_id = ?", (version, session_id))
        return
    store._records[session_id] = tuple(row[1:])
    if everything:
        store._newest[session_id] = version


@pytest.fixture(params=["memory", "sqlite"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "memory":
        yield pydeno.MemoryJournalStore()
        return
    with pydeno.SQLiteJournalStore(tmp_path / "sessions.db") as store:
        yield store


@pytest.mark.parametrize("made_again", [True, False], ids=["made again", "not made again yet"])
def test_a_deleted_sessions_old_row_put_back_by_hand_is_refused_and_never_restored(
    any_store: Any, made_again: bool
) -> None:
    with pydeno.SessionPool(any_store, KEY, max_live=1) as sessions:
        for step in range(1, 5):
            with sessions.lease("a", owner="alice") as agent:
                agent.run(f"globalThis.secret = 'deleted state {step}'")
        old = row_of(any_store, "a")
        sessions.delete("a", owner="alice")
        if made_again:
            with sessions.lease("a", owner="alice") as agent:
                assert agent.run("typeof secret") == "undefined"
                agent.run("globalThis.secret = 'new state'")
            evict(sessions)
        put_back(any_store, old, everything=True)
        with pytest.raises(pydeno.JournalError) as info, sessions.lease("a", owner="alice"):
            pass
        assert re.fullmatch(
            r"the stored journal of session 'a' is version 4, older than version \d+ this pool last wrote or read; "
            r"a store that hands back an older journal is refused",
            str(info.value),
        ), str(info.value)
        assert pydeno.classify_error(info.value).kind == "journal_invalid"
        # Nor is a delete written over a row the pool cannot trust.
        with pytest.raises(pydeno.JournalError, match=r"is version 4, older than .* and the session is not deleted\n"):
            sessions.delete("a", owner="alice")


def test_a_deleted_sessions_versions_go_on_from_where_they_were_so_no_old_row_matches_a_new_one(
    any_store: Any,
) -> None:
    with pydeno.SessionPool(any_store, KEY, max_live=1) as sessions:
        for _ in range(3):
            with sessions.lease("a", owner="alice") as agent:
                agent.run("globalThis.n = (globalThis.n ?? 0) + 1")
        sessions.delete("a", owner="alice")
        assert any_store.owner_bytes("alice") == 0
        # The deleted id may be taken by anyone, and starts with nothing.
        with sessions.lease("a", owner="bob") as agent:
            assert agent.run("typeof n") == "undefined"
            agent.run("globalThis.n = 'bob'")
        evict(sessions)
        version, owner, _ = any_store.read("a")
        assert (version, owner) == (5, "bob")
        with sessions.lease("a", owner="bob") as agent:
            assert agent.run("n") == "bob"
    # A new pool on the same store continues from the store's version too.
    with pydeno.SessionPool(any_store, KEY) as fresh:
        before = any_store.read("a")[0]
        fresh.delete("a", owner="bob")
        assert any_store.read("a")[:2] == (before + 1, None)
        with fresh.lease("a", owner="carol") as agent:
            assert agent.run("typeof n") == "undefined"
            agent.run("globalThis.n = 'carol'")
        assert any_store.read("a")[:2] == (before + 2, "carol")


def test_deleting_a_session_keeps_none_of_its_journal_in_the_store(any_store: Any) -> None:
    with pydeno.SessionPool(any_store, KEY) as sessions:
        with sessions.lease("a", owner="alice") as agent:
            agent.run("globalThis.note = 'a private note 0123456789'")
        assert b"a private note 0123456789" in any_store.read("a")[2]
        sessions.delete("a", owner="alice")
        sessions.delete("a", owner="alice")  # deleting a deleted session does nothing
        _, owner, record = any_store.read("a")
        assert owner is None and b"private note" not in record
        assert any_store.owner_bytes("alice") == 0


@pytest.mark.parametrize("deleted", [True, False], ids=["deleted in between", "not deleted"])
def test_an_old_row_put_back_by_hand_is_refused_even_by_a_pool_that_never_saw_the_session(
    any_store: Any, deleted: bool
) -> None:
    with pydeno.SessionPool(any_store, KEY) as sessions:
        for step in range(1, 5):
            with sessions.lease("a") as agent:
                agent.run(f"globalThis.step = {step}")
        old = row_of(any_store, "a")
        if deleted:
            sessions.delete("a")
        with sessions.lease("a") as agent:
            agent.run("globalThis.step = 'later'")
    put_back(any_store, old)
    with pydeno.SessionPool(any_store, KEY) as fresh:
        with pytest.raises(pydeno.JournalError) as info, fresh.lease("a"):
            pass
        with pytest.raises(pydeno.JournalError, match="the store has held for it"):
            fresh.delete("a")
    assert re.fullmatch(
        r"the stored journal of session 'a' is version 4, older than version \d+ the store has held for it; "
        r"a row put back in the store is refused",
        str(info.value),
    ), str(info.value)
    assert pydeno.classify_error(info.value).kind == "journal_invalid"


def test_an_old_record_put_back_under_a_newer_version_number_is_refused(any_store: Any) -> None:
    with pydeno.SessionPool(any_store, KEY) as sessions:
        with sessions.lease("a") as agent:
            agent.run("globalThis.step = 1")
        old = row_of(any_store, "a")
        with sessions.lease("a") as agent:
            agent.run("globalThis.step = 2")
        current = row_of(any_store, "a")
    # The row claims the newest version; the record inside was sealed as the first.
    forged = list(current)
    forged[-1] = old[-1]
    if isinstance(any_store, pydeno.SQLiteJournalStore):
        forged[3] = len(old[-1])
    put_back(any_store, tuple(forged))
    with pydeno.SessionPool(any_store, KEY) as fresh, pytest.raises(pydeno.JournalError) as info, fresh.lease("a"):
        pass
    assert str(info.value) == (
        "the stored journal of session 'a' was sealed as version 1 but is stored as version 2; "
        "a record moved to another version is refused"
    )


# The schema of a file written before the store kept each session's newest version.
EARLIER_SCHEMA = """
CREATE TABLE pydeno_journals (
    session_id TEXT PRIMARY KEY NOT NULL, owner TEXT, version INTEGER NOT NULL,
    size INTEGER NOT NULL, record BLOB NOT NULL
);
CREATE INDEX pydeno_journals_owner ON pydeno_journals (owner);
"""


def test_a_sqlite_file_from_an_earlier_pydeno_opens_keeps_its_sessions_and_refuses_older_rows(tmp_path: Path) -> None:
    memory = pydeno.MemoryJournalStore()
    rows = []
    with pydeno.SessionPool(memory, KEY) as sessions:
        for step in (1, 2):
            with sessions.lease("a", owner="alice") as agent:
                agent.run(f"globalThis.step = {step}")
            version, owner, record = memory.read("a") or (0, None, b"")
            rows.append(("a", owner, version, len(record), record))
    path = tmp_path / "earlier.db"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.executescript(EARLIER_SCHEMA)
        db.execute("INSERT INTO pydeno_journals VALUES (?, ?, ?, ?, ?)", rows[1])
    with pydeno.SQLiteJournalStore(path):
        pass  # opened once: the file now keeps each session's newest version, seeded from its rows
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("INSERT OR REPLACE INTO pydeno_journals VALUES (?, ?, ?, ?, ?)", rows[0])
    with pydeno.SQLiteJournalStore(path) as store, pydeno.SessionPool(store, KEY) as sessions:
        with (
            pytest.raises(pydeno.JournalError, match="is version 1, older than version 2 the store has held for it"),
            sessions.lease("a", owner="alice"),
        ):
            pass
        store.write("a", "alice", 2, rows[1][-1])  # what the file held, put back through the store
        with sessions.lease("a", owner="alice") as agent:
            assert agent.run("step") == 2


def test_a_pool_that_still_holds_a_session_another_deleted_cannot_write_it_back(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    with (
        pydeno.SQLiteJournalStore(path) as one,
        pydeno.SQLiteJournalStore(path) as two,
        pydeno.SessionPool(one, KEY) as holder,
        pydeno.SessionPool(two, KEY) as deleter,
    ):
        with holder.lease("a", owner="alice") as agent:
            agent.run("globalThis.secret = 'deleted state'")
        deleter.delete("a", owner="alice")
        conflict = r"^the journal of session 'a' changed in the store since this pool read it"
        with pytest.raises(pydeno.JournalError, match=conflict), holder.lease("a", owner="alice") as agent:
            agent.run("secret += ' again'")
        # The holder dropped its worker; the store kept the tombstone, so both pools now
        # see a new, empty session.
        for sessions in (holder, deleter):
            with sessions.lease("a", owner="alice") as agent:
                assert agent.run("typeof secret") == "undefined"


def test_a_row_removed_by_hand_is_refused_as_lost_even_by_a_pool_that_never_saw_the_session(any_store: Any) -> None:
    with pydeno.SessionPool(any_store, KEY) as sessions:
        for step in (1, 2):
            with sessions.lease("a") as agent:
                agent.run(f"globalThis.step = {step}")
    if isinstance(any_store, pydeno.SQLiteJournalStore):
        with contextlib.closing(sqlite3.connect(any_store.path, isolation_level=None)) as db:
            db.execute("DELETE FROM pydeno_journals WHERE session_id = 'a'")
    else:
        del any_store._records["a"]
    with pydeno.SessionPool(any_store, KEY) as fresh:
        with pytest.raises(pydeno.JournalError) as info, fresh.lease("a"):
            pass
        assert fresh.stats()["created"] == 0
    assert str(info.value) == (
        "the store has no journal of session 'a', whose version 2 it has held; a row removed behind the "
        "store's back is refused (the store's own delete(session_id) forgets a session for good)"
    )
    # The store's own delete is the way to forget it: the id then starts afresh.
    any_store.delete("a")
    with pydeno.SessionPool(any_store, KEY) as fresh, fresh.lease("a") as agent:
        assert agent.run("typeof step") == "undefined"
