"""Code Mode over MCP servers: pydeno.mcp_tools against real MCP servers (the SDK's own
server classes, tests/mcp_servers/), each a process the SDK's stdio client starts."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client, ClientSession, StdioServerParameters, stdio_client

import pydeno

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVERS = Path(__file__).parents[1] / "mcp_servers"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def server(name: str, *args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[str(SERVERS / f"{name}.py"), *args])


@asynccontextmanager
async def files_server() -> AsyncIterator[Client]:
    """The files server, through the SDK's high-level Client."""
    async with Client(server("files_server")) as client:
        yield client


@asynccontextmanager
async def web_server(*args: str) -> AsyncIterator[ClientSession]:
    """The web server, through stdio_client and a ClientSession."""
    async with stdio_client(server("web_server", *args)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def killed_mid_call(cm: pydeno.AsyncCodeMode) -> pydeno.ExecutionResult:
    """Run tools.files.hang() and kill the files server while the call waits: the server
    connects to this listener and sends its pid once it is inside the tool."""

    async def kill(conn: SocketStream) -> None:
        async with conn:
            pid = int(await BufferedByteReceiveStream(conn).receive_until(b"\n", 32))
            os.kill(pid, signal.SIGKILL)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, kill)
        port = listener.extra(SocketAttribute.local_port)
        result = await cm.execute(f"await tools.files.hang({{port: {port}}})")
        tg.cancel_scope.cancel()
    return result


async def test_each_mcp_tool_is_a_typed_function_in_its_servers_namespace() -> None:
    async with files_server() as files:
        tools = await pydeno.mcp_tools({"files": files})
        by_name = {t.name: t for t in tools}
        assert sorted(by_name) == [
            "files.called",
            "files.hang",
            "files.list_files",
            "files.read_file",
            "files.stat",
            "files.strict",
            "files.write_file",
        ]
        read = by_name["files.read_file"]
        assert read.input_schema["properties"] == {"path": {"title": "Path", "type": "string"}}
        assert read.description == "Read a file. The text of a file."
        assert (read.read_only, by_name["files.write_file"].read_only) == (True, False)
        assert by_name["files.stat"].output_schema is not None
        async with pydeno.AsyncCodeMode(tools) as cm:
            ts = cm.typescript()
            assert "interface FilesReadFileInput {\n  path: string;\n}" in ts
            assert "interface FilesStatOutput {\n  path: string;\n  size: number;\n}" in ts
            assert "  files: {\n" in ts
            assert "    read_file(args: FilesReadFileInput): Promise<unknown>;" in ts
            assert "    stat(args: FilesStatInput): Promise<FilesStatOutput>;" in ts
            assert "- tools.files.read_file({ path }) (read-only): Read a file. The text of a file." in cm.describe()


async def test_a_tool_with_structured_content_returns_it_as_the_value() -> None:
    async with files_server() as files, pydeno.AsyncCodeMode(await pydeno.mcp_tools({"files": files})) as cm:
        result = await cm.execute("const s = await tools.files.stat({path: 'a.txt'}); [s.path, s.size]")
        assert result.ok, str(result)
        assert result.value == ["a.txt", 5]
        assert [(c["name"], c["outcome"]) for c in result.tool_calls] == [("files.stat", "ok")]


async def test_one_text_block_is_its_string_and_several_are_a_list() -> None:
    async with files_server() as files, pydeno.AsyncCodeMode(await pydeno.mcp_tools({"files": files})) as cm:
        result = await cm.execute("[await tools.files.read_file({path: 'b.txt'}), await tools.files.list_files()]")
        assert result.value == ["bravo", ["a.txt", "b.txt"]], str(result)


async def test_images_and_embedded_resources_arrive_as_their_mcp_json_objects() -> None:
    async with web_server() as web, pydeno.AsyncCodeMode(await pydeno.mcp_tools({"web": web})) as cm:
        result = await cm.execute("await tools.web.fetch_page({url: 'http://127.0.0.1/a'})")
        assert result.value == [
            "the page at http://127.0.0.1/a",
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {
                "type": "resource",
                "resource": {"uri": "http://127.0.0.1/a", "mimeType": "text/html", "text": "<p>hi</p>"},
            },
        ], str(result)


async def test_a_result_marked_is_error_is_a_tool_error_the_program_can_catch() -> None:
    async with files_server() as files, pydeno.AsyncCodeMode(await pydeno.mcp_tools({"files": files})) as cm:
        result = await cm.execute(
            "try { await tools.files.read_file({path: 'missing.txt'}) } catch (e) { [e.name, e.message] }"
        )
        assert result.value == [
            "ToolError",
            "tools.files.read_file() failed: Error executing tool read_file: no file 'missing.txt'",
        ], str(result)
        assert result.tool_calls[0]["outcome"] == "error"


async def test_an_mcp_protocol_error_is_a_tool_error_naming_the_server_and_the_code() -> None:
    async with files_server() as files, pydeno.AsyncCodeMode(await pydeno.mcp_tools({"files": files})) as cm:
        result = await cm.execute("await tools.files.strict({level: 2})")
        assert not result.ok
        assert result.error is not None
        assert (result.error["name"], result.error["kind"]) == ("ToolError", "tool_failed")
        assert result.error["message"] == (
            "MCP server 'files' refused tools.files.strict(): level 2 is not supported (MCP error -32602)"
        )


async def test_read_only_hints_let_read_tools_run_under_the_read_only_policy_and_refuse_writes() -> None:
    async with files_server() as files:
        tools = await pydeno.mcp_tools({"files": files})
        async with pydeno.AsyncCodeMode(tools, approve="read_only") as cm:
            result = await cm.execute(
                "const text = await tools.files.read_file({path: 'a.txt'});\n"
                "let refused = null;\n"
                "try { await tools.files.write_file({path: 'a.txt', content: 'x'}) }\n"
                "catch (e) { refused = e.message }\n"
                "[text, refused, await tools.files.called()]"
            )
        assert result.value == [
            "alpha",
            "tools.files.write_file() was refused by the approval policy",
            {"result": ["read_file"]},
        ], str(result)
        assert [c["outcome"] for c in result.tool_calls] == ["ok", "refused", "ok"]


async def test_two_servers_are_two_namespaces_of_one_program_and_paged_listings_are_followed() -> None:
    async with files_server() as files, web_server() as web:
        tools = await pydeno.mcp_tools({"files": files, "web": web})
        # The web server lists one tool per page.
        assert [t.name for t in tools if t.name.startswith("web.")] == [
            "web.fetch_page",
            "web.search",
            "web.echo",
            "web.post",
        ]
        async with pydeno.AsyncCodeMode(tools) as cm:
            assert "  web: {\n" in cm.typescript()
            result = await cm.execute(
                "const hits = await tools.web.search({query: await tools.files.read_file({path: 'a.txt'})});\n"
                "await tools.files.write_file({path: 'hits.txt', content: hits.join(', ')});\n"
                "await tools.files.read_file({path: 'hits.txt'})"
            )
        assert result.value == "alpha 1, alpha 2", str(result)


async def test_malformed_arguments_are_refused_by_the_schema_before_reaching_the_server() -> None:
    async with files_server() as files, pydeno.AsyncCodeMode(await pydeno.mcp_tools({"files": files})) as cm:
        result = await cm.execute(
            "let message = null;\n"
            "try { await tools.files.read_file({path: 3}) } catch (e) { message = e.message }\n"
            "[message, await tools.files.called()]"
        )
        assert result.value == [
            "tools.files.read_file(): invalid arguments: $.path: 3 is not of type 'string'",
            {"result": []},
        ], str(result)


async def test_arguments_that_are_not_json_are_refused_even_when_the_schema_allows_anything() -> None:
    async with web_server() as web, pydeno.AsyncCodeMode(await pydeno.mcp_tools({"web": web})) as cm:
        result = await cm.execute(
            "const echoed = await tools.web.echo({a: [1, 'x', {b: null}]});\n"
            "const refused = [];\n"
            "for (const bad of [new Date(0), new Uint8Array(2), undefined, NaN]) {\n"
            "  try { await tools.web.echo({a: [bad]}) } catch (e) { refused.push(e.message) }\n"
            "}\n"
            "[echoed, refused]"
        )
        prefix = "tools.web.echo(): invalid arguments: $.a[0]: an MCP server takes JSON, and"
        assert result.value == [
            {"a": [1, "x", {"b": None}]},
            [
                f"{prefix} a Date is not JSON",
                f"{prefix} a Uint8Array is not JSON",
                f"{prefix} undefined is not JSON",
                f"{prefix} nan is not JSON",
            ],
        ], str(result)


async def test_a_non_finite_or_inexact_number_is_refused_by_the_servers_schema_before_the_call() -> None:
    async with files_server() as files, pydeno.AsyncCodeMode(await pydeno.mcp_tools({"files": files})) as cm:
        result = await cm.execute(
            "const refused = [];\n"
            "for (const level of [NaN, -Infinity, 2**53, 1e300]) {\n"
            "  try { await tools.files.strict({level}) } catch (e) { refused.push(e.message) }\n"
            "}\n"
            "[refused, await tools.files.called()]"
        )
        prefix = "tools.files.strict(): invalid arguments: $.level:"
        beyond = (
            "is not an exact integer: it is beyond Number.MAX_SAFE_INTEGER (2**53 - 1), where a JavaScript number "
            "cannot tell neighbouring integers apart; pass a BigInt (e.g. 2n ** 60n) for a larger integer"
        )
        assert result.value == [
            [
                f"{prefix} NaN is not a finite number (JSON has no NaN or Infinity)",
                f"{prefix} -Infinity is not a finite number (JSON has no NaN or Infinity)",
                f"{prefix} 9007199254740992 {beyond}",
                f"{prefix} 1e+300 {beyond}",
            ],
            {"result": []},
        ], str(result)


