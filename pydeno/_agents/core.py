"""The agent session core, shared by :class:`pydeno.AgentSandbox` and its async twin.

Everything that is a rule lives here, with no I/O: what each tool call of a run becomes (run
the tool, pause for approval, a recorded answer during replay, or a refusal), what a run
records and how a replay is checked against its record; the signed journal format is
:mod:`pydeno._agents.journal`. The two sandboxes only move the run forward on their runtime and call the tools.

Determinism, so a replay asks for the same tool calls: inside an agent session
``Math.random`` and ``crypto.getRandomValues``/``randomUUID`` draw from a generator seeded
per session, and ``Date``/``Date.now()``/``performance.now()`` read a clock fixed at the
session's start. Both are recorded in the journal.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .._base.determinism import check_clock, check_seed
from .._base.determinism import prelude as determinism_prelude
from .._base.errors import JavaScriptError, ReplayDivergence, ToolError, guest_error
from .._base.failures import closed_error
from .._tools.approval import ASK_EACH, UNANSWERED, PausedToolCall
from .._tools.bridge import ToolBridge
from .journal import CallRecord, Journal, RunRecord, check_key, encode, seal_journal, snapshot

__all__ = ["Action", "SessionCore", "SessionDriver", "runtime_options", "session_clock"]

# --- the session ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    """What a tool call becomes: ``run`` the tool, ``pause`` for the caller, or ``answer``
    at once with ``value`` or ``error`` (a refusal, or a recorded answer during replay)."""

    kind: Literal["run", "pause", "answer"]
    name: str
    args: list[Any]
    value: Any = None
    error: Exception | None = None


class _RecordedError(ToolError):
    """A recorded tool failure, answered again during replay exactly as the guest saw it."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.guest_error = (name, message)


