"""Getting ready for a first worker while the caller does other work.

``prestart(sandbox)`` starts what a confined worker's start needs, the zygote that forks
workers (pydeno/host/process/zygote.py), in its own process, without waiting for it: a
program that must import something large before its first runtime (``pydeno mcp``, which
imports the MCP SDK) overlaps the two. Nothing is started with ``sandbox="off"``, whose
workers need no zygote.
"""

from __future__ import annotations

from ..host.process.spawner import spawner

__all__ = ["prestart"]


def prestart(sandbox: str) -> None:
    if sandbox != "off":
        spawner().warm()
