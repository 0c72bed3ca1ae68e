"""The host's defences against a hostile worker, through the public API.

Each test starts one of the fake workers in ``tests/fake_workers`` (through the
``fake_worker`` fixture) that speaks the wire badly on purpose, and checks that the host
kills it quickly with an error whose start it wrote itself, closes the runtime, and leaks
nothing (the autouse leak guard in conftest.py checks processes, threads and descriptors).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

import pydeno
from pydeno.host.wire.protocol import PROTOCOL_VERSION, W_HELLO

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

FakeWorker = Callable[..., None]

MALFORMED = "worker sent a malformed frame ("
PROTOCOL = "worker broke protocol: "
STARTUP_EXIT = "worker exited during startup ("
# A fake worker runs without the seccomp filter, so even its signals could be its own doing.
GUEST_DIED = "worker died running guest code ("

MiB = 2**20
# Generous limits for the cases that fail on their own, short ones where a limit must fire:
# either way no test waits long, and a slow machine does not turn one failure into another.
QUICK: dict[str, Any] = {"timeout": 10.0, "startup_timeout": 10.0, "max_message_bytes": MiB}
SHORT_TIMEOUT: dict[str, Any] = {**QUICK, "timeout": 1.0}
SHORT_STARTUP: dict[str, Any] = {**QUICK, "startup_timeout": 1.0}
BACKENDS = ["asyncio", "trio"]


def assert_message(exc: BaseException, prefix: str, detail: str) -> None:
    """The message starts with the host's own prefix; the detail only follows it."""
    message = str(exc)
    assert message.startswith(prefix), message
    assert detail in message[len(prefix) :], message


def assert_closed(rt: pydeno.Runtime) -> None:
    assert rt.closed
    with pytest.raises(RuntimeError, match=r"^runtime is closed\nKind: closed "):
        rt.eval("1")


async def assert_closed_async(rt: pydeno.AsyncRuntime) -> None:
    assert rt.closed
    with pytest.raises(RuntimeError, match=r"^runtime is closed\nKind: closed "):
        await rt.eval("1")


def first_eval_fails(expected: type[pydeno.PydenoError], **options: Any) -> BaseException:
    """Start a runtime, evaluate once, and return the error that eval raised."""
    rt = pydeno.Runtime(**(options or QUICK))
    try:
        with pytest.raises(expected) as info:
            rt.eval("1")
        assert_closed(rt)
    finally:
        rt.close()
    return info.value


def first_async_eval_fails(backend: str, expected: type[pydeno.PydenoError], **options: Any) -> BaseException:
    """The same through AsyncRuntime, whose handshake is awaited by the first eval."""

    async def main() -> BaseException:
        rt = pydeno.AsyncRuntime(**(options or QUICK))
        try:
            with pytest.raises(expected) as info:
                await rt.eval("1")
            await assert_closed_async(rt)
        finally:
            await rt.close()
        return info.value

    return anyio.run(main, backend=backend)


@contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Kill every worker this process started if the block outlives ``seconds``: a hang the
    host should have prevented then fails the test instead of stalling the run."""

    def kill_workers() -> None:
        for child in psutil.Process().children():
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)

    timer = threading.Timer(seconds, kill_workers)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()


# -- bad frames in answer to an eval ---------------------------------------------------------
BAD_ANSWERS = [
    # framing
    ("garbage_text", MALFORMED, f"length {int.from_bytes(b'List', 'big')} exceeds max_message_bytes={MiB})"),
    ("garbage_msgpack", MALFORMED, "FormatError"),
    ("length_4gib", MALFORMED, f"length 4294967295 exceeds max_message_bytes={MiB})"),
    ("empty_frame", MALFORMED, "incomplete input"),
    ("trailing_bytes", MALFORMED, "ExtraData"),
    ("array_length_lie", MALFORMED, f"2147483647 exceeds max_array_len({MiB})"),
    # nesting: the host's limit is 128 levels; deeper than msgpack's own stack is refused too
    ("deep_200", MALFORMED, "a value is nested deeper than 128 levels)"),
    ("deep_1000", MALFORMED, "a value is nested deeper than 128 levels)"),
    ("deep_maps", MALFORMED, "a value is nested deeper than 128 levels)"),
    # too costly to decode before either is found too deep: refused before anything is built
    ("deep_100000", PROTOCOL, "would take about"),
    ("deep_json", PROTOCOL, "would take about"),
    # extension types and strings
    ("unknown_ext", MALFORMED, "unknown extension type 42"),
    ("bigint_bad_sign", MALFORMED, "malformed BigInt"),
    ("bigint_no_digits", MALFORMED, "malformed BigInt"),
    ("bigint_not_hex", MALFORMED, "invalid literal for int() with base 16"),
    ("date_short", MALFORMED, "malformed Date"),
    ("date_nan", MALFORMED, "malformed Date"),
    ("date_far_future", MALFORMED, "Date outside the range of datetime"),
    ("function_handle_short", MALFORMED, "malformed function handle"),
    ("set_not_a_list", MALFORMED, "malformed Set"),
    ("set_of_lists", MALFORMED, "unhashable type: 'list'"),
    ("json_not_json", MALFORMED, "JSONDecodeError"),
    ("invalid_utf8", MALFORMED, "UnicodeDecodeError"),
    ("invalid_utf8_key", MALFORMED, "UnicodeDecodeError"),
    ("map_list_key", MALFORMED, "unhashable type: 'list'"),
    # shapes
    ("not_an_array", PROTOCOL, "a frame is not an array starting with a kind"),
    ("a_scalar", PROTOCOL, "a frame is not an array starting with a kind"),
    ("empty_array", PROTOCOL, "a frame is not an array starting with a kind"),
    ("kind_not_int", PROTOCOL, "a frame is not an array starting with a kind"),
    ("unknown_kind", PROTOCOL, "unexpected frame of kind 99 with 3 items"),
    ("result_wrong_arity", PROTOCOL, "unexpected frame of kind 1 with 2 items"),
    ("result_id_not_int", PROTOCOL, "unexpected frame of kind 1 with 3 items"),
    ("error_not_strings", PROTOCOL, "unexpected frame of kind 2 with 6 items"),
    ("second_hello", PROTOCOL, f"unexpected frame of kind {W_HELLO} with 5 items"),
    ("console_bad_level", PROTOCOL, "unexpected frame of kind 4 with 3 items"),
    ("console_unhashable_level", PROTOCOL, "unexpected frame of kind 4 with 3 items"),
    ("console_text_not_str", PROTOCOL, "unexpected frame of kind 4 with 3 items"),
    ("hostcall_args_not_list", PROTOCOL, "unexpected frame of kind 3 with 4 items"),
    # bookkeeping (the first eval is request 1; the fake answers request 1001)
    ("unknown_result_id", PROTOCOL, "an answer to request 1001, which is not pending"),
    ("unknown_error_id", PROTOCOL, "an answer to request 1001, which is not pending"),
    ("unbound_hostcall", PROTOCOL, "host call to 'never_bound', which was never bound"),
    ("unknown_part_id", PROTOCOL, "part of an answer to request 1001, which is not pending"),
    # a result in parts
    ("parts_over_limit", MALFORMED, f"a result in parts exceeds max_message_bytes={MiB})"),
    ("last_part_not_array", PROTOCOL, "the last part of the answer to request 1 is not an array"),
    ("part_not_array", PROTOCOL, "unexpected frame of kind 6 with 3 items"),
]


@pytest.mark.parametrize(("case", "prefix", "detail"), BAD_ANSWERS)
def test_a_bad_answer_to_an_eval_kills_the_worker_and_closes_the_runtime(
    fake_worker: FakeWorker, case: str, prefix: str, detail: str
) -> None:
    fake_worker("bad_answer", case)
    assert_message(first_eval_fails(pydeno.WorkerCrashed), prefix, detail)


def test_a_length_prefix_over_max_message_bytes_kills_the_worker(fake_worker: FakeWorker) -> None:
    fake_worker("bad_answer", "length_over", "1025")
    error = first_eval_fails(pydeno.WorkerCrashed, **{**QUICK, "max_message_bytes": 1024})
    assert str(error) == "worker sent a malformed frame (length 1025 exceeds max_message_bytes=1024)"


def test_a_4_gib_length_prefix_is_refused_without_waiting_for_the_bytes(fake_worker: FakeWorker) -> None:
    # The fake sends the prefix and 64 bytes, then idles: only a check on the header itself
    # can fail this eval before its (long) timeout.
    fake_worker("bad_answer", "length_4gib")
    with watchdog(30):
        error = first_eval_fails(pydeno.WorkerCrashed, **{**QUICK, "timeout": 600.0})
    assert str(error).startswith(MALFORMED + "length 4294967295 exceeds")


def test_a_truncated_frame_then_exit_is_reported_as_a_death_with_the_workers_last_words(
    fake_worker: FakeWorker,
) -> None:
    fake_worker("bad_answer", "truncated_exit")
    error = first_eval_fails(pydeno.WorkerCrashed)
    assert str(error) == "worker died running guest code (exit code 0): stopped half-way through a frame"


def test_a_truncated_frame_then_silence_ends_in_the_eval_timeout(fake_worker: FakeWorker) -> None:
    fake_worker("bad_answer", "truncated_silent")
    error = first_eval_fails(pydeno.RuntimeTimeout, **SHORT_TIMEOUT)
    assert str(error) == "command exceeded timeout=1.0s; worker killed"


def test_sets_nested_thousands_deep_are_refused_without_crashing_the_host() -> None:
    # In a child interpreter: if the host segfaults, only the child dies.
    script = f"""