async def test_a_call_the_server_never_answers_is_an_upstream_failure_after_the_timeout() -> None:
    async def hold(conn: SocketStream) -> None:
        async with conn:
            await conn.receive()
            await anyio.sleep_forever()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with files_server() as files, listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, hold)
        port = listener.extra(SocketAttribute.local_port)
        async with pydeno.AsyncCodeMode(await pydeno.mcp_tools({"files": files}, timeout=0.5)) as cm:
            result = await cm.execute(f"await tools.files.hang({{port: {port}}})")
            assert result.error is not None, str(result)
            assert (result.error["name"], result.error["kind"]) == ("UpstreamError", "upstream_failed")
            assert result.error["message"] == "MCP server 'files' did not answer tools.files.hang() within timeout=0.5s"
            # The session lives on: the next call is answered.
            after = await cm.execute("await tools.files.read_file({path: 'a.txt'})")
            assert after.value == "alpha", str(after)
        tg.cancel_scope.cancel()


async def test_a_server_killed_mid_call_is_an_upstream_failure_and_the_code_mode_lives_on() -> None:
    async with (
        files_server() as files,
        web_server() as web,
        pydeno.AsyncCodeMode(await pydeno.mcp_tools({"files": files, "web": web})) as cm,
    ):
        result = await killed_mid_call(cm)
        assert result.error is not None, str(result)
        assert result.error["name"] == "UpstreamError"
        gone = "MCP server 'files' went away during tools.files.hang(): Connection closed"
        assert result.error["message"] == gone
        assert (result.error["kind"], result.error["retryable"]) == ("upstream_failed", False)
        # The other server still answers; the dead one fails at once, with the same kind.
        after = await cm.execute(
            "const hits = await tools.web.search({query: 'q'});\n"
            "let gone = null;\n"
            "try { await tools.files.read_file({path: 'a.txt'}) } catch (e) { gone = [e.name, e.message] }\n"
            "[hits, gone]"
        )
        assert after.value == [
            ["q 1", "q 2"],
            ["UpstreamError", "MCP server 'files' went away during tools.files.read_file(): Connection closed"],
        ], str(after)


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_code_mode_over_mcp_works_under_trio_too() -> None:
    async with files_server() as files, pydeno.AsyncCodeMode(await pydeno.mcp_tools({"files": files})) as cm:
        result = await cm.execute(
            "[await tools.files.read_file({path: 'a.txt'}), await tools.files.stat({path: 'a.txt'})]"
        )
        assert result.value == ["alpha", {"path": "a.txt", "size": 5}], str(result)


async def test_the_sync_code_mode_is_refused_at_once_since_the_session_lives_in_another_loop() -> None:
    async with files_server() as files:
        tools = await pydeno.mcp_tools({"files": files})
        with pydeno.CodeMode(tools) as cm:
            result = cm.execute("await tools.files.read_file({path: 'a.txt'})")
        assert result.error is not None
        assert result.error["message"] == (
            "tools.files.read_file() was called outside the event loop its MCP session belongs to: "
            "run MCP tools with pydeno.AsyncCodeMode, in that loop"
        )


async def test_a_tool_name_that_is_not_an_identifier_is_mapped_and_two_that_collide_are_refused() -> None:
    async with web_server() as web:
        tools = await pydeno.mcp_tools({"web": web})
        assert "web.fetch_page" in [t.name for t in tools]
    async with web_server("colliding") as web:
        with pytest.raises(ValueError, match=r"tools 'fetch-page' and 'fetch_page' are both tools\.web\.fetch_page"):
            await pydeno.mcp_tools({"web": web})


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        pytest.param(
            {"sessions": {"my-files": None}},
            ValueError,
            r"MCP server name 'my-files' is not a JavaScript identifier .*call it e\.g\. 'my_files'",
            id="a server name that is not an identifier",
        ),
        pytest.param(
            {"sessions": {"files": object()}},
            TypeError,
            r"MCP server 'files': object has no list_tools\(\)",
            id="a session without the API",
        ),
        pytest.param({"sessions": [("files", None)]}, TypeError, r"mcp_tools\(\) takes a mapping", id="not a mapping"),
        pytest.param(
            {"sessions": {1: None}}, TypeError, r"an MCP server's name must be a str, got int", id="a name not a str"
        ),
        pytest.param({"sessions": {}, "timeout": -1}, ValueError, r"timeout must be a positive", id="a bad timeout"),
    ],
)
async def test_bad_arguments_are_refused_with_what_to_pass(
    arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        await pydeno.mcp_tools(**arguments)
