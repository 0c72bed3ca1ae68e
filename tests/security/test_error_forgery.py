"""The forgery battery: a real guest reaches the worker's stderr and stdout, prints host
messages, throws errors named like host errors and writes forged frames. It may make a
failure look less retryable, never more, and never turns a host fact into another kind.
A worker that exits cleanly with a whole host message as its last stderr line is the
hostile fake ``tests/fake_workers/forged_clean_exit.py``.

What a guest can reach from inside the worker (found with real workers, pinned below):
``(await import('node:process')).default.stderr.write`` and ``node:fs`` ``writeSync(2, ..)``
reach fd 2; ``process.stdout.write`` and ``writeSync(1, ..)`` reach fd 1, the wire itself;
``console.error`` is a console frame, not stderr. ``process.kill(process.pid, ..)`` kills
the worker; ``process.exit`` fails (the worker deleted ``Deno``), but ``fs.closeSync(1)``
makes the worker's next write fail, and the worker then exits with code 0.
"""

from __future__ import annotations

import errno
import json
import re
from typing import Any

import pytest

import pydeno
from tests.support.error_checks import GUEST_DIED, FakeWorker, assert_explained, eval_failure, failure

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow


# Every message the host writes (or, for a prefix, its start), as a guest would copy it.
HOST_MESSAGES = {
    "timeout": "command exceeded timeout=1s; worker killed",
    "timeout as printed": "command exceeded timeout=1.0s; worker killed",
    "cpu_limit": "worker used more than 1.0s of CPU in one command and was killed",
    "host_wait": (
        "host callbacks kept the guest waiting for more than 1.0s in one command (max_host_wait); worker killed"
    ),
    "memory_limit": "worker used 1 bytes, over max_memory=1; killed",
    "memory_limit from V8": "worker ran out of its V8 heap (sized from max_memory=1) and was stopped",
    "thread_limit": "worker started 99 threads (limit 1); killed",
    "host_call_budget": "guest made more than max_host_calls=1 host calls",
    "protocol_violation": "worker broke protocol: forged",
    "malformed frame": "worker sent a malformed frame (forged)",
    "sandbox_unavailable": "worker failed to start: an OS sandbox is required but forged",
    "limits_unmeasurable": "max_memory cannot be enforced on this system (forged)",
    "deno_unavailable": "worker failed to start: No such file or directory (/usr/bin/deno) [ENOENT]",
    "worker_crashed": "worker process died (killed by SIGKILL)",
    "guest_crashed": "worker died running guest code (exit code 0)",
    "force_killed": "worker did not acknowledge termination within terminate_grace=1.0s; killed",
    "terminated": "runtime was terminated on request",
    "closed runtime": "runtime is closed",
    "closed function": "Function has been closed",
    "abandoned tool calls": "too many abandoned tool calls in this session",
}
# Kinds only the host can establish; no guest action may produce one except by really
# causing it (a guest that really ends its worker is guest_crashed, one that breaks the wire is
# protocol_violation).
HOST_FACTS = {
    "timeout",
    "cpu_limit",
    "memory_limit",
    "thread_limit",
    "host_wait",
    "max_pause",
    "host_call_budget",
    "terminated",
    "force_killed",
    "sandbox_unavailable",
    "limits_unmeasurable",
    "deno_unavailable",
    "closed",
}


def js(text: str) -> str:
    """text as a JavaScript string literal."""
    return json.dumps(text)


def js_line(text: str) -> str:
    """text and a newline as a JavaScript string literal."""
    return json.dumps(text + "\n")


def assert_never_more_retryable(info: pydeno.ErrorInfo, honest: str) -> None:
    """A forgery may at most make the honest kind less retryable, never more."""
    if not pydeno.KINDS[honest][0]:
        assert not info.retryable


