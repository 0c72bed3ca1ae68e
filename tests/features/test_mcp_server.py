"""``pydeno mcp``: the real MCP SDK client against the real server process, over stdio and HTTP."""

from __future__ import annotations

import contextlib
import math
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import psutil
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

import pydeno
from pydeno._cli import main as _cli
from tests.support.mcp_clients import SERVER, gone, http_server, run, stdio_client, until, wait_until, workers

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

FOREVER = "await new Promise(() => {})"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextlib.asynccontextmanager
async def connect(transport: str, *flags: str) -> AsyncIterator[tuple[Client, psutil.Process]]:
    if transport == "stdio":
        async with stdio_client(*flags) as pair:
            yield pair
    else:
        async with http_server(*flags) as (url, server), Client(url) as client:
            yield client, server


BUSY = "{ const end = Date.now() + 300; while (Date.now() < end) {} }"


def cpu_of(p: psutil.Process) -> float:
    try:
        return float(p.cpu_times().user)
    except psutil.Error:
        return math.inf


async def worker_of(client: Client, server: psutil.Process) -> psutil.Process:
    """The worker that runs a session's calls (the server also keeps a pool's spare): the one
    that spends the CPU of a busy program the session runs."""
    before = [(p, cpu_of(p)) for p in workers(server)]
    await run(client, BUSY)
    (busy,) = [p for p, spent in before if spent + 0.1 < cpu_of(p) < math.inf]
    return busy


TRANSPORTS = pytest.mark.parametrize("transport", ["stdio", "http"])


async def test_the_server_lists_one_tool_run_javascript_with_its_input_and_output_schemas() -> None:
    async with stdio_client() as (client, _):
        listed = (await client.list_tools()).tools
    assert [t.name for t in listed] == ["run_javascript"]
    (tool,) = listed
    assert tool.input_schema["required"] == ["code"]
    assert set(tool.input_schema["properties"]) == {"code", "timeout"}
    assert tool.output_schema is not None and "error" in tool.output_schema["properties"]
    assert tool.description is not None and "last expression" in tool.description
    assert "nothing persists" in tool.description


async def test_the_server_names_itself_with_this_projects_version() -> None:
    async with stdio_client() as (client, _):
        info = client.server_info
    assert info is not None and info.name == "pydeno"
    assert info.version == pydeno.__version__


@TRANSPORTS
async def test_a_run_returns_its_value_as_structured_content_and_its_text_form(transport: str) -> None:
    async with connect(transport) as (client, _):
        result = await run(client, "console.log('counting'); [1, 2, 3].map((x) => x * 2)")
    assert not result.is_error
    assert result.structured_content["ok"] is True
    assert result.structured_content["value"] == [2, 4, 6]
    assert result.structured_content["stdout"] == "counting"
    assert result.content[0].text == "ok: [2, 4, 6]\nstdout:\n  counting"


async def test_typescript_runs_with_its_types_stripped() -> None:
    async with stdio_client() as (client, _):
        result = await run(
            client, "const n: number = 20; interface P { x: number }; const p: P = { x: n + 1 }; p.x * 2"
        )
    assert result.structured_content["value"] == 42


@TRANSPORTS
async def test_a_program_that_throws_is_an_error_result_with_its_kind_not_a_protocol_error(transport: str) -> None:
    async with connect(transport) as (client, _):
        result = await run(client, "const o = null;\no.x")
    assert result.is_error
    error = result.structured_content["error"]
    assert (error["kind"], error["name"], error["line"]) == ("js_error", "TypeError", 2)
    assert result.content[0].text.startswith("error: TypeError: Cannot read properties of null")


@TRANSPORTS
async def test_a_program_over_its_timeout_is_an_error_result_of_kind_timeout(transport: str) -> None:
    async with connect(transport, "--pool-size", "1") as (client, _):
        result = await run(client, "while (true) {}", timeout=0.5)
        after = await run(client, "'still serving'")
    assert result.is_error
    assert result.structured_content["error"]["kind"] == "timeout"
    assert result.structured_content["error"]["message"] == "command exceeded timeout=0.5s; worker killed"
    # What the model can change, with the limit's value; never the operator's option.
    assert result.structured_content["error"]["hint"].startswith(
        "The program did not finish in time (its limit is 0.5 s per run): make it do less work per run"
    )
    assert after.structured_content["value"] == "still serving"


