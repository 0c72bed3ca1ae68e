"""The network side of HttpFetch: a connection pool that reaches only checked addresses,
and whose every wait ends by the running fetch's deadline. Imported when the first
HttpFetch is made, so that ``import pydeno`` does not load the HTTP stack."""

from __future__ import annotations

import contextvars
import ipaddress
import math
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import httpcore
import httpx

from .policy import IPAddress

__all__ = ["DEADLINE", "DEFAULT_HEADERS", "AddressRefused", "remaining", "transport"]

# Why the host may not connect to an address (None: it may).
Refusal = Callable[[IPAddress], "str | None"]

# The deadline (time.monotonic()) of the fetch running in this thread: every socket
# operation of the connection pool waits at most until then.
DEADLINE: contextvars.ContextVar[float] = contextvars.ContextVar("pydeno_fetch_deadline", default=math.inf)


def _resolve(host: str, port: int, deadline: float) -> list[str]:
    """host's addresses, resolved in a thread so that the deadline holds even while the
    system resolver hangs."""
    try:
        return [ipaddress.ip_address(host).compressed]
    except ValueError:
        pass
    done = threading.Event()
    box: list[Any] = []

    def work() -> None:
        try:
            box.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP))
        except OSError as exc:
            box.append(exc)
        finally:
            done.set()

    threading.Thread(target=work, name="pydeno-fetch-resolve", daemon=True).start()
    if not done.wait(max(0.0, deadline - time.monotonic())):
        raise httpcore.ConnectTimeout(f"resolving {host} took too long")
    found = box[0]
    if isinstance(found, OSError):
        raise httpcore.ConnectError(f"could not resolve {host} ({found.strerror or found})")
    addresses = [str(info[4][0]).partition("%")[0] for info in found]
    return list(dict.fromkeys(ipaddress.ip_address(a).compressed for a in addresses))


def remaining(timeout: float | None) -> float:
    left = DEADLINE.get() - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("the fetch deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every wait ends by the running fetch's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, remaining(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, remaining(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, remaining(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _GuardedBackend(httpcore.NetworkBackend):
    """Resolves each host itself, checks the addresses and connects to a checked one: the
    name is never resolved again between the check and the connection. TLS still verifies
    the certificate against the name (the pool passes it as the server name)."""

    def __init__(self, refusal: Refusal) -> None:
        self._refusal = refusal
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = _resolve(host, port, DEADLINE.get())
        usable = [a for a in addresses if self._refusal(ipaddress.ip_address(a)) is None]
        if not usable:
            first = addresses[0]
            why = self._refusal(ipaddress.ip_address(first))
            shown = host if host == first else f"{host} resolves to {first}, which"
            raise AddressRefused(f"{shown} is {why}; allow it with allow_addresses= only knowingly")
        failure: Exception | None = None
        for address in usable:
            try:
                stream = self._inner.connect_tcp(address, port, remaining(timeout), local_address, socket_options)
            except httpcore.ConnectError as exc:
                failure = exc
                continue
            return _DeadlineStream(stream)
        assert failure is not None
        raise failure

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise AddressRefused("unix sockets are not reachable")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class AddressRefused(Exception):
    """Raised inside the connection pool; becomes FetchRefused."""


class _ResponseStream(httpx.SyncByteStream):
    def __init__(self, inner: Iterable[bytes]) -> None:
        self._inner = inner

    def __iter__(self) -> Iterator[bytes]:
        yield from self._inner

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()


class _Transport(httpx.BaseTransport):
    """httpx over a connection pool whose connections only reach checked addresses."""

    def __init__(self, refusal: Refusal, ssl_context: ssl.SSLContext) -> None:
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=32,
            max_keepalive_connections=8,
            keepalive_expiry=30.0,
            http1=True,
            http2=False,
            network_backend=_GuardedBackend(refusal),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        response = self._pool.handle_request(core)
        assert isinstance(response.stream, Iterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._pool.close()


# What every request says unless the guest says otherwise. Identity: the body the guest
# reads is the body the server sent, with no decoder between.
DEFAULT_HEADERS: tuple[tuple[str, str], ...] = (
    ("user-agent", "pydeno-fetch"),
    ("accept", "*/*"),
    ("accept-encoding", "identity"),
)


def transport(refusal: Refusal, ssl_context: ssl.SSLContext | None) -> httpx.BaseTransport:
    """What every request of one HttpFetch goes through. Requests are sent on it directly,
    not through an httpx.Client: there are no proxies from the environment, no cookie jar,
    and no redirect handling of httpx's own (which parses a Location before the host's
    checks could, and fails on one it cannot parse even when the guest follows nothing)."""
    return _Transport(refusal, ssl_context or ssl.create_default_context())
