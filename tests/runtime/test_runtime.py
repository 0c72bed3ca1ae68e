"""Runtime: the synchronous driver, end to end against real deno workers."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

import pydeno


@pytest.fixture
def rt() -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime() as runtime:
        yield runtime


# -- evaluation semantics ------------------------------------------------------------------
@pytest.mark.slow
def test_eval_returns_the_value_of_the_last_expression(rt: pydeno.Runtime) -> None:
    assert rt.eval("1 + 1") == 2


def test_let_const_function_and_class_declarations_persist_between_evals(rt: pydeno.Runtime) -> None:
    rt.eval("let a = 1; const b = 2; function f() { return 3 } class C { v() { return 4 } }")
    assert rt.eval("a + b + f() + new C().v()") == 10


@pytest.mark.slow
def test_top_level_await_works_and_its_declarations_persist(rt: pydeno.Runtime) -> None:
    assert rt.eval("const x = await Promise.resolve(20); x + 1") == 21
    assert rt.eval("x * 2") == 40


def test_declarations_from_an_await_eval_are_visible_to_a_plain_eval_and_back(rt: pydeno.Runtime) -> None:
    rt.eval("let plain = 5")
    assert rt.eval("let awaited = await Promise.resolve(plain + 1); awaited") == 6
    assert rt.eval("awaited + plain") == 11


@pytest.mark.slow
def test_a_returned_promise_is_awaited(rt: pydeno.Runtime) -> None:
    assert rt.eval("new Promise(r => setTimeout(() => r('late'), 10))") == "late"


def test_an_async_function_result_is_awaited(rt: pydeno.Runtime) -> None:
    assert rt.eval("(async () => { await null; return 7 })()") == 7


def test_redeclaring_a_let_in_a_plain_eval_is_a_javascript_error(rt: pydeno.Runtime) -> None:
    rt.eval("let once = 1")
    with pytest.raises(pydeno.JavaScriptError) as info:
        rt.eval("let once = 2")
    assert info.value.name == "SyntaxError"
    assert rt.eval("once") == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Deno", "process", "require"])
def test_the_guest_sees_no_deno_process_or_require(rt: pydeno.Runtime, name: str) -> None:
    assert rt.eval(f"typeof {name}") == "undefined"
    assert rt.eval(f"'{name}' in globalThis") is False


def test_the_guest_cannot_read_the_host_environment_or_files(rt: pydeno.Runtime) -> None:
    with pytest.raises(pydeno.JavaScriptError) as info:
        rt.eval("const fs = await import('node:fs'); fs.readFileSync('/etc/passwd', 'utf8')")
    # Either the permission check or the missing Deno global stops it; never the contents.
    assert "root:" not in str(info.value)


@pytest.mark.slow
def test_the_guest_cannot_connect_an_inspector_session(rt: pydeno.Runtime) -> None:
    with pytest.raises(pydeno.JavaScriptError):
        rt.eval("const { Session } = await import('node:inspector'); new Session().connect()")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Deno", "process", "require"])
def test_the_guest_still_sees_no_deno_process_or_require_after_a_top_level_await(rt: pydeno.Runtime, name: str) -> None:
    # The first top-level-await eval loads Deno's node:process, which needs the Deno global
    # for a moment: that moment must not outlive the load.
    assert rt.eval("await null; 1") == 1
    assert rt.eval(f"typeof {name}") == "undefined"
    assert rt.eval(f"await null; typeof {name}") == "undefined"


def test_a_guest_global_named_deno_survives_the_first_top_level_await(rt: pydeno.Runtime) -> None:
    rt.eval("globalThis.Deno = 'mine'")
    assert rt.eval("await null; Deno") == "mine"
    assert rt.eval("Deno") == "mine"


# -- the worker's read loop: synchronous reads only when nothing else can run ----------------
@pytest.mark.slow
def test_a_command_waiting_on_a_host_call_still_runs_its_timers(rt: pydeno.Runtime) -> None:
    rt.bind_function("slow", lambda: "host")
    code = "let ticks = 0; const t = setInterval(() => ticks++, 1); slow().then(v => { clearInterval(t); return v })"
    assert rt.eval(code) == "host"
    assert rt.eval("new Promise(r => setTimeout(() => r(ticks >= 0), 5))") is True


def test_a_command_settled_by_a_node_next_tick_completes(rt: pydeno.Runtime) -> None:
    # process.nextTick callbacks share Deno's tick queue with the worker's own read loop.
    code = "const { nextTick } = await import('node:process'); await new Promise(r => nextTick(() => r('ticked')))"
    assert rt.eval(code) == "ticked"
    assert rt.eval("new Promise(r => nextTick(() => r('again')))") == "again"


def test_a_chain_of_microtasks_after_a_host_call_completes(rt: pydeno.Runtime) -> None:
    rt.bind_function("one", lambda: 1)
    code = (
        "one().then(v => v + 1).then(v => Promise.resolve(v + 1))"
        ".then(async v => { await null; await null; return v + 1 })"
    )
    for _ in range(3):
        assert rt.eval(code) == 4


@pytest.mark.slow
def test_an_unhandled_rejection_is_reported_by_the_next_command_without_a_timer() -> None:
    seen: list[tuple[str, str]] = []
    with pydeno.Runtime(on_console=lambda level, text: seen.append((level, text))) as runtime:
        runtime.eval("Promise.reject(new Error('early')); 1")
        assert runtime.eval("2") == 2
        assert ("error", "Uncaught (in promise) Error: early") in seen


# -- errors ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_thrown_error_becomes_javascript_error_with_name_message_and_stack(rt: pydeno.Runtime) -> None:
    with pytest.raises(pydeno.JavaScriptError) as info:
        rt.eval("function boom() { throw new RangeError('too far') }\nboom()")
    err = info.value
    assert str(err) == "Evaluation failed: RangeError: too far"
    assert (err.name, err.message) == ("RangeError", "too far")
    assert "boom" in err.stack
    assert "main.ts" not in err.stack and "ext:core" not in err.stack


@pytest.mark.slow
def test_a_syntax_error_is_a_javascript_error(rt: pydeno.Runtime) -> None:
    with pytest.raises(pydeno.JavaScriptError) as info:
        rt.eval("let = = 1")
    assert info.value.name == "SyntaxError"


def test_throwing_a_non_error_value_keeps_the_host_prefix(rt: pydeno.Runtime) -> None:
    with pytest.raises(pydeno.JavaScriptError) as info:
        rt.eval("throw 42")
    assert str(info.value) == "Evaluation failed: 42"
    assert info.value.name == ""


@pytest.mark.slow
def test_a_rejected_promise_becomes_javascript_error(rt: pydeno.Runtime) -> None:
    with pytest.raises(pydeno.JavaScriptError, match=r"^Evaluation failed: TypeError: nope\n"):
        rt.eval("Promise.reject(new TypeError('nope'))")


def test_an_error_whose_properties_throw_is_still_reported(rt: pydeno.Runtime) -> None:
    code = "const e = new Error('x'); Object.defineProperty(e, 'message', { get() { throw 1 } }); throw e"
    with pytest.raises(pydeno.JavaScriptError) as info:
        rt.eval(code)
    assert info.value.name == "Error"


@pytest.mark.slow
def test_an_error_thrown_from_a_timer_is_reported_and_not_fatal(rt: pydeno.Runtime) -> None:
    seen: list[tuple[str, str]] = []
    with pydeno.Runtime(on_console=lambda level, text: seen.append((level, text))) as runtime:
        runtime.eval("setTimeout(() => { throw new Error('from a timer') }, 0)")
        assert runtime.eval("new Promise(r => setTimeout(() => r(1), 30))") == 1
        assert ("error", "Uncaught Error: from a timer") in seen
    del rt


@pytest.mark.slow
def test_an_unhandled_rejection_is_reported_and_not_fatal() -> None:
    seen: list[tuple[str, str]] = []
    with pydeno.Runtime(on_console=lambda level, text: seen.append((level, text))) as runtime:
        runtime.eval("Promise.reject(new Error('ignored')); 1")
        assert runtime.eval("new Promise(r => setTimeout(() => r(2), 30))") == 2
        assert ("error", "Uncaught (in promise) Error: ignored") in seen


# -- console -----------------------------------------------------------------------------------
def test_console_output_arrives_as_frames_with_its_level() -> None:
    seen: list[tuple[str, str]] = []
    with pydeno.Runtime(on_console=lambda level, text: seen.append((level, text))) as runtime:
        runtime.eval("console.log('a', 1, {b: 2}); console.warn('w'); console.error('e'); console.debug('d')")
    assert seen == [("log", "a 1 { b: 2 }"), ("warn", "w"), ("error", "e"), ("debug", "d")]


def test_console_text_is_bounded_and_control_characters_are_stripped() -> None:
    seen: list[str] = []
    with pydeno.Runtime(on_console=lambda level, text: seen.append(text)) as runtime:
        runtime.eval("console.log('\\x1b[31mred\\x07' + 'x'.repeat(100000))")
    (text,) = seen
    assert text.startswith("[31mred")
    assert "\x1b" not in text and "\x07" not in text
    assert len(text) < 20_000 and text.endswith("more characters]")


def test_console_goes_to_the_pydeno_console_logger_by_default(
    rt: pydeno.Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("DEBUG", logger="pydeno.console"):
        rt.eval("console.warn('careful')")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [("WARNING", "careful")]


# -- host functions -----------------------------------------------------------------------------
@pytest.mark.slow
def test_a_bound_function_is_an_async_guest_global(rt: pydeno.Runtime) -> None:
    rt.bind_function("add", lambda a, b: a + b)
    assert rt.eval("add(2, 3) instanceof Promise") is True
    assert rt.eval("await add(2, 3)") == 5


@pytest.mark.slow
def test_an_async_bound_function_is_awaited(rt: pydeno.Runtime) -> None:
    async def twice(x: int) -> int:
        return 2 * x

    rt.bind_function("twice", twice)
    assert rt.eval("twice(21)") == 42


def test_a_python_exception_reaches_the_guest_as_a_host_failure_named_after_its_class_with_details_hidden(
    rt: pydeno.Runtime,
) -> None:
    def fail() -> None:
        raise KeyError("secret-token")

    rt.bind_function("fail", fail)
    name, message = rt.eval("try { await fail() } catch (e) { [e instanceof Error, e.name, e.message] }")[1:]
    assert name == "KeyError"
    assert message == "host function fail() failed on the host (KeyError); its details are hidden from the program"


def test_expose_host_errors_shows_the_exception_text_to_the_guest() -> None:
    def fail() -> None:
        raise ValueError("bad input")

    with pydeno.Runtime(expose_host_errors=True) as runtime:
        runtime.bind_function("fail", fail)
        assert (
            runtime.eval("fail().catch(e => `${e.name}: ${e.message}`)")
            == "ValueError: host function fail() failed on the host (ValueError): bad input"
        )


def test_an_uncaught_host_error_fails_the_eval_as_a_host_failure_not_the_guests_error(rt: pydeno.Runtime) -> None:
    def fail() -> None:
        raise RuntimeError("x")

    rt.bind_function("fail", fail)
    with pytest.raises(pydeno.JavaScriptError) as info:
        rt.eval("await fail()")
    assert info.value.name == "RuntimeError"
    assert info.value.kind == "tool_failed"
    assert "(host function fail() raised RuntimeError)" in info.value.hint


def test_a_host_function_returning_an_unconvertible_value_gives_the_guest_a_clear_error(rt: pydeno.Runtime) -> None:
    rt.bind_function("weird", object)
    message = rt.eval("weird().catch(e => e.message)")
    assert "could not be converted" in message and "object" in message
    assert rt.eval("1") == 1


def test_a_host_function_may_call_back_into_the_guest(rt: pydeno.Runtime) -> None:
    double = rt.eval("(x) => x * 2")
    rt.bind_function("viaHost", lambda x: double(x) + 1)
    assert rt.eval("viaHost(20)") == 41


def test_several_host_calls_in_flight_all_complete(rt: pydeno.Runtime) -> None:
    rt.bind_function("ident", lambda x: x)
    assert rt.eval("Promise.all(Array.from({length: 32}, (_, i) => ident(i)))") == list(range(32))


@pytest.mark.slow
def test_rebinding_a_name_replaces_the_function(rt: pydeno.Runtime) -> None:
    rt.bind_function("f", lambda: 1)
    rt.bind_function("f", lambda: 2)
    assert rt.eval("f()") == 2


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "fn", "error", "match"),
    [
        (1, len, TypeError, "name must be a str"),
        ("not valid", len, ValueError, "JavaScript identifier"),
        ("1abc", len, ValueError, "JavaScript identifier"),
        ("class", len, ValueError, "reserved"),
        ("ok", "not callable", TypeError, "fn must be callable"),
    ],
)
def test_bind_function_refuses_bad_arguments_clearly(
    rt: pydeno.Runtime, name: Any, fn: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        rt.bind_function(name, fn)


# -- arguments, deadlines and closing ------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"timeout": 0}, ValueError, "timeout must be a positive"),
        ({"timeout": "1"}, TypeError, "timeout must be a number"),
        ({"timeout": float("nan")}, ValueError, "timeout must be a positive"),
        ({"max_memory": 10}, ValueError, "max_memory must be at least"),
        ({"max_memory": 1.5}, TypeError, "max_memory must be an int"),
        ({"jitless": "yes"}, TypeError, "jitless must be True or False"),
        ({"max_message_bytes": 0}, ValueError, "max_message_bytes must be at least"),
        ({"on_console": 3}, TypeError, "on_console must be a callable"),
    ],
)
def test_runtime_refuses_bad_options_before_starting_a_worker(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        pydeno.Runtime(**kwargs)


@pytest.mark.slow
def test_eval_refuses_code_that_is_not_a_string(rt: pydeno.Runtime) -> None:
    with pytest.raises(TypeError, match="code must be a str"):
        rt.eval(b"1")  # type: ignore[arg-type]
    assert rt.eval("1") == 1


@pytest.mark.slow
def test_a_deadline_kills_the_worker_and_closes_the_runtime(rt: pydeno.Runtime) -> None:
    with pytest.raises(pydeno.RuntimeTimeout, match=r"^command exceeded timeout=0\.3s; worker killed\n"):
        rt.eval("while (true) {}", timeout=0.3)
    assert rt.closed
    with pytest.raises(RuntimeError, match=r"^runtime is closed\nKind: closed "):
        rt.eval("1")


@pytest.mark.slow
def test_the_deadline_covers_promises_that_never_settle() -> None:
    with pydeno.Runtime(timeout=0.3) as runtime, pytest.raises(pydeno.RuntimeTimeout):
        runtime.eval("new Promise(() => {})")


def test_runtime_timeout_is_not_a_builtin_timeout_error() -> None:
    assert not issubclass(pydeno.RuntimeTimeout, TimeoutError)
    assert issubclass(pydeno.RuntimeTimeout, pydeno.PydenoError)


def test_a_closed_runtime_refuses_every_call() -> None:
    runtime = pydeno.Runtime()
    fn = runtime.eval("() => 1")
    runtime.close()
    runtime.close()
    for call in (lambda: runtime.eval("1"), lambda: runtime.bind_function("f", len), fn):
        with pytest.raises(RuntimeError):
            call()


def test_a_worker_killed_from_outside_raises_worker_crashed_and_closes(rt: pydeno.Runtime) -> None:
    rt.eval("1")
    process = rt._sup.process
    assert process is not None
    process.popen.kill()
    with pytest.raises(pydeno.WorkerCrashed, match=r"^worker process died \(killed by SIGKILL\)"):
        rt.eval("1")
    assert rt.closed


def test_calls_from_several_threads_are_serialised(rt: pydeno.Runtime) -> None:
    rt.eval("let counter = 0")
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(50):
                rt.eval("counter += 1")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert rt.eval("counter") == 200


def test_runtimes_are_independent() -> None:
    with pydeno.Runtime() as a, pydeno.Runtime() as b:
        a.eval("globalThis.shared = 1")
        assert b.eval("typeof shared") == "undefined"


def test_jitless_false_starts_a_working_runtime() -> None:
    with pydeno.Runtime(jitless=False) as runtime:
        assert runtime.eval("[1, 2, 3].reduce((a, b) => a + b)") == 6


def test_the_worker_leaves_no_global_of_its_own_for_the_guest(rt: pydeno.Runtime) -> None:
    # gc stays as a name (V8 makes it non-configurable), with no function behind it.
    own = "Object.getOwnPropertyNames(globalThis).filter(n => n.startsWith('$') || /pydeno/.test(n))"
    assert rt.eval(own) == []
    assert rt.eval("globalThis.gc") is pydeno.undefined
    assert rt.eval("const v = await Promise.resolve({ok: true}); v") == {"ok": True}
    assert rt.eval(own) == []


def test_an_error_with_a_huge_message_is_reported_cut_short_and_the_worker_lives_on() -> None:
    with pydeno.Runtime(max_message_bytes=1_000_000) as runtime:
        with pytest.raises(pydeno.JavaScriptError) as info:
            runtime.eval("throw new Error('x'.repeat(2e6))")
        assert info.value.message.startswith("xxxx") and info.value.message.endswith("more characters]")
        assert len(str(info.value)) < 1_000_000
        assert runtime.eval("1") == 1


def test_an_on_console_handler_that_raises_is_logged_and_the_command_completes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(level: str, text: str) -> None:
        raise ValueError("handler bug")

    with pydeno.Runtime(on_console=broken) as runtime, caplog.at_level("ERROR", logger="pydeno.console"):
        assert runtime.eval("console.log('a'); console.log('b'); 42") == 42
        assert runtime.eval("1") == 1
    assert [r.getMessage() for r in caplog.records] == ["pydeno: the on_console handler raised"] * 2


# -- memory over a long life ---------------------------------------------------------------------
def _worker_rss(runtime: pydeno.Runtime) -> int:
    process = runtime._sup.process
    assert process is not None
    return int(psutil.Process(process.pid).memory_info().rss)


def _growth_over_new_code(rt: pydeno.Runtime, template: str) -> int:
    """How far the worker's RSS rose above where it stood after 3,000 evals of new code (the
    first collections load what they need once), over 15,000 more: template with {i}."""
    for i in range(3_000):
        rt.eval(template.format(i=i))
    before = _worker_rss(rt)
    highest = before
    for i in range(3_000, 18_000):
        assert rt.eval(template.format(i=i)) == i + 1
        if i % 500 == 0:
            highest = max(highest, _worker_rss(rt))
    return highest - before


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["require", "off"])
def test_evals_of_new_code_do_not_grow_the_worker_and_what_it_declared_survives(sandbox: Any) -> None:
    # Each eval of new code used to leave its whole script in V8's compilation cache: about
    # 1 KiB of RSS per eval, +13 MiB over these 15,000 (measured). The worker's collections
    # now keep it within a band a few MiB wide, in either sandbox mode (V8's young generation
    # shrinks at each collection and grows back); 5 MiB leaves room for a busy machine.
    with pydeno.Runtime(sandbox=sandbox) as rt:
        rt.eval("let kept = 'still here'; function twice(x) { return 2 * x }")
        growth = _growth_over_new_code(rt, "({i}) + 1")
        assert growth < 5 * 2**20, f"the worker grew by {growth / 2**20:.1f} MiB"
        assert rt.eval("kept") == "still here"
        assert rt.eval("twice(kept.length)") == 20
        assert rt.eval("await Promise.resolve(kept)") == "still here"
        with pytest.raises(pydeno.JavaScriptError) as info:
            rt.eval("let kept = 1")
        assert info.value.name == "SyntaxError"


@pytest.mark.slow
def test_evals_of_new_code_with_await_do_not_grow_the_worker() -> None:
    # Each is rewritten under a name of its own, whose mapping of frames the worker keeps for
    # the latest only: keeping them all grew the worker by about 0.7 KiB per eval.
    with pydeno.Runtime() as rt:
        rt.eval("let kept = await 'still here'")
        growth = _growth_over_new_code(rt, "await ({i}) + 1")
        assert growth < 6 * 2**20, f"the worker grew by {growth / 2**20:.1f} MiB"
        assert rt.eval("kept") == "still here"


def test_a_runtime_that_repeats_one_eval_is_not_collected_again_and_again() -> None:
    # Repeating one eval compiles nothing, so nothing would be given back for good: only the
    # young generation, which every collection shrinks and every few hundred commands fill
    # again. With an allowance smaller than that regrowth, the worker collected every 1,280
    # commands, a pause of several milliseconds each. Only a full collection clears a WeakRef
    # to an object that has outlived a few scavenges, which the guest can see.
    with pydeno.Runtime() as rt:
        rt.eval("globalThis.held = { old: true }; globalThis.ref = new WeakRef(held); void 0")
        for _ in range(3_000):  # scavenges move it to the old generation while it is held
            rt.eval("1 + 1")
        rt.eval("delete globalThis.held")
        for _ in range(4_000):
            rt.eval("1 + 1")
        assert rt.eval("ref.deref() !== undefined") is True


LEFT_OPEN = textwrap.dedent(
    """
    import pydeno
    confined, unconfined = pydeno.Runtime(), pydeno.Runtime(sandbox="off")
    assert confined.eval("1 + 1") == 2 and unconfined.eval("2") == 2
    print(confined._sup.process.pid, unconfined._sup.process.pid)
    """
)


def test_runtimes_left_open_at_interpreter_exit_end_quietly_and_take_their_workers() -> None:
    done = subprocess.run([sys.executable, "-c", LEFT_OPEN], check=False, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    pids = [int(pid) for pid in done.stdout.split()]
    deadline = time.monotonic() + 10
    while (alive := [pid for pid in pids if psutil.pid_exists(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive == []
