"""AgentSandbox and AsyncAgentSandbox: sessions of runs calling tools, pausing for approval,
bounded by max_pause, dumped into signed journals and restored by replay on a fresh worker."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import msgpack
import pytest

import pydeno

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
SCRIPTS = Path(__file__).parents[1] / "agent_scripts"
HOST_WAIT = "host callbacks kept the guest waiting for more than {0}s in one command (max_host_wait); worker killed"
PAUSED = "a run is paused at a tool call: resume it (or close the session) first"
NOT_AUTHENTIC = "journal is not authentic: wrong key, or altered since it was signed"
SNAPSHOT_NOT_AUTHENTIC = "snapshot is not authentic: wrong key, or altered since it was signed"


class Service:
    """Tools that answer predictably and log every live call, to show what replay skips."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def tool(self, name: str, answer: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            self.calls.append((name, args))
            return answer(*args)

        return call

    def tools(self, names: Iterable[str]) -> dict[str, Callable[..., Any]]:
        return {name: self.tool(name, lambda *args, name=name: f"{name}{list(args)}") for name in names}


def flip(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1 :]


def body_index(data: bytes) -> int:
    """The offset of the middle of a journal's signed body."""
    body = msgpack.unpackb(data)[3]
    assert isinstance(body, bytes)
    return data.index(body) + len(body) // 2


# --- runs -------------------------------------------------------------------------------------


def test_session_state_persists_across_runs_that_call_tools() -> None:
    service = Service()
    with pydeno.AgentSandbox(tools=service.tools(["lookup"])) as sb:
        assert sb.run("const seen = [await tools.lookup('ada')]; seen.length") == 1
        assert sb.run("seen.push(await tools.lookup('grace')); seen") == ["lookup['ada']", "lookup['grace']"]
        assert sb.tool_calls_made == 2
    assert service.calls == [("lookup", ("ada",)), ("lookup", ("grace",))]


def test_run_awaits_async_tools() -> None:
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    with pydeno.AgentSandbox(tools={"double": double}) as sb:
        assert sb.run("await tools.double(21)") == 42


def test_start_returns_the_value_when_the_code_calls_no_tool() -> None:
    with pydeno.AgentSandbox(tools=Service().tools(["lookup"])) as sb:
        assert sb.start("'no tools needed'") == "no tools needed"
        assert sb.paused is None


def test_a_javascript_error_in_a_run_leaves_the_session_usable_and_dumpable() -> None:
    service = Service()
    with pydeno.AgentSandbox(tools=service.tools(["lookup"])) as sb:
        sb.run("const kept = await tools.lookup('ada')")
        with pytest.raises(pydeno.JavaScriptError) as exc_info:
            sb.run("await tools.lookup('grace'); throw new RangeError('bad page')")
        assert str(exc_info.value) == "Evaluation failed: RangeError: bad page"
        assert not sb.closed
        assert sb.run("kept") == "lookup['ada']"
        journal = sb.dump(KEY)
    # The failed run is part of the record: it replays (and fails again) on load.
    with pydeno.AgentSandbox.load(journal, key=KEY, tools=service.tools(["lookup"])) as restored:
        assert restored.run("kept") == "lookup['ada']"
        assert restored.tool_calls_made == 2
    assert len(service.calls) == 2


@pytest.mark.parametrize(
    ("answer", "max_tool_calls", "code", "name", "kind"),
    [
        (pydeno.ToolNotFoundError("no user 42"), None, "await tools.get()", "ToolNotFoundError", "tool_not_found"),
        (pydeno.ToolError("upstream refused"), None, "await tools.get()", "ToolError", "tool_failed"),
        ("fine", 1, "await tools.get(); await tools.get()", "ToolBudgetError", "tool_budget"),
    ],
)
def test_an_agent_run_that_does_not_catch_a_tool_failure_classifies_by_kind(
    answer: Any, max_tool_calls: int | None, code: str, name: str, kind: str
) -> None:
    def get() -> Any:
        if isinstance(answer, Exception):
            raise answer
        return answer

    with pydeno.AgentSandbox(tools={"get": get}, max_tool_calls=max_tool_calls) as sb:
        with pytest.raises(pydeno.JavaScriptError) as exc_info:
            sb.run(code)
        assert exc_info.value.name == name
        assert pydeno.classify_error(exc_info.value, via_agent=True).kind == kind
        assert sb.run("'still usable'") == "still usable"


