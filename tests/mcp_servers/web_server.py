"""A small MCP server over stdio for the tests, written on the SDK's low-level Server.

Run as ``python tests/mcp_servers/web_server.py [colliding]``. It lists its tools one per
page (so a client must follow the cursors), answers with several content blocks, an
image and an embedded resource, echoes what it is sent, and names a tool that is not a JavaScript identifier.
With ``colliding`` it also lists ``fetch_page``, which maps to the same name as ``fetch-page``.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

INVALID_PARAMS = -32602
PNG = "iVBORw0KGgo="

TOOLS = [
    types.Tool(
        name="fetch-page",
        description="A page's text, and a screenshot of it.",
        input_schema={"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
        annotations=types.ToolAnnotations(title="Fetch a page", read_only_hint=True),
    ),
    types.Tool(
        name="search",
        description="Search results, one text block each.",
        input_schema={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="echo",
        description="Its arguments, as structured content.",
        input_schema={"type": "object"},
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="post",
        description="Publish a page.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    ),
]
if sys.argv[1:] == ["colliding"]:
    TOOLS.append(types.Tool(name="fetch_page", input_schema={"type": "object"}))


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    index = int(params.cursor) if params is not None and params.cursor is not None else 0
    following = str(index + 1) if index + 1 < len(TOOLS) else None
    return types.ListToolsResult(tools=[TOOLS[index]], next_cursor=following)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    arguments = params.arguments or {}
    if params.name == "fetch-page":
        url = arguments["url"]
        return types.CallToolResult(
            content=[
                types.TextContent(text=f"the page at {url}"),
                types.ImageContent(data=PNG, mime_type="image/png"),
                types.EmbeddedResource(
                    resource=types.TextResourceContents(uri=url, mime_type="text/html", text="<p>hi</p>")
                ),
            ]
        )
    if params.name == "search":
        query = arguments["query"]
        return types.CallToolResult(content=[types.TextContent(text=f"{query} {n}") for n in (1, 2)])
    if params.name == "echo":
        return types.CallToolResult(content=[], structured_content=arguments)
    if params.name == "post":
        return types.CallToolResult(content=[types.TextContent(text="posted")])
    raise MCPError(INVALID_PARAMS, f"unknown tool {params.name!r}")


server = Server("web", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