# The ways a guest can end its own worker, all reached through node: modules. The two
# signals need sandbox="off": the seccomp filter refuses the worker every fatal signal to
# itself (tests/security/test_deaths.py); an exit needs no permission anywhere.
DEATHS = {
    "SIGKILL": (
        "(await import('node:process')).default.kill((await import('node:process')).default.pid, 'SIGKILL')",
        "killed by SIGKILL",
        "off",
    ),
    "SIGTERM": (
        "(await import('node:process')).default.kill((await import('node:process')).default.pid, 'SIGTERM')",
        "killed by SIGTERM",
        "off",
    ),
    # process.exit needs the Deno global the worker deleted; closing fd 1 makes the worker's
    # own next write fail, and it then exits with code 0.
    "exit 0": ("(await import('node:fs')).closeSync(1); 1", "exit code 0", "require"),
}


@pytest.mark.parametrize("death", list(DEATHS))
@pytest.mark.parametrize("forged", list(HOST_MESSAGES.values()), ids=list(HOST_MESSAGES))
def test_a_guest_that_prints_a_host_message_to_stderr_and_ends_its_worker_is_a_guest_crash_never_retried(
    forged: str, death: str
) -> None:
    code, how, sandbox = DEATHS[death]
    with pydeno.Runtime(timeout=10, sandbox=sandbox) as rt:
        exc = failure(lambda: rt.eval(f"(await import('node:fs')).writeSync(2, {js_line(forged)}); {code}"))
        assert rt.closed
    assert type(exc) is pydeno.WorkerCrashed
    assert str(exc) == f"{GUEST_DIED}{how}): {forged}"
    info = assert_explained(exc, "guest_crashed")
    assert not info.retryable


@pytest.mark.parametrize("death", list(DEATHS))
def test_the_guest_reaches_stderr_through_node_process_too_and_still_only_after_the_prefix(death: str) -> None:
    forged = "worker used 1 bytes, over max_memory=1; killed"
    code, how, sandbox = DEATHS[death]
    with pydeno.Runtime(timeout=10, sandbox=sandbox) as rt:
        exc = failure(
            lambda: rt.eval(f"(await import('node:process')).default.stderr.write({js_line(forged)}); {code}")
        )
    assert str(exc) == f"{GUEST_DIED}{how}): {forged}"
    assert_explained(exc, "guest_crashed")


def test_console_error_is_a_console_frame_not_stderr_and_classifies_nothing() -> None:
    received: list[tuple[str, str]] = []
    forged = "worker used 1 bytes, over max_memory=1; killed"
    with pydeno.Runtime(on_console=lambda level, text: received.append((level, text))) as rt:
        exc = failure(lambda: rt.eval(f"console.error({js(forged)}); null.x"))
        process = rt._sup.process
        assert process is not None
        assert forged.encode() not in process.stderr_tail()
        assert not rt.closed
    assert received == [("error", forged)]
    assert_explained(exc, "js_error")


def test_what_the_guest_writes_to_stderr_while_it_lives_never_becomes_an_error() -> None:
    forged = "worker used 1 bytes, over max_memory=1; killed"
    with pydeno.Runtime() as rt:
        assert rt.eval(f"(await import('node:fs')).writeSync(2, {js_line(forged)}); 'alive'") == "alive"
        exc = failure(lambda: rt.eval("null.x"))
        process = rt._sup.process
        assert process is not None
        assert forged.encode() in process.stderr_tail()
    assert_explained(exc, "js_error")


THROWS = {
    "an Error named like a host error": "throw Object.assign(new Error(MSG), {name: NAME})",
    "a class named like a host error": (
        "throw new ({[NAME]: class extends Error { get name() { return NAME } }})[NAME](MSG)"
    ),
    "an Error with an empty name": "throw Object.assign(new Error(MSG), {name: ''})",
    "a plain object": "throw {name: NAME, message: MSG}",
    "a thrown string": "throw MSG",
    "the message as the name": "throw Object.assign(new Error(MSG), {name: MSG})",
}
HOST_NAMES = ["WorkerCrashed", "RuntimeTimeout", "RuntimeTerminated", "RuntimeError", "TimeoutError", "MemoryError"]


@pytest.mark.parametrize("shape", list(THROWS))
def test_a_guest_error_that_copies_a_host_error_name_or_message_is_a_js_error_never_a_host_fact(shape: str) -> None:
    with pydeno.Runtime() as rt:
        for name in HOST_NAMES if "NAME" in THROWS[shape] else [""]:
            for forged in HOST_MESSAGES.values():
                code = THROWS[shape].replace("NAME", js(name)).replace("MSG", js(forged))
                exc = failure(lambda code=code: rt.eval(code))
                assert type(exc) is pydeno.JavaScriptError, code
                assert str(exc).startswith("Evaluation failed: ")
                assert forged in str(exc)
                info = assert_explained(exc, "js_error")
                assert not info.retryable and not info.retry_with_larger_limits
        assert not rt.closed


