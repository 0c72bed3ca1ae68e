"""Code Mode over an MCP server: a model's program calls the server's tools as a typed API.

Run from the repository root: ``.venv/bin/python examples/mcp_code_mode.py``. It starts
itself a second time with ``--serve``, as a small MCP server of support tickets over stdio
(the way a real server would be launched), connects to it with the MCP SDK's client, and
hands the server's tools to ``pydeno.AsyncCodeMode`` with ``approve="read_only"``: the
tools the server marks read-only run, the one that changes tickets is refused. Prints one
JSON line per program.
"""

from __future__ import annotations

import asyncio
import json
import sys

from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel

import pydeno

server = MCPServer("tickets")
TICKETS = {
    1: {"title": "Login page is slow", "status": "open", "priority": 2},
    2: {"title": "Typo on the pricing page", "status": "open", "priority": 3},
    3: {"title": "Checkout fails with a 500", "status": "open", "priority": 1},
    4: {"title": "Dark mode colours", "status": "closed", "priority": 3},
}


class Ticket(BaseModel):
    id: int
    title: str
    status: str
    priority: int


class Found(BaseModel):
    tickets: list[Ticket]


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def search_tickets(status: str) -> Found:
    """The tickets with a status ("open" or "closed")."""
    return Found(tickets=[Ticket(id=i, **t) for i, t in TICKETS.items() if t["status"] == status])


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def close_ticket(id: int) -> str:  # noqa: A002 - the MCP argument's name
    """Close a ticket."""
    TICKETS[id]["status"] = "closed"
    return f"closed ticket {id}"


# Programs a model might write after reading cm.describe().
PROGRAMS = [
    # The two most urgent open tickets, in one run instead of one model turn per call.
    """
    const { tickets } = await tools.tickets.search_tickets({ status: "open" });
    tickets.sort((a, b) => a.priority - b.priority).slice(0, 2).map((t) => `#${t.id} ${t.title}`)
    """,
    # A write: close_ticket is not read-only, so the policy refuses it; the program sees why.
    """
    try { await tools.tickets.close_ticket({ id: 3 }) } catch (e) { `${e.name}: ${e.message}` }
    """,
]


async def main() -> None:
    me = StdioServerParameters(command=sys.executable, args=[__file__, "--serve"])
    async with Client(me) as session:
        tools = await pydeno.mcp_tools({"tickets": session})
        async with pydeno.AsyncCodeMode(tools, approve="read_only") as cm:
            for code in PROGRAMS:
                result = await cm.execute(code)
                calls = [f"{c['name']} {c['outcome']}" for c in result.tool_calls]
                print(json.dumps({"ok": result.ok, "value": result.value, "tool_calls": calls}))


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        server.run()
    else:
        asyncio.run(main())