async def test_a_call_timeout_lowers_the_server_timeout_but_never_raises_it() -> None:
    async with stdio_client("--timeout", "0.5") as (client, _):
        result = await run(client, "while (true) {}", timeout=3600)
    assert result.structured_content["error"]["message"] == "command exceeded timeout=0.5s; worker killed"


@TRANSPORTS
async def test_with_session_top_level_declarations_persist_from_call_to_call(transport: str) -> None:
    async with connect(transport, "--session") as (client, _):
        first = await run(client, "let x = 1; function twice(n: number) { return n * 2 }")
        second = await run(client, "x = twice(x + 1); x")
    assert first.structured_content["ok"] is True
    assert second.structured_content["value"] == 4


@TRANSPORTS
async def test_without_session_each_call_runs_on_a_fresh_worker(transport: str) -> None:
    async with connect(transport, "--pool-size", "1") as (client, _):
        await run(client, "globalThis.kept = 1; let x = 1")
        result = await run(client, "[typeof x, typeof globalThis.kept]")
    assert result.structured_content["value"] == ["undefined", "undefined"]


async def test_each_http_session_has_its_own_runtime() -> None:
    async with http_server("--session") as (url, _), Client(url) as a, Client(url) as b:
        await run(a, "let who = 'a'")
        await run(b, "let who = 'b'")
        seen = [(await run(c, "who")).structured_content["value"] for c in (a, b)]
    assert seen == ["a", "b"]


async def test_past_max_sessions_the_idle_session_gives_way_and_loses_its_state() -> None:
    async with http_server("--session", "--max-sessions", "1") as (url, _), Client(url) as first:
        assert (await run(first, "let who = 'first'; who")).structured_content["value"] == "first"
        async with Client(url) as late:
            assert (await run(late, "let who = 'late'; who")).structured_content["value"] == "late"
        # The first session was idle, so it gave way: its next call starts on a fresh runtime.
        assert (await run(first, "typeof who")).structured_content["value"] == "undefined"


async def test_a_new_session_starts_on_a_worker_the_pool_had_started_before_it() -> None:
    async with http_server("--session", "--pool-size", "1") as (url, server):
        (warm,) = await until(lambda: workers(server), "the pool's warm worker")
        async with Client(url) as client:
            assert (await run(client, "1 + 1")).structured_content["value"] == 2
            # The session's worker and the pool's spare, whichever way the session got its own.
            during = await until(lambda: len(found := workers(server)) == 2 and found, "two workers")
        # Ending the session kills its worker: the one that was warm before it connected.
        (ended,) = await until(lambda: [p for p in during if not p.is_running()], "the session's worker gone")
        assert ended.pid == warm.pid


@pytest.mark.slow
async def test_ten_concurrent_clients_all_get_their_own_results() -> None:
    results: dict[int, Any] = {}
    async with http_server("--session") as (url, _):

        async def one(i: int) -> None:
            async with Client(url) as client:
                await run(client, f"let mine = {i}")
                results[i] = (await run(client, "mine * 10")).structured_content["value"]

        async with anyio.create_task_group() as group:
            for i in range(10):
                group.start_soon(one, i)
    assert results == {i: i * 10 for i in range(10)}


@pytest.mark.slow
async def test_a_slow_session_does_not_block_another_and_leaving_mid_call_kills_its_worker() -> None:
    async with http_server("--session") as (url, server), Client(url) as fast:
        await run(fast, "let ready = true")
        fast_worker = await worker_of(fast, server)
        slow_ended = anyio.Event()
        async with anyio.create_task_group() as group:

            async def slow() -> None:
                async with Client(url) as client:
                    await run(client, "while (true) {}")
                slow_ended.set()

            spent = {p.pid: cpu_of(p) for p in workers(server)}
            group.start_soon(slow)
            (slow_worker,) = await until(
                lambda: [p for p in workers(server) if spent.get(p.pid, 0.0) + 0.2 < cpu_of(p) < math.inf],
                "the slow call's worker",
            )
            result = await run(fast, "ready")
            assert result.structured_content["value"] is True
            assert not slow_ended.is_set()
            group.cancel_scope.cancel()  # the slow client leaves mid-call
        assert gone([slow_worker])
        assert (await run(fast, "ready")).structured_content["value"] is True
        assert fast_worker.is_running()


