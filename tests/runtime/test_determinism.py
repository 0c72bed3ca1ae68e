"""random_seed= and clock=: a seeded Math.random and crypto and a fixed clock, so that an
execution repeats exactly, in runtimes, Code Mode and agent sessions."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest

import pydeno

PROBE = (
    "[Math.random(), crypto.randomUUID(), Array.from(crypto.getRandomValues(new Uint8Array(4))),"
    " Date.now(), new Date().toISOString(), performance.now()]"
)
NEW_YEAR = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def probe(**options: Any) -> Any:
    with pydeno.Runtime(**options) as rt:
        return rt.eval(PROBE)


def test_the_same_seed_and_clock_give_the_same_values_in_another_worker() -> None:
    first = probe(random_seed=7, clock=NEW_YEAR)
    assert first == probe(random_seed=7, clock=NEW_YEAR)
    assert first[3:] == [1767225600000, "2026-01-01T00:00:00.000Z", 0]
    assert 0.0 < first[0] < 1.0 and first[0] > 1e-6  # a small seed still starts well mixed
    assert first[:3] != probe(random_seed=8, clock=NEW_YEAR)[:3]


def test_a_clock_in_seconds_since_the_epoch_is_the_same_clock() -> None:
    assert probe(clock=NEW_YEAR.timestamp())[3] == 1767225600000


def test_a_seed_alone_leaves_the_real_clock() -> None:
    now_ms = time.time() * 1000
    assert abs(probe(random_seed=1)[3] - now_ms) < 60_000


def test_dates_other_than_now_are_real_dates() -> None:
    with pydeno.Runtime(clock=0) as rt:
        assert rt.eval("[new Date(86400000).toISOString(), Date.UTC(2000, 0, 1), String(Date()).includes('1970')]") == [
            "1970-01-02T00:00:00.000Z",
            946684800000,
            True,
        ]


def test_guest_code_cannot_put_the_real_generator_or_clock_back() -> None:
    with pydeno.Runtime(random_seed=3, clock=0) as rt:
        first = rt.eval("Math.random()")
        rt.eval(
            "try { Math.random = () => 0.5 } catch {}\n"
            "try { Object.defineProperty(globalThis, 'Date', { value: 1 }) } catch {}"
        )
        assert rt.eval("[Math.random() !== 0.5, Date.now()]") == [True, 0]
    with pydeno.Runtime(random_seed=3) as rt:
        assert rt.eval("Math.random()") == first


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"random_seed": True}, TypeError, "random_seed must be an int or None, got bool"),
        ({"random_seed": -1}, ValueError, "random_seed must be at least 0 and below 2**128, got -1"),
        ({"random_seed": 2**128}, ValueError, f"random_seed must be at least 0 and below 2**128, got {2**128}"),
        (
            {"clock": datetime.datetime(2026, 1, 1)},
            ValueError,
            "clock must be a timezone-aware datetime (datetime.now(timezone.utc), say), got a naive one",
        ),
        ({"clock": float("nan")}, ValueError, "clock must be a finite number of seconds since the epoch, got nan"),
        ({"clock": "today"}, TypeError, "clock must be a datetime, seconds since the epoch, or None, got str"),
    ],
)
def test_a_bad_seed_or_clock_is_refused(options: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error) as exc_info:
        pydeno.Runtime(**options)
    assert str(exc_info.value) == message


def test_a_code_mode_execution_repeats_exactly_with_a_seed_and_a_clock() -> None:
    @pydeno.tool
    def echo(value: float) -> float:
        """Echo."""
        return value

    program = "const r = await tools.echo({ value: Math.random() });\n[r, Date.now(), crypto.randomUUID()]"
    results = []
    for _ in range(2):
        with pydeno.CodeMode([echo], random_seed=11, clock=NEW_YEAR) as cm:
            results.append(cm.execute(program))
    assert results[0].value == results[1].value
    assert results[0].tool_calls[0]["arguments"] == results[1].tool_calls[0]["arguments"]
    assert results[0].value[1] == 1767225600000


@pytest.mark.slow
def test_an_agent_session_takes_its_seed_and_clock_and_keeps_them_in_its_journal() -> None:
    key = b"k" * 32
    with pydeno.AgentSandbox(random_seed=5, clock=0) as session:
        first = session.run("[Math.random(), Date.now()]")
        journal = session.dump(key)
    with pydeno.AgentSandbox(random_seed=5, clock=0) as again:
        assert again.run("[Math.random(), Date.now()]") == first
    with pydeno.AgentSandbox.load(journal, key=key) as restored:
        assert restored.run("Date.now()") == 0
    assert first[1] == 0