# --- pausing for approval ---------------------------------------------------------------------

APPROVAL = """
const results = [];
for (const to of ['alice@example.com', 'mallory@example.com']) {
  try { results.push(await tools.send_email(to, 'Welcome!')); }
  catch (e) { results.push(`${e.name}: ${e.message}`); }
}
results
"""


@pytest.mark.parametrize(
    ("rejection", "seen"),
    [
        ("mallory is not on the allow list", "ToolError: mallory is not on the allow list"),
        (pydeno.ToolError("mallory is not on the allow list"), "ToolError: mallory is not on the allow list"),
        (pydeno.ToolNotFoundError("no such mailbox"), "ToolNotFoundError: no such mailbox"),
        (
            PermissionError("policy engine internals"),
            "PermissionError: tools.send_email() failed on the host (PermissionError); its details are hidden "
            "from the program",
        ),
    ],
)
def test_a_full_approval_flow_approves_one_call_and_rejects_another(rejection: Exception | str, seen: str) -> None:
    service = Service()
    with pydeno.AgentSandbox(tools=service.tools(["send_email"]), max_tool_calls=5) as sb:
        first = sb.start(APPROVAL)
        assert isinstance(first, pydeno.PausedToolCall)
        assert (first.name, first.args) == ("send_email", ["alice@example.com", "Welcome!"])
        assert sb.paused is first
        second = first.resume(value="queued for alice")
        assert isinstance(second, pydeno.PausedToolCall)
        assert (second.name, second.args) == ("send_email", ["mallory@example.com", "Welcome!"])
        assert sb.paused is second
        assert second.resume(error=rejection) == ["queued for alice", seen]
        assert sb.paused is None
        assert sb.tool_calls_made == 2
        assert sb.run("results.length") == 2
    assert service.calls == []  # the caller answered both calls; the tool never ran


def test_a_rejection_the_guest_does_not_catch_fails_the_run_as_tool_failed() -> None:
    with pydeno.AgentSandbox(tools=Service().tools(["delete_repo"])) as sb:
        paused = sb.start("await tools.delete_repo('prod')")
        assert isinstance(paused, pydeno.PausedToolCall)
        with pytest.raises(pydeno.JavaScriptError) as exc_info:
            paused.resume(error="deleting prod needs a second approver")
        assert str(exc_info.value) == "Evaluation failed: ToolError: deleting prod needs a second approver"
        assert pydeno.classify_error(exc_info.value, via_agent=True).kind == "tool_failed"
        assert sb.paused is None
        assert sb.run("1 + 1") == 2


@pytest.mark.parametrize("method", ["start", "run"])
def test_a_new_run_while_a_run_is_paused_raises_runtime_error(method: str) -> None:
    with pydeno.AgentSandbox(tools=Service().tools(["lookup"])) as sb:
        paused = sb.start("await tools.lookup('ada')")
        assert isinstance(paused, pydeno.PausedToolCall)
        with pytest.raises(RuntimeError) as exc_info:
            getattr(sb, method)("1")
        assert str(exc_info.value) == PAUSED
        assert sb.paused is paused
        assert paused.resume(value="approved") == "approved"


def test_resuming_the_same_paused_call_twice_raises_runtime_error() -> None:
    with pydeno.AgentSandbox(tools=Service().tools(["lookup"])) as sb:
        paused = sb.start("[await tools.lookup('a'), await tools.lookup('b')]")
        assert isinstance(paused, pydeno.PausedToolCall)
        following = paused.resume(value="A")
        assert isinstance(following, pydeno.PausedToolCall)
        for value in ("again", None):
            with pytest.raises(RuntimeError) as exc_info:
                paused.resume(value=value)
            assert str(exc_info.value) == "this tool call was already answered"
        assert following.resume(value="B") == ["A", "B"]
        with pytest.raises(RuntimeError) as exc_info:
            following.resume(error="late")
        assert str(exc_info.value) == "this tool call was already answered"


def test_resume_refuses_an_error_that_is_neither_an_exception_nor_a_str_and_stays_paused() -> None:
    with pydeno.AgentSandbox(tools=Service().tools(["lookup"])) as sb:
        paused = sb.start("await tools.lookup('a')")
        assert isinstance(paused, pydeno.PausedToolCall)
        with pytest.raises(TypeError) as exc_info:
            paused.resume(error=42)  # type: ignore[arg-type]
        assert str(exc_info.value) == "error must be an exception or a str, got int"
        assert sb.paused is paused
        assert paused.resume(value="fine") == "fine"