import sys
import pydeno
from pydeno.host.process import worker
command = [sys.executable, {str(_fake_path("bad_answer"))!r}, "deep_sets", "5000"]
with worker.launching(worker.Launch(command=lambda config: command)):
    rt = pydeno.Runtime(timeout=10, startup_timeout=10)
try:
    rt.eval("1")
except pydeno.WorkerCrashed as exc:
    print(exc)
"""
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert child.returncode == 0, f"the host died: returncode {child.returncode}, stderr {child.stderr[-500:]!r}"
    assert child.stdout.startswith(MALFORMED), child.stdout


def _fake_path(name: str) -> str:
    return str(Path(__file__).resolve().parent.parent / "fake_workers" / f"{name}.py")


# -- the handshake -------------------------------------------------------------------------------
BAD_HANDSHAKES = [
    ("garbage", MALFORMED, f"length {int.from_bytes(b'Deno', 'big')} exceeds max_message_bytes={MiB})"),
    ("garbage_msgpack", MALFORMED, "FormatError"),
    ("wrong_protocol", PROTOCOL, f"protocol version {PROTOCOL_VERSION + 1}, expected {PROTOCOL_VERSION}"),
    ("protocol_not_int", PROTOCOL, f"unexpected frame of kind {W_HELLO} with 5 items"),
    ("versions_not_str", PROTOCOL, "a malformed handshake"),
    ("hello_not_array", PROTOCOL, "a frame is not an array starting with a kind"),
    ("result_first", PROTOCOL, "the first frame was not a handshake"),
    ("console_first", PROTOCOL, "the first frame was not a handshake"),
    ("exit_with_stderr", STARTUP_EXIT, "exit code 1): at main.ts:1:1"),
    ("killed", STARTUP_EXIT, "killed by SIGKILL)"),
    ("truncated_hello_then_exit", STARTUP_EXIT, "exit code 0)"),
]


@pytest.mark.parametrize(("case", "prefix", "detail"), BAD_HANDSHAKES)
def test_a_bad_handshake_fails_the_runtime_constructor(
    fake_worker: FakeWorker, case: str, prefix: str, detail: str
) -> None:
    fake_worker("bad_handshake", case)
    with pytest.raises(pydeno.WorkerCrashed) as info:
        pydeno.Runtime(**QUICK)
    assert_message(info.value, prefix, detail)


@pytest.mark.parametrize("case", ["silent", "truncated_hello_then_silent"])
def test_a_worker_that_never_completes_its_handshake_hits_startup_timeout(fake_worker: FakeWorker, case: str) -> None:
    fake_worker("bad_handshake", case)
    with pytest.raises(pydeno.WorkerCrashed) as info:
        pydeno.Runtime(**SHORT_STARTUP)
    assert str(info.value) == "worker did not complete its handshake within startup_timeout=1.0s; killed"


def test_garbage_glued_to_a_good_handshake_kills_the_worker_at_the_first_eval(fake_worker: FakeWorker) -> None:
    fake_worker("bad_handshake", "garbage_after_hello")
    assert_message(first_eval_fails(pydeno.WorkerCrashed), MALFORMED, "FormatError")


# -- death, silence and pipes ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("exit_with_stderr", "worker died running guest code (exit code 3): something went badly wrong"),
        ("sigkill", "worker died running guest code (killed by SIGKILL): about to die"),
    ],
)
def test_a_worker_that_dies_during_an_eval_is_reported_with_how_it_ended(
    fake_worker: FakeWorker, case: str, expected: str
) -> None:
    fake_worker("dies_mid_eval", case)
    assert str(first_eval_fails(pydeno.WorkerCrashed)) == expected


def test_a_worker_that_shakes_hands_and_then_says_nothing_hits_the_eval_timeout(fake_worker: FakeWorker) -> None:
    fake_worker("dies_mid_eval", "silent")
    error = first_eval_fails(pydeno.RuntimeTimeout, **SHORT_TIMEOUT)
    assert str(error) == "command exceeded timeout=1.0s; worker killed"


@pytest.mark.parametrize("case", ["forged_stderr", "forged_stderr_ansi"])
def test_a_host_message_forged_on_stderr_only_ever_follows_the_hosts_own_prefix(
    fake_worker: FakeWorker, case: str
) -> None:
    fake_worker("dies_mid_eval", case)
    message = str(first_eval_fails(pydeno.WorkerCrashed))
    assert message == "worker died running guest code (exit code 1): worker used 999 bytes, over max_memory=1; killed"
    assert message.startswith(GUEST_DIED)
    assert not any(ch in message for ch in "\x1b\r\x07")


@pytest.mark.parametrize("case", ["close_stdout", "close_stdin"])
def test_a_worker_that_closes_a_pipe_while_it_runs_is_a_guest_crash(fake_worker: FakeWorker, case: str) -> None:
    fake_worker("closed_pipes", case)
    error = first_eval_fails(pydeno.WorkerCrashed)
    assert str(error) == "worker died running guest code (closed its pipes)"
    assert pydeno.classify_error(error).kind == "guest_crashed"


def test_a_worker_that_never_reads_its_stdin_makes_a_large_eval_time_out(fake_worker: FakeWorker) -> None:
    fake_worker("closed_pipes", "never_reads")
    rt = pydeno.Runtime(**SHORT_TIMEOUT)
    try:
        # Far more than a pipe holds, so the host's write blocks for good.
        with pytest.raises(pydeno.RuntimeTimeout, match=r"^command exceeded timeout=1\.0s; worker killed\n"):
            rt.eval("'" + "x" * (4 * MiB) + "'")
        assert_closed(rt)
    finally:
        rt.close()


def test_a_worker_that_closes_its_stderr_is_waited_for_without_spinning(fake_worker: FakeWorker) -> None:
    # A closed stderr stays readable (at end of file) for good; polling it would busy-loop
    # for the whole half second the fake takes to answer.
    fake_worker("closed_pipes", "close_stderr")
    with pydeno.Runtime(**QUICK) as rt:
        before = resource.getrusage(resource.RUSAGE_SELF)
        assert rt.eval("1") == 42
        after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu < 0.25, f"the host used {cpu:.2f}s of CPU waiting 0.5s for an answer"


def test_megabytes_of_stderr_do_not_deadlock_the_host(fake_worker: FakeWorker) -> None:
    fake_worker("stderr_spam", "4")
    with watchdog(30), pydeno.Runtime(**QUICK) as rt:
        assert rt.eval("1") == 42
        process = rt._sup.process
        assert process is not None
        assert process.stderr_tail().endswith(b"and then it happened again\n")


def test_a_worker_that_never_stops_sending_console_output_still_times_out(fake_worker: FakeWorker) -> None:
    # With a slow console handler the worker always has more output waiting: the deadline
    # must hold even though the host never runs out of bytes to read.
    fake_worker("console_flood")
    seen: list[str] = []

    def slow_handler(level: str, text: str) -> None:
        seen.append(level)
        time.sleep(0.0005)

    with watchdog(30):
        error = first_eval_fails(pydeno.RuntimeTimeout, **{**SHORT_TIMEOUT, "on_console": slow_handler})
    assert str(error) == "command exceeded timeout=1.0s; worker killed"
    assert seen


# -- host calls ----------------------------------------------------------------------------------
def test_a_host_call_id_reused_while_in_flight_kills_the_worker(fake_worker: FakeWorker) -> None:
    # The fake calls f as call 7; f evaluates again on the same runtime, and the fake calls f
    # as call 7 once more while the first call 7 is still running.
    fake_worker("reused_call_id")
    rt = pydeno.Runtime(**QUICK)
    try:
        rt.bind_function("f", lambda: rt.eval("inner"))
        with pytest.raises(pydeno.WorkerCrashed) as info:
            rt.eval("outer")
        assert str(info.value) == "worker broke protocol: host call id 7 reused while in flight"
        assert_closed(rt)
    finally:
        rt.close()


# -- text from the worker ------------------------------------------------------------------------
def test_control_characters_and_terminal_escapes_are_stripped_from_console_output(fake_worker: FakeWorker) -> None:
    fake_worker("forged_text", "console")
    seen: list[tuple[str, str]] = []
    with pydeno.Runtime(**QUICK, on_console=lambda level, text: seen.append((level, text))) as rt:
        assert rt.eval("1") == "done"
    assert seen == [
        ("log", "[2J[HclearedINFO forged line bell\ttab\nsecond line"),
        ("error", "31mC1 escape next-line]0;title done"),
    ]


def test_control_characters_are_stripped_from_a_guest_error(fake_worker: FakeWorker) -> None:
    fake_worker("forged_text", "error")
    with pydeno.Runtime(**QUICK) as rt, pytest.raises(pydeno.JavaScriptError) as info:
        rt.eval("1")
    error = info.value
    assert (error.name, error.message) == ("TypeError", "bad\nWorkerCrashed: forged[0m")
    assert error.stack == "at <eval>:1\n  at [1mx[0m"
    assert str(error).startswith("Evaluation failed: TypeError: ")


# -- the same defences in AsyncRuntime, under asyncio and trio --------------------------------------
ASYNC_CASES = [
    pytest.param(("bad_answer", "garbage_text"), MALFORMED, "exceeds max_message_bytes=", id="garbage"),
    pytest.param(("bad_answer", "length_4gib"), MALFORMED, "length 4294967295 exceeds", id="4gib"),
    pytest.param(("bad_answer", "deep_200"), MALFORMED, "nested deeper than 128", id="deep"),
    pytest.param(("bad_answer", "invalid_utf8"), MALFORMED, "UnicodeDecodeError", id="utf8"),
    pytest.param(("bad_answer", "unbound_hostcall"), PROTOCOL, "never bound", id="unbound"),
    pytest.param(("bad_answer", "console_unhashable_level"), PROTOCOL, "kind 4", id="console-level"),
    pytest.param(
        ("bad_handshake", "wrong_protocol"), PROTOCOL, f"protocol version {PROTOCOL_VERSION + 1}", id="protocol"
    ),
    pytest.param(("bad_handshake", "exit_with_stderr"), STARTUP_EXIT, "at main.ts:1:1", id="startup-exit"),
    pytest.param(("dies_mid_eval", "sigkill"), GUEST_DIED, "killed by SIGKILL)", id="sigkill"),
    pytest.param(("dies_mid_eval", "forged_stderr"), GUEST_DIED, "over max_memory=1", id="forged"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("worker", "prefix", "detail"), ASYNC_CASES)
def test_async_runtime_kills_a_hostile_worker_and_closes(
    fake_worker: FakeWorker, backend: str, worker: tuple[str, str], prefix: str, detail: str
) -> None:
    fake_worker(*worker)
    assert_message(first_async_eval_fails(backend, pydeno.WorkerCrashed), prefix, detail)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_runtime_applies_startup_timeout_and_eval_timeout(fake_worker: FakeWorker, backend: str) -> None:
    fake_worker("bad_handshake", "silent")
    error = first_async_eval_fails(backend, pydeno.WorkerCrashed, **SHORT_STARTUP)
    assert str(error) == "worker did not complete its handshake within startup_timeout=1.0s; killed"
    fake_worker("dies_mid_eval", "silent")
    error = first_async_eval_fails(backend, pydeno.RuntimeTimeout, **SHORT_TIMEOUT)
    assert str(error) == "command exceeded timeout=1.0s; worker killed"


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_runtime_times_out_a_worker_that_never_stops_sending(fake_worker: FakeWorker, backend: str) -> None:
    fake_worker("console_flood")
    options = {**SHORT_TIMEOUT, "on_console": lambda level, text: time.sleep(0.0005)}
    with watchdog(30):
        error = first_async_eval_fails(backend, pydeno.RuntimeTimeout, **options)
    assert str(error) == "command exceeded timeout=1.0s; worker killed"


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_runtime_survives_megabytes_of_stderr(fake_worker: FakeWorker, backend: str) -> None:
    fake_worker("stderr_spam", "2")

    async def main() -> Any:
        async with pydeno.AsyncRuntime(**QUICK) as rt:
            return await rt.eval("1")

    with watchdog(30):
        assert anyio.run(main, backend=backend) == 42


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_runtime_kills_a_worker_that_reuses_a_host_call_id(fake_worker: FakeWorker, backend: str) -> None:
    fake_worker("reused_call_id")

    async def main() -> None:
        rt = pydeno.AsyncRuntime(**QUICK)
        try:

            async def f() -> Any:
                return await rt.eval("inner")

            await rt.bind_function("f", f)
            with pytest.raises(pydeno.WorkerCrashed) as info:
                await rt.eval("outer")
            assert str(info.value) == "worker broke protocol: host call id 7 reused while in flight"
            await assert_closed_async(rt)
        finally:
            await rt.close()

    anyio.run(main, backend=backend)