@pytest.mark.parametrize(
    "code",
    [
        "throw new Error('more than 4 host calls in flight')",
        "throw Object.assign(new Error('more than 99 host calls in flight'), {name: 'WorkerCrashed'})",
        "throw 'Error: more than 4 host calls in flight'",
    ],
)
def test_a_guest_error_that_copies_the_in_flight_refusal_is_at_most_that_non_retryable_kind(code: str) -> None:
    with pydeno.Runtime() as rt:
        exc = failure(lambda: rt.eval(code))
    assert type(exc) is pydeno.JavaScriptError
    info = assert_explained(exc, "inflight_limit")
    assert not info.retryable
    assert_never_more_retryable(info, "js_error")


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("throw Object.assign(new Error('spent'), {name: 'ToolBudgetError'})", "tool_budget"),
        ("throw new Error('ToolBudgetError: my own budget is spent')", "tool_budget"),
        ("throw 'ToolBudgetError'", "tool_budget"),
        ("throw Object.assign(new Error('x'), {name: 'ToolNotFoundError'})", "tool_not_found"),
        ("throw Object.assign(new Error('x'), {name: 'ToolError'})", "tool_failed"),
        ("throw Object.assign(new Error('x'), {name: 'ToolErrors'})", "js_error"),
    ],
)
def test_a_guest_error_that_names_a_tool_error_is_that_tool_kind_and_never_retryable(code: str, kind: str) -> None:
    with pydeno.Runtime() as rt:
        exc = failure(lambda: rt.eval(code))
        assert not rt.closed
    assert type(exc) is pydeno.JavaScriptError
    info = assert_explained(exc, kind)
    assert not info.retryable
    assert_never_more_retryable(info, "js_error")


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("throw new TypeError('no network access in this sandbox')", "sandbox_denied"),
        ("throw new Error('no file access in this sandbox: \"/x\" was not read')", "sandbox_denied"),
        (
            "throw Object.assign(new Error('no network access in this sandbox'), {name: 'WorkerCrashed'})",
            "sandbox_denied",
        ),
        ("throw 'npm packages cannot be imported in this sandbox'", "import_refused"),
        (
            "throw new Error('module \"x\" cannot be imported in this sandbox: files are not available')",
            "import_refused",
        ),
        ("throw new Error('tools.x() failed on the host (KeyError); its details are hidden')", "tool_failed"),
        ("throw new Error('host function f() failed on the host (MemoryError): worker used 1 bytes')", "tool_failed"),
        ("throw new Error('no network access in this sandbox, honestly')", "js_error"),
    ],
)
def test_a_guest_error_that_copies_a_sandbox_refusal_or_a_host_failure_gains_no_retry(code: str, kind: str) -> None:
    with pydeno.Runtime() as rt:
        exc = failure(lambda: rt.eval(code))
        assert not rt.closed
    assert type(exc) is pydeno.JavaScriptError
    info = assert_explained(exc, kind)
    assert not info.retryable and not info.retry_with_larger_limits
    assert_never_more_retryable(info, "js_error")


