"""The streamable HTTP transport of ``pydeno mcp``: the Host and Origin guards for any bound
address, each request's disconnect made visible to its call, a session ended by its DELETE,
and uvicorn run under the server's own signal handling."""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import anyio.lowlevel
import uvicorn
from mcp.server import Server, ServerRequestContext
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

from .mcp_config import GRACEFUL_SHUTDOWN, HTTP_PATH, SESSION_HEADER, ServerConfig

# The scope key of an HTTP request's event that is set when its client disconnects.
_DISCONNECTED: Final = "pydeno.disconnected"


def disconnect_of(ctx: ServerRequestContext[Any, Any]) -> anyio.Event | None:
    scope = getattr(ctx.request, "scope", None)
    event = scope.get(_DISCONNECTED) if isinstance(scope, dict) else None
    return event if isinstance(event, anyio.Event) else None


def _host_of(host: str) -> str | None:
    """The name in a Host header (or an Origin's host), lower case and without its port;
    None when it is not of the form name, name:port, [v6] or [v6]:port."""
    name = host.strip().lower()
    if name.startswith("["):  # [v6]:port
        end = name.find("]")
        if end < 0 or (name[end + 1 :] and not re.fullmatch(r":\d{1,5}", name[end + 1 :])):
            return None
        return name[1:end]
    if name.count(":") == 1:
        name, _, port = name.partition(":")
        if not re.fullmatch(r"\d{1,5}", port):
            return None
    return name


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _local_name(host: str, allowed: tuple[str, ...] = ()) -> bool:
    """Whether a Host names this machine in a way DNS cannot rebind: an IP address literal,
    localhost, or a name the operator allowed (--allow-host). A rebinding page's requests
    carry its own name."""
    name = _host_of(host)
    return name is not None and (name == "localhost" or name in allowed or _is_ip(name))


def _local_origin(origin: str, host: str, allowed: tuple[str, ...] = ()) -> bool:
    """Whether a browser page of this Origin may call the server reached as Host: a page of
    the server's own origin, of a loopback address (a local tool's page), or of a name the
    operator allowed. A page on another address (another machine of the network, whose
    pages anyone may write) is refused, as a page of a rebinding name is."""
    scheme, sep, rest = origin.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or "/" in rest:
        return False
    name = _host_of(rest)
    if name is None:
        return False
    if name == "localhost" or name in allowed or name == _host_of(host):
        return True
    return _is_ip(name) and ipaddress.ip_address(name).is_loopback


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _watch_http(app: ASGIApp, config: ServerConfig, end_session: Callable[[str], Awaitable[None]]) -> ASGIApp:
    """app, behind the Host and Origin checks (for whatever address the server binds), with
    each request's disconnect made visible to its call, and a session's worker closed as soon
    as the transport accepted the client's DELETE of it."""

    allowed = tuple(name.lower() for name in config.allow_hosts)

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope.get("headers", [])}
        if not _local_name(headers.get("host", ""), allowed):
            await _plain(send, 421, "Invalid Host header: use the server's IP address or localhost")
            return
        origin = headers.get("origin")
        if origin is not None and not _local_origin(origin, headers["host"], allowed):
            await _plain(send, 403, "Invalid Origin header")
            return
        disconnected = anyio.Event()
        scope[_DISCONNECTED] = disconnected
        status = 0

        async def watched() -> Any:
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected.set()
            return message

        async def sent(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        await app(scope, watched, sent)
        session = headers.get(SESSION_HEADER)
        if scope.get("method") == "DELETE" and session and 200 <= status < 300:
            await end_session(session)

    return wrapped


class _Uvicorn(uvicorn.Server):
    # serve() below owns SIGINT and SIGTERM: uvicorn's own handlers would re-raise the signal
    # after shutdown, killing the process before it closes its workers.
    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # Only now is the socket accepting: a client that reads the address can connect.
        if self.started and sockets:
            address = sockets[0].getsockname()
            host = f"[{address[0]}]" if sockets[0].family == socket.AF_INET6 else address[0]
            print(f"pydeno mcp: serving on http://{host}:{address[1]}{HTTP_PATH}", file=sys.stderr, flush=True)


async def serve_http(
    server: Server[Any], config: ServerConfig, end_session: Callable[[str], Awaitable[None]], stop: anyio.Event
) -> None:
    app = server.streamable_http_app(
        streamable_http_path=HTTP_PATH,
        session_idle_timeout=config.idle_timeout,
        max_request_body_size=config.max_message_bytes,
        # _watch_http checks Host and Origin for every address; the transport's own check
        # holds only for the loopback names, and refuses a Host without a port.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        host=config.host,
    )
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((config.host, config.port))
        web = _Uvicorn(
            uvicorn.Config(
                _watch_http(app, config, end_session),
                log_level="warning",
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
                lifespan="on",
            )
        )

        async def stop_web() -> None:
            await stop.wait()
            web.should_exit = True

        async with anyio.create_task_group() as group:
            group.start_soon(stop_web)
            await web.serve(sockets=[sock])
            group.cancel_scope.cancel()
    finally:
        sock.close()
