"""The runtime core as the state machine it is: bytes and the time in, events, bytes to send
and deadlines out, with no deno, no process, no thread and no sleep.

A test plays the worker by feeding frames it builds, and plays the clocks; it reads the
notices the core queues for the supervisor, so what the core tells the monitor is seen too.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import msgpack
import pytest

import pydeno
from pydeno._base.options import RuntimeOptions
from pydeno.host.wire.connection import (
    H_EVAL,
    H_REPLY,
    H_TERMINATE,
    PROTOCOL_VERSION,
    W_CONSOLE,
    W_ERROR,
    W_HELLO,
    W_HOSTCALL,
    W_PART,
    W_RESULT,
    W_TERMINATED,
    HostCall,
)
from pydeno.host.wire.core import (
    LOOK_NS,
    NEED_DATA,
    TICK,
    Bind,
    Closed,
    Command,
    Core,
    Eval,
    ForceKill,
    HostWait,
    Idle,
    Running,
    State,
)


def wire(value: Any) -> bytes:
    payload: bytes = msgpack.packb(value, use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


def sent(data: bytes) -> list[Any]:
    """The frames in bytes the core gave to send."""
    frames, view = [], memoryview(data)
    while view:
        (length,) = struct.unpack(">I", view[:4])
        frames.append(msgpack.unpackb(view[4 : 4 + length], raw=False, strict_map_key=False))
        view = view[4 + length :]
    return frames


class Observer:
    """Reads what the core queued for the supervisor, as records a test can compare."""

    def __init__(self, core: Core | None = None) -> None:
        self.core = core
        self._told: list[tuple[Any, ...]] = []

    @property
    def told(self) -> list[tuple[Any, ...]]:
        assert self.core is not None
        for notice in self.core.take_notices():
            if isinstance(notice, Running):
                self._told.append(("command_started",))
            elif isinstance(notice, Idle):
                self._told.append(("commands_finished",))
            elif isinstance(notice, HostWait):
                verdict = None if notice.verdict is None else str(notice.verdict)
                self._told.append(("host_wait_until", notice.deadline, verdict))
            elif isinstance(notice, ForceKill):
                self._told.append(("force_kill_at", notice.deadline, str(notice.verdict)))
            elif isinstance(notice, Closed):
                self._told.append(("closed",))
        return self._told


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.ns = 0

    def __call__(self) -> float:
        return self.now


def make_core(**options: Any) -> tuple[Core, Observer, Clock]:
    clock = Clock()
    core = Core(
        RuntimeOptions(**options),
        make_function=lambda fid: ("function", fid),
        function_id=lambda value: None,
        clock=clock,
        ns_clock=lambda: clock.ns,
    )
    assert core.state is State.STARTING
    core.feed(wire([W_HELLO, PROTOCOL_VERSION, "2.0.0", "13.0", []]))
    assert core.pump() is None and core.connection.hello is not None
    assert core.state is State.READY
    return core, Observer(core), clock


def bind(core: Core, name: str, fn: Any) -> None:
    """Bind fn as the worker would confirm it."""
    command = core.request(Bind(name, fn))
    assert core.functions[name] is fn
    core.feed(wire([W_RESULT, command.rid, None]))
    assert core.pump() is None and core.finish(command) is None


def start_eval(core: Core, code: str = "1 + 1", timeout: float | None = None, *, internal: bool = False) -> Command:
    command = core.request(Eval(code), timeout, internal=internal)
    assert sent(command.take_data()) == [[H_EVAL, command.rid, code]]
    assert command.take_data() == b""
    return command


def test_a_result_completes_its_command_and_the_value_is_taken_once() -> None:
    core, observer, _ = make_core()
    command = start_eval(core)
    assert core.pump() is NEED_DATA
    core.feed(wire([W_RESULT, command.rid, 2]))
    assert core.pump() is None
    assert core.finish(command) == 2
    assert observer.told == [("command_started",), ("commands_finished",)]


def test_a_guest_error_is_raised_as_javascript_error_when_the_command_finishes() -> None:
    core, _, _ = make_core()
    command = start_eval(core)
    core.feed(wire([W_ERROR, command.rid, "TypeError", "x is not a function", "TypeError: x\n    at <eval>", []]))
    assert core.pump() is None
    with pytest.raises(pydeno.JavaScriptError, match="TypeError: x is not a function"):
        core.finish(command)
    assert not core.closed


def test_a_result_in_parts_arrives_as_one_array() -> None:
    core, _, _ = make_core()
    command = start_eval(core)
    core.feed(wire([W_PART, command.rid, [1, 2]]) + wire([W_PART, command.rid, [3]]))
    assert core.pump() is NEED_DATA
    core.feed(wire([W_RESULT, command.rid, [4]]))
    assert core.pump() is None
    assert core.finish(command) == [1, 2, 3, 4]


def test_the_deadline_is_the_timeout_from_when_the_command_began_and_raises_once_passed() -> None:
    core, observer, clock = make_core(timeout=2.0)
    command = start_eval(core)
    assert command.deadline == clock.now + 2.0
    assert core.remaining(command) == TICK
    clock.now += 1.9
    assert core.remaining(command) == pytest.approx(0.1)
    clock.now += 0.1
    with pytest.raises(pydeno.RuntimeTimeout) as info:
        core.remaining(command)
    assert str(info.value) == "command exceeded timeout=2.0s; worker killed"
    assert info.value.kind == "timeout"
    assert core.closed and observer.told[-1] == ("closed",)


def test_a_timeout_given_to_one_command_overrides_the_runtimes() -> None:
    core, _, clock = make_core(timeout=2.0)
    assert start_eval(core, timeout=0.5).deadline == clock.now + 0.5
    assert start_eval(make_core(timeout=None)[0]).deadline == math.inf


def test_the_handshake_has_its_own_deadline() -> None:
    core, _, clock = make_core(startup_timeout=3.0)
    deadline = core.startup_deadline()
    clock.now += 3.0
    with pytest.raises(pydeno.WorkerCrashed, match=r"within startup_timeout=3\.0s") as info:
        core.remaining(None, deadline)
    assert info.value.kind == "worker_crashed"


def test_a_host_call_names_its_function_and_the_reply_goes_back_by_its_id() -> None:
    core, _, _ = make_core()
    bind(core, "lookup", {"a": 1}.get)
    command = start_eval(core, "await lookup('a')")
    core.feed(wire([W_HOSTCALL, 7, "lookup", ["a"]]))
    call = core.pump()
    assert isinstance(call, HostCall) and (call.call_id, call.name, call.args) == (7, "lookup", ["a"])
    target = core.begin_host_call(call)
    assert callable(target) and not isinstance(target, bytes)
    assert sent(core.settle_host_call(call, target(*call.args))) == [[H_REPLY, 7, True, 1]]
    core.feed(wire([W_RESULT, command.rid, 1]))
    assert core.pump() is None and core.finish(command) == 1


def test_the_time_a_host_function_takes_moves_the_guests_deadline_and_counts_as_host_wait() -> None:
    core, _, clock = make_core(timeout=1.0)
    bind(core, "slow", lambda: None)
    command = start_eval(core)
    core.feed(wire([W_HOSTCALL, 1, "slow", []]))
    call = core.pump()
    assert isinstance(call, HostCall)
    core.begin_host_call(call)
    clock.now += 5.0
    core.settle_host_call(call, None)
    assert command.host_wait == 5.0
    assert command.deadline == 1000.0 + 1.0 + 5.0
    assert core.remaining(command) == TICK


def test_max_host_wait_is_told_to_the_monitor_and_raised_once_spent() -> None:
    core, observer, clock = make_core(max_host_wait=2.0)
    bind(core, "slow", lambda: None)
    start_eval(core)
    core.feed(wire([W_HOSTCALL, 1, "slow", []]))
    call = core.pump()
    assert isinstance(call, HostCall)
    core.begin_host_call(call)
    message = "host callbacks kept the guest waiting for more than 2.0s in one command (max_host_wait); worker killed"
    assert observer.told[-1] == ("host_wait_until", clock.now + 2.0, message)
    clock.now += 2.5
    with pytest.raises(pydeno.RuntimeTimeout, match=r"\Ahost callbacks kept the guest waiting") as info:
        core.settle_host_call(call, None)
    assert info.value.kind == "host_wait"
    assert ("host_wait_until", None, None) in observer.told and core.closed


def test_more_host_calls_than_max_host_calls_end_the_runtime() -> None:
    core, _, _ = make_core(max_host_calls=1)
    bind(core, "f", lambda: None)
    start_eval(core)
    core.feed(wire([W_HOSTCALL, 1, "f", []]))
    call = core.pump()
    assert isinstance(call, HostCall)
    core.settle_host_call(call, None)
    core.feed(wire([W_HOSTCALL, 2, "f", []]))
    with pytest.raises(pydeno.WorkerCrashed) as info:
        core.pump()
    assert str(info.value) == "guest made more than max_host_calls=1 host calls"
    assert info.value.kind == "host_call_budget" and core.closed


def test_a_host_call_over_max_inflight_host_calls_is_refused_to_the_guest_not_run() -> None:
    core, _, _ = make_core(max_inflight_host_calls=1)
    bind(core, "f", lambda: None)
    start_eval(core)
    core.feed(wire([W_HOSTCALL, 1, "f", []]))
    first = core.pump()
    assert isinstance(first, HostCall) and callable(core.begin_host_call(first))
    core.feed(wire([W_HOSTCALL, 2, "f", []]))
    second = core.pump()
    assert isinstance(second, HostCall)
    refusal = core.begin_host_call(second)
    assert isinstance(refusal, bytes)
    assert sent(refusal) == [[H_REPLY, 2, False, ["Error", "more than 1 host calls in flight"]]]
    assert not core.closed


def test_a_host_functions_exception_reaches_the_guest_with_its_details_hidden() -> None:
    core, _, _ = make_core()
    bind(core, "f", lambda: None)
    start_eval(core)
    core.feed(wire([W_HOSTCALL, 1, "f", []]))
    call = core.pump()
    assert isinstance(call, HostCall)
    core.begin_host_call(call)
    reply = core.settle_host_call(call, error=KeyError("secret"))
    assert sent(reply) == [
        [
            H_REPLY,
            1,
            False,
            [
                "KeyError",
                "host function f() failed on the host (KeyError); its details are hidden from the program",
            ],
        ]
    ]


def test_console_output_goes_to_the_handler_and_is_capped_per_command() -> None:
    seen: list[tuple[str, str]] = []
    core, _, _ = make_core(max_console_bytes=5, on_console=lambda level, text: seen.append((level, text)))
    command = start_eval(core)
    core.feed(wire([W_CONSOLE, "log", "abc"]) + wire([W_CONSOLE, "log", "defg"]) + wire([W_CONSOLE, "log", "h"]))
    core.feed(wire([W_RESULT, command.rid, None]))
    assert core.pump() is None
    assert seen == [
        ("log", "abc"),
        ("warn", "pydeno: console output went over max_console_bytes=5 in this command; the rest is dropped"),
    ]


def test_terminate_sends_its_frame_sets_the_grace_and_an_acknowledgement_raises_terminated() -> None:
    core, observer, clock = make_core(terminate_grace=1.5)
    start_eval(core)
    data = core.request_termination()
    assert data is not None and sent(data) == [[H_TERMINATE]]
    assert observer.told[-1][:2] == ("force_kill_at", clock.now + 1.5)
    core.feed(wire([W_TERMINATED]))
    with pytest.raises(pydeno.RuntimeTerminated) as info:
        core.pump()
    assert info.value.kind == "terminated" and core.closed


def test_a_termination_not_acknowledged_within_the_grace_is_force_killed() -> None:
    core, _, clock = make_core(terminate_grace=1.0)
    command = start_eval(core)
    core.request_termination()
    clock.now += 1.0
    with pytest.raises(pydeno.RuntimeForceKilled) as info:
        core.remaining(command)
    assert info.value.kind == "force_killed"


def test_terminate_with_no_command_running_just_closes() -> None:
    core, observer, _ = make_core()
    assert core.request_termination() is None
    assert core.closed and observer.told == [("closed",)]


def test_an_acknowledgement_nobody_asked_for_is_a_protocol_violation() -> None:
    core, _, _ = make_core()
    start_eval(core)
    core.feed(wire([W_TERMINATED]))
    with pytest.raises(pydeno.WorkerCrashed, match=r"\Aworker broke protocol: ") as info:
        core.pump()
    assert info.value.kind == "protocol_violation" and core.closed


def test_a_forged_frame_closes_the_runtime_as_a_protocol_violation() -> None:
    core, _, _ = make_core()
    start_eval(core)
    core.feed(wire([W_RESULT, 999, 1]))
    with pytest.raises(pydeno.WorkerCrashed) as info:
        core.pump()
    assert info.value.kind == "protocol_violation"


def test_after_a_send_the_core_asks_to_look_again_for_a_moment() -> None:
    core, _, clock = make_core()
    assert not core.answer_expected()
    core.sent()
    assert core.answer_expected()
    clock.ns += LOOK_NS
    assert not core.answer_expected()


def test_an_interrupted_command_closes_the_runtime_and_a_failed_step_does_not() -> None:
    core, _, _ = make_core()
    core.abandon(start_eval(core), ValueError("a bad argument"))
    assert not core.closed and not core.commands
    core.abandon(start_eval(core), KeyboardInterrupt())
    assert core.closed


def test_a_closed_core_refuses_to_go_on() -> None:
    core, observer, _ = make_core()
    core.close()
    core.close()
    assert observer.told == [("closed",)]
    with pytest.raises(RuntimeError, match=r"\Aruntime is closed\nKind: closed "):
        core.check_open()


def test_a_request_is_made_in_one_call_that_carries_its_id_and_its_bytes() -> None:
    core, observer, clock = make_core(timeout=3.0)
    command = core.request(Eval("1 + 1", typescript=True), 0.5)
    assert core.commands == [command] and command.deadline == clock.now + 0.5
    assert sent(command.take_data())[0][1] == command.rid
    assert observer.told == [("command_started",)]


def test_the_lifecycle_moves_forward_only() -> None:
    core, _, _ = make_core()
    start_eval(core)
    core.request_termination()
    assert core.state is State.TERMINATING
    core.close()
    assert core.state is State.CLOSED and core.closed
    with pytest.raises(AssertionError, match="from closed to ready"):
        core._move(State.READY)


def test_the_core_counts_commands_internal_ones_and_host_calls() -> None:
    core, _, _ = make_core()
    bind(core, "f", lambda: None)
    command = start_eval(core)
    core.feed(wire([W_HOSTCALL, 1, "f", []]))
    call = core.pump()
    assert isinstance(call, HostCall)
    core.begin_host_call(call)
    core.settle_host_call(call, None)
    core.feed(wire([W_RESULT, command.rid, None]))
    assert core.pump() is None and core.finish(command) is None
    internal = start_eval(core, internal=True)
    core.abandon(internal, ValueError("a failed step"))
    core.abandon(internal, ValueError("ended once"))
    assert (core.commands_done, core.internal_done, core.host_calls) == (3, 1, 1)


def test_a_close_says_whether_close_was_called() -> None:
    core, observer, _ = make_core()
    core.close("the runtime was closed after timeout")
    assert not core.closed_by_call and observer.told == [("closed",)]
    other, _, _ = make_core()
    other.close(by_call=True)
    assert other.closed_by_call and other.take_notices() == [Closed(by_call=True)]


def test_an_acknowledgement_in_a_dead_worker_s_last_output_is_seen() -> None:
    core, _, _ = make_core()
    start_eval(core)
    core.request_termination()
    core.feed(wire([W_CONSOLE, "log", "last words"]) + wire([W_TERMINATED]))
    assert core.saw_termination()
