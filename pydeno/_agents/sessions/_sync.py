"""Generated from pydeno/_agents/sessions/_async.py by scripts/unasync.py: edit that file, not this one.

The session pools: many long-lived agent or Code Mode sessions, few workers.

``async with sessions.lease(session_id) as agent:`` (``with`` for the sync ``SessionPool``)
hands out the session's :class:`~pydeno.AsyncAgentSandbox` with its state, exclusively:
another lease of the same session waits for this one to end. A pool made with
``code_mode=True`` hands out an :class:`~pydeno.AsyncCodeMode` bound to the session instead,
journaled by the same core (pydeno/_code_mode/_async.py); everything below holds for both. At most ``max_live`` sessions
hold a worker; a lease that needs one more evicts the least recently used idle session,
which comes back on its next lease by replaying its journal on a fresh worker. Each lease's
end writes the session's journal to the store when it changed, sealed under the pool's key
for that session and version (pydeno/_agents/sessions/core.py), so a store that hands back an
older or a foreign journal is refused. The rules are :class:`~pydeno._agents.sessions.core.LeaseBook`'s;
this file is the source of both pools (pydeno/_agents/sessions/_sync.py is generated from it).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, Literal, TypeVar, cast, overload

from ..._base.checks import NeedsWith, count, limit_text, size
from ..._base.errors import JournalError, StoreError
from ..._base.options import RuntimeOptions, check_option_names
from ..._base.stats import Stats
from ..._code_mode._sync import CodeMode
from ..._code_mode.api import CodeModeTools
from ..._code_mode.core import route_console
from ..._code_mode.result import DEFAULT_MAX_OUTPUT_CHARS, check_output_chars
from ..._pools._sync import SandboxPool
from ..._pools.core import WARM_UP_AWAIT
from ..._runtime._sync import Runtime
from ..._runtime.backends import sync as backend
from ..._tools.approval import ApprovePolicy
from .._sync import AgentSandbox
from ..core import runtime_options, session_clock
from ..journal import DEFAULT_MAX_JOURNAL_BYTES, Journal, check_key, decode_journal
from .core import Entry, LeaseBook, check_owner, check_session_id, open_record, other_owner, seal, shown
from .store import JournalStore

__all__ = ["SessionPool"]


class _WarmWorkers(SandboxPool):
    """The warm workers of a session pool. A session's tools and most agent code use await,
    which a worker evaluates on a path whose first use costs more than the rest of a
    restore: that first use is made before a session takes the worker."""

    _warm_code = WARM_UP_AWAIT

    def _check_set_up(self, rt: Runtime) -> None:
        # A session's host calls are its tools, journaled so that a restore replays them: a
        # function bound by setup would never be called.
        names = rt._steps.function_names()
        if names:
            raise TypeError(
                f"the setup of a SessionPool bound host functions ({', '.join(sorted(names))}), which a session "
                "cannot call: its host calls are its tools; pass them as tools= instead"
            )


# How long the idle reaper sleeps when no session will expire: it is woken sooner by any
# lease's end.
_NO_EXPIRY = 3600.0

# What a lease hands out: an agent sandbox, or (code_mode=True) a Code Mode.
Session = TypeVar("Session", AgentSandbox, CodeMode)


class SessionPool(NeedsWith, Generic[Session]):
    """``SessionPool(store, key, *, code_mode=False, max_live=64, idle_ttl=None,
    lease_timeout=30.0, max_live_per_owner=None, max_bytes_per_owner=None, **session_kwargs)``.

    ``store`` keeps the journals (:class:`~pydeno.MemoryJournalStore`,
    :class:`~pydeno.SQLiteJournalStore`); ``key`` (bytes, at least 16) signs them.
    ``max_live`` caps the sessions that hold a worker; ``idle_ttl`` (seconds) closes a
    session's worker once it has been idle that long (its journal stays in the store);
    ``lease_timeout`` bounds how long a lease waits for the session or for a live slot.
    ``max_live_per_owner`` and ``max_bytes_per_owner`` cap what one owner holds.
    ``warm_workers`` workers are kept started ahead (beside the live ones), so that a lease
    of a new or evicted session replays its journal without waiting for a worker to start.
    ``setup(rt)`` prepares each session's new worker, as a pool's ``setup=`` does, before the
    session is made or replayed on it: the workers then come from the warm ones (started
    when a lease asks if ``warm_workers`` is 0).
    ``session_kwargs`` are :class:`~pydeno.AgentSandbox`'s: ``tools`` (a mapping),
    ``max_tool_calls``, ``max_pause`` and the runtime's options. With ``code_mode=True`` a
    lease hands out an :class:`~pydeno.CodeMode` bound to the session, and they are
    Code Mode's: ``tools`` (a list of :class:`~pydeno.Tool` or functions), ``max_tool_calls``
    (the session's budget, across its programs), ``max_output_chars``, ``approve`` and the
    runtime's options; its programs' declarations stay from one to the next (docs/sessions.md,
    "Code Mode sessions"). Use it as
    ``with SessionPool(...) as sessions:`` (that starts the idle reaper), or call
    :meth:`close`: closing kills every worker the pool holds; the journals stay in the store.
    """

    @overload
    def __init__(
        self: SessionPool[AgentSandbox],
        store: JournalStore,
        key: bytes,
        *,
        code_mode: Literal[False] = False,
        max_live: int = 64,
        idle_ttl: float | None = None,
        lease_timeout: float = 30.0,
        max_live_per_owner: int | None = None,
        max_bytes_per_owner: int | str | None = None,
        max_journal_bytes: int | str = DEFAULT_MAX_JOURNAL_BYTES,
        warm_workers: int = 0,
        setup: Callable[[Runtime], Any] | None = None,
        tools: Mapping[str, Callable[..., Any]] | None = None,
        max_tool_calls: int | None = None,
        max_pause: float | None = None,
        **runtime_kwargs: Any,
    ) -> None: ...
    @overload
    def __init__(
        self: SessionPool[CodeMode],
        store: JournalStore,
        key: bytes,
        *,
        code_mode: Literal[True],
        max_live: int = 64,
        idle_ttl: float | None = None,
        lease_timeout: float = 30.0,
        max_live_per_owner: int | None = None,
        max_bytes_per_owner: int | str | None = None,
        max_journal_bytes: int | str = DEFAULT_MAX_JOURNAL_BYTES,
        warm_workers: int = 0,
        setup: Callable[[Runtime], Any] | None = None,
        tools: Any = None,
        max_tool_calls: int | None = None,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        approve: ApprovePolicy = None,
        **runtime_kwargs: Any,
    ) -> None: ...
    def __init__(
        self,
        store: JournalStore,
        key: bytes,
        *,
        code_mode: bool = False,
        max_live: int = 64,
        idle_ttl: float | None = None,
        lease_timeout: float = 30.0,
        max_live_per_owner: int | None = None,
        max_bytes_per_owner: int | str | None = None,
        max_journal_bytes: int | str = DEFAULT_MAX_JOURNAL_BYTES,
        warm_workers: int = 0,
        setup: Callable[[Runtime], Any] | None = None,
        tools: Any = None,
        max_tool_calls: int | None = None,
        max_pause: float | None = None,
        max_output_chars: int | None = None,
        approve: ApprovePolicy = None,
        **runtime_kwargs: Any,
    ) -> None:
        if not isinstance(code_mode, bool):
            raise TypeError(f"code_mode must be a bool, got {type(code_mode).__name__}")
        if not isinstance(store, JournalStore):
            raise TypeError(
                f"store must be a journal store (pydeno.MemoryJournalStore(), pydeno.SQLiteJournalStore(path)), "
                f"got {type(store).__name__}"
            )
        self._store = store
        self._key = check_key(key)
        self._book = LeaseBook.create(max_live, max_live_per_owner, max_bytes_per_owner, idle_ttl, lease_timeout)
        self._max_journal_bytes = size("max_journal_bytes", max_journal_bytes, 1)
        # A bad option fails here, not in the first lease.
        self._code_mode = code_mode
        if code_mode:
            options = self._code_mode_options(
                tools, max_tool_calls, max_pause, max_output_chars, approve, runtime_kwargs
            )
        else:
            if max_output_chars is not None or approve is not None:
                raise TypeError(
                    "max_output_chars= and approve= are a Code Mode session's: pass code_mode=True for a pool of "
                    "Code Mode sessions"
                )
            check_option_names(type(self), runtime_kwargs, without=("max_host_wait",))
            options, _, _ = runtime_options(runtime_kwargs, max_pause)
        RuntimeOptions(**options)
        warm = count("warm_workers", warm_workers, 0)
        # The warm workers are a pool's, started as a session's runtime would be. A setup
        # runs where the pool runs it, so each session's worker comes from there.
        self._warm = _WarmWorkers(warm, setup=setup, **options) if warm or setup is not None else None
        self._tools = tools
        self._max_tool_calls = max_tool_calls
        self._max_pause = max_pause
        self._max_output_chars = DEFAULT_MAX_OUTPUT_CHARS if max_output_chars is None else max_output_chars
        self._approve = approve
        self._runtime_kwargs = runtime_kwargs
        self._cond = backend.Condition()
        # The figures of the workers closed so far, and the leases' waits: under a plain
        # lock, never held across an await, as stats() may come from any thread.
        self._figures_lock = threading.Lock()
        self._retired = Stats()
        self._waited = {"count": 0, "total": 0.0, "max": 0.0}
        self._background = backend.Background(self._reap, "pydeno-sessions")
        self._background.start()

    def _code_mode_options(
        self,
        tools: Any,
        max_tool_calls: Any,
        max_pause: Any,
        max_output_chars: Any,
        approve: Any,
        runtime_kwargs: dict[str, Any],
    ) -> dict[str, Any]:
        """Check a Code Mode session's arguments now; the options of its workers' runtimes."""
        if max_pause is not None:
            raise TypeError(
                "max_pause= is an agent session's: a Code Mode session bounds its tools' waits with max_host_wait=, "
                "as CodeMode does"
            )
        check_option_names(type(self), runtime_kwargs)
        if max_output_chars is not None:
            check_output_chars(max_output_chars)
        CodeModeTools([] if tools is None else tools, max_tool_calls=max_tool_calls, approve=approve)
        options = dict(runtime_kwargs)
        session_clock(options)
        # A Code Mode hands its programs' console output to the caller's handler itself; a
        # warm worker's handler hands it to the Code Mode whose program runs on it.
        options["on_console"] = route_console
        return options

    def __enter__(self) -> SessionPool[Session]:
        self._background.start()
        if self._warm is not None:
            self._warm.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        try:
            self.close()
        finally:
            if self._warm is not None:
                self._warm.__exit__(None, None, None)
            self._background.leave()

    # -- leases --------------------------------------------------------------------------
    @contextlib.contextmanager
    def lease(self, session_id: str, owner: str | None = None, *, timeout: float | None = None) -> Iterator[Session]:
        """The session's sandbox (with code_mode=True, its Code Mode) for this block, made on
        first use and restored from its journal if it has no worker; its journal is written
        when the block ends."""
        session_id, owner = check_session_id(session_id), check_owner(owner)
        limit = self._book.lease_limit(timeout)
        self._background.check_started("use the session pool as `with SessionPool(...) as sessions:`")
        entry = self._acquire(session_id, owner, limit)
        try:
            yield cast(Session, entry.sandbox)
        finally:
            with backend.shielded():
                self._end(entry)

    def _acquire(self, session_id: str, owner: str | None, limit: float) -> Entry:
        book = self._book
        started = time.monotonic()
        deadline = started + limit
        with self._cond:
            while True:
                book.check_open()
                how, entry, evicted = book.claim(session_id, owner)
                if how != "wait":
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise book.timed_out(session_id, entry, limit)
                backend.wait(self._cond, left)
            self._count_wait(time.monotonic() - started)
        assert entry is not None
        for gone in evicted:
            self._discard(gone)
        if how == "live" and not entry.sandbox.closed:
            return entry
        try:
            if how == "live":
                # Its worker died while it was idle: its journal was written when its last
                # lease ended, so it comes back like an evicted session.
                self._discard(entry)
            sandbox, version, journal, size = self._restore(entry)
        except BaseException:
            with backend.shielded():
                self._discard(entry)
                with self._cond:
                    book.abandon(entry)
                    self._cond.notify_all()
            raise
        with self._cond:
            book.restored(entry, sandbox, version, new=journal is None)
            entry.journal, entry.stored_bytes = journal, size
        return entry

    def _restore(self, entry: Entry) -> tuple[Any, int, bytes | None, int]:
        """A sandbox with the session's state: its stored journal replayed, or new (no
        record, or the tombstone of a delete, whose version the new session goes on from)."""
        session_id = entry.session_id
        stored = backend.blocking(lambda: self._store.read(session_id))
        known = self._book.known.get(session_id, 0)
        version = 0
        if stored is None:
            if known:
                raise JournalError(
                    f"the store has no journal of session {shown(session_id)}, whose version {known} this pool "
                    "wrote or read; a store that loses a journal is refused"
                )
        else:
            owner, version, journal = open_record(
                self._key, session_id, stored[2], known, self._max_journal_bytes, stored[0]
            )
            if journal is not None:
                if owner != entry.owner:
                    raise other_owner(session_id)
                parsed = decode_journal(journal, self._key, self._max_journal_bytes)
                sandbox = self._session_on(self._warm_runtime(entry), parsed)
                return sandbox, version, journal, len(stored[2])
        return self._session_on(self._warm_runtime(entry), None), version, None, 0

    def _session_on(self, rt: Runtime | None, journal: Journal | None) -> Any:
        """The session's sandbox or Code Mode, on rt (a warm worker, or None: one of its own),
        new or restored from journal."""
        kwargs = dict(self._runtime_kwargs)
        if self._code_mode:
            return CodeMode._in_session(
                self._tools if self._tools is not None else [],
                max_tool_calls=self._max_tool_calls,
                max_output_chars=self._max_output_chars,
                approve=self._approve,
                runtime_kwargs=kwargs,
                journal=journal,
                runtime=rt,
            )
        if journal is not None:
            return AgentSandbox._replayed(journal, self._tools, self._max_pause, kwargs, runtime=rt)
        if rt is None:
            return AgentSandbox(
                self._tools, max_tool_calls=self._max_tool_calls, max_pause=self._max_pause, **self._runtime_kwargs
            )
        return AgentSandbox._on(rt, self._tools, self._max_tool_calls, self._max_pause, kwargs)

    def _stored(self, session_id: str) -> bool:
        """Whether the pool holds the session live, or the store a journal of it that this
        pool would restore (a tombstone is none); JournalError for a record it would refuse."""
        if session_id in self._book.live:
            return True
        stored = backend.blocking(lambda: self._store.read(session_id))
        if stored is None:
            return False
        known = self._book.known.get(session_id, 0)
        _, _, journal = open_record(self._key, session_id, stored[2], known, self._max_journal_bytes, stored[0])
        return journal is not None

    def _warm_runtime(self, entry: Entry) -> Any:
        """A worker from the warm ones (None if the pool keeps none), the session's to own;
        the checkout is ended when the session's worker is closed (_discard)."""
        if self._warm is None:
            return None
        checkout = self._warm.checkout()
        rt = checkout.__enter__()
        entry.checkout = checkout
        return rt

    def _discard(self, entry: Entry) -> None:
        """Close a session's worker (and end the warm pool's checkout it came from, whose
        figures the warm pool keeps; the others' are kept here)."""
        sandbox, entry.sandbox = entry.sandbox, None
        if sandbox is not None:
            sandbox.close()
            if entry.checkout is None:
                with self._figures_lock:
                    self._retired.merge(sandbox._rt._steps.stats())
        checkout, entry.checkout = entry.checkout, None
        if checkout is not None:
            checkout.__exit__(None, None, None)

    def _end(self, entry: Entry) -> None:
        """Write the session's journal if it changed, then make it idle (or drop it: its
        worker died, or what it did cannot be stored)."""
        sandbox, keep = entry.sandbox, True
        try:
            journal = sandbox._journal(self._key)
            if journal != entry.journal:
                keep = self._write(entry, journal)
        except StoreError:
            # Nothing is lost: the live sandbox keeps the state, and the next lease's end
            # writes it again; an unsaved session is never evicted or expired.
            entry.dirty = True
            raise
        except BaseException:
            keep = False
            raise
        finally:
            keep = keep and not sandbox.closed
            with self._cond:
                self._book.release(entry, time.monotonic(), keep=keep)
                self._cond.notify_all()
            if not keep:
                self._discard(entry)

    def _write(self, entry: Entry, journal: bytes) -> bool:
        session_id, owner, version = entry.session_id, entry.owner, entry.version + 1
        record = seal(self._key, session_id, owner, version, journal)
        if len(record) > self._max_journal_bytes:
            # Stored, it could never be read back: the last stored journal stays the session's.
            raise JournalError(
                f"the journal of session {shown(session_id)} is {len(record)} bytes, over "
                f"max_journal_bytes={self._max_journal_bytes}; the session's last stored journal is kept",
                hint=(
                    "make the session's runs return and keep less, or raise max_journal_bytes= "
                    f"(now {limit_text(self._max_journal_bytes)}) of the SessionPool"
                ),
            )
        if owner is not None and self._book.max_bytes_per_owner is not None:
            stored = backend.blocking(lambda: self._store.owner_bytes(owner))
            self._book.check_bytes(owner, stored, entry.stored_bytes, len(record))
        if not backend.blocking(lambda: self._store.write(session_id, owner, version, record)):
            raise JournalError(
                f"the journal of session {shown(session_id)} changed in the store since this pool read it "
                f"(another pool wrote it); this lease's runs are not stored"
            )
        with self._cond:
            self._book.written(entry, version)
            entry.journal, entry.stored_bytes = journal, len(record)
        return True

    # -- the rest of the API ---------------------------------------------------------------
    def delete(self, session_id: str, owner: str | None = None, *, timeout: float | None = None) -> None:
        """Forget the session: close its worker and replace its journal in the store with a
        tombstone (docs/sessions.md), so that no older journal of it is restored again. It
        waits for a lease of it to end, like a lease."""
        session_id, owner = check_session_id(session_id), check_owner(owner)
        limit = self._book.lease_limit(timeout)
        book = self._book
        started = time.monotonic()
        with self._cond:
            while True:
                book.check_open()
                entry = book.live.get(session_id)
                if entry is None or not entry.leased:
                    break
                left = started + limit - time.monotonic()
                if left <= 0:
                    raise book.timed_out(session_id, entry, limit)
                backend.wait(self._cond, left)
            if entry is not None:
                if entry.owner != owner:
                    raise other_owner(session_id)
                del book.live[session_id]
        try:
            if entry is not None:
                self._discard(entry)
            self._bury(session_id, owner)
        finally:
            # The slot it held is free even if the store refused the tombstone.
            with self._cond:
                self._cond.notify_all()

    def _bury(self, session_id: str, owner: str | None) -> None:
        """Write the session's tombstone over its record as the next version (nothing if it
        has no record or is deleted already): its journal is gone, and its versions go on
        from there, so no record from before the delete is ever taken for a later one."""
        stored = backend.blocking(lambda: self._store.read(session_id))
        known = self._book.known.get(session_id, 0)
        if stored is None:
            if known:
                raise JournalError(
                    f"the store has no journal of session {shown(session_id)}, whose version {known} this pool "
                    "wrote or read; a store that loses a journal is refused, and the session is not deleted"
                )
            return
        version, stored_owner, record = stored
        try:
            sealed_owner, _, journal = open_record(self._key, session_id, record, 0, self._max_journal_bytes)
        except JournalError:
            # A record that does not open (altered, foreign, too big) is deleted all the same.
            pass
        else:
            if journal is None:
                return
            stored_owner = sealed_owner
        if stored_owner != owner:
            raise other_owner(session_id)
        if version < known:
            raise JournalError(
                f"the stored journal of session {shown(session_id)} is version {version}, older than version "
                f"{known} this pool last wrote or read; a store that hands back an older journal is refused, "
                "and the session is not deleted"
            )
        tombstone = seal(self._key, session_id, None, version + 1, None)
        if not backend.blocking(lambda: self._store.write(session_id, None, version + 1, tombstone)):
            raise JournalError(
                f"the journal of session {shown(session_id)} changed in the store since this pool read it "
                "(another pool wrote it); the session is not deleted"
            )
        with self._cond:
            self._book.known[session_id] = max(known, version + 1)

    def stats(self) -> dict[str, Any]:
        """The pool's figures (docs/observability.md): those of every worker it started, as
        ``Runtime.stats()`` has them, with ``queue_wait_seconds`` the time leases waited;
        and live, leased and idle sessions, leases, created, restores (journals replayed),
        evictions and expirations."""
        with self._figures_lock:
            total = self._retired.copy()
        # One C-level copy of the values: safe against a lease changing the book meanwhile.
        for entry in list(self._book.live.values()):
            sandbox = entry.sandbox
            if sandbox is not None and entry.checkout is None:
                total.merge(sandbox._rt._steps.stats())
        if self._warm is not None:
            total.merge(self._warm.stats())
        figures = total.as_dict()
        with self._figures_lock:
            figures["queue_wait_seconds"] = dict(self._waited)
        return {**figures, **self._book.counts()}

    def _count_wait(self, seconds: float) -> None:
        with self._figures_lock:
            waited = self._waited
            waited["count"] += 1
            waited["total"] += seconds
            waited["max"] = max(waited["max"], seconds)

    def _reap(self) -> None:
        """Close the workers of sessions idle past idle_ttl, as they expire."""
        book = self._book
        while True:
            with self._cond:
                while True:
                    if book.closed:
                        return
                    gone = book.expired(time.monotonic())
                    if gone:
                        break
                    wait = book.next_expiry(time.monotonic())
                    backend.wait(self._cond, _NO_EXPIRY if wait is None else max(wait, 0.001))
            for entry in gone:
                self._discard(entry)

    def close(self) -> None:
        """Kill every worker the pool holds (a leased session's too); the journals written
        so far stay in the store. Idempotent."""
        failure: StoreError | None = None
        with backend.shielded():
            with self._cond:
                entries = self._book.drain()
                self._cond.notify_all()
            for entry in entries:
                if entry.sandbox is None:
                    continue
                if entry.dirty and not entry.leased:
                    # A journal the store refused before: one more try, or it is lost now.
                    try:
                        self._write(entry, entry.sandbox._journal(self._key))
                    except StoreError as exc:
                        failure = failure or exc
                self._discard(entry)
            if self._warm is not None:
                self._warm.close()
        self._background.join()
        if failure is not None:
            raise failure

    @property
    def closed(self) -> bool:
        return self._book.closed
