"""SessionPool(code_mode=True): Code Mode sessions kept as journals, restored by replay on
fresh workers (real deno workers, a real SQLite file). The agent sessions' own guarantees are
tested in tests/features/test_sessions.py; here, that a Code Mode session has each of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import pydeno
from tests.support.processes import deno_workers as workers

pytestmark = pytest.mark.slow

KEY = b"k" * 32


class Prices:
    """A tool that counts its calls, so a replay can be seen not to call it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def tool(self) -> pydeno.Tool:
        def price(item: str) -> float:
            """The price of an item."""
            self.calls.append(item)
            return 2.5

        return pydeno.Tool("price", price)


def pool(store: Any, prices: Prices | None = None, **kwargs: Any) -> pydeno.SessionPool[pydeno.CodeMode]:
    tools = [] if prices is None else [prices.tool()]
    return pydeno.SessionPool(store, KEY, code_mode=True, tools=tools, **kwargs)


def evict(sessions: pydeno.SessionPool[pydeno.CodeMode], name: str = "evictor") -> None:
    with sessions.lease(name):
        pass


DECLARE = """
const tea = await tools.price({ item: "tea" });
let count: number = 2;
function total(n: number) { return tea * n }
class Basket { items = ["tea"] }
globalThis.note = "kept";
total(count)
"""


def test_a_lease_gives_a_code_mode_whose_execute_returns_an_execution_result() -> None:
    prices = Prices()
    with pool(pydeno.MemoryJournalStore(), prices) as sessions, sessions.lease("a") as cm:
        assert isinstance(cm, pydeno.CodeMode)
        result = cm.execute("console.log('done');\n" + DECLARE)
    assert isinstance(result, pydeno.ExecutionResult)
    assert (result.ok, result.value, result.stdout) == (True, 5.0, "done")
    assert [(c["name"], c["arguments"], c["outcome"]) for c in result.tool_calls] == [("price", {"item": "tea"}, "ok")]


def test_declarations_and_globals_survive_eviction_and_no_tool_is_called_again() -> None:
    prices = Prices()
    with pool(pydeno.MemoryJournalStore(), prices, max_live=1) as sessions:
        with sessions.lease("a") as cm:
            assert cm.execute(DECLARE).value == 5.0
        evict(sessions)
        assert cm.closed  # evicted: its worker is gone
        with sessions.lease("a") as restored:
            assert restored is not cm
            result = restored.execute("[tea, count, total(3), new Basket().items, note]")
        assert result.value == [2.5, 2, 7.5, ["tea"], "kept"]
        assert result.tool_calls == ()
        assert prices.calls == ["tea"]
        assert sessions.stats()["restores"] == 1


def test_the_tool_budget_is_the_sessions_across_leases_and_evictions() -> None:
    prices = Prices()
    with pool(pydeno.MemoryJournalStore(), prices, max_live=1, max_tool_calls=2) as sessions:
        with sessions.lease("a") as cm:
            assert cm.execute("await tools.price({ item: 'a' })").ok
        evict(sessions)
        with sessions.lease("a") as cm:
            assert cm.execute("await tools.price({ item: 'b' })").ok
            spent = cm.execute("await tools.price({ item: 'c' })")
        evict(sessions)
        with sessions.lease("a") as cm:
            again = cm.execute("await tools.price({ item: 'd' })")
    assert prices.calls == ["a", "b"]
    for result in (spent, again):
        assert result.error is not None and result.error["kind"] == "tool_budget"
        assert result.error["message"] == "the tool-call budget of 2 calls is spent"


