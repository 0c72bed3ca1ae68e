"""``pydeno mcp`` against hostile and sloppy clients: raw stdio bytes, raw HTTP requests, and
SDK clients that fire too much at once, never read, never say goodbye."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import IO, Any

import anyio
import httpx
import psutil
import pytest
from mcp import Client

from pydeno._cli import main as _cli
from tests.support.mcp_clients import SERVER, gone, http_server, run, stdio_client, until, wait_until, workers

pytestmark = [pytest.mark.anyio]

SLEEP = "await new Promise((r) => setTimeout(r, {ms})); 'slept'"
PROTOCOL = "2025-06-18"
INITIALIZE = {
    "protocolVersion": PROTOCOL,
    "capabilities": {},
    "clientInfo": {"name": "hostile", "version": "0"},
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class WorkerCount:
    """The most deno workers a server held at once, sampled in a thread while the block runs."""

    def __init__(self, server: psutil.Process) -> None:
        self.server = server
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.most = max(self.most, len(workers(self.server)))
            time.sleep(0.01)

    def __enter__(self) -> WorkerCount:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# -- a raw stdio client --------------------------------------------------------------------------


class RawStdio:
    """A stdio client that writes bytes and reads lines itself, and can stop reading."""

    def __init__(self, *flags: str) -> None:
        self.log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self.proc = subprocess.Popen(
            [*SERVER, *flags], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, bufsize=0
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self._pending = b""

    def send(self, message: dict[str, Any] | bytes) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        self.stdin.write(data)

    def receive(self, limit: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + limit
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            assert left > 0, "no answer from the server"
            readable, _, _ = select.select([self.stdout], [], [], left)
            if readable:
                chunk = os.read(self.stdout.fileno(), 1 << 16)
                assert chunk, "the server closed its stdout"
                self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def answer_to(self, ident: int) -> dict[str, Any]:
        while (message := self.receive()).get("id") != ident:
            pass
        return message

    def initialize(self) -> None:
        self.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INITIALIZE})
        assert "result" in self.answer_to(0)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, ident: int, code: str) -> None:
        self.send(
            {
                "jsonrpc": "2.0",
                "id": ident,
                "method": "tools/call",
                "params": {"name": "run_javascript", "arguments": {"code": code}},
            }
        )

    def stderr(self) -> str:
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.stdin.close()
        self.proc.kill()
        self.proc.wait()
        self.stdout.close()
        self.log.close()


@contextlib.contextmanager
def raw_stdio(*flags: str) -> Iterator[RawStdio]:
    client = RawStdio(*flags)
    try:
        yield client
    finally:
        client.close()


# -- a raw HTTP client ---------------------------------------------------------------------------


def messages_of(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a streamable HTTP response: JSON, or server-sent events."""
    if response.headers.get("content-type", "").startswith("application/json"):
        body = response.json()
        return body if isinstance(body, list) else [body]
    return [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]


