"""The streamable HTTP transport of ``pydeno mcp``: the Host and Origin guards for any bound
address, each request's disconnect made visible to its call, a session ended by its DELETE,
a stored session resumed under the id its client presents (--store), and uvicorn run under
the server's own signal handling."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
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
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._version import __version__
from .mcp_config import GRACEFUL_SHUTDOWN, HTTP_PATH, SESSION_HEADER, ServerConfig

log = logging.getLogger("pydeno.mcp")

# The scope key of an HTTP request's event that is set when its client disconnects.
_DISCONNECTED: Final = "pydeno.disconnected"
# The scope key of the session id the request's client presented: the transport may know the
# session by another id (a resumed one's, see _Resumer).
_SESSION: Final = "pydeno.session"
# How long the server's own handshake for a resumed session may take.
_HANDSHAKE_SECONDS: Final = 10.0


def disconnect_of(ctx: ServerRequestContext[Any, Any]) -> anyio.Event | None:
    scope = getattr(ctx.request, "scope", None)
    event = scope.get(_DISCONNECTED) if isinstance(scope, dict) else None
    return event if isinstance(event, anyio.Event) else None


def client_session_of(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The session id the request's client presented (its Mcp-Session-Id), whatever id the
    transport knows the session by."""
    scope = getattr(ctx.request, "scope", None)
    session = scope.get(_SESSION) if isinstance(scope, dict) else None
    if isinstance(session, str) and session:
        return session
    headers = getattr(ctx.request, "headers", None)
    value = headers.get(SESSION_HEADER) if headers is not None else None
    return value if isinstance(value, str) and value else None


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


def _with_session(headers: list[tuple[bytes, bytes]], old: str | None, new: str) -> list[tuple[bytes, bytes]]:
    """headers with their Mcp-Session-Id (old's, if old is given) set to new."""
    name = SESSION_HEADER.encode("latin-1")
    kept = [(k, v) for k, v in headers if k.lower() != name or (old is not None and v.decode("latin-1") != old)]
    if old is not None and len(kept) == len(headers):
        return headers
    return [*kept, (name, new.encode("latin-1"))]


