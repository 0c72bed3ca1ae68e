"""A closed runtime (or function handle, or session) says so in pydeno's own terms: the
exception is both a PydenoError and a RuntimeError, its text is the kind table's exact
phrase, and its note says what closed it."""

from __future__ import annotations

import pickle
import re
from typing import Any

import pytest

import pydeno

# Real workers: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

MiB = 2**20


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


def closed_failure(call: object) -> pydeno.ClosedError:
    assert callable(call)
    with pytest.raises(pydeno.PydenoError) as info:
        call()
    exc = info.value
    assert isinstance(exc, pydeno.ClosedError)
    assert isinstance(exc, RuntimeError)
    assert pydeno.classify_error(exc).kind == "closed"
    assert exc.kind == "closed"
    # The note holds the hint, which says what closed it.
    assert exc.__notes__ == [exc.__notes__[0]]
    assert f"\nFix: {exc.hint}\n" in exc.__notes__[0]
    return exc


def test_a_runtime_closed_by_its_memory_limit_says_so_when_used_again() -> None:
    limit = 128 * MiB
    with pydeno.Runtime(max_memory=limit, timeout=30) as rt:
        with pytest.raises(pydeno.WorkerCrashed) as first:
            rt.eval("const a = []; while (true) a.push({x: Math.random(), s: 'y'.repeat(100)})")
        assert first.value.kind == "memory_limit"
        exc = closed_failure(lambda: rt.eval("1"))
    assert str(exc) == "runtime is closed"
    assert exc.hint.startswith(f"the runtime was closed after memory_limit: {first.value}. ")
    assert re.search(r"max_memory=134217728", exc.__notes__[0])


def test_a_runtime_closed_by_its_deadline_names_the_timeout() -> None:
    with pydeno.Runtime(timeout=0.3) as rt:
        with pytest.raises(pydeno.RuntimeTimeout):
            rt.eval("while (true) {}")
        exc = closed_failure(lambda: rt.eval("1"))
    assert exc.hint.startswith("the runtime was closed after timeout: command exceeded timeout=0.3s; worker killed. ")


def test_a_runtime_closed_by_close_says_close_was_called() -> None:
    rt = pydeno.Runtime()
    rt.close()
    exc = closed_failure(lambda: rt.eval("1"))
    assert str(exc) == "runtime is closed"
    assert exc.hint.startswith("close() was called on the runtime (")


def test_a_runtime_closed_by_terminate_with_nothing_running_says_terminate_was_called() -> None:
    rt = pydeno.Runtime()
    rt.terminate()
    exc = closed_failure(lambda: rt.eval("1"))
    assert exc.hint.startswith("terminate() was called while no command ran, which closes the runtime. ")


@pytest.mark.anyio
async def test_an_async_runtime_closed_by_a_crash_names_the_crash() -> None:
    async with pydeno.AsyncRuntime() as rt:
        with pytest.raises(pydeno.WorkerCrashed) as first:
            await rt.eval("(await import('node:fs')).closeSync(1); 1")
        with pytest.raises(pydeno.PydenoError) as info:
            await rt.eval("1")
    exc = info.value
    assert isinstance(exc, pydeno.ClosedError) and isinstance(exc, RuntimeError)
    assert str(exc) == "runtime is closed"
    assert exc.hint.startswith(f"the runtime was closed after {first.value.kind}: {first.value}. ")


def test_a_function_handle_says_whether_it_or_its_runtime_was_closed() -> None:
    with pydeno.Runtime(timeout=0.3) as rt:
        fn = rt.eval("(x) => x + 1")
        other = rt.eval("(x) => x - 1")
        fn.close()
        exc = closed_failure(lambda: fn(1))
        assert str(exc) == "Function has been closed"
        assert exc.hint.startswith("close() was called on this JsFunction. ")
        with pytest.raises(pydeno.RuntimeTimeout):
            rt.eval("while (true) {}")
        exc = closed_failure(lambda: other(1))
    assert str(exc) == "Function has been closed"
    assert exc.hint.startswith("its runtime is closed: the runtime was closed after timeout: ")


def test_a_closed_error_crosses_a_process_boundary_with_its_note() -> None:
    rt = pydeno.Runtime()
    rt.close()
    exc = closed_failure(lambda: rt.eval("1"))
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is pydeno.ClosedError
    assert str(copy) == "runtime is closed"
    assert copy.__notes__ == exc.__notes__
    assert copy.hint == exc.hint
    assert pydeno.classify_error(copy).kind == "closed"


def test_a_plain_runtime_error_with_the_phrase_still_classifies_as_closed() -> None:
    # The kind table anchors the phrase: an exception known only by its type and text (one
    # that crossed a boundary as text) keeps the kind.
    assert pydeno.classify_error(RuntimeError("runtime is closed")).kind == "closed"


def test_a_session_says_whether_it_or_its_runtime_was_closed() -> None:
    with pydeno.AgentSandbox(tools={}, timeout=0.3) as sb:
        with pytest.raises(pydeno.RuntimeTimeout):
            sb.run("while (true) {}")
        exc = closed_failure(lambda: sb.run("1"))
    assert str(exc) == "the session is closed"
    assert exc.hint.startswith("its runtime is closed: the runtime was closed after timeout: ")
    sb = pydeno.AgentSandbox(tools={})
    sb.close()
    exc = closed_failure(lambda: sb.run("1"))
    assert exc.hint.startswith("close() was called on the session. ")


def test_a_closed_code_mode_raises_a_closed_error_that_says_close_was_called() -> None:
    cm = pydeno.CodeMode([])
    cm.close()
    exc = closed_failure(lambda: cm.execute("1"))
    assert str(exc) == "the session is closed"
    assert exc.hint.startswith("close() was called on the Code Mode. ")