# A client in its own process, to be killed mid-call: it prints its server's pid (0 over HTTP)
# and then calls a program that never ends.
CLIENT_SCRIPT = """
import sys, anyio, psutil
from mcp import Client, StdioServerParameters

async def main():
    target = sys.argv[1]
    if target == "stdio":
        target = StdioServerParameters(command=sys.executable, args=["-m", "pydeno", "mcp", *sys.argv[2:]])
    async with Client(target) as client:
        servers = [p.pid for p in psutil.Process().children() if "mcp" in p.cmdline()]
        print(servers[0] if servers else 0, flush=True)
        await client.call_tool("run_javascript", {"code": "await new Promise(() => {})"})

anyio.run(main)
"""


@contextlib.contextmanager
def client_process(*args: str) -> Iterator[int]:
    """A client running the endless call; killed when the block ends."""
    client = subprocess.Popen([sys.executable, "-c", CLIENT_SCRIPT, *args], stdout=subprocess.PIPE, text=True)
    assert client.stdout is not None
    try:
        yield int(client.stdout.readline())
    finally:
        client.kill()
        client.wait()
        client.stdout.close()


def call_reached(server: psutil.Process) -> list[psutil.Process]:
    """The server's workers once a call has one: the pool (one warm worker) starts a
    replacement for the one it handed out, to the call or to a new session."""
    alive: list[psutil.Process] = wait_until(lambda: len(found := workers(server)) >= 2 and found, "the call's worker")
    return alive


MODES = pytest.mark.parametrize("session", [True, False], ids=["session", "pool"])


def mode_flags(session: bool) -> list[str]:
    return ["--session", "--pool-size", "1"] if session else ["--pool-size", "1"]


@pytest.mark.slow
@MODES
def test_a_stdio_client_killed_mid_call_leaves_no_server_and_no_worker_behind(session: bool) -> None:
    with client_process("stdio", *mode_flags(session)) as pid:
        server = psutil.Process(pid)
        running = call_reached(server)
    assert gone([server, *running])


@pytest.mark.slow
@MODES
async def test_an_http_client_killed_mid_call_has_its_worker_killed_while_the_server_serves_on(session: bool) -> None:
    async with http_server(*mode_flags(session), "--timeout", "3600") as (url, server):
        warm = await until(lambda: workers(server), "the warm worker")
        with client_process(url):
            call_reached(server)
        # The call's worker: the warm one the pool handed out, to the call or to its session.
        assert gone(warm)
        async with Client(url) as client:
            assert (await run(client, "'serving'")).structured_content["value"] == "serving"


async def test_an_idle_session_is_closed_and_its_worker_killed() -> None:
    async with stdio_client("--session", "--idle-timeout", "0.5") as (client, server):
        await run(client, "let kept = 1")
        worker = await worker_of(client, server)
        assert gone([worker])
        result = await run(client, "typeof kept")
    assert result.structured_content["value"] == "undefined"


async def test_a_call_the_client_cancels_mid_program_leaves_its_session_a_fresh_runtime() -> None:
    async with stdio_client("--session") as (client, server):
        await run(client, "let kept = 1")
        worker = await worker_of(client, server)
        spent = worker.cpu_times().user
        async with anyio.create_task_group() as group:
            group.start_soon(run, client, "while (true) {}")
            await until(lambda: worker.cpu_times().user > spent + 0.2, "the call running")
            group.cancel_scope.cancel()
        assert gone([worker])
        result = await run(client, "typeof kept")
    assert result.structured_content["value"] == "undefined"


async def test_code_over_max_code_bytes_is_refused_as_an_error_result() -> None:
    async with stdio_client("--max-code-bytes", "10") as (client, _):
        result = await run(client, "'ééééé'")  # 7 characters, 12 bytes
        fits = await run(client, "'é'")
    assert result.is_error
    assert result.structured_content["error"]["kind"] == "invalid_input"
    assert result.structured_content["error"]["message"] == (
        "run_javascript: 'code' is 12 bytes (UTF-8), over this server's limit of 10 (--max-code-bytes): "
        "send a shorter program"
    )
    assert fits.structured_content["value"] == "é"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"code": 5}, "run_javascript: 'code' must be a string (TypeScript or JavaScript), got int"),
        ({}, "run_javascript needs the argument 'code': the program, as a string"),
        ({"code": "1", "timeout": -1}, "run_javascript: 'timeout' must be a positive number of seconds, got -1"),
        ({"code": "1", "timeout": "5"}, "run_javascript: 'timeout' must be a number of seconds, got str"),
        (
            {"code": "1", "lang": "ts"},
            "run_javascript got unknown argument(s) 'lang': it takes only 'code' and 'timeout'",
        ),
    ],
    ids=["code-not-a-string", "code-missing", "timeout-negative", "timeout-not-a-number", "extra-field"],
)
async def test_malformed_arguments_are_an_error_result_that_says_what_was_wrong(
    arguments: dict[str, Any], message: str
) -> None:
    async with stdio_client() as (client, _):
        result = await client.call_tool("run_javascript", arguments)
    assert result.is_error
    assert result.structured_content["error"]["message"] == message
    assert result.structured_content["error"]["kind"] == "invalid_input"