class SessionCore:
    """One agent session's state: its tool bridge, seed and clock, and the record of its runs."""

    def __init__(
        self,
        bridge: ToolBridge,
        *,
        expose_errors: bool,
        seed: int | None = None,
        clock_ms: int | None = None,
        code_mode: bool = False,
    ) -> None:
        self.bridge = bridge
        self.expose_errors = expose_errors
        # A Code Mode session's: its journal says so (see pydeno/_agents/journal.py).
        self.code_mode = code_mode
        self.seed = secrets.randbits(128) if seed is None else seed
        self.clock_ms = int(time.time() * 1000) if clock_ms is None else clock_ms
        self.runs: list[RunRecord] = []
        self.run: RunRecord | None = None
        # During replay: the record being replayed, and how many of its calls were answered.
        self.replaying: RunRecord | None = None
        self.replay_index = 0
        self.pending: tuple[str, list[Any]] | None = None
        # Loading a snapshot: the paused call the last replayed run stops at again.
        self.pending_replay: tuple[str, list[Any]] | None = None
        # The arguments of the call being answered, as the guest sent them.
        self._call_args: list[Any] = []

    def prelude(self) -> str:
        return determinism_prelude(self.seed, self.clock_ms)

    # -- runs ------------------------------------------------------------------------
    def begin_run(self, code: str, replay: RunRecord | None = None) -> None:
        self.run = RunRecord(code)
        self.replaying = replay
        self.replay_index = 0

    def on_call(self, args: list[Any], *, pause: bool) -> Action:
        """Decide what a call of the tools' host function becomes."""
        name, call_args = (args[0], args[1]) if len(args) == 2 else (None, None)
        display = name if isinstance(name, str) else repr(name)
        if not isinstance(call_args, list):
            return Action("answer", display, [], error=ToolError("a tool call arrived malformed"))
        # As the guest sent them: the tool (or an approver) may change the list it is given.
        call_args = snapshot(call_args)
        if self.replaying is not None:
            return self._replayed(display, call_args)
        try:
            tool = self.bridge.charge(name)
        except ToolError as exc:
            self.record(display, call_args, exc)
            return Action("answer", display, call_args, error=exc)
        self._call_args = call_args
        # start() asks the caller about each call, as Code Mode's approve="ask" does.
        if pause and ASK_EACH.decide(tool, call_args) == "ask":
            self.pending = (display, call_args)
            return Action("pause", display, snapshot(call_args))
        return Action("run", display, snapshot(call_args))

    def _replayed(self, name: str, args: list[Any]) -> Action:
        assert self.replaying is not None and self.run is not None
        calls = self.replaying.calls
        number = len(self.runs) + 1
        if self.replay_index >= len(calls):
            if self.pending_replay is not None and self.pending_replay[0] == name:
                if encode(self.pending_replay[1]) != encode(args):
                    raise ReplayDivergence(
                        f"replaying run {number}: the paused call tools.{name}() has other arguments"
                    )
                # The snapshot's paused call, reached again: pause here for the caller.
                self.replaying, self.pending_replay = None, None
                self.pending = (name, args)
                self.bridge.charge(name)
                return Action("pause", name, snapshot(args))
            raise ReplayDivergence(
                f"replaying run {number}: the guest called tools.{name}() after the {len(calls)} recorded calls"
            )
        recorded = calls[self.replay_index]
        if recorded.name != name or encode(recorded.args) != encode(args):
            raise ReplayDivergence(
                f"replaying run {number}: call {self.replay_index + 1} was tools.{name}(...), "
                f"but the journal recorded tools.{recorded.name}(...) with other arguments"
                if recorded.name == name
                else f"replaying run {number}: call {self.replay_index + 1} was tools.{name}(), "
                f"but the journal recorded tools.{recorded.name}()"
            )
        self.replay_index += 1
        # Charged as the original call was (a refusal for budget charged nothing then, and
        # is refused again now): a restored session never gets spent budget back.
        with contextlib.suppress(ToolError):
            self.bridge.charge(name)
        self.run.calls.append(recorded)
        if recorded.ok:
            return Action("answer", name, args, value=recorded.payload)
        return Action("answer", name, args, error=_RecordedError(*recorded.payload))

    def call_tool(self, action: Action) -> Any:
        """Run the tool of a "run" action with its arguments (may return an awaitable)."""
        return self.bridge.run(action.name, action.args)

    def settle(
        self,
        name: str,
        value: Any = None,
        error: Exception | None = None,
        *,
        convertible: Callable[[Any], tuple[str, str] | None],
    ) -> tuple[Any, Exception | None]:
        """Record the answer to the current call as the guest will receive it, and return
        what to send: (value, None), or (None, error). ``convertible(value)`` says whether the
        value can cross the wire (else the Error the guest gets instead, recorded as such)."""
        assert self.run is not None
        args = self.pending[1] if self.pending is not None else self._call_args
        self.pending = None
        if error is None:
            refused = convertible(value)
            if refused is None:
                self.run.calls.append(CallRecord(name, args, True, snapshot(value)))
                return value, None
            error = _RecordedError(*refused)
        # What the guest was shown, not the exception's own text, which it may not see.
        pair = guest_error(error, expose=self.expose_errors, where=f"tools.{name}()")
        self.run.calls.append(CallRecord(name, args, False, list(pair)))
        return None, error

    def record(self, name: str, args: list[Any], error: BaseException) -> None:
        """A call refused before any tool ran (budget, unknown tool)."""
        assert self.run is not None
        pair = guest_error(error, expose=self.expose_errors, where=f"tools.{name}()")
        self.run.calls.append(CallRecord(name, args, False, list(pair)))

    def finish_run(self, value: Any = None, error: JavaScriptError | None = None) -> None:
        """The current run completed with value or a guest error; check it against its record
        when replaying."""
        run, replayed = self.run, self.replaying
        assert run is not None
        run.complete = True
        run.ok = error is None
        run.result = snapshot(value) if error is None else [error.name, error.message]
        self.run, self.replaying = None, None
        if replayed is not None:
            number = len(self.runs) + 1
            if self.replay_index != len(replayed.calls):
                raise ReplayDivergence(
                    f"replaying run {number}: the guest made {self.replay_index} tool calls, "
                    f"the journal recorded {len(replayed.calls)}"
                )
            if run.ok != replayed.ok or encode(run.result) != encode(replayed.result):
                raise ReplayDivergence(f"replaying run {number}: the run ended differently than recorded")
        self.runs.append(run)

    def abandon_run(self) -> None:
        self.run, self.replaying, self.pending = None, None, None

    def replayed(self, journal: Journal) -> None:
        """After every run of journal was replayed: charge what the journal spent beyond its
        runs' calls, or ReplayDivergence if the replay spent more."""
        # A journal may have spent more than its runs' calls: a run its worker died in is not
        # kept (its state died with the worker), but the calls it made stay charged.
        if self.bridge.calls_made > journal.spent:
            raise ReplayDivergence(
                f"the replay spent {self.bridge.calls_made} tool calls, the journal recorded {journal.spent}"
            )
        self.bridge.charge_spent(journal.spent - self.bridge.calls_made)

    # -- journals --------------------------------------------------------------------
    def dump(self, key: Any) -> bytes:
        key = check_key(key)
        runs = list(self.runs)
        kind: Literal["journal", "snapshot"] = "journal"
        pending: Any = None
        if self.run is not None and self.pending is not None:
            kind, runs, pending = "snapshot", [*runs, self.run], list(self.pending)
        fields: dict[str, Any] = {
            "seed": self.seed,
            "clock_ms": self.clock_ms,
            "max_tool_calls": self.bridge.max_calls,
            "spent": self.bridge.calls_made,
            "runs": [r.to_data() for r in runs],
            "pending": pending,
        }
        if self.code_mode:
            fields["code_mode"] = True
        return seal_journal(key, kind, encode(fields))