def test_a_call_past_the_budget_never_pauses() -> None:
    with pydeno.AgentSandbox(tools=Service().tools(["lookup"]), max_tool_calls=1) as sb:
        paused = sb.start("[await tools.lookup('a'), await tools.lookup('b').catch((e) => `${e.name}: ${e.message}`)]")
        assert isinstance(paused, pydeno.PausedToolCall)
        assert paused.resume(value="A") == ["A", "ToolBudgetError: the tool-call budget of 1 calls is spent"]
        assert sb.tool_calls_made == 1


# --- max_pause ----------------------------------------------------------------------------------


def _paused_too_long(sb: pydeno.AgentSandbox) -> None:
    paused = sb.start("await tools.slow(0)")
    assert isinstance(paused, pydeno.PausedToolCall)
    time.sleep(0.35)
    paused.resume(value="too late")


def _slow_tool(sb: pydeno.AgentSandbox) -> None:
    sb.run("await tools.slow(0.35)")


def _two_pauses_adding_up(sb: pydeno.AgentSandbox) -> None:
    paused = sb.start("[await tools.slow(0), await tools.slow(0)]")
    for _ in range(2):
        assert isinstance(paused, pydeno.PausedToolCall)
        time.sleep(0.13)
        paused = paused.resume(value="answered")


@pytest.mark.parametrize("scenario", [_paused_too_long, _slow_tool, _two_pauses_adding_up])
def test_a_run_waiting_on_tools_past_max_pause_fails_and_closes_the_session(
    scenario: Callable[[pydeno.AgentSandbox], None],
) -> None:
    def slow(seconds: float) -> str:
        time.sleep(seconds)
        return "slow answer"

    with pydeno.AgentSandbox(tools={"slow": slow}, max_pause=0.2) as sb:
        with pytest.raises(pydeno.RuntimeTimeout) as exc_info:
            scenario(sb)
        exc = exc_info.value
        assert str(exc) == HOST_WAIT.format(0.2)
        assert pydeno.classify_error(exc, via_agent=True).kind == "max_pause"
        assert pydeno.classify_error(exc).kind == "host_wait"
        assert sb.closed
        assert sb.paused is None
        with pytest.raises(RuntimeError) as closed_info:
            sb.run("1")
        assert str(closed_info.value) == "the session is closed"
        assert pydeno.classify_error(closed_info.value, via_agent=True).kind == "closed"


def test_max_pause_is_counted_per_run() -> None:
    with pydeno.AgentSandbox(tools=Service().tools(["lookup"]), max_pause=0.3) as sb:
        for expected in ("first", "second"):
            paused = sb.start("await tools.lookup('x')")
            assert isinstance(paused, pydeno.PausedToolCall)
            time.sleep(0.17)
            assert paused.resume(value=expected) == expected


WAIT_REFUSED = "an agent session bounds tool waits with max_pause=, not max_host_wait="


