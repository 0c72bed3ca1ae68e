"""AsyncRuntime: the anyio driver, under asyncio and trio, against real deno workers."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import pydeno

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.mark.slow
async def test_eval_returns_values_and_keeps_declarations() -> None:
    async with pydeno.AsyncRuntime() as rt:
        assert await rt.eval("let a = 40; a + 1") == 41
        assert await rt.eval("const b = await Promise.resolve(a + 2); b") == 42
        assert await rt.eval("a + b") == 82


@pytest.mark.slow
async def test_a_long_array_result_sent_in_parts_arrives_whole() -> None:
    async with pydeno.AsyncRuntime() as rt:
        value = await rt.eval("Array.from({length: 9000}, (_, i) => i % 3000 ? {i} : [i, undefined])")
        assert value == [{"i": i} if i % 3000 else [i, pydeno.undefined] for i in range(9000)]
        assert await rt.eval("Array.from({length: 9000}, (_, i) => i).at(-1)") == 8999


@pytest.mark.slow
async def test_a_runtime_used_without_async_with_starts_on_first_use() -> None:
    rt = pydeno.AsyncRuntime()
    try:
        assert await rt.eval("'ready'") == "ready"
    finally:
        await rt.close()
    assert rt.closed


@pytest.mark.slow
async def test_sync_and_async_host_functions_are_called() -> None:
    async def slow_mul(a: int, b: int) -> int:
        await anyio.sleep(0.01)
        return a * b

    async with pydeno.AsyncRuntime() as rt:
        await rt.bind_function("mul", slow_mul)
        await rt.bind_function("add", lambda a, b: a + b)
        assert await rt.eval("await mul(6, 7) + await add(1, 2)") == 45


@pytest.mark.slow
async def test_a_js_function_handle_is_awaitable() -> None:
    async with pydeno.AsyncRuntime() as rt:
        inc = await rt.eval("(x) => x + 1")
        assert await inc(41) == 42
        inc.close()
        with pytest.raises(RuntimeError, match=r"^Function has been closed\nKind: closed "):
            await inc(1)


@pytest.mark.slow
async def test_a_host_function_may_evaluate_on_the_same_runtime() -> None:
    async with pydeno.AsyncRuntime() as rt:

        async def inner() -> Any:
            return await rt.eval("21 * 2")

        await rt.bind_function("inner", inner)
        assert await rt.eval("inner()") == 42


@pytest.mark.slow
async def test_javascript_errors_are_raised() -> None:
    async with pydeno.AsyncRuntime() as rt:
        with pytest.raises(pydeno.JavaScriptError, match=r"^Evaluation failed: Error: no\n"):
            await rt.eval("throw new Error('no')")
        assert await rt.eval("1") == 1


@pytest.mark.slow
async def test_the_sandbox_deadline_raises_runtime_timeout_and_closes() -> None:
    async with pydeno.AsyncRuntime() as rt:
        with pytest.raises(pydeno.RuntimeTimeout):
            await rt.eval("while (true) {}", timeout=0.3)
        assert rt.closed
        with pytest.raises(RuntimeError, match=r"^runtime is closed\nKind: closed "):
            await rt.eval("1")


@pytest.mark.slow
async def test_an_outer_deadline_raises_timeout_error_and_kills_the_worker() -> None:
    async with pydeno.AsyncRuntime() as rt:
        with pytest.raises(TimeoutError):
            with anyio.fail_after(0.3):
                await rt.eval("new Promise(() => {})")
        assert rt.closed


@pytest.mark.slow
async def test_concurrent_tasks_on_one_runtime_are_serialised() -> None:
    async with pydeno.AsyncRuntime() as rt:
        await rt.eval("let n = 0")
        results: list[Any] = []

        async def bump() -> None:
            results.append(await rt.eval("await new Promise(r => setTimeout(r, 5)); ++n"))

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(bump)
        assert sorted(results) == [1, 2, 3, 4, 5]


@pytest.mark.slow
async def test_other_tasks_keep_running_while_a_command_is_in_flight() -> None:
    # The driver looks at the pipe again at each turn of the loop for a moment after it
    # sends: each look must yield, so a task that only sleeps briefly keeps its pace.
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.sleep(0.001)

    async with pydeno.AsyncRuntime() as rt, anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        await anyio.sleep(0)
        start = ticks
        for _ in range(20):
            assert await rt.eval("{ const t = Date.now(); while (Date.now() - t < 10) {} } 1") == 1
        moved = ticks - start
        tg.cancel_scope.cancel()
    # 20 commands of 10 ms each: a ticker held back by the driver would barely move.
    assert moved >= 50


@pytest.mark.slow
async def test_console_output_reaches_the_handler() -> None:
    seen: list[tuple[str, str]] = []
    async with pydeno.AsyncRuntime(on_console=lambda level, text: seen.append((level, text))) as rt:
        await rt.eval("console.info('hello')")
    assert seen == [("info", "hello")]