class _Resumer:
    """Sessions kept in the store (--store), resumed under the id their client presents.

    A client keeps its Mcp-Session-Id across a restart of the server, whose transport no
    longer knows it (nor, past its idle timeout, a session of this server's own life): it
    answers 404. When the store keeps the session, the server opens a transport session of
    its own instead, by the handshake a client makes, and the request goes on over it; the
    client's id stays the session's, mapped to the transport's both ways (the transport's
    never reaches the client). A request the transport answers otherwise passes as it is.
    """

    def __init__(self, app: ASGIApp, stored: Callable[[str], Awaitable[bool]]) -> None:
        self.app = app
        self.stored = stored
        # The client's session id -> the transport's session that serves it.
        self.transport_of: dict[str, str] = {}
        self._reopening = anyio.Lock()

    async def serve(self, scope: Scope, receive: Receive, send: Send, session: str) -> None:
        consumed: list[Message] = []

        async def recording() -> Message:
            message = await receive()
            consumed.append(message)
            return message

        tried = self.transport_of.get(session, session)
        held = await self._attempt(scope, recording, send, session, tried)
        if held is None:
            return
        # One at a time: a client's GET stream and its call may both find the session gone.
        async with self._reopening:
            transport = self.transport_of.get(session)
            if transport is None or transport == tried:
                self.transport_of.pop(session, None)
                transport = await self._reopen(scope, session)
        if transport is not None:
            replayed = iter(consumed)

            async def again() -> Message:
                message = next(replayed, None)
                return message if message is not None else await receive()

            held = await self._attempt(scope, again, send, session, transport)
        for message in held or ():
            await send(message)

    async def _attempt(
        self, scope: Scope, receive: Receive, send: Send, session: str, transport: str
    ) -> list[Message] | None:
        """Serve the request over the transport's session ``transport``: None once answered,
        or the 404 it answered (unknown session), held back unsent."""
        held: list[Message] | None = None

        async def sending(message: Message) -> None:
            nonlocal held
            if held is not None:
                held.append(message)
                return
            if message["type"] == "http.response.start":
                if message["status"] == 404:
                    held = [message]
                    return
                if transport != session:
                    headers = _with_session(list(message.get("headers", [])), transport, session)
                    message = {**message, "headers": headers}
            await send(message)

        if transport != session:
            scope = {**scope, "headers": _with_session(list(scope["headers"]), None, transport)}
        await self.app(scope, receive, sending)
        return held

    async def _reopen(self, scope: Scope, session: str) -> str | None:
        """A transport session for the client's id, when the store keeps the session: the
        handshake, at the protocol version the request carries (or the latest)."""
        try:
            if not await self.stored(session):
                return None
        except Exception as exc:  # noqa: BLE001 - a record the pool would refuse: no resume
            log.warning("session %s is not resumed: %s: %s", session[:8], type(exc).__name__, exc)
            return None
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        version = headers.get("mcp-protocol-version", "")
        if version not in HANDSHAKE_PROTOCOL_VERSIONS:
            version = LATEST_HANDSHAKE_VERSION
        hello = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "pydeno-resumed-session", "version": __version__},
            },
        }
        with anyio.move_on_after(_HANDSHAKE_SECONDS):
            status, answer = await self._exchange(scope, hello, None, version)
            transport = answer.get(SESSION_HEADER)
            if status != 200 or not transport:
                return None
            ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            status, _ = await self._exchange(scope, ready, transport, version)
            if status != 202:
                return None
            self.transport_of[session] = transport
            log.info("session %s resumed from the store", session[:8])
            return transport
        return None

    async def _exchange(
        self, scope: Scope, message: dict[str, Any], transport: str | None, version: str
    ) -> tuple[int, dict[str, str]]:
        """POST one JSON-RPC message to the transport as a client would: the response's status
        and headers (its body read to its end and dropped)."""
        body = json.dumps(message).encode()
        headers = [(name, value) for name, value in scope["headers"] if name.lower() == b"host"] + [
            (b"accept", b"application/json, text/event-stream"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        if transport is not None:
            headers += [(SESSION_HEADER.encode(), transport.encode()), (b"mcp-protocol-version", version.encode())]
        status, answer, done, sent = 0, {}, anyio.Event(), False

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(reply: Message) -> None:
            nonlocal status
            if reply["type"] == "http.response.start":
                status = int(reply["status"])
                answer.update({k.decode("latin-1").lower(): v.decode("latin-1") for k, v in reply.get("headers", [])})
            elif reply["type"] == "http.response.body" and not reply.get("more_body", False):
                done.set()

        own = {k: v for k, v in scope.items() if k not in (_DISCONNECTED, _SESSION)}
        await self.app({**own, "method": "POST", "headers": headers, "query_string": b""}, receive, send)
        return status, answer


def _watch_http(
    app: ASGIApp,
    config: ServerConfig,
    end_session: Callable[[str], Awaitable[None]],
    stored: Callable[[str], Awaitable[bool]] | None = None,
) -> ASGIApp:
    """app, behind the Host and Origin checks (for whatever address the server binds), with
    each request's disconnect made visible to its call, a session's worker closed as soon as
    the transport accepted the client's DELETE of it, and (``stored``: --store) a session the
    store keeps resumed under its client's id."""

    allowed = tuple(name.lower() for name in config.allow_hosts)
    resumer = _Resumer(app, stored) if stored is not None else None

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

        session = headers.get(SESSION_HEADER)
        if session:
            scope[_SESSION] = session
        if resumer is not None and session and scope.get("path") == HTTP_PATH:
            await resumer.serve(scope, watched, sent, session)
        else:
            await app(scope, watched, sent)
        if scope.get("method") == "DELETE" and session and 200 <= status < 300:
            if resumer is not None:
                resumer.transport_of.pop(session, None)
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
    server: Server[Any],
    config: ServerConfig,
    end_session: Callable[[str], Awaitable[None]],
    stop: anyio.Event,
    stored: Callable[[str], Awaitable[bool]] | None = None,
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
                _watch_http(app, config, end_session, stored),
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