async def test_an_unknown_tool_is_an_error_naming_the_one_tool() -> None:
    async with stdio_client() as (client, _):
        with pytest.raises(MCPError, match=r"^unknown tool 'eval': this server has one tool, 'run_javascript'$"):
            await client.call_tool("eval", {"code": "1"})


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_stops_the_http_server_after_closing_every_worker(stop: int) -> None:
    async with http_server("--pool-size", "2", stop=stop) as (url, server):
        async with Client(url) as client:
            await run(client, "1")
        pooled = await until(lambda: len(workers(server)) == 2 and workers(server), "the warm pool")
    assert gone([server, *pooled])


def test_sigterm_stops_a_stdio_server_waiting_for_input_after_closing_every_worker() -> None:
    proc = subprocess.Popen([*SERVER, "--pool-size", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        pooled = wait_until(lambda: workers(psutil.Process(proc.pid)), "the warm worker")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()
    assert gone(pooled)


async def test_with_session_an_http_request_that_belongs_to_no_session_is_refused_saying_why() -> None:
    async with http_server("--session") as (url, _), Client(url, mode="2026-07-28") as client:
        result = await run(client, "1")
    assert result.is_error
    assert result.structured_content["error"]["message"].startswith(
        "this server keeps one runtime per MCP session (--session), and this call belongs to no session"
    )


async def test_the_limits_come_from_the_flags() -> None:
    async with stdio_client("--cpu-limit", "0.2", "--max-memory", "128M") as (client, _):
        result = await run(client, "while (true) {}")
        listed = (await client.list_tools()).tools[0]
    assert result.structured_content["error"]["kind"] == "cpu_limit"
    assert listed.description is not None and "128 MiB of memory" in listed.description


def test_without_the_mcp_extra_pydeno_mcp_exits_2_saying_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)
    monkeypatch.delitem(sys.modules, "pydeno._cli.mcp_server", raising=False)
    assert _cli.main(["mcp"]) == 2
    assert capsys.readouterr().err == _cli.MCP_EXTRA_MISSING + "\n"


def test_pydeno_mcp_help_explains_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _cli.main(["mcp", "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    for flag in (
        "--http",
        "--host",
        "--port",
        "--session",
        "--store",
        "--idle-timeout",
        "--max-sessions",
        "--pool-size",
        "--timeout",
        "--max-memory",
        "--cpu-limit",
        "--sandbox",
        "--max-code-bytes",
        "--max-workers",
        "--max-queued",
        "--max-message-bytes",
        "--max-result-bytes",
        "--allow-host",
    ):
        assert f"{flag} " in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["mcp", "--port", "80"], "--host, --port and --allow-host need --http"),
        (["mcp", "--http", "--allow-host", "a/b"], "argument --allow-host: invalid host name 'a/b'"),
        (["mcp", "--max-memory", "1M"], "argument --max-memory: max_memory"),
        (["mcp", "--pool-size", "0"], "argument --pool-size: invalid pool size '0'"),
        (["mcp", "--max-sessions", "0"], "argument --max-sessions: invalid number of sessions '0'"),
        (["mcp", "--max-workers", "0"], "argument --max-workers: invalid number of workers '0'"),
        (
            ["mcp", "--session", "--max-workers", "4", "--max-sessions", "5"],
            "--max-sessions 5 is over --max-workers 4: each session holds a worker",
        ),
        (["mcp", "--max-result-bytes", "1K"], "argument --max-result-bytes: --max-result-bytes must be at least 4096"),
        (["mcp", "--max-message-bytes", "lots"], "argument --max-message-bytes: invalid size 'lots'"),
    ],
    ids=[
        "port-without-http",
        "host-name-not-a-name",
        "memory-below-minimum",
        "empty-pool",
        "no-sessions",
        "no-workers",
        "more-sessions-than-workers",
        "tiny-results",
        "message-size-not-a-size",
    ],
)
def test_a_bad_flag_is_a_usage_error(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _cli.main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