class RawHttp:
    """A streamable HTTP client made of single requests: it never sends DELETE unless told."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http, self.url = http, url
        self.session: str | None = None
        self._ids = 0

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": PROTOCOL}
        if self.session is not None:
            headers["mcp-session-id"] = self.session
        headers.update(extra)
        return headers

    async def post(self, message: dict[str, Any], **headers: str) -> httpx.Response:
        return await self.http.post(self.url, json=message, headers=self.headers(**headers))

    async def initialize(self) -> None:
        response = await self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INITIALIZE})
        assert response.status_code == 200, response.text
        self.session = response.headers["mcp-session-id"]
        note = await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert note.status_code == 202, note.text

    async def call(self, code: str) -> dict[str, Any]:
        self._ids += 1
        response = await self.post(
            {
                "jsonrpc": "2.0",
                "id": self._ids,
                "method": "tools/call",
                "params": {"name": "run_javascript", "arguments": {"code": code}},
            }
        )
        assert response.status_code == 200, response.text
        (answer,) = [m for m in messages_of(response) if m.get("id") == self._ids]
        result: dict[str, Any] = answer["result"]
        return result


@contextlib.asynccontextmanager
async def raw_http(url: str) -> AsyncIterator[RawHttp]:
    async with httpx.AsyncClient(timeout=60) as http:
        yield RawHttp(http, url)


# -- 1. bounded workers and queues ---------------------------------------------------------------


def busy_refusals(results: list[Any]) -> list[Any]:
    return [
        r
        for r in results
        if r.is_error
        and r.structured_content["error"]["kind"] == "checkout_timeout"
        and r.structured_content["error"]["retryable"] is True
        and r.structured_content["error"]["message"].startswith("this server is busy")
        # What a model can do, never the operator's flags (those are in the server's log).
        and r.structured_content["error"]["hint"].startswith("Nothing ran: send the same call again")
        and "--" not in r.structured_content["error"]["hint"]
    ]


@pytest.mark.slow
async def test_a_client_firing_many_concurrent_calls_never_holds_more_than_max_workers() -> None:
    async with stdio_client("--max-workers", "3", "--max-queued", "2", "--pool-size", "1") as (client, server):
        results: list[Any] = []

        async def one() -> None:
            results.append(await run(client, SLEEP.format(ms=1500)))

        with WorkerCount(server) as count:
            async with anyio.create_task_group() as group:
                for _ in range(12):
                    group.start_soon(one)
        after = await run(client, "'served'")
    assert count.most <= 3
    ok = [r for r in results if not r.is_error]
    assert len(ok) == 5  # three running, two queued behind them
    assert len(busy_refusals(results)) == 7
    assert after.structured_content["value"] == "served"


@pytest.mark.slow
async def test_with_session_calls_waiting_behind_a_session_are_bounded_too() -> None:
    async with stdio_client("--session", "--max-queued", "2") as (client, _):
        results: list[Any] = []

        async def one() -> None:
            results.append(await run(client, SLEEP.format(ms=800)))

        async with anyio.create_task_group() as group:
            for _ in range(8):
                group.start_soon(one)
    assert len([r for r in results if not r.is_error]) == 3
    assert len(busy_refusals(results)) == 5


@pytest.mark.slow
async def test_one_http_session_cannot_take_every_worker_from_another() -> None:
    async with (
        http_server("--max-workers", "4", "--max-queued", "4", "--pool-size", "1") as (url, server),
        Client(url, mode="legacy") as hog,
        Client(url, mode="legacy") as polite,
    ):
        results: list[Any] = []

        async def greedy() -> None:
            results.append(await run(hog, SLEEP.format(ms=3000)))

        with WorkerCount(server) as count:
            async with anyio.create_task_group() as group:
                for _ in range(20):
                    group.start_soon(greedy)
                await until(lambda: len(busy_refusals(results)) >= 16, "the hog refused past its share")
                started = time.monotonic()
                mine = await run(polite, "'mine'")
                waited = time.monotonic() - started
    assert mine.structured_content["value"] == "mine"
    assert waited < 2.5  # it ran beside the hog's calls, not after them
    assert len([r for r in results if not r.is_error]) == 4  # two running, two queued: half of each
    assert count.most <= 4


# -- 2. the stdio line reader --------------------------------------------------------------------


def test_the_line_reader_does_linear_work_and_never_holds_more_than_its_cap() -> None:
    from pydeno._cli.mcp_stdio import Oversized, _LineSplitter

    cap = 1 << 20
    splitter = _LineSplitter(cap)
    chunk = b"x" * (1 << 16)
    total = 0
    out: list[Any] = []
    out += splitter.feed(b'{"jsonrpc": "2.0", "method": "tools/call", "params": {"code": "')
    for _ in range(1024):  # 64 MiB of one line
        out += splitter.feed(chunk)
        total += len(chunk)
        assert splitter.buffered <= cap
    out += splitter.feed(b'"}, "id": 77}\n{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n')
    assert splitter.buffered == 0
    (big, small) = out
    assert isinstance(big, Oversized) and big.ident == 77 and big.size > total
    assert small == '{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n'
    # Every byte is looked at a bounded number of times: no rescan of what was buffered.
    assert splitter.scanned <= 2 * (total + 200)


def test_the_line_reader_finds_the_id_of_a_message_whose_id_comes_first() -> None:
    from pydeno._cli.mcp_stdio import Oversized, _LineSplitter

    splitter = _LineSplitter(100)
    (big,) = splitter.feed(b'{"jsonrpc":"2.0","id":"abc","method":"x","params":{"code":"' + b"y" * 500 + b'"}}\n')
    assert isinstance(big, Oversized) and big.ident == "abc"
    (nested,) = splitter.feed(b'{"method":"x","params":{"a":' + b"1" * 500 + b',"id":5}}\n')
    assert isinstance(nested, Oversized) and nested.ident is None


@pytest.mark.slow
def test_a_huge_stdio_line_gets_a_json_rpc_error_and_the_server_serves_the_next_call() -> None:
    with raw_stdio("--max-message-bytes", "1M", "--pool-size", "1") as client:
        client.initialize()
        code = "x" * (32 << 20)
        # The TypeScript SDK's order: the id comes last.
        line = json.dumps(
            {
                "method": "tools/call",
                "params": {"name": "run_javascript", "arguments": {"code": code}},
                "jsonrpc": "2.0",
                "id": 7,
            }
        )
        server = psutil.Process(client.proc.pid)
        spent = server.cpu_times().user
        client.send(line.encode() + b"\n")
        error = client.answer_to(7)
        client.call(8, "6 * 7")
        served = client.answer_to(8)
        cpu = server.cpu_times().user - spent
    assert error["error"]["code"] == -32600
    assert error["error"]["message"] == (
        f"message of {len(line)} bytes is over this server's limit of 1048576 bytes "
        "(--max-message-bytes); it was discarded"
    )
    assert served["result"]["structuredContent"]["value"] == 42
    assert cpu < 1  # a linear reader; one that rescans and recopies its buffer spends seconds here


# -- 3. a client that stops reading --------------------------------------------------------------


def pipe_full(reader: IO[bytes]) -> bool:
    size = fcntl.fcntl(reader.fileno(), 1032)  # F_GETPIPE_SZ
    waiting = bytearray(4)
    fcntl.ioctl(reader.fileno(), termios.FIONREAD, waiting)
    return int.from_bytes(waiting, sys.byteorder) >= size


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "stdin-closed"])
def test_a_server_whose_client_stopped_reading_still_stops_and_kills_every_worker(how: str) -> None:
    with raw_stdio("--pool-size", "1", "--max-result-bytes", "4M") as client:
        client.initialize()
        server = psutil.Process(client.proc.pid)
        for i in range(4):
            client.call(10 + i, "'x'.repeat(1 << 20)")
        wait_until(lambda: pipe_full(client.stdout), "the client's stdout pipe full")
        # The calls' own workers may be gone by now, and the pool's spare between two starts.
        running = wait_until(lambda: workers(server), "a worker alive under the stalled server")
        if how == "SIGTERM":
            client.proc.send_signal(signal.SIGTERM)
        else:
            client.stdin.close()
        assert client.proc.wait(10) == 0
    assert gone(running)


# -- 4. the address is printed once it listens ---------------------------------------------------


@pytest.mark.slow
async def test_the_http_server_accepts_a_connection_as_soon_as_it_prints_its_address() -> None:
    for _ in range(3):
        async with http_server() as (url, _):
            port = int(url.rsplit(":", 1)[1].split("/")[0])
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass


# -- 5. a refused DELETE keeps the session -------------------------------------------------------


@pytest.mark.slow
async def test_a_delete_the_transport_refused_leaves_the_session_and_its_state() -> None:
    async with http_server("--session") as (url, _), raw_http(url) as client:
        await client.initialize()
        assert (await client.call("let kept = 41; kept"))["structuredContent"]["value"] == 41
        refused = await client.http.delete(url, headers=client.headers(host="attacker.example"))
        assert refused.status_code == 421
        assert (await client.call("kept + 1"))["structuredContent"]["value"] == 42
        ended = await client.http.delete(url, headers=client.headers())
        assert ended.status_code == 200


# -- 6. Host and Origin checks on every address --------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "0.0.0.0"])
async def test_host_and_origin_checks_hold_for_every_bind_address(host: str) -> None:
    proc = subprocess.Popen([*SERVER, "--http", "--host", host, "--port", "0"], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    try:
        line = await anyio.to_thread.run_sync(proc.stderr.readline)
        url = line.split("serving on ")[1].strip()
        port = url.rsplit(":", 1)[1].split("/")[0]
        target = f"http://[::1]:{port}/mcp" if host == "::1" else f"http://127.0.0.1:{port}/mcp"
        async with raw_http(target) as client:
            body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INITIALIZE}
            rebound = await client.post(body, host=f"attacker.example:{port}")
            cross = await client.post(body, origin="http://attacker.example")
            fine = await client.post(body)
        assert rebound.status_code == 421
        assert cross.status_code == 403
        assert fine.status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        proc.stderr.close()


# -- 7. sessions that cannot be hoarded ----------------------------------------------------------


@pytest.mark.slow
async def test_one_shot_clients_that_never_delete_do_not_lock_out_the_next() -> None:
    async with http_server("--session", "--max-sessions", "2", "--pool-size", "1") as (url, server):
        clients = []
        for i in range(4):
            async with raw_http(url) as client:
                await client.initialize()
                result = await client.call(f"let who = {i}; who")
                assert result["structuredContent"]["value"] == i, result
                clients.append(client.session)
        await until(lambda: len(workers(server)) <= 3, "the reclaimed sessions' workers gone")
        async with raw_http(url) as latest:
            latest.session = clients[-1]
            kept = await latest.call("who")
            latest.session = clients[0]
            lost = await latest.call("typeof who")
    assert kept["structuredContent"]["value"] == 3  # the most recent kept its state
    assert lost["structuredContent"]["value"] == "undefined"  # the least recent gave way


@pytest.mark.slow
async def test_a_busy_session_never_gives_way_to_a_new_one() -> None:
    async with http_server("--session", "--max-sessions", "1") as (url, _), raw_http(url) as busy:
        await busy.initialize()
        async with anyio.create_task_group() as group:
            group.start_soon(busy.call, SLEEP.format(ms=3000))
            await anyio.sleep(0.5)
            async with raw_http(url) as late:
                await late.initialize()
                refused = await late.call("1")
        assert refused["isError"] is True
        error = refused["structuredContent"]["error"]
        assert error["kind"] == "checkout_timeout" and error["retryable"] is True
        assert error["message"].startswith("this server is busy: it keeps 1 sessions (--max-sessions)")
        assert error["hint"].startswith("Nothing ran: send the same call again") and "--" not in error["hint"]


def test_the_idle_timeout_default_fits_one_shot_clients(capsys: pytest.CaptureFixture[str]) -> None:
    from pydeno._cli.mcp_config import DEFAULT_IDLE_TIMEOUT

    assert DEFAULT_IDLE_TIMEOUT == 120.0
    with pytest.raises(SystemExit):
        _cli.main(["mcp", "--help"])
    assert "(default 120)" in capsys.readouterr().out


# -- 8. bounded results --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("code", "cut"),
    [
        ("'é'.repeat(3_000_000)", "value"),
        ("'\\u0001'.repeat(500_000)", "value"),
        ("Array.from({length: 200_000}, (_, i) => ({i, s: 'x'.repeat(i % 50)}))", "value"),
    ],
    ids=["two-byte-chars", "escaped-chars", "many-objects"],
)
async def test_a_big_result_is_bounded_as_a_whole_by_max_result_bytes(code: str, cut: str) -> None:
    async with stdio_client("--max-result-bytes", "100000") as (client, _):
        result = await run(client, code)
    size = len(result.model_dump_json(by_alias=True, exclude_none=True).encode())
    assert size <= 100_000
    data = result.structured_content
    assert data["ok"] is True
    assert cut in data["truncated"]
    assert data["value"]["$type"] == "truncated"
    assert data["value"]["chars"] > 100_000


# -- 9. operator advice in the server's log ------------------------------------------------------


@pytest.mark.slow
def test_a_failed_call_is_logged_for_the_operator_naming_the_server_flag() -> None:
    with raw_stdio("--timeout", "0.5", "--pool-size", "1") as client:
        client.initialize()
        client.call(1, "while (true) {}")
        answer = client.answer_to(1)
        assert answer["result"]["structuredContent"]["error"]["kind"] == "timeout"
        log = wait_until(lambda: "call failed" in (text := client.stderr()) and text, "the log line")
    (line,) = [x for x in log.splitlines() if "call failed" in x]
    assert "call failed: kind timeout: " in line
    fix = line.split("; fix: ")[1]
    assert fix.startswith("raise --timeout (now 0.5)")
    assert "timeout=" not in fix


@pytest.mark.parametrize(
    ("host", "local"),
    [
        ("127.0.0.1:8765", True),
        ("127.0.0.1", True),
        ("localhost:8765", True),
        ("[::1]:8765", True),
        ("192.168.1.20:8765", True),
        ("attacker.example:8765", False),
        ("127.0.0.1.attacker.example", False),
        ("localhost.attacker.example:80", False),
        ("127.0.0.1:80@attacker.example", False),
        ("[::1]attacker", False),
        ("", False),
    ],
)
def test_only_an_ip_address_or_localhost_passes_the_host_check(host: str, local: bool) -> None:
    from pydeno._cli.mcp_http import _local_name

    assert _local_name(host) is local


@pytest.mark.parametrize(
    ("origin", "host", "passes"),
    [
        ("http://127.0.0.1:8765", "127.0.0.1:8765", True),
        ("http://localhost:6274", "127.0.0.1:8765", True),
        ("http://[::1]:3000", "127.0.0.1:8765", True),
        ("http://192.168.1.20:8765", "192.168.1.20:8765", True),
        ("http://192.168.1.66", "127.0.0.1:8765", False),
        ("http://192.168.1.66", "192.168.1.20:8765", False),
        ("https://attacker.example", "127.0.0.1:8765", False),
        ("http://127.0.0.1.attacker.example", "127.0.0.1:8765", False),
        ("null", "127.0.0.1:8765", False),
        ("file://", "127.0.0.1:8765", False),
    ],
)
def test_a_browser_page_may_call_only_from_the_servers_own_origin_or_a_loopback_one(
    origin: str, host: str, passes: bool
) -> None:
    from pydeno._cli.mcp_http import _local_origin

    assert _local_origin(origin, host) is passes


@pytest.mark.slow
async def test_a_host_name_the_operator_allowed_passes_and_others_still_do_not() -> None:
    async with http_server("--allow-host", "mcp.example") as (url, _), raw_http(url) as client:
        port = url.rsplit(":", 1)[1].split("/")[0]
        body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INITIALIZE}
        named = await client.post(body, host=f"MCP.example:{port}", origin="https://mcp.example")
        other = await client.post(body, host=f"attacker.example:{port}")
    assert named.status_code == 200
    assert other.status_code == 421


@pytest.mark.parametrize(
    ("kind", "flag", "keyword"),
    [
        ("timeout", "--timeout", "timeout="),
        ("memory_limit", "--max-memory", "max_memory="),
        ("cpu_limit", "--cpu-limit", "cpu_limit="),
    ],
)
def test_operator_advice_names_the_server_flag_not_the_python_keyword(kind: str, flag: str, keyword: str) -> None:
    from pydeno._cli.mcp_server import operator_fix

    fix = operator_fix(None, kind)
    assert flag in fix
    assert keyword not in fix


@pytest.mark.slow
async def test_an_http_body_over_max_message_bytes_is_refused_and_the_server_serves_on() -> None:
    async with http_server("--max-message-bytes", "64K") as (url, _), raw_http(url) as client:
        big = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {"code": "x" * 100_000}}}
        refused = await client.post(big)
        await client.initialize()
        served = await client.call("6 * 7")
    assert refused.status_code == 413
    assert served["structuredContent"]["value"] == 42


@pytest.mark.slow
async def test_many_http_sessions_at_once_never_hold_more_than_max_workers() -> None:
    flags = ("--session", "--max-workers", "3", "--max-sessions", "3", "--pool-size", "1")
    async with http_server(*flags) as (url, server):
        answers: list[dict[str, Any]] = []

        async def one_session() -> None:
            async with raw_http(url) as client:
                await client.initialize()
                answers.append(await client.call(SLEEP.format(ms=1500)))

        with WorkerCount(server) as count:
            async with anyio.create_task_group() as group:
                for _ in range(8):
                    group.start_soon(one_session)
    assert count.most <= 3
    ok = [a for a in answers if not a["isError"]]
    busy = [a for a in answers if a["isError"]]
    assert 3 <= len(ok) < 8
    assert all(a["structuredContent"]["error"]["kind"] == "checkout_timeout" for a in busy)
