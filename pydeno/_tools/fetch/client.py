"""``HttpFetch``: the guest's only road to the network, on the host's terms.

The guest never opens a socket. It asks the host, which checks every request against one
policy before anything is sent: the URL must fall under an allowed prefix (an origin and a
path prefix, compared segment by segment), its host must be written canonically, the method
and headers must be allowed and the body within its cap. The host then resolves the name
itself, refuses private, loopback, link-local and metadata addresses unless they are allowed
explicitly, and connects to the very address it checked, so a name that resolves differently
a second time (DNS rebinding) gains nothing. Redirects are followed by the host, hop by hop,
each hop checked like the first. Headers the host injects (credentials) go upstream only and
never reach the guest.

One policy, one I/O path: requests run on a synchronous httpx transport (no client, so
nothing of httpx's parses a server's answer before the host's checks); an async runtime
runs them in a worker thread, so the same code serves ``Runtime`` and ``AsyncRuntime`` under
any event loop, and the total ``timeout`` is enforced on every socket operation.
"""

from __future__ import annotations

import ipaddress
import re
import ssl
import time
import urllib.parse
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, overload

from ..._base.checks import count, limit_text, seconds, size
from ..._base.errors import FetchFailed, FetchRefused, FetchTimeout
from ..tool import Tool
from .guest import HOST_FUNCTION, INSTALL
from .policy import (
    BAD_VALUE,
    FORBIDDEN_REQUEST,
    STANDARD_METHODS,
    TOKEN,
    AddressPolicy,
    Entry,
    IPAddress,
    Refusal,
    Target,
    allow_entry,
    beyond_latin_1,
    headers_option,
    method_option,
    network,
    parse_url,
    strings,
)

if TYPE_CHECKING:
    import httpx

    from ..._runtime._async import AsyncRuntime
    from ..._runtime._sync import Runtime

__all__ = ["HttpFetch"]

Redirect = Literal["follow", "manual", "error"]
_MAX_HEADERS: Final = 64
_MAX_HEADER_BYTES: Final = 16384
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_REDIRECT_MODES: Final[dict[str, Redirect]] = {"follow": "follow", "manual": "manual", "error": "error"}
# Set-Cookie may carry a session the injected credentials opened; hop-by-hop headers
# describe the host's connection, not the resource.
_HIDDEN_RESPONSE: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "set-cookie",
        "set-cookie2",
        "te",
        "trailer",
        "transfer-encoding",
    }
)

# A word of an injected value this long is a secret of its own: the token of
# "Bearer <token>" is what a server is most likely to repeat, without its scheme.
_MIN_SECRET_WORD: Final = 8
_REDIRECT_SCHEMES: Final = frozenset({"http", "https"})


class _Secrets:
    """The values the host injects, in every form a server is likely to hand one back in:
    whole, each long word of it alone, and percent-encoded, in any letter case. What the
    guest is shown of a server's answer (the reason phrase, header names and values, the
    final URL, error messages) is checked against them."""

    def __init__(self, values: Iterable[str]) -> None:
        forms: set[str] = set()
        for value in values:
            if not value.strip():
                continue
            for text in {value, *(word for word in value.split() if len(word) >= _MIN_SECRET_WORD)}:
                forms.update((text, urllib.parse.quote(text, safe=""), urllib.parse.quote_plus(text, safe="")))
        # Longest first: the whole value is redacted as one, not word by word.
        ordered = sorted(forms, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, ordered)), re.IGNORECASE) if ordered else None

    def scrub(self, text: str) -> str:
        return text if self._pattern is None else self._pattern.sub("[redacted]", text)

    def found(self, text: str) -> bool:
        return self._pattern is not None and self._pattern.search(text) is not None


# --- requests -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Request:
    url: str
    method: str
    headers: list[tuple[str, str]]
    body: bytes | None
    redirect: Redirect


@dataclass(slots=True)
class _Answer:
    status: int
    status_text: str
    url: str
    redirected: bool
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    def wire(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "statusText": self.status_text,
            "url": self.url,
            "redirected": self.redirected,
            "headers": [list(pair) for pair in self.headers],
            "body": self.body,
        }

    def tool_output(self) -> dict[str, Any]:
        headers: dict[str, str] = {}
        for name, value in self.headers:
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        return {
            "status": self.status,
            "headers": headers,
            "body": self.body.decode("utf-8", errors="replace"),
            "url": self.url,
        }


def _show(url: str) -> str:
    """A guest's URL as a message shows it: escaped, and cut if long."""
    text = url.encode("ascii", "backslashreplace").decode("ascii")
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return text if len(text) <= 200 else text[:200] + "..."


