"""A small MCP server over stdio for the tests: files kept in memory.

Run as ``python tests/mcp_servers/files_server.py``. Its tools cover what Code Mode maps:
a text result, a structured one, a tool error, a protocol error, a read-only hint, a name
that is not a JavaScript identifier, and a call that blocks until the test kills the process
(it first connects to the test on 127.0.0.1 and sends its pid, so the test awaits that
instead of sleeping).
"""

from __future__ import annotations

import os
import socket
from typing import TypedDict

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import ToolAnnotations

INVALID_PARAMS = -32602

server = MCPServer("files")
files: dict[str, str] = {"a.txt": "alpha", "b.txt": "bravo"}
calls: list[str] = []


class FileInfo(TypedDict):
    path: str
    size: int


@server.tool(
    title="Read a file",
    description="The text of a file.",
    annotations=ToolAnnotations(read_only_hint=True),
    structured_output=False,
)
def read_file(path: str) -> str:
    calls.append("read_file")
    if path not in files:
        raise ToolError(f"no file {path!r}")
    return files[path]


@server.tool(description="A file's path and size.", annotations=ToolAnnotations(read_only_hint=True))
def stat(path: str) -> FileInfo:
    calls.append("stat")
    return {"path": path, "size": len(files.get(path, ""))}


@server.tool(description="Write a file.", annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def write_file(path: str, content: str) -> str:
    calls.append("write_file")
    files[path] = content
    return f"wrote {len(content)} characters to {path}"


@server.tool(name="list-files", description="The paths of every file.", structured_output=False)
def list_files() -> list[str]:
    calls.append("list-files")
    return sorted(files)


@server.tool(description="The tools called so far, in order.", annotations=ToolAnnotations(read_only_hint=True))
def called() -> list[str]:
    return list(calls)


@server.tool(description="Refuse with a protocol error.")
def strict(level: int) -> str:
    calls.append("strict")
    raise MCPError(INVALID_PARAMS, f"level {level} is not supported")


@server.tool(description="Connect to the test, send this process's pid, then never answer.")
async def hang(port: int) -> str:
    calls.append("hang")
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(f"{os.getpid()}\n".encode())
        await anyio.sleep_forever()
    return "unreachable"


if __name__ == "__main__":
    server.run()