def test_a_new_pool_on_the_same_sqlite_file_resumes_a_code_mode_session(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    prices = Prices()
    with pydeno.SQLiteJournalStore(path) as store, pool(store, prices) as sessions, sessions.lease("a") as cm:
        assert cm.execute(DECLARE).ok
    assert not workers()
    with pydeno.SQLiteJournalStore(path) as store, pool(store, prices, max_tool_calls=5) as sessions:
        with sessions.lease("a") as cm:
            result = cm.execute("count += 1; [total(count), note, await tools.price({ item: 'milk' })]")
        assert result.value == [7.5, "kept", 2.5]
        assert sessions.stats()["restores"] == 1
    assert prices.calls == ["tea", "milk"]


def test_a_program_that_threw_keeps_what_it_declared_before_the_throw_and_is_replayed() -> None:
    with pool(pydeno.MemoryJournalStore(), max_live=1) as sessions:
        with sessions.lease("a") as cm:
            failed = cm.execute("globalThis.before = 1; throw new Error('late')")
        evict(sessions)
        with sessions.lease("a") as cm:
            assert cm.execute("before").value == 1
    assert failed.error is not None and failed.error["message"] == "late"


def test_a_worker_killed_by_a_limit_loses_that_program_only_and_its_calls_stay_spent() -> None:
    prices = Prices()
    with pool(pydeno.MemoryJournalStore(), prices, max_tool_calls=3) as sessions:
        with sessions.lease("a") as cm:
            assert cm.execute("globalThis.kept = await tools.price({ item: 'a' })").ok
            timed_out = cm.execute(
                "await tools.price({ item: 'b' }); globalThis.lost = 1; while (true) {}", timeout=0.5
            )
            with pytest.raises(RuntimeError, match=r"^the session is closed") as closed:
                cm.execute("1")
        with sessions.lease("a") as cm:
            assert cm.execute("[kept, typeof lost]").value == [2.5, "undefined"]
            assert cm.execute("await tools.price({ item: 'c' })").ok
            spent = cm.execute("await tools.price({ item: 'd' })")
    assert timed_out.error is not None and timed_out.error["kind"] == "timeout"
    assert pydeno.classify_error(closed.value).kind == "closed"
    assert "lease the session again" in str(getattr(closed.value, "hint", ""))
    assert spent.error is not None and spent.error["kind"] == "tool_budget"
    assert prices.calls == ["a", "b", "c"]


def test_a_code_mode_session_leased_by_another_owner_is_refused() -> None:
    with pool(pydeno.MemoryJournalStore(), max_live=1) as sessions:
        with sessions.lease("a", owner="alice") as cm:
            cm.execute("globalThis.secret = 1")
        with pytest.raises(ValueError, match=r"^session 'a' belongs to another owner"), sessions.lease("a", "eve"):
            pass
        evict(sessions)
        with pytest.raises(ValueError, match=r"^session 'a' belongs to another owner"), sessions.lease("a", "eve"):
            pass
        with sessions.lease("a", owner="alice") as cm:
            assert cm.execute("secret").value == 1


class RollbackStore(pydeno.MemoryJournalStore):
    """A store that answers a read with the first record it held of the session."""

    def __init__(self) -> None:
        super().__init__()
        self.first: dict[str, bytes] = {}
        self.roll_back = False

    def write(self, session_id: str, owner: str | None, version: int, record: bytes) -> bool:
        self.first.setdefault(session_id, record)
        return super().write(session_id, owner, version, record)

    def read(self, session_id: str) -> tuple[int, str | None, bytes] | None:
        stored = super().read(session_id)
        if not self.roll_back or stored is None:
            return stored
        return (1, stored[1], self.first[session_id])


def test_a_store_that_hands_back_an_older_code_mode_journal_is_refused() -> None:
    store = RollbackStore()
    with pool(store, max_live=1) as sessions:
        for step in (1, 2):
            with sessions.lease("a") as cm:
                cm.execute(f"globalThis.step = {step}")
        evict(sessions)
        store.roll_back = True
        with pytest.raises(pydeno.JournalError) as info, sessions.lease("a"):
            pass
        store.roll_back = False
        with sessions.lease("a") as cm:
            assert cm.execute("step").value == 2
    assert str(info.value) == (
        "the stored journal of session 'a' is version 1, older than version 2 this pool last wrote or read; "
        "a store that hands back an older journal is refused"
    )


def test_an_owner_over_its_stored_bytes_keeps_its_last_code_mode_journal() -> None:
    with pool(pydeno.MemoryJournalStore(), max_live=1, max_bytes_per_owner=2000) as sessions:
        with sessions.lease("a", owner="alice") as cm:
            cm.execute("globalThis.small = 1")
        with (
            pytest.raises(pydeno.SessionLimitError, match=r"^owner 'alice' would store "),
            sessions.lease("a", owner="alice") as cm,
        ):
            cm.execute("globalThis.big = 'x'.repeat(5000)")
        with sessions.lease("a", owner="alice") as cm:
            assert cm.execute("[small, typeof big]").value == [1, "undefined"]


def test_an_agent_pool_refuses_a_code_mode_sessions_journal_and_a_code_mode_pool_an_agents() -> None:
    store = pydeno.MemoryJournalStore()
    with pool(store) as sessions, sessions.lease("cm") as cm:
        cm.execute("let x = 1")
    with pydeno.SessionPool(store, KEY) as sessions, sessions.lease("agent") as agent:
        agent.run("globalThis.y = 1")
    with pydeno.SessionPool(store, KEY) as agents, pytest.raises(pydeno.JournalError) as to_agent, agents.lease("cm"):
        pass
    with pool(store) as code_modes, pytest.raises(pydeno.JournalError) as to_code_mode, code_modes.lease("agent"):
        pass
    assert str(to_agent.value) == (
        "journal is a Code Mode session's: restore it with a SessionPool(code_mode=True), not as an agent session"
    )
    assert str(to_code_mode.value) == (
        "journal is an agent session's: restore it with AgentSandbox.load or a SessionPool without code_mode="
    )


def test_a_program_whose_replay_ends_otherwise_than_recorded_is_a_replay_divergence() -> None:
    # sandbox="off": the guest reads its worker's real pid, which a fresh worker does not share.
    with pool(pydeno.MemoryJournalStore(), max_live=1, sandbox="off") as sessions:
        with sessions.lease("a") as cm:
            assert cm.execute("(await import('node:process')).default.pid").ok
        evict(sessions)
        with (
            pytest.raises(pydeno.ReplayDivergence, match=r"^replaying run 1: the run ended differently"),
            sessions.lease("a"),
        ):
            pass


def test_the_model_reads_that_declarations_and_the_budget_are_the_sessions() -> None:
    with pool(pydeno.MemoryJournalStore(), Prices(), max_tool_calls=4) as sessions, sessions.lease("a") as cm:
        text = cm.describe()
    assert "stay for the next run of this session" in text
    assert "At most 4 tool calls in this session, across all its runs." in text
    assert "`Date` and `Date.now()` stay at the session's start" in text
    assert "per run" not in text


def test_a_session_reads_a_clock_fixed_at_its_start_and_a_seeded_random_across_a_restore() -> None:
    with pool(pydeno.MemoryJournalStore(), max_live=1, clock=1_700_000_000, random_seed=7) as sessions:
        with sessions.lease("a") as cm:
            first = cm.execute("globalThis.r = Math.random(); [Date.now(), r]").value
        evict(sessions)
        with sessions.lease("a") as cm:
            assert cm.execute("[Date.now(), r]").value == first
    assert first[0] == 1_700_000_000_000


def test_start_is_refused_on_a_code_mode_session() -> None:
    with (
        pool(pydeno.MemoryJournalStore()) as sessions,
        sessions.lease("a") as cm,
        pytest.raises(RuntimeError, match=r"^a Code Mode session runs programs with execute\(\)"),
    ):
        cm.start("1")


def test_with_warm_workers_a_programs_console_output_is_its_result_and_the_callers_once() -> None:
    seen: list[str] = []
    with pool(
        pydeno.MemoryJournalStore(), max_live=1, warm_workers=1, on_console=lambda level, text: seen.append(text)
    ) as sessions:
        with sessions.lease("a") as cm:
            assert cm.execute("console.log('from a'); 1").stdout == "from a"
        evict(sessions)
        with sessions.lease("a") as cm:  # replayed: its output is not told again
            assert cm.execute("console.log('again'); 2").stdout == "again"
    assert seen == ["from a", "again"]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"code_mode": "yes"}, TypeError, "code_mode must be a bool, got str"),
        ({"code_mode": True, "max_pause": 1}, TypeError, "max_pause= is an agent session's"),
        ({"approve": "read_only"}, TypeError, "max_output_chars= and approve= are a Code Mode session's"),
        ({"code_mode": True, "tools": {"f": len}}, TypeError, "tools must be a list of pydeno.Tool"),
        ({"code_mode": True, "max_tool_calls": -1}, ValueError, "max_tool_calls must be at least 0"),
        ({"code_mode": True, "max_output_chars": 0}, ValueError, "max_output_chars must be"),
        ({"code_mode": True, "timeot": 1}, TypeError, "SessionPool() got an unexpected keyword argument 'timeot'"),
        ({"code_mode": True, "random_seed": -1}, ValueError, "random_seed must be at least 0"),
    ],
    ids=[
        "code_mode not a bool",
        "max_pause",
        "approve without code_mode",
        "tools as a mapping",
        "a negative budget",
        "no output",
        "a misspelt option",
        "a bad seed",
    ],
)
def test_a_bad_code_mode_pool_argument_is_a_typed_error_before_any_worker_starts(
    kwargs: Any, error: type, message: str
) -> None:
    with pytest.raises(error) as info:
        pydeno.SessionPool(pydeno.MemoryJournalStore(), KEY, **kwargs)
    assert str(info.value).startswith(message)
    assert not workers()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_async_pool_leases_an_async_code_mode_and_restores_it_under_asyncio_and_trio(backend: str) -> None:
    prices = Prices()

    async def main() -> None:
        async with pydeno.AsyncSessionPool(
            pydeno.MemoryJournalStore(), KEY, code_mode=True, tools=[prices.tool()], max_live=1
        ) as sessions:
            async with sessions.lease("a") as cm:
                assert isinstance(cm, pydeno.AsyncCodeMode)
                assert (await cm.execute("let got = await tools.price({ item: 'x' }); got")).value == 2.5
            async with sessions.lease("b") as cm:
                await cm.execute("1")
            async with sessions.lease("a") as cm:
                assert (await cm.execute("got * 2")).value == 5.0

    anyio.run(main, backend=backend)
    assert prices.calls == ["x"]
    assert not workers()
