"""``pydeno mcp --session --store PATH``: sessions kept in a SQLite file and resumed by a server
started again on it (real server processes; the MCP SDK's own client over HTTP and stdio)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from pydeno._cli import main as _cli
from tests.support.mcp_clients import SERVER, run, stdio_client

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextlib.asynccontextmanager
async def server_on(store: Path, port: int = 0) -> AsyncIterator[str]:
    """``pydeno mcp --http --session --store`` on port (0: any free one): its URL; stopped
    with SIGTERM after, which it must answer by exiting 0."""
    proc = subprocess.Popen(
        [*SERVER, "--http", "--session", "--store", str(store), "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    try:
        line = await anyio.to_thread.run_sync(proc.stderr.readline)
        assert "serving on http://127.0.0.1:" in line, line
        yield line.split("serving on ")[1].strip()
    finally:
        proc.send_signal(signal.SIGTERM)
        status = await anyio.to_thread.run_sync(proc.wait, 30)
        proc.stderr.close()
    assert status == 0


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", maxsplit=1)[0])


async def test_an_http_server_started_again_on_the_same_store_resumes_the_session_its_client_presents(
    tmp_path: Path,
) -> None:
    store = tmp_path / "sessions.db"
    first = server_on(store)
    url = await first.__aenter__()
    try:
        async with Client(url) as client:
            defined = await run(client, "let kept: number = 41; globalThis.note = 'here'; kept")
            # The same client, with the same Mcp-Session-Id, across the restart.
            await first.__aexit__(None, None, None)
            first = None
            async with server_on(store, port_of(url)) as again:
                assert again == url
                resumed = await run(client, "[kept + 1, note]")
                changed = await run(client, "kept += 10; kept")
                after = await run(client, "kept")
    finally:
        if first is not None:
            await first.__aexit__(None, None, None)
    assert defined.structured_content["value"] == 41
    assert not resumed.is_error, resumed.structured_content
    assert resumed.structured_content["value"] == [42, "here"]
    assert (changed.structured_content["value"], after.structured_content["value"]) == (51, 51)


VERSION = "2025-06-18"
ACCEPT = "application/json, text/event-stream"


async def post(http: httpx.AsyncClient, url: str, message: dict[str, Any], session: str | None) -> httpx.Response:
    headers = {"accept": ACCEPT, "mcp-protocol-version": VERSION}
    if session is not None:
        headers["mcp-session-id"] = session
    return await http.post(url, json=message, headers=headers)


async def open_session(http: httpx.AsyncClient, url: str) -> str:
    """A session opened as a client opens one: the handshake; its Mcp-Session-Id."""
    hello = {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}
    response = await post(http, url, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}, None)
    session = response.headers["mcp-session-id"]
    await post(http, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    return session


def call(code: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "run_javascript", "arguments": {"code": code}},
    }


async def test_a_session_its_client_deleted_or_an_id_no_store_keeps_is_not_resumed(tmp_path: Path) -> None:
    store = tmp_path / "sessions.db"
    async with server_on(store) as url, httpx.AsyncClient() as http:
        deleted = await open_session(http, url)
        assert (await post(http, url, call("let gone = 1"), deleted)).status_code == 200
        assert (
            await http.delete(url, headers={"mcp-session-id": deleted, "mcp-protocol-version": VERSION})
        ).status_code == 200
        kept = await open_session(http, url)
        assert (await post(http, url, call("let kept = 1"), kept)).status_code == 200
    async with server_on(store, port_of(url)) as url, httpx.AsyncClient() as http:
        statuses = [(await post(http, url, call("1"), session)).status_code for session in (deleted, "f" * 32, kept)]
    assert statuses == [404, 404, 200]


async def test_a_resumed_sessions_id_with_garbage_is_refused_and_leaves_the_session_to_its_client(
    tmp_path: Path,
) -> None:
    # A hostile client after the restart: the stored session's id with a body that is not
    # JSON, with a JSON-RPC message that is no request, and a forged id of 8 KiB. Each is
    # refused; the session's own client then finds it whole.
    store = tmp_path / "sessions.db"
    async with server_on(store) as url, httpx.AsyncClient() as http:
        session = await open_session(http, url)
        assert (await post(http, url, call("let mine = 'intact'"), session)).status_code == 200
    async with server_on(store, port_of(url)) as url, httpx.AsyncClient() as http:
        headers = {"accept": ACCEPT, "mcp-protocol-version": VERSION, "mcp-session-id": session}
        as_json = {**headers, "content-type": "application/json"}
        garbage = await http.post(url, content=b"\xff{not json", headers=as_json)
        assert 400 <= garbage.status_code < 500, garbage.text
        no_request = await http.post(url, json={"jsonrpc": "2.0", "id": 7}, headers=headers)
        assert 400 <= no_request.status_code < 500, no_request.text
        forged = await post(http, url, call("1"), "z" * 8192)
        assert forged.status_code == 404
        reply = await post(http, url, call("mine"), session)
        assert reply.status_code == 200 and "intact" in reply.text, reply.text


async def test_a_client_that_opens_its_saved_session_id_again_with_a_handshake_resumes_it_under_that_id(
    tmp_path: Path,
) -> None:
    store = tmp_path / "sessions.db"
    async with server_on(store) as url, httpx.AsyncClient() as http:
        saved = await open_session(http, url)
        await post(http, url, call("let total = 40"), saved)
    async with server_on(store, port_of(url)) as url, httpx.AsyncClient() as http:
        hello = {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}
        opened = await post(http, url, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}, saved)
        await post(http, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, saved)
        answer = await post(http, url, call("total + 2"), saved)
    assert (opened.status_code, opened.headers["mcp-session-id"]) == (200, saved)
    assert '"value":42' in answer.text


async def test_a_stdio_server_started_again_on_the_same_store_resumes_its_one_session(tmp_path: Path) -> None:
    store = tmp_path / "sessions.db"
    async with stdio_client("--session", "--store", str(store)) as (client, _):
        listed = (await client.list_tools()).tools
        await run(client, "let total: number = 40")
        await run(client, "total += 1")
    async with stdio_client("--session", "--store", str(store)) as (client, _):
        result = await run(client, "total + 1")
    assert result.structured_content["value"] == 42
    description = listed[0].description or ""
    assert "even after the server restarts" in description
    assert "`Date.now()` stays at the session's start" in description


async def test_with_a_store_a_call_that_hits_a_limit_loses_only_itself(tmp_path: Path) -> None:
    store = tmp_path / "sessions.db"
    async with stdio_client("--session", "--store", str(store)) as (client, _):
        await run(client, "let kept = 'yes'")
        limit = await run(client, "globalThis.lost = 1; while (true) {}", timeout=0.5)
        after = await run(client, "[kept, typeof lost]")
    assert limit.structured_content["error"]["kind"] == "timeout"
    assert after.structured_content["value"] == ["yes", "undefined"]


async def test_a_stored_session_that_does_not_replay_as_recorded_is_started_afresh_and_the_call_says_so(
    tmp_path: Path,
) -> None:
    store = tmp_path / "sessions.db"
    # --sandbox off: a program reads its worker's real process id, which a fresh worker does not share.
    flags = ("--session", "--store", str(store), "--sandbox", "off")
    async with stdio_client(*flags) as (client, _):
        await run(client, "let pid = (await import('node:process')).default.pid; pid")
    async with stdio_client(*flags) as (client, _):
        lost = await run(client, "typeof pid")
        fresh = await run(client, "typeof pid")
    error = lost.structured_content["error"]
    assert error["kind"] == "replay_divergence"
    assert error["message"].endswith(
        "this call did not run, and what the session's earlier calls defined is lost: its next call starts on an "
        "empty runtime"
    )
    assert fresh.structured_content["value"] == "undefined"


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        _cli.main(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_store_without_session_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = usage_error(["mcp", "--store", str(tmp_path / "s.db")], capsys)
    assert "--store needs --session" in err
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("missing/s.db", "journal store {path} failed: OperationalError: unable to open database file"),
        ("", "journal store {path} failed: OperationalError: unable to open database file"),
        (":memory:", "--store ':memory:': give the path of a SQLite file"),
    ],
    ids=["a missing folder", "a folder", "no file"],
)
def test_a_store_path_that_cannot_be_a_sqlite_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, message: str
) -> None:
    path = name if name.startswith(":") else str(tmp_path / name) if name else str(tmp_path)
    err = usage_error(["mcp", "--session", "--store", path], capsys)
    assert message.format(path=path) in err


def test_a_file_that_is_not_a_database_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.db"
    path.write_bytes(b"not a database" * 100)
    err = usage_error(["mcp", "--session", "--store", str(path)], capsys)
    assert "journal store" in err and "file is not a database" in err


@pytest.mark.parametrize(
    ("content", "mode", "message"),
    [
        (b"ab" * 32 + b"\n", 0o644, "may be read or written by others (mode 0644): make it its owner's only"),
        (b"ab" * 8 + b"\n", 0o600, "holds 8 bytes, fewer than 16"),
        (b"not hex\n", 0o600, "does not hold hexadecimal digits"),
    ],
    ids=["readable by others", "too short", "not hexadecimal"],
)
def test_a_key_file_that_cannot_sign_the_store_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, mode: int, message: str
) -> None:
    key = tmp_path / "s.db.key"
    key.write_bytes(content)
    key.chmod(mode)
    err = usage_error(["mcp", "--session", "--store", str(tmp_path / "s.db")], capsys)
    assert f"the key file {key} of --store " in err and message in err


def test_the_first_server_on_a_store_makes_its_key_file_its_owners_only(tmp_path: Path) -> None:
    from pydeno._cli.mcp_store import open_store

    store, key = open_store(str(tmp_path / "s.db"))
    store.close()
    again, same = open_store(str(tmp_path / "s.db"))
    again.close()
    info = os.stat(tmp_path / "s.db.key")
    assert info.st_mode & 0o777 == 0o600
    assert key == same and len(key) == 32
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db", "s.db.key"]