# A msgpack writer in the guest: frames the host would accept if the worker wrote them.
FRAMES_JS = """
const fs = await import('node:fs');
const te = new TextEncoder();
const str = (s) => { const b = te.encode(s); return [0xd9, b.length, ...b]; };
const frame = (...items) => {
  const body = [0x90 + items.length, ...items.flat()];
  const n = body.length;
  return new Uint8Array([n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255, ...body]);
};
const FORGED = 'worker used 1 bytes, over max_memory=1; killed';
"""
STDOUT_FORGERIES = [
    pytest.param(
        "fs.writeSync(1, te.encode(FORGED + '\\n'))",
        pydeno.WorkerCrashed,
        "protocol_violation",
        r"worker sent a malformed frame \(length \d+ exceeds max_message_bytes=67108864\)",
        id="a host message as raw text",
    ),
    pytest.param(
        "(await import('node:process')).default.stdout.write(FORGED + '\\n')",
        pydeno.WorkerCrashed,
        "protocol_violation",
        r"worker sent a malformed frame \(length \d+ exceeds max_message_bytes=67108864\)",
        id="raw text through process.stdout",
    ),
    pytest.param(
        "fs.writeSync(1, frame([5]))",
        pydeno.WorkerCrashed,
        "protocol_violation",
        r"worker broke protocol: acknowledged a termination never asked for",
        id="a termination acknowledgement",
    ),
    pytest.param(
        "fs.writeSync(1, frame([0], [1], str('2.0.0'), str('13.0')))",
        pydeno.WorkerCrashed,
        "protocol_violation",
        r"worker broke protocol: unexpected frame of kind 0 with 4 items",
        id="a second handshake",
    ),
    pytest.param(
        "fs.writeSync(1, frame([2], [0xcd, 3, 0xe7], str('WorkerCrashed'), str(FORGED), str(''), [0x90]))",
        pydeno.WorkerCrashed,
        "protocol_violation",
        r"worker broke protocol: an answer to request 999, which is not pending",
        id="an error answering a request never made",
    ),
    pytest.param(
        "fs.writeSync(1, frame([2], [1], str('WorkerCrashed'), str(FORGED), str(''), [0x90]))",
        pydeno.JavaScriptError,
        "js_error",
        r"Evaluation failed: WorkerCrashed: worker used 1 bytes, over max_memory=1; killed",
        id="an error answering the running eval",
    ),
    pytest.param(
        "fs.writeSync(1, frame([2], [1], str(''), str(FORGED), str(''), [0x90]))",
        pydeno.JavaScriptError,
        "js_error",
        r"Evaluation failed: worker used 1 bytes, over max_memory=1; killed",
        id="an error with no name answering the running eval",
    ),
    pytest.param(
        "fs.writeSync(1, frame([2], [1], str(''), str(FORGED), str(''), [0x91, 0x2a]))",
        pydeno.JavaScriptError,
        "js_error",
        r"Evaluation failed: worker used 1 bytes, over max_memory=1; killed",
        id="an error with a thrown value answering the running eval",
    ),
]


@pytest.mark.parametrize(("code", "error", "kind", "message"), STDOUT_FORGERIES)
def test_forged_output_on_the_workers_stdout_is_at_worst_a_protocol_violation(
    code: str, error: type[Exception], kind: str, message: str
) -> None:
    with pydeno.Runtime(timeout=10) as rt:
        # The eval never settles by itself: whatever ends it is what the guest wrote.
        exc = failure(lambda: rt.eval(FRAMES_JS + code + "; await new Promise(() => {})"))
    assert type(exc) is error
    assert re.fullmatch(message, str(exc)), str(exc)
    info = assert_explained(exc, kind)
    assert info.kind not in HOST_FACTS
    assert not info.retryable


def test_a_console_frame_forged_on_stdout_is_only_console_output() -> None:
    received: list[tuple[str, str]] = []
    with pydeno.Runtime(on_console=lambda level, text: received.append((level, text))) as rt:
        assert rt.eval(FRAMES_JS + "fs.writeSync(1, frame([4], str('error'), str(FORGED))); 'done'") == "done"
        assert not rt.closed
    assert received == [("error", "worker used 1 bytes, over max_memory=1; killed")]


WHOLE_MESSAGE_FORGERIES = [
    "worker used 999 bytes, over max_memory=1; killed",
    "command exceeded timeout=1.0s; worker killed",
    "worker started 99 threads (limit 1); killed",
    "runtime is closed",
]


@pytest.mark.parametrize("when", ["after_hello", "mid_eval"])
@pytest.mark.parametrize("forged", WHOLE_MESSAGE_FORGERIES)
def test_a_worker_that_exits_cleanly_with_a_whole_host_message_on_stderr_is_still_a_guest_crash(
    fake_worker: FakeWorker, forged: str, when: str
) -> None:
    fake_worker("forged_clean_exit", when, forged)
    exc = eval_failure("1", timeout=10, startup_timeout=10)
    assert type(exc) is pydeno.WorkerCrashed
    assert str(exc) == f"{GUEST_DIED}exit code 0): {forged}"
    # An exit after the handshake is the worker's own doing; the forgery may only take
    # retryability away, never grant it.
    info = assert_explained(exc, "guest_crashed")
    assert_never_more_retryable(info, "guest_crashed")


class StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class CrashedStrRaises(pydeno.WorkerCrashed):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class BudgetStrRaises(pydeno.ToolBudgetError):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class TimeoutStrRaises(TimeoutError):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class ClosedStrRaises(RuntimeError):
    def __str__(self) -> str:
        raise ValueError("no text for you")


def cyclic(first: BaseException, second: BaseException) -> BaseException:
    crashed = pydeno.WorkerCrashed("worker failed to start: forged")
    crashed.__cause__ = first
    first.__cause__ = second
    second.__cause__ = first
    return crashed


def self_caused() -> BaseException:
    crashed = pydeno.WorkerCrashed("worker failed to start: forged")
    crashed.__cause__ = crashed
    return crashed


def context_cycle() -> BaseException:
    a, b = RuntimeError("runtime is closed"), RuntimeError("runtime is closed")
    a.__context__, b.__context__ = b, a
    return a


ODD_INPUTS = [
    pytest.param(StrRaises(), "unknown", id="__str__ raises"),
    pytest.param(
        CrashedStrRaises("worker process died (exit code 1)"), "unknown", id="a WorkerCrashed whose __str__ raises"
    ),
    pytest.param(BudgetStrRaises("spent"), "tool_budget", id="a ToolBudgetError whose __str__ raises"),
    pytest.param(TimeoutStrRaises(), "timeout", id="a TimeoutError whose __str__ raises"),
    pytest.param(ClosedStrRaises("runtime is closed"), "unknown", id="a RuntimeError whose __str__ raises"),
    pytest.param(cyclic(OSError(errno.EMFILE, "x"), OSError(errno.ENOMEM, "y")), "worker_crashed", id="cyclic causes"),
    pytest.param(cyclic(OSError(errno.EMFILE, "x"), FileNotFoundError()), "deno_unavailable", id="cyclic with a file"),
    pytest.param(self_caused(), "worker_crashed", id="its own cause"),
    pytest.param(context_cycle(), "closed", id="cyclic contexts"),
    pytest.param(KeyboardInterrupt(), "unknown", id="KeyboardInterrupt"),
    pytest.param(SystemExit(3), "unknown", id="SystemExit"),
    pytest.param(GeneratorExit(), "unknown", id="GeneratorExit"),
    pytest.param(BaseExceptionGroup("g", [KeyboardInterrupt()]), "unknown", id="a BaseExceptionGroup"),
    pytest.param(RuntimeError(None), "unknown", id="RuntimeError(None)"),
    pytest.param(Exception(), "unknown", id="Exception()"),
    pytest.param(TypeError(None), "invalid_input", id="TypeError(None)"),
    pytest.param(pydeno.WorkerCrashed(None), "worker_crashed", id="WorkerCrashed(None)"),  # type: ignore[arg-type]
    pytest.param(pydeno.RuntimeTimeout(None), "timeout", id="RuntimeTimeout(None)"),  # type: ignore[arg-type]
    pytest.param(pydeno.JavaScriptError(None, None), "js_error", id="JavaScriptError(None, None)"),  # type: ignore[arg-type]
    pytest.param(pydeno.JavaScriptError("", ""), "js_error", id="JavaScriptError('', '')"),
    pytest.param(None, "unknown", id="None"),
    pytest.param("worker used 1 bytes, over max_memory=1; killed", "unknown", id="a str"),
]


@pytest.mark.parametrize(("exc", "kind"), ODD_INPUTS)
@pytest.mark.parametrize("via_agent", [False, True])
def test_classify_error_never_raises_on_odd_inputs(exc: Any, kind: str, via_agent: bool) -> None:
    info = pydeno.classify_error(exc, via_agent=via_agent)
    assert info.kind == kind
    assert (info.retryable, info.retry_with_larger_limits, info.summary) == pydeno.KINDS[kind]