def runtime_options(runtime_kwargs: Mapping[str, Any], max_pause: Any) -> tuple[dict[str, Any], int | None, int | None]:
    """The options of a session's runtime, and the seed and clock the session itself keeps."""
    if "max_host_wait" in runtime_kwargs:
        raise TypeError("an agent session bounds tool waits with max_pause=, not max_host_wait=")
    options = {**runtime_kwargs, "max_host_wait": max_pause}
    seed, clock = session_clock(options)
    return options, seed, clock


def session_clock(options: dict[str, Any]) -> tuple[int | None, int | None]:
    """The seed and clock a session keeps, taken out of its runtime's options: a session is
    deterministic by itself, and random_seed= and clock= choose them (a restored one keeps
    its journal's)."""
    return check_seed(options.pop("random_seed", None)), check_clock(options.pop("clock", None))


class SessionDriver:
    """What the sync and async sandboxes share beyond the core: set-up, the paused call's
    bookkeeping, and the read-only API. Subclasses own a runtime (``_rt``) and move runs."""

    _rt: Any

    def _setup(
        self,
        tools: Mapping[str, Callable[..., Any]] | None,
        max_tool_calls: int | None,
        max_pause: float | None,
        runtime_kwargs: dict[str, Any],
        seed: int | None = None,
        clock_ms: int | None = None,
        runtime: Any = None,
    ) -> None:
        """Set up the bridge and the session core, then the driver's runtime (``runtime``,
        if given: one started with :func:`runtime_options`' options, which the session owns)."""
        options, given_seed, given_clock = runtime_options(runtime_kwargs, max_pause)
        seed = seed if seed is not None else given_seed
        clock_ms = clock_ms if clock_ms is not None else given_clock
        self._bridge = ToolBridge(tools or {}, max_calls=max_tool_calls)
        self._session = SessionCore(
            self._bridge, expose_errors=bool(options.get("expose_host_errors", False)), seed=seed, clock_ms=clock_ms
        )
        self._paused: PausedToolCall | None = None
        self._waiting: tuple[Any, Any] | None = None
        self._closed = False
        self._start_runtime(options, runtime)

    def _start_runtime(self, options: dict[str, Any], runtime: Any) -> None:
        raise NotImplementedError  # pragma: no cover - each driver starts its own runtime

    @property
    def paused(self) -> PausedToolCall | None:
        """The tool call the current run waits on, if any."""
        return self._paused

    @property
    def tool_calls_made(self) -> int:
        """Tool calls the session has charged to its budget (a restored one included)."""
        return self._bridge.calls_made

    @property
    def closed(self) -> bool:
        return self._closed or bool(self._rt.closed)

    def describe_tools(self) -> list[dict[str, Any]]:
        """Each tool's name, description and parameters, for a model's prompt."""
        return self._bridge.describe_tools()

    def typescript(self) -> str:
        """TypeScript declarations of ``tools``, for a model writing guest code."""
        return self._bridge.typescript()

    def _check_open(self) -> None:
        if self.closed:
            runtime = f"its runtime is closed: {self._rt._steps.closed_by}"
            why = "close() was called on the session" if self._closed else runtime
            raise closed_error("the session is closed", why)

    def _check_idle(self) -> None:
        self._check_open()
        if self._paused is not None:
            raise RuntimeError("a run is paused at a tool call: resume it (or close the session) first")

    def _pause(self, action: Action, command: Any, call: Any) -> PausedToolCall:
        self._paused = PausedToolCall(self, action.name, action.args)
        self._waiting = (command, call)
        return self._paused

    def _take_waiting(
        self, paused: PausedToolCall, value: Any, error: Exception | None
    ) -> tuple[Any, Any, Any, Exception | None]:
        """The command and call a resume answers, and the answer to send, recorded as the guest
        will receive it; RuntimeError if the call was already answered."""
        self._check_open()
        if value is UNANSWERED:
            value = None
        if paused is not self._paused or self._waiting is None:
            raise RuntimeError("this tool call was already answered")
        command, call = self._waiting
        self._paused, self._waiting = None, None
        value, error = self._session.settle(paused.name, value, error, convertible=self._rt._steps.convertible)
        return command, call, value, error

    def _check_replayed(self, journal: Journal) -> None:
        self._session.replayed(journal)