@pytest.mark.parametrize(
    ("cls", "kwargs", "error", "message"),
    [
        (pydeno.AgentSandbox, {"max_host_wait": 1}, TypeError, WAIT_REFUSED),
        (pydeno.AsyncAgentSandbox, {"max_host_wait": 1}, TypeError, WAIT_REFUSED),
        (
            pydeno.AgentSandbox,
            {"tools": {"send email": print}},
            ValueError,
            "tool name 'send email' is not a JavaScript identifier (letters, digits, _ or $), "
            "or several joined by dots for a namespace",
        ),
        (pydeno.AgentSandbox, {"tools": {"send": "smtp"}}, TypeError, "tool 'send' must be callable, got str"),
        (pydeno.AgentSandbox, {"max_tool_calls": -1}, ValueError, "max_calls must be at least 0, got -1"),
    ],
)
def test_bad_sandbox_arguments_are_refused_before_a_worker_starts(
    cls: Callable[..., object], kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as exc_info:
        cls(**kwargs)
    assert str(exc_info.value) == message


# --- determinism --------------------------------------------------------------------------------

PROBE = """[
  Math.random(),
  crypto.randomUUID(),
  Array.from(crypto.getRandomValues(new Uint8Array(6))),
  Date.now(),
  new Date().getTime(),
  new Date().toISOString(),
  performance.now(),
]"""


def test_randomness_is_seeded_per_session_and_the_clock_is_fixed() -> None:
    before = time.time()
    with pydeno.AgentSandbox() as one, pydeno.AgentSandbox() as two:
        first, again = one.run(PROBE), one.run(PROBE)
        other = two.run(PROBE)
    # The clock stands still at the session's start; the generator moves on.
    assert first[3] == first[4] == again[3] == again[4]
    assert abs(first[3] / 1000 - before) < 30
    assert first[6] == again[6] == 0
    assert first[:3] != again[:3]
    assert first[:3] != other[:3]
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", first[1])
    assert 0 <= first[0] < 1


def test_a_loaded_session_continues_the_same_random_sequence_and_clock() -> None:
    with pydeno.AgentSandbox(tools=Service().tools(["lookup"])) as sb:
        sb.run("const warmup = [Math.random(), crypto.randomUUID(), await tools.lookup(String(Math.random()))]")
        journal = sb.dump(KEY)
        expected = [sb.run(PROBE), sb.run(PROBE)]
    with pydeno.AgentSandbox.load(journal, key=KEY, tools=Service().tools(["lookup"])) as restored:
        assert [restored.run(PROBE), restored.run(PROBE)] == expected


# --- journals -------------------------------------------------------------------------------------


def test_load_replays_the_recorded_runs_without_calling_tools() -> None:
    service = Service()
    with pydeno.AgentSandbox(tools=service.tools(["lookup"]), max_tool_calls=10) as sb:
        sb.run("const people = {}")
        sb.run("for (const n of ['ada', 'grace']) people[n] = await tools.lookup(n)")
        journal = sb.dump(KEY)
    assert len(service.calls) == 2
    loader = Service()
    with pydeno.AgentSandbox.load(journal, key=KEY, tools=loader.tools(["lookup"])) as restored:
        assert loader.calls == []
        assert restored.tool_calls_made == 2
        assert restored.run("people") == {"ada": "lookup['ada']", "grace": "lookup['grace']"}
        assert restored.run("await tools.lookup('linus')") == "lookup['linus']"
    assert loader.calls == [("lookup", ("linus",))]


def test_a_snapshot_dumped_while_paused_loads_paused_at_the_same_call() -> None:
    code = "const a = await tools.lookup('ada'); const b = await tools.lookup('grace'); [a, b, Math.random()]"
    with pydeno.AgentSandbox(tools=Service().tools(["lookup"])) as sb:
        paused = sb.start(code)
        assert isinstance(paused, pydeno.PausedToolCall)
        paused = paused.resume(value="Ada L.")
        assert isinstance(paused, pydeno.PausedToolCall)
        snapshot = sb.dump(KEY)
        assert msgpack.unpackb(snapshot)[2] == "snapshot"
        expected = paused.resume(value="Grace H.")
    loader = Service()
    with pydeno.AgentSandbox.load(snapshot, key=KEY, tools=loader.tools(["lookup"])) as restored:
        again = restored.paused
        assert again is not None
        assert (again.name, again.args) == ("lookup", ["grace"])
        assert restored.tool_calls_made == 2
        assert again.resume(value="Grace H.") == expected
        assert restored.paused is None
        assert restored.run("a") == "Ada L."
    assert loader.calls == []


def test_a_journal_dumped_with_no_run_paused_is_a_journal() -> None:
    with pydeno.AgentSandbox() as sb:
        sb.run("1")
        assert msgpack.unpackb(sb.dump(KEY))[:3] == ["pydeno-journal", 1, "journal"]


def test_a_restored_session_never_gets_back_tool_budget_it_already_spent() -> None:
    spend = "const got = []; got.push(await tools.lookup('a')); got.push(await tools.lookup('b')); got"
    more = "try { got.push(await tools.lookup('%s')) } catch (e) { got.push(`${e.name}: ${e.message}`) } got.at(-1)"
    with pydeno.AgentSandbox(tools=Service().tools(["lookup"]), max_tool_calls=3) as sb:
        sb.run(spend)
        journal = sb.dump(KEY)
    loader = Service()
    with pydeno.AgentSandbox.load(journal, key=KEY, tools=loader.tools(["lookup"])) as restored:
        assert restored.tool_calls_made == 2
        assert restored.run(more % "c") == "lookup['c']"
        assert restored.run(more % "d") == "ToolBudgetError: the tool-call budget of 3 calls is spent"
        assert restored.tool_calls_made == 3
    assert loader.calls == [("lookup", ("c",))]


def test_a_restored_snapshot_never_gets_back_tool_budget_it_already_spent() -> None:
    code = "const got = [await tools.lookup('a'), await tools.lookup('b')]; got"
    more = "try { await tools.lookup('%s') } catch (e) { `${e.name}: ${e.message}` }"
    with pydeno.AgentSandbox(tools=Service().tools(["lookup"]), max_tool_calls=3) as sb:
        paused = sb.start(code)
        assert isinstance(paused, pydeno.PausedToolCall)
        assert isinstance(paused.resume(value="A"), pydeno.PausedToolCall)
        snapshot = sb.dump(KEY)
    loader = Service()
    with pydeno.AgentSandbox.load(snapshot, key=KEY, tools=loader.tools(["lookup"])) as restored:
        assert restored.paused is not None
        assert restored.paused.resume(value="B") == ["A", "B"]
        assert restored.run(more % "c") == "lookup['c']"
        assert restored.run(more % "d") == "ToolBudgetError: the tool-call budget of 3 calls is spent"
    assert loader.calls == [("lookup", ("c",))]


@pytest.mark.parametrize(
    ("key", "error", "message"),
    [
        (b"too short", ValueError, "key must be at least 16 bytes (use secrets.token_bytes(32)), got 9"),
        ("a str is not a key", TypeError, "key must be bytes, got str"),
    ],
)
def test_dump_refuses_a_weak_or_mistyped_key(key: Any, error: type[Exception], message: str) -> None:
    with pydeno.AgentSandbox() as sb:
        with pytest.raises(error) as exc_info:
            sb.dump(key)
        assert str(exc_info.value) == message
        with pytest.raises(error):
            pydeno.AgentSandbox.load(sb.dump(KEY), key=key)


def test_a_journal_dumped_in_one_process_is_loaded_and_continued_in_another(tmp_path: Path) -> None:
    setup = "const names = [await tools.lookup('ada')]; const r0 = Math.random(); r0"
    more = "names.push(await tools.lookup('grace')); [names, Math.random(), crypto.randomUUID(), Date.now()]"
    service = Service()
    with pydeno.AgentSandbox(tools={"lookup": service.tool("lookup", lambda name: f"{name}@parent")}) as sb:
        sb.run(setup)
        (tmp_path / "session.journal").write_bytes(sb.dump(KEY))
        expected = sb.run(more)
    child = subprocess.run(
        [sys.executable, str(SCRIPTS / "continue_session.py"), str(tmp_path / "session.journal"), KEY.hex(), more],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    out = json.loads(child.stdout)
    assert out["calls_during_load"] == []
    assert out["calls"] == ["grace"]
    assert out["made"] == 2
    names, *rest = out["result"]
    # The first answer was replayed from the parent's journal; the second is the child's own.
    assert names[0] == "ada@parent"
    assert re.fullmatch(r"grace@\d+", names[1])
    assert names[1] != f"grace@{os.getpid()}"
    assert rest == expected[1:]


# --- refused journals ------------------------------------------------------------------------------

DIVERGING = """
const city = 'extra' in tools ? 'Bergen' : 'Oslo';
let report = 'offline';
if ('weather' in tools) report = await tools.weather(city);
else if ('search' in tools) report = await tools.search(`${city} weather`);
if ('alerts' in tools) report += await tools.alerts(city);
'news' in tools ? `${report} (with news)` : report
"""
PAUSED_SEARCH = "await tools.search('headlines' in tools ? 'headlines' : report)"


@dataclass(frozen=True)
class Recorded:
    journal: bytes
    snapshot: bytes


@pytest.fixture(scope="module")
def recorded() -> Recorded:
    with pydeno.AgentSandbox(tools=Service().tools(["weather", "search"])) as sb:
        assert sb.run(DIVERGING) == "weather['Oslo']"
        journal = sb.dump(KEY)
        assert isinstance(sb.start(PAUSED_SEARCH), pydeno.PausedToolCall)
        snapshot = sb.dump(KEY)
    return Recorded(journal, snapshot)


def _other_version(data: bytes) -> bytes:
    outer = msgpack.unpackb(data)
    outer[1] = 2
    return bytes(msgpack.packb(outer))


@pytest.mark.parametrize(
    ("damage", "options", "message"),
    [
        (lambda j: b"\xc1 not a journal", {}, "journal is malformed or truncated (FormatError)"),
        (lambda j: j[:-1], {}, "journal is malformed or truncated (ValueError)"),
        (lambda j: j[: len(j) // 2], {}, "journal is malformed or truncated (ValueError)"),
        (
            lambda j: bytes(msgpack.packb(["some-other-format", 1, "journal", b"", b""])),
            {},
            "journal is malformed: not a pydeno journal",
        ),
        (_other_version, {}, "journal format version 2 is not supported (this pydeno reads 1)"),
        (lambda j: flip(j, body_index(j)), {}, NOT_AUTHENTIC),
        (lambda j: j, {"key": OTHER_KEY}, NOT_AUTHENTIC),
        (lambda j: j, {"max_journal_bytes": 100}, "journal is {n} bytes, over the limit of 100"),
    ],
    ids=[
        "malformed",
        "truncated-by-one",
        "truncated-by-half",
        "foreign",
        "version",
        "tampered",
        "wrong-key",
        "oversized",
    ],
)
def test_a_bad_journal_raises_journal_error(
    recorded: Recorded, damage: Callable[[bytes], bytes], options: dict[str, Any], message: str
) -> None:
    service = Service()
    data = damage(recorded.journal)
    with pytest.raises(pydeno.JournalError) as exc_info:
        pydeno.AgentSandbox.load(data, **{"key": KEY, "tools": service.tools(["weather", "search"]), **options})
    exc = exc_info.value
    assert type(exc) is pydeno.JournalError
    assert str(exc) == message.format(n=len(data))
    assert pydeno.classify_error(exc).kind == exc.kind == "journal_invalid"
    assert service.calls == []


@pytest.mark.parametrize("kind", ["journal", "snapshot"])
def test_flipping_any_single_bit_of_a_journal_or_snapshot_is_refused(recorded: Recorded, kind: str) -> None:
    data = getattr(recorded, kind)
    errors: dict[str, int] = {}
    for index in range(len(data)):
        with pytest.raises((pydeno.JournalError, pydeno.SnapshotAuthenticationError)) as exc_info:
            pydeno.AgentSandbox.load(flip(data, index), key=KEY)
        name = type(exc_info.value).__name__
        errors[name] = errors.get(name, 0) + 1
    expected = {"JournalError"} if kind == "journal" else {"JournalError", "SnapshotAuthenticationError"}
    assert set(errors) == expected


@pytest.mark.parametrize("damage", ["tampered", "wrong-key"])
def test_a_tampered_or_wrongly_keyed_snapshot_raises_snapshot_authentication_error(
    recorded: Recorded, damage: str
) -> None:
    data, key = recorded.snapshot, KEY
    if damage == "tampered":
        data = flip(data, body_index(data))
    else:
        key = OTHER_KEY
    service = Service()
    with pytest.raises(pydeno.SnapshotAuthenticationError) as exc_info:
        pydeno.AgentSandbox.load(data, key=key, tools=service.tools(["weather", "search"]))
    assert str(exc_info.value) == SNAPSHOT_NOT_AUTHENTIC
    assert pydeno.classify_error(exc_info.value).kind == exc_info.value.kind == "snapshot_invalid"
    assert service.calls == []


@pytest.mark.parametrize(
    ("kind", "tools", "message"),
    [
        ("journal", ["search"], "replaying run 1: call 1 was tools.search(), but the journal recorded tools.weather()"),
        ("journal", [], "replaying run 1: the guest made 0 tool calls, the journal recorded 1"),
        (
            "journal",
            ["weather", "search", "extra"],
            "replaying run 1: call 1 was tools.weather(...), "
            "but the journal recorded tools.weather(...) with other arguments",
        ),
        (
            "journal",
            ["weather", "search", "alerts"],
            "replaying run 1: the guest called tools.alerts() after the 1 recorded calls",
        ),
        ("journal", ["weather", "search", "news"], "replaying run 1: the run ended differently than recorded"),
        (
            "snapshot",
            ["weather", "search", "headlines"],
            "replaying run 2: the paused call tools.search() has other arguments",
        ),
    ],
)
def test_a_replay_whose_guest_asks_for_other_tool_calls_raises_replay_divergence(
    recorded: Recorded, kind: str, tools: list[str], message: str
) -> None:
    service = Service()
    with pytest.raises(pydeno.ReplayDivergence) as exc_info:
        pydeno.AgentSandbox.load(getattr(recorded, kind), key=KEY, tools=service.tools(tools))
    exc = exc_info.value
    assert str(exc) == message
    assert isinstance(exc, pydeno.JournalError)
    assert pydeno.classify_error(exc).kind == exc.kind == "replay_divergence"
    assert service.calls == []


def test_the_same_tools_replay_the_recorded_journal_and_snapshot(recorded: Recorded) -> None:
    # The control for the divergence table: with the recorded tools, both load.
    service = Service()
    tools = service.tools(["weather", "search"])
    with pydeno.AgentSandbox.load(recorded.journal, key=KEY, tools=tools) as restored:
        assert restored.run("report") == "weather['Oslo']"
    with pydeno.AgentSandbox.load(recorded.snapshot, key=KEY, tools=tools) as restored:
        assert restored.paused is not None
        assert (restored.paused.name, restored.paused.args) == ("search", ["weather['Oslo']"])
    assert service.calls == []


# --- the async sandbox -------------------------------------------------------------------------------

BACKENDS = pytest.mark.parametrize("backend", ["asyncio", "trio"])


@BACKENDS
def test_the_async_sandbox_runs_an_approval_flow_and_restores_its_snapshot(backend: str) -> None:
    calls: list[str] = []

    async def send_email(to: str, body: str) -> str:
        await anyio.sleep(0.001)
        calls.append(to)
        return f"sent to {to}"

    async def main() -> None:
        async with pydeno.AsyncAgentSandbox(tools={"send_email": send_email}, max_tool_calls=4) as sb:
            assert await sb.run("await tools.send_email('ops@example.com', 'deploy done')") == "sent to ops@example.com"
            first = await sb.start(APPROVAL)
            assert isinstance(first, pydeno.PausedToolCall)
            assert (first.name, first.args) == ("send_email", ["alice@example.com", "Welcome!"])
            with pytest.raises(RuntimeError) as exc_info:
                await sb.start("1")
            assert str(exc_info.value) == PAUSED
            second = await first.resume(value="queued for alice")
            assert isinstance(second, pydeno.PausedToolCall)
            snapshot = sb.dump(KEY)
            assert await second.resume(error="not approved") == ["queued for alice", "ToolError: not approved"]
            with pytest.raises(RuntimeError):
                await second.resume(value="twice")
        restored = await pydeno.AsyncAgentSandbox.load(snapshot, key=KEY, tools={"send_email": send_email})
        async with restored:
            again = restored.paused
            assert again is not None
            assert (again.name, again.args) == ("send_email", ["mallory@example.com", "Welcome!"])
            assert restored.tool_calls_made == 3
            assert await again.resume(value="approved after all") == ["queued for alice", "approved after all"]
            assert await restored.run("await tools.send_email('x@example.com', '').catch((e) => e.name)") == (
                "sent to x@example.com"
            )
            assert await restored.run("await tools.send_email('y@example.com', '').catch((e) => e.name)") == (
                "ToolBudgetError"
            )

    anyio.run(main, backend=backend)
    assert calls == ["ops@example.com", "x@example.com"]


@BACKENDS
def test_the_async_sandbox_fails_a_run_paused_past_max_pause_and_closes(backend: str) -> None:
    async def main() -> None:
        async with pydeno.AsyncAgentSandbox(tools=Service().tools(["lookup"]), max_pause=0.2) as sb:
            paused = await sb.start("await tools.lookup('a')")
            assert isinstance(paused, pydeno.PausedToolCall)
            await anyio.sleep(0.35)
            with pytest.raises(pydeno.RuntimeTimeout) as exc_info:
                await paused.resume(value="late")
            assert str(exc_info.value) == HOST_WAIT.format(0.2)
            assert pydeno.classify_error(exc_info.value, via_agent=True).kind == "max_pause"
            assert sb.closed
            with pytest.raises(RuntimeError) as closed_info:
                await sb.run("1")
            assert str(closed_info.value) == "the session is closed"

    anyio.run(main, backend=backend)


@BACKENDS
def test_the_async_sandbox_refuses_tampered_and_diverging_journals(backend: str, recorded: Recorded) -> None:
    service = Service()

    async def main() -> None:
        with pytest.raises(pydeno.JournalError) as journal_info:
            await pydeno.AsyncAgentSandbox.load(flip(recorded.journal, body_index(recorded.journal)), key=KEY)
        assert str(journal_info.value) == NOT_AUTHENTIC
        with pytest.raises(pydeno.SnapshotAuthenticationError):
            await pydeno.AsyncAgentSandbox.load(recorded.snapshot, key=OTHER_KEY)
        with pytest.raises(pydeno.ReplayDivergence) as divergence_info:
            await pydeno.AsyncAgentSandbox.load(recorded.journal, key=KEY, tools=service.tools(["search"]))
        assert str(divergence_info.value) == (
            "replaying run 1: call 1 was tools.search(), but the journal recorded tools.weather()"
        )
        restored = await pydeno.AsyncAgentSandbox.load(recorded.journal, key=KEY, tools=service.tools(["weather"]))
        async with restored:
            assert await restored.run("report") == "weather['Oslo']"

    anyio.run(main, backend=backend)
    assert service.calls == []


# --- what a journal records ---------------------------------------------------------------------------


def test_a_tool_that_sorts_its_argument_in_place_does_not_break_the_replay() -> None:
    def smallest(items: list[int]) -> int:
        items.sort()
        return items[0]

    with pydeno.AgentSandbox(tools={"smallest": smallest}) as sb:
        assert sb.run("const low = await tools.smallest([3, 1, 2]); low") == 1
        journal = sb.dump(KEY)
    with pydeno.AgentSandbox.load(journal, key=KEY, tools={"smallest": smallest}) as restored:
        assert restored.run("low") == 1


def test_a_tool_result_changed_after_the_call_is_journaled_as_the_guest_received_it() -> None:
    inventory = ["apple"]
    with pydeno.AgentSandbox(tools={"stock": lambda: inventory}) as sb:
        assert sb.run("const seen = (await tools.stock()).join(','); seen") == "apple"
        inventory.append("pear")  # the service's own state moves on after the call
        journal = sb.dump(KEY)
    with pydeno.AgentSandbox.load(journal, key=KEY, tools={"stock": lambda: inventory}) as restored:
        assert restored.run("seen") == "apple"


def test_changing_a_paused_calls_args_does_not_change_what_the_journal_records() -> None:
    with pydeno.AgentSandbox(tools=Service().tools(["send"])) as sb:
        paused = sb.start("await tools.send('bob', ['draft'])")
        assert isinstance(paused, pydeno.PausedToolCall)
        paused.args[1].append("reviewed")  # the caller annotates what it was shown
        snapshot = sb.dump(KEY)
        assert paused.resume(value="sent") == "sent"
        journal = sb.dump(KEY)
    with pydeno.AgentSandbox.load(snapshot, key=KEY, tools=Service().tools(["send"])) as restored:
        assert restored.paused is not None
        assert restored.paused.args == ["bob", ["draft"]]
    with pydeno.AgentSandbox.load(journal, key=KEY, tools=Service().tools(["send"])) as restored:
        assert restored.run("1") == 1


@pytest.mark.parametrize(
    "result",
    [object(), {"nested": [object()]}, datetime.datetime(2024, 5, 1, 12, 0)],
    ids=["object", "nested-object", "naive-datetime"],
)
def test_a_tool_result_the_guest_could_not_receive_is_journaled_as_the_error_it_saw(result: object) -> None:
    code = "const outcome = await tools.get().then(() => 'received', (e) => e.name); outcome"
    with pydeno.AgentSandbox(tools={"get": lambda: result}) as sb:
        assert sb.run(code) == "TypeError"
        journal = sb.dump(KEY)
    with pydeno.AgentSandbox.load(journal, key=KEY, tools={"get": lambda: result}) as restored:
        assert restored.run("outcome") == "TypeError"


@pytest.mark.parametrize("result", [bytearray(b"\x01\x02"), memoryview(b"\x01\x02")], ids=["bytearray", "memoryview"])
def test_every_tool_result_the_guest_received_can_be_journaled(result: object) -> None:
    with pydeno.AgentSandbox(tools={"get": lambda: result}) as sb:
        assert sb.run("const got = await tools.get(); Array.from(got)") == [1, 2]
        journal = sb.dump(KEY)
    with pydeno.AgentSandbox.load(journal, key=KEY, tools={"get": lambda: result}) as restored:
        assert restored.run("Array.from(got)") == [1, 2]


def test_a_session_whose_run_returned_a_function_can_still_be_dumped() -> None:
    with pydeno.AgentSandbox() as sb:
        inc = sb.run("const inc = (x) => x + 1; inc")
        assert isinstance(inc, pydeno.JsFunction)
        journal = sb.dump(KEY)
    with pydeno.AgentSandbox.load(journal, key=KEY) as restored:
        assert restored.run("inc(41)") == 42