class HttpFetch:
    """``HttpFetch(allow, *, allow_addresses=(), methods=("GET", "HEAD"), headers=None,
    timeout=30.0, max_redirects=5, max_request_bytes=1 MiB, max_response_bytes=4 MiB,
    ssl_context=None)``.

    ``allow`` lists the URL prefixes a guest may fetch: an origin (``scheme://host[:port]``)
    and optionally a path prefix, compared segment by segment (``https://api.example.com/v1/``
    allows ``/v1`` and everything under it, not ``/v10``). It may also be a mapping of prefix
    to headers that the host adds to requests under that prefix alone. ``headers`` are added
    to every request the guest makes (not to a redirect's hop to another origin). The guest
    never sees an added header. ``allow_addresses`` lists the addresses or networks
    (``"127.0.0.1"``, ``"10.0.0.0/8"``) the host may connect to although they are not public.
    ``ssl_context`` verifies https servers (the system's trusted CAs by default).

    ``fetch.attach(rt)`` installs a guest ``fetch(url, init?)``; ``fetch.tool()`` is the
    same as a :class:`~pydeno.Tool` for Code Mode. ``close()`` (or ``with``) closes its
    connections.
    """

    def __init__(
        self,
        allow: Iterable[str] | Mapping[str, Mapping[str, str] | None],
        *,
        allow_addresses: Iterable[str] = (),
        methods: Iterable[str] = ("GET", "HEAD"),
        headers: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        max_redirects: int = 5,
        max_request_bytes: int | str = 2**20,
        max_response_bytes: int | str = 4 * 2**20,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if isinstance(allow, (str, bytes)):
            raise TypeError("allow must be a list of URL prefixes (or a mapping of prefix to headers), not one string")
        pairs: list[tuple[Any, Any]]
        if isinstance(allow, Mapping):
            pairs = list(allow.items())
        elif isinstance(allow, Iterable):
            pairs = [(text, None) for text in allow]
        else:
            raise TypeError(f"allow must be a list of URL prefixes, got {type(allow).__name__}")
        if not pairs:
            raise ValueError("allow is empty: list the URL prefixes the guest may fetch")
        self._entries = tuple(allow_entry(text, extra) for text, extra in pairs)
        self._headers = headers_option("headers", headers)
        self._addresses = AddressPolicy(tuple(network(a) for a in strings("allow_addresses", allow_addresses)))
        self.methods = frozenset(method_option(m) for m in strings("methods", methods))
        if not self.methods:
            raise ValueError("methods is empty: allow at least one method, e.g. methods=['GET']")
        self.timeout = seconds("timeout", timeout)
        self.max_redirects = count("max_redirects", max_redirects, 0)
        self.max_request_bytes = size("max_request_bytes", max_request_bytes, 0)
        self.max_response_bytes = size("max_response_bytes", max_response_bytes, 0)
        injected = [*self._headers, *(pair for e in self._entries for pair in e.headers)]
        self._secrets = _Secrets(value for _, value in injected)
        from . import transport

        if ssl_context is not None and not isinstance(ssl_context, ssl.SSLContext):
            raise TypeError(f"ssl_context must be an ssl.SSLContext or None, got {type(ssl_context).__name__}")
        self._transport = transport.transport(self._addresses.refusal, ssl_context)
        self._closed = False

    def __repr__(self) -> str:
        return f"<pydeno.HttpFetch allow={[e.text for e in self._entries]!r} methods={sorted(self.methods)!r}>"

    @property
    def read_only(self) -> bool:
        """True when only GET and HEAD are allowed."""
        return self.methods <= {"GET", "HEAD"}

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Close the connections. Idempotent; a fetch after it fails."""
        self._closed = True
        self._transport.close()

    def __enter__(self) -> HttpFetch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> HttpFetch:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    # -- exposure ----------------------------------------------------------------------------
    @overload
    def attach(self, rt: Runtime) -> None: ...
    @overload
    def attach(self, rt: AsyncRuntime) -> Awaitable[None]: ...
    def attach(self, rt: Runtime | AsyncRuntime) -> Awaitable[None] | None:
        """Install the guest's ``fetch(url, init?)`` in rt (a coroutine to await for an
        AsyncRuntime)."""
        if rt._steps.has_function(HOST_FUNCTION):
            raise RuntimeError("an HttpFetch is already attached to this runtime")
        return rt._steps.install(HOST_FUNCTION, self._guest_call, INSTALL, blocks=True)

    def tool(self, name: str = "fetch", *, description: str | None = None) -> Tool:
        """This fetch as a Code Mode tool: ``tools.<name>({url, method?, headers?, body?})``
        answers ``{status, headers, body, url}`` (the body as text)."""
        methods = sorted(self.methods)
        return Tool(
            name,
            _ToolCall(self),
            description=description
            or (
                "Fetch a URL over HTTP(S) through the host; only these prefixes are allowed: "
                + ", ".join(e.text for e in self._entries)
                + f". Methods: {', '.join(methods)}."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "an absolute http(s) URL under an allowed prefix"},
                    "method": {"type": "string", "enum": methods, "default": "GET"},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                    "body": {"type": "string"},
                },
                "required": ["url"],
                "additionalProperties": False,
            },
            output_schema={
                "type": "object",
                "properties": {
                    "status": {"type": "integer"},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                    "body": {"type": "string"},
                    "url": {"type": "string"},
                },
                "required": ["status", "headers", "body", "url"],
            },
            read_only=self.read_only,
        )

    # -- the host functions --------------------------------------------------------------------
    def _guest_call(self, url: Any = None, init: Any = None) -> dict[str, Any]:
        return self._run(self._guest_request(url, init)).wire()

    def _guest_request(self, url: Any, init: Any) -> _Request:
        if init is None:
            init = {}
        if not isinstance(init, dict):
            raise FetchRefused("fetch refused: init must be an object")
        shown = url if isinstance(url, str) else repr(type(url).__name__)
        method = init.get("method")
        method = "GET" if method is None else method
        if not isinstance(method, str) or not TOKEN.match(method):
            raise FetchRefused(f"fetch refused: {_show(shown)}: the method must be an HTTP method name")
        headers = init.get("headers")
        pairs: list[Any]
        if headers is None:
            pairs = []
        elif isinstance(headers, dict):
            pairs = list(headers.items())
        elif isinstance(headers, list):
            pairs = headers
        else:
            raise FetchRefused(f"fetch refused: {_show(shown)}: headers must be an object or a list of pairs")
        redirect = init.get("redirect", "follow")
        mode = _REDIRECT_MODES.get(redirect) if isinstance(redirect, str) else None
        if mode is None:
            raise FetchRefused(f"fetch refused: {_show(shown)}: redirect must be 'follow', 'manual' or 'error'")
        return self._request(url, method, pairs, init.get("body"), mode)

    def _request(self, url: Any, method: str, pairs: list[Any], body: Any, redirect: Redirect) -> _Request:
        """The guest's request, checked before anything is resolved or sent."""
        method = method.upper() if method.upper() in STANDARD_METHODS else method
        where = f"{method} {_show(url) if isinstance(url, str) else 'a non-string URL'}"
        if self._closed:
            raise FetchFailed(f"fetch failed: {where}: this HttpFetch is closed")
        if not isinstance(url, str):
            raise FetchRefused(f"fetch refused: {where}: the URL must be a string")
        self._check_url(url, where)
        if method not in self.methods:
            raise FetchRefused(
                f"fetch refused: {where}: method {method} is not allowed (methods={sorted(self.methods)})"
            )
        headers: list[tuple[str, str]] = []
        size = 0
        if len(pairs) > _MAX_HEADERS:
            raise FetchRefused(f"fetch refused: {where}: more than {_MAX_HEADERS} headers")
        for pair in pairs:
            if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
                raise FetchRefused(f"fetch refused: {where}: each header must be a [name, value] pair of strings")
            name, value = pair
            if not TOKEN.match(name):
                raise FetchRefused(f"fetch refused: {where}: '{_show(name)}' is not a valid header name")
            lowered = name.lower()
            if lowered in FORBIDDEN_REQUEST or lowered.startswith(("proxy-", "sec-")):
                raise FetchRefused(f"fetch refused: {where}: the guest may not set the {lowered} header")
            if BAD_VALUE.search(value):
                raise FetchRefused(f"fetch refused: {where}: the {lowered} header has a control character")
            beyond = beyond_latin_1(value)
            if beyond is not None:
                raise FetchRefused(
                    f"fetch refused: {where}: the {lowered} header has a character beyond Latin-1 "
                    f"(U+{ord(beyond):04X}); encode the value first, for example with encodeURIComponent()"
                )
            size += len(name) + len(value)
            headers.append((lowered, value))
        if size > _MAX_HEADER_BYTES:
            raise FetchRefused(f"fetch refused: {where}: the headers are over {_MAX_HEADER_BYTES} bytes")
        data: bytes | None
        if body is None:
            data = None
        elif isinstance(body, str):
            data = body.encode("utf-8", errors="surrogatepass")
        elif isinstance(body, (bytes, bytearray, memoryview)):
            data = bytes(body)
        else:
            raise FetchRefused(f"fetch refused: {where}: the body must be a string or bytes")
        if data is not None and method in ("GET", "HEAD"):
            raise FetchRefused(f"fetch refused: {where}: a {method} request cannot have a body")
        if data is not None and len(data) > self.max_request_bytes:
            raise FetchRefused(
                f"fetch refused: {where}: the body of {len(data)} bytes is over "
                f"max_request_bytes={self.max_request_bytes}",
                hint=(
                    "send a smaller body, or raise HttpFetch(max_request_bytes=) "
                    f"(now {limit_text(self.max_request_bytes)})"
                ),
            )
        return _Request(url, method, headers, data, redirect)

    def _check_url(self, url: str, where: str) -> tuple[Target, Entry]:
        """The target and its most specific entry, or FetchRefused. A host written as an
        address is checked here, before any connection could be attempted."""
        try:
            target = parse_url(url)
        except Refusal as exc:
            raise FetchRefused(f"fetch refused: {where}: {exc}") from None
        entries = [e for e in self._entries if e.covers(target)]
        if not entries:
            raise FetchRefused(f"fetch refused: {where}: not under any allowed prefix (allow=)")
        try:
            literal: IPAddress | None = ipaddress.ip_address(target.host)
        except ValueError:
            literal = None
        if literal is not None:
            why = self._addresses.refusal(literal)
            if why is not None:
                raise FetchRefused(
                    f"fetch refused: {where}: {literal} is {why}; allow it with allow_addresses= only knowingly"
                )
        return target, max(entries, key=lambda e: len(e.segments))

    def _scrub(self, text: str) -> str:
        return self._secrets.scrub(text)

    def _where(self, method: str, url: str) -> str:
        """A hop as messages name it: a URL a server chose may carry an injected value."""
        return f"{method} {_show(self._scrub(url))}"

    def _run(self, request: _Request) -> _Answer:
        """Send request, following redirects hop by hop, all within the timeout."""
        import httpcore

        from .transport import DEADLINE, AddressRefused

        token = DEADLINE.set(time.monotonic() + self.timeout)
        first = self._where(request.method, request.url)
        try:
            return self._exchange(request)
        except AddressRefused as exc:
            raise FetchRefused(f"fetch refused: {first}: {self._scrub(str(exc))}") from None
        except httpcore.TimeoutException:
            raise FetchTimeout(f"fetch timed out after {self.timeout}s: {first}") from None
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol, OSError) as exc:
            reason = self._scrub(str(exc)) or type(exc).__name__
            raise FetchFailed(f"fetch failed: {first}: {reason}") from None
        finally:
            DEADLINE.reset(token)

    def _exchange(self, request: _Request) -> _Answer:
        import httpx

        from .transport import DEFAULT_HEADERS, remaining

        url, method, body = request.url, request.method, request.body
        guest_headers = list(request.headers)
        origin = parse_url(url).origin
        for hop in range(self.max_redirects + 1):
            where = self._where(method, url)
            target, entry = self._check_url(url, where)
            # The host's headers: this entry's own always; the global ones only on the
            # origin the guest asked for, never on one a redirect chose.
            injected = dict(entry.headers)
            if target.origin == origin:
                injected = {**dict(self._headers), **injected}
            sent = dict(guest_headers)
            if target.origin != origin:
                sent.pop("authorization", None)
            sent.update(injected)
            sent = {**{k: v for k, v in DEFAULT_HEADERS if k not in sent}, **sent}
            # Every value was checked to be Latin-1: each character goes out as its byte.
            outgoing = httpx.Request(
                method,
                target.url,
                headers=[(k.encode("ascii"), v.encode("latin-1")) for k, v in sent.items()],
                content=body,
                extensions={"timeout": httpx.Timeout(remaining(None)).as_dict()},
            )
            response = self._transport.handle_request(outgoing)
            response.request = outgoing
            try:
                location = response.headers.get("location")
                if response.status_code in _REDIRECTS and location is not None and request.redirect != "manual":
                    if request.redirect == "error":
                        raise FetchFailed(f"fetch failed: {where}: answered with a redirect and redirect is 'error'")
                    if hop == self.max_redirects:
                        break
                    next_url = self._redirect_target(target, location, where)
                    if (response.status_code == 303 and method != "HEAD") or (
                        response.status_code in (301, 302) and method == "POST"
                    ):
                        method, body = "GET", None
                        guest_headers = [(k, v) for k, v in guest_headers if not k.startswith("content-")]
                    try:
                        self._check_url(next_url, self._where(method, next_url))
                    except FetchRefused as exc:
                        reason = str(exc).removeprefix("fetch refused: ")
                        raise FetchRefused(f"fetch refused: redirect from {where} to {self._scrub(reason)}") from None
                    if method not in self.methods:
                        raise FetchRefused(f"fetch refused: redirect from {where}: method {method} is not allowed")
                    url = next_url
                    continue
                return _Answer(
                    response.status_code,
                    self._reason(response, where),
                    self._scrub(str(target.url)),
                    hop > 0,
                    self._response_headers(response, where),
                    self._body(response, where, method),
                )
            finally:
                response.close()
        raise FetchFailed(
            f"fetch failed: {self._where(request.method, request.url)}: "
            f"more than max_redirects={self.max_redirects} redirects"
        )

    def _redirect_target(self, target: Target, location: str, where: str) -> str:
        """The absolute URL a redirect's Location names, or FetchRefused: a scheme other than
        http(s) (data:, javascript:, file:, ...) or a Location that does not parse is never
        followed. The URL is checked against the policy by the caller."""
        import httpx

        malformed = f"fetch refused: redirect from {where} to a Location that is not a valid URL"
        try:
            scheme = urllib.parse.urlsplit(location).scheme.lower()
        except ValueError:
            raise FetchRefused(malformed) from None
        if scheme and scheme not in _REDIRECT_SCHEMES:
            # A scheme is letters, digits and "+-.", which a token could be made of too.
            shown = self._scrub(scheme)
            shown = shown if len(shown) <= 32 else shown[:32] + "..."
            raise FetchRefused(
                f"fetch refused: redirect from {where} to a {shown}: URL; only http and https URLs are followed"
            )
        try:
            return str(target.url.join(location))
        except (httpx.InvalidURL, UnicodeError, ValueError):
            raise FetchRefused(malformed) from None

    def _reason(self, response: httpx.Response, where: str) -> str:
        """The reason phrase as the server sent it, one character per byte (the fetch
        standard's statusText), with any injected value redacted."""
        raw = response.extensions.get("reason_phrase", b"")
        reason = raw.decode("latin-1") if isinstance(raw, bytes) else ""
        if BAD_VALUE.search(reason):
            raise FetchFailed(
                f"fetch failed: {where}: the server's answer has a control character in its reason phrase"
            )
        return self._scrub(reason)

    def _response_headers(self, response: httpx.Response, where: str) -> list[tuple[str, str]]:
        """The headers the guest sees: each byte one character, as the fetch standard has
        it. A header whose name or value carries an injected value is left out whole."""
        out = []
        for raw_name, raw_value in response.headers.raw:
            name = raw_name.decode("latin-1").lower()
            value = raw_value.decode("latin-1")
            if name in _HIDDEN_RESPONSE or self._secrets.found(name) or self._secrets.found(value):
                continue
            if BAD_VALUE.search(value):
                raise FetchFailed(
                    f"fetch failed: {where}: the server's answer has a control character in the {_show(name)} header"
                )
            out.append((name, value))
        return out

    def _body(self, response: httpx.Response, where: str, method: str) -> bytes:
        cap = self.max_response_bytes
        over = f"fetch failed: {where}: the response is over max_response_bytes={cap}"
        hint = f"fetch something smaller, or raise HttpFetch(max_response_bytes=) (now {limit_text(cap)})"
        declared = response.headers.get("content-length")
        if method != "HEAD" and declared is not None and declared.isdigit() and int(declared) > cap:
            raise FetchFailed(over, hint=hint)
        chunks: list[bytes] = []
        received = 0
        for chunk in response.iter_raw():
            received += len(chunk)
            if received > cap:
                raise FetchFailed(over, hint=hint)
            chunks.append(chunk)
        return b"".join(chunks)


class _ToolCall:
    """The function behind ``HttpFetch.tool()``: synchronous in a synchronous runtime, an
    awaitable (the request in a worker thread) where an event loop runs this thread."""

    __slots__ = ("_fetch",)

    def __init__(self, fetch: HttpFetch) -> None:
        self._fetch = fetch

    def __call__(self, arguments: dict[str, Any]) -> Any:
        fetch = self._fetch
        headers = arguments.get("headers") or {}
        request = fetch._request(
            arguments.get("url"),
            arguments.get("method") or "GET",
            list(headers.items()),
            arguments.get("body"),
            "follow",
        )
        import sniffio

        try:
            sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            return fetch._run(request).tool_output()
        return self._in_thread(request)

    async def _in_thread(self, request: _Request) -> dict[str, Any]:
        import anyio.to_thread

        answer = await anyio.to_thread.run_sync(self._fetch._run, request, abandon_on_cancel=True)
        return answer.tool_output()
