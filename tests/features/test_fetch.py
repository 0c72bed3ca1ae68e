"""HttpFetch against real HTTP servers on 127.0.0.1 and real workers: what a guest may
fetch, what it is refused before anything is sent, what it sees of the answer, and what it
never sees (the host's injected headers). A hostile server's raw answers are
tests/hostile/test_fetch_hostile_server.py."""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import ssl
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

import pydeno
from tests.support.fetch_guests import SECRET, guest, refusal

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

# A self-signed certificate for the name fetch.test (and no other), valid until 2126.
TLS = Path(__file__).parents[1] / "fetch_tls"

# The addresses this process asks the kernel to connect to while a test records them, seen
# by an audit hook (hooks cannot be removed: it is installed once and idles otherwise).
CONNECTS: list[tuple[Any, ...]] = []
RECORDING = threading.Event()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "socket.connect" and RECORDING.is_set() and isinstance(args[1], tuple):
        CONNECTS.append(args[1])


sys.addaudithook(_audit)


@pytest.fixture
def connects() -> Iterator[list[tuple[Any, ...]]]:
    """Every address connected to during the test."""
    RECORDING.set()
    try:
        yield CONNECTS
    finally:
        RECORDING.clear()


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Route = Callable[[http.server.BaseHTTPRequestHandler], None]


@dataclass
class Server:
    port: int
    seen: list[Seen] = field(default_factory=list)
    routes: dict[str, Route] = field(default_factory=dict)
    release: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


def reply(
    handler: http.server.BaseHTTPRequestHandler,
    status: int = 200,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    *,
    length: bool = True,
) -> None:
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    if length:
        handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@contextlib.contextmanager
def serving(tls: ssl.SSLContext | None = None) -> Iterator[Server]:
    """A real HTTP server on 127.0.0.1 (https with tls) that records what it is sent."""
    state = Server(0)

    class Handler(http.server.BaseHTTPRequestHandler):
        def handle_one(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            path = self.path.partition("?")[0]
            state.seen.append(Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            route = state.routes.get(path)
            if route is None:
                reply(self, 200, json.dumps({"path": self.path}).encode(), {"Content-Type": "application/json"})
            else:
                route(self)

        do_GET = do_POST = do_HEAD = do_PUT = handle_one

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    state.port = httpd.server_address[1]
    # A short poll: shutdown() waits for the loop to look, once per test.
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), name="test-http-server")
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture
def server() -> Iterator[Server]:
    with serving() as state:
        yield state


def local(server: Server, *prefixes: str, **options: Any) -> pydeno.HttpFetch:
    """An HttpFetch allowed to reach the test server on 127.0.0.1."""
    allow = options.pop("allow", None) or [server.url(p) for p in (prefixes or ("/",))]
    options.setdefault("allow_addresses", ["127.0.0.1"])
    return pydeno.HttpFetch(allow, **options)


def stalled(server: Server) -> Route:
    """A route that answers only once the test is over (the fixture releases it)."""

    def route(handler: http.server.BaseHTTPRequestHandler) -> None:
        server.release.wait(30)
        reply(handler, 200, b"late")

    return route


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- what works ----------------------------------------------------------------------------


def test_a_guest_fetches_an_allowed_url_and_reads_status_headers_and_json(server: Server) -> None:
    server.routes["/hello"] = lambda h: reply(h, 201, b'{"hello": "world"}', {"Content-Type": "application/json"})
    with local(server) as fetch:
        got = guest(
            fetch,
            f"""const r = await fetch({json.dumps(server.url("/hello?x=1"))});
            return [r.status, r.ok, r.statusText, r.url, r.redirected, r.headers.get('Content-Type'),
                    r.headers.has('content-type'), await r.json(), r.bodyUsed]""",
        )
    assert got == [
        201,
        True,
        "Created",
        server.url("/hello?x=1"),
        False,
        "application/json",
        True,
        {"hello": "world"},
        True,
    ]
    assert [s.path for s in server.seen] == ["/hello?x=1"]


def test_text_array_buffer_and_bytes_read_the_body_once(server: Server) -> None:
    server.routes["/t"] = lambda h: reply(h, 200, "héllo".encode())
    with local(server) as fetch:
        got = guest(
            fetch,
            f"""const url = {json.dumps(server.url("/t"))};
            const a = await (await fetch(url)).text();
            const b = new Uint8Array(await (await fetch(url)).arrayBuffer()).length;
            const r = await fetch(url);
            const c = (await r.bytes()).length;
            let again = 'read twice';
            try {{ await r.text(); }} catch (e) {{ again = e.name; }}
            return [a, b, c, again]""",
        )
    assert got == ["héllo", 6, 6, "TypeError"]


def test_the_guest_cannot_reach_the_raw_host_function_after_attach(server: Server) -> None:
    with local(server) as fetch:
        got = guest(
            fetch,
            "return [typeof __pydeno_fetch, '__pydeno_fetch' in globalThis, "
            "Object.getOwnPropertyNames(globalThis).filter((n) => n.includes('fetch'))]",
        )
    assert got == ["undefined", False, ["fetch"]]


def test_a_post_within_the_caps_sends_its_body(server: Server) -> None:
    server.routes["/post"] = lambda h: reply(h, 200, b"ok")
    with local(server, methods=["GET", "POST"], max_request_bytes=10) as fetch:
        got = guest(
            fetch,
            f"""const r = await fetch({json.dumps(server.url("/post"))},
                {{method: 'post', body: 'abc', headers: {{'Content-Type': 'text/plain', 'X-Trace': '7'}}}});
            return [r.status, await r.text()]""",
        )
    assert got == [200, "ok"]
    assert (server.seen[0].method, server.seen[0].body) == ("POST", b"abc")
    assert server.seen[0].headers["x-trace"] == "7" and server.seen[0].headers["content-type"] == "text/plain"


def test_an_async_runtime_gets_the_same_fetch_under_asyncio_and_trio(server: Server) -> None:
    async def main() -> Any:
        with local(server) as fetch:
            async with pydeno.AsyncRuntime() as rt:
                await fetch.attach(rt)
                return await rt.eval(f"(async () => (await fetch({json.dumps(server.url('/a'))})).json())()")

    assert anyio.run(main, backend="asyncio") == {"path": "/a"}
    assert anyio.run(main, backend="trio") == {"path": "/a"}


def test_concurrent_fetches_from_an_async_runtime_all_complete(server: Server) -> None:
    async def main() -> Any:
        with local(server) as fetch:
            async with pydeno.AsyncRuntime() as rt:
                await fetch.attach(rt)
                urls = json.dumps([server.url(f"/c{i}") for i in range(4)])
                return await rt.eval(f"Promise.all({urls}.map(async (u) => (await fetch(new URL(u))).json()))")

    assert anyio.run(main) == [{"path": f"/c{i}"} for i in range(4)]


def test_a_head_request_gets_the_headers_and_no_body(server: Server) -> None:
    with local(server) as fetch:
        got = guest(
            fetch,
            f"const r = await fetch({json.dumps(server.url('/h'))}, {{method: 'HEAD'}});"
            "return [r.status, r.headers.get('content-type'), await r.text()]",
        )
    assert got == [200, "application/json", ""]
    assert server.seen[0].method == "HEAD"


def test_attaching_twice_to_one_runtime_is_refused(server: Server) -> None:
    with local(server) as fetch, pydeno.Runtime() as rt:
        fetch.attach(rt)
        with pytest.raises(RuntimeError, match="already attached"):
            fetch.attach(rt)


# --- addresses -----------------------------------------------------------------------------


def test_the_same_url_is_refused_without_allow_addresses_because_it_is_loopback(server: Server) -> None:
    with local(server, allow_addresses=[]) as fetch:
        got = refusal(fetch, server.url("/x"))
    assert got == [
        "FetchRefused",
        f"fetch refused: GET {server.url('/x')}: 127.0.0.1 is a loopback address; "
        "allow it with allow_addresses= only knowingly",
    ]
    assert server.seen == []


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://169.254.169.254/latest/meta-data/", "a cloud metadata address"),
        ("http://10.0.0.1/", "a private address"),
        ("http://[::1]:9/", "a loopback address"),
        ("http://[::ffff:127.0.0.1]:9/", "a loopback address"),
        ("http://100.64.0.1/", "a shared (CGNAT) address"),
        ("http://0.0.0.0:9/", "an unspecified address"),
        ("http://224.0.0.1/", "a multicast address"),
    ],
)
def test_a_non_public_address_is_refused_before_any_connection_is_attempted(
    url: str, why: str, connects: list[tuple[Any, ...]]
) -> None:
    with pydeno.HttpFetch([url]) as fetch:
        got = refusal(fetch, url)
    assert got[0] == "FetchRefused"
    assert got[1].startswith(f"fetch refused: GET {url}: ") and got[1].endswith(
        f"is {why}; allow it with allow_addresses= only knowingly"
    )
    host = url.split("/")[2].rsplit(":", 1)[0].strip("[]")
    assert not [a for a in connects if a[0] in {host, "169.254.169.254", "10.0.0.1", "::1", "127.0.0.1"}]


def test_an_allowed_network_never_covers_a_metadata_address_only_the_address_itself_does(
    connects: list[tuple[Any, ...]],
) -> None:
    url = "http://169.254.169.254/"
    with pydeno.HttpFetch([url], allow_addresses=["169.254.0.0/16"]) as fetch:
        got = refusal(fetch, url)
    assert got[1].endswith("169.254.169.254 is a cloud metadata address; allow it with allow_addresses= only knowingly")
    assert not [a for a in connects if a[0] == "169.254.169.254"]


def test_an_allowed_network_lets_its_addresses_through(server: Server) -> None:
    with local(server, allow_addresses=["127.0.0.0/8"]) as fetch:
        assert guest(fetch, f"return (await fetch({json.dumps(server.url('/n'))})).status") == 200


def test_a_name_that_resolves_to_loopback_is_refused_unless_allow_addresses_covers_it(server: Server) -> None:
    url = server.url("/name", host="localhost")
    with pydeno.HttpFetch([url]) as fetch:
        got = refusal(fetch, url)
    assert got[0] == "FetchRefused"
    assert got[1].startswith(f"fetch refused: GET {url}: localhost resolves to ")
    assert "a loopback address" in got[1]
    assert server.seen == []
    with pydeno.HttpFetch([url], allow_addresses=["127.0.0.1", "::1"]) as fetch:
        assert guest(fetch, f"return (await fetch({json.dumps(url)})).json()") == {"path": "/name"}


def test_the_host_connects_to_the_address_it_checked_and_never_resolves_the_name_again(
    server: Server, monkeypatch: pytest.MonkeyPatch, connects: list[tuple[Any, ...]]
) -> None:
    # A rebinding resolver: the checked answer first, a private address on any later look-up.
    real = socket.getaddrinfo
    asked: list[str] = []

    def rebinding(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "rebind.test":
            asked.append(host)
            host = "127.0.0.1" if len(asked) == 1 else "10.0.0.1"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    url = f"http://rebind.test:{server.port}/r"
    with pydeno.HttpFetch([url], allow_addresses=["127.0.0.1"]) as fetch:
        assert guest(fetch, f"return (await fetch({json.dumps(url)})).json()") == {"path": "/r"}
    assert asked == ["rebind.test"]
    assert ("127.0.0.1", server.port) in connects
    assert not [a for a in connects if a[0] == "10.0.0.1"]
    assert server.seen[0].headers["host"] == f"rebind.test:{server.port}"


@pytest.fixture
def tls_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Server, list[str | None]]]:
    """An https server for fetch.test on 127.0.0.1 (the name resolves there), and the server
    names (SNI) its clients asked for."""
    names: list[str | None] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(TLS / "cert.pem", TLS / "key.pem")
    context.sni_callback = lambda _sock, name, _ctx: names.append(name)
    real = socket.getaddrinfo

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == "fetch.test" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    with serving(context) as state:
        yield state, names


def trusting() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(TLS / "cert.pem"))


def test_https_verifies_the_certificate_against_the_name_while_connecting_to_the_checked_address(
    tls_server: tuple[Server, list[str | None]], connects: list[tuple[Any, ...]]
) -> None:
    server, names = tls_server
    url = f"https://fetch.test:{server.port}/secure"
    with pydeno.HttpFetch([url], allow_addresses=["127.0.0.1"], ssl_context=trusting()) as fetch:
        assert guest(fetch, f"return (await fetch({json.dumps(url)})).json()") == {"path": "/secure"}
    assert names == ["fetch.test"]
    assert server.seen[0].headers["host"] == f"fetch.test:{server.port}"
    assert ("127.0.0.1", server.port) in connects


def test_https_to_a_server_whose_certificate_is_not_trusted_fails(tls_server: tuple[Server, list[str | None]]) -> None:
    server, _ = tls_server
    url = f"https://fetch.test:{server.port}/"
    with pydeno.HttpFetch([url], allow_addresses=["127.0.0.1"]) as fetch:
        got = refusal(fetch, url)
    assert got[0] == "FetchFailed" and "CERTIFICATE_VERIFY_FAILED" in got[1], got
    assert server.seen == []


def test_https_by_address_fails_against_a_certificate_for_a_name(tls_server: tuple[Server, list[str | None]]) -> None:
    server, _ = tls_server
    url = f"https://127.0.0.1:{server.port}/"
    with pydeno.HttpFetch([url], allow_addresses=["127.0.0.1"], ssl_context=trusting()) as fetch:
        got = refusal(fetch, url)
    assert got[0] == "FetchFailed" and "CERTIFICATE_VERIFY_FAILED" in got[1], got
    assert server.seen == []


# --- URLs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["2130706433", "0x7f000001", "0177.0.0.1", "127.1", "127.0.0.01"])
def test_numeric_aliases_of_an_address_are_refused(server: Server, host: str) -> None:
    with local(server) as fetch:
        got = refusal(fetch, server.url("/", host=host))
    assert got[0] == "FetchRefused"
    assert got[1].startswith(f"fetch refused: GET http://{host}:{server.port}/: ")
    assert "numeric alias" in got[1] or "Invalid IPv4 address" in got[1]
    assert server.seen == []


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://user@127.0.0.1:{port}/", "user information"),
        ("http://127.0.0.1:{port}\\@evil.example/", "backslash"),
        ("ftp://127.0.0.1:{port}/", "only http and https"),
        ("http://localhost.:{port}/", "trailing dot"),
        ("/relative", "only http and https"),
    ],
)
def test_userinfo_odd_schemes_and_trailing_dots_are_refused(server: Server, url: str, why: str) -> None:
    with local(server) as fetch:
        got = refusal(fetch, url.format(port=server.port))
    assert got[0] == "FetchRefused" and why in got[1], got
    assert server.seen == []


@pytest.mark.parametrize(
    "path",
    [
        "/v1/../admin",
        "/v10",
        "/v1/%2e%2e/admin",
        "/v1/%2E%2e/admin",
        "/v1/..%2fadmin",
        "/v1%2f../admin",
        "/v1/..;/admin",
        "/v1/%c0%ae%c0%ae/admin",
        "/v1/%00",
        "/admin",
    ],
)
def test_a_path_outside_its_prefix_or_climbing_out_of_it_is_refused(server: Server, path: str) -> None:
    with local(server, "/v1/") as fetch:
        got = refusal(fetch, server.url(path))
    assert got[0] == "FetchRefused", got
    assert server.seen == []


@pytest.mark.parametrize("path", ["/v1", "/v1/", "/v1/users/7", "/v1/a/../b"])
def test_a_path_under_its_prefix_is_allowed(server: Server, path: str) -> None:
    with local(server, "/v1") as fetch:
        assert guest(fetch, f"return (await fetch({json.dumps(server.url(path))})).status") == 200


def test_an_idn_host_and_its_punycode_form_are_the_same_host(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.getaddrinfo

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == "xn--bcher-kva.test" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    with pydeno.HttpFetch([f"http://BÜCHER.test:{server.port}/"], allow_addresses=["127.0.0.1"]) as fetch:
        got = guest(fetch, f"return (await fetch('http://xn--bcher-kva.test:{server.port}/i')).status")
    assert got == 200
    assert server.seen[0].headers["host"] == f"xn--bcher-kva.test:{server.port}"


# --- redirects -----------------------------------------------------------------------------


def test_a_same_origin_redirect_is_followed_and_checked_again(server: Server) -> None:
    server.routes["/old"] = lambda h: reply(h, 302, headers={"Location": "/v1/new"})
    with local(server, "/old", "/v1/") as fetch:
        got = guest(fetch, f"const r = await fetch({json.dumps(server.url('/old'))}); return [r.url, r.redirected]")
    assert got == [server.url("/v1/new"), True]
    assert [s.path for s in server.seen] == ["/old", "/v1/new"]


def test_a_redirect_to_a_disallowed_origin_is_refused_and_the_server_sees_only_the_first_request(
    server: Server,
) -> None:
    elsewhere = server.url("/next", host="localhost")
    server.routes["/jump"] = lambda h: reply(h, 307, headers={"Location": elsewhere})
    with local(server) as fetch:
        got = refusal(fetch, server.url("/jump"))
    assert got == [
        "FetchRefused",
        f"fetch refused: redirect from GET {server.url('/jump')} to GET {elsewhere}: "
        "not under any allowed prefix (allow=)",
    ]
    assert [s.path for s in server.seen] == ["/jump"]


def test_a_redirect_loop_is_capped_by_max_redirects(server: Server) -> None:
    server.routes["/loop"] = lambda h: reply(h, 302, headers={"Location": "/loop"})
    with local(server, max_redirects=3) as fetch:
        got = refusal(fetch, server.url("/loop"))
    assert got == ["FetchFailed", f"fetch failed: GET {server.url('/loop')}: more than max_redirects=3 redirects"]
    assert len(server.seen) == 4


def test_manual_redirect_returns_the_redirect_itself(server: Server) -> None:
    server.routes["/old"] = lambda h: reply(h, 301, headers={"Location": "http://elsewhere.example/"})
    with local(server) as fetch:
        got = guest(
            fetch,
            f"const r = await fetch({json.dumps(server.url('/old'))}, {{redirect: 'manual'}});"
            "return [r.status, r.headers.get('location')]",
        )
    assert got == [301, "http://elsewhere.example/"]


def test_redirect_error_fails_on_a_redirect_without_following_it(server: Server) -> None:
    server.routes["/old"] = lambda h: reply(h, 302, headers={"Location": "/new"})
    with local(server) as fetch:
        got = refusal(fetch, server.url("/old"), "{redirect: 'error'}")
    assert got == [
        "FetchFailed",
        f"fetch failed: GET {server.url('/old')}: answered with a redirect and redirect is 'error'",
    ]
    assert [s.path for s in server.seen] == ["/old"]


def test_a_303_after_a_post_becomes_a_get_without_the_body(server: Server) -> None:
    server.routes["/form"] = lambda h: reply(h, 303, headers={"Location": "/done"})
    with local(server, methods=["GET", "POST"]) as fetch:
        guest(fetch, f"await fetch({json.dumps(server.url('/form'))}, {{method: 'POST', body: 'x=1'}})")
    assert [(s.method, s.path, s.body) for s in server.seen] == [("POST", "/form", b"x=1"), ("GET", "/done", b"")]


# --- injected headers ----------------------------------------------------------------------


def test_an_injected_header_reaches_the_server_and_never_the_guest(server: Server) -> None:
    # The server repeats the credential in a response header; the guest must not see it.
    server.routes["/me"] = lambda h: reply(h, 200, b"{}", {"X-Seen": str(h.headers.get("authorization"))})
    with local(server, headers={"Authorization": SECRET}) as fetch:
        got = guest(
            fetch,
            f"const r = await fetch({json.dumps(server.url('/me'))}); return [r.headers.get('x-seen'), [...r.headers]]",
        )
        assert SECRET not in repr(fetch)
    assert got[0] is None and SECRET not in json.dumps(got)
    assert server.seen[0].headers["authorization"] == SECRET


def test_an_injected_header_never_appears_in_an_error_message(server: Server) -> None:
    token = SECRET.split()[1]
    server.routes["/leak"] = lambda h: reply(h, 302, headers={"Location": f"http://localhost:{server.port}/{token}"})
    with local(server, headers={"X-Api-Key": token}) as fetch:
        got = refusal(fetch, server.url("/leak"))
    assert got[0] == "FetchRefused"
    assert token not in got[1] and "[redacted]" in got[1]


def test_injected_headers_are_dropped_on_a_redirect_to_another_origin_unless_it_has_its_own(server: Server) -> None:
    other = server.url("/there", host="localhost")
    server.routes["/here"] = lambda h: reply(h, 302, headers={"Location": other})
    allow: dict[str, dict[str, str] | None] = {server.url("/"): None, server.url("/", host="localhost"): None}
    addresses = ["127.0.0.1", "::1"]
    with pydeno.HttpFetch(allow, allow_addresses=addresses, headers={"Authorization": SECRET}) as fetch:
        guest(fetch, f"await fetch({json.dumps(server.url('/here'))}, {{headers: {{'X-Guest': 'g'}}}})")
    first, second = server.seen
    assert first.headers["authorization"] == SECRET
    assert "authorization" not in second.headers
    assert second.headers["x-guest"] == "g"

    server.seen.clear()
    allow[server.url("/", host="localhost")] = {"Authorization": "Bearer for-localhost"}
    with pydeno.HttpFetch(allow, allow_addresses=addresses, headers={"Authorization": SECRET}) as fetch:
        guest(fetch, f"await fetch({json.dumps(server.url('/here'))})")
    assert [s.headers.get("authorization") for s in server.seen] == [SECRET, "Bearer for-localhost"]


def test_an_entrys_own_headers_go_only_to_requests_under_that_entry(server: Server) -> None:
    allow = {server.url("/private/"): {"X-Key": "k-private-0123"}, server.url("/"): None}
    with pydeno.HttpFetch(allow, allow_addresses=["127.0.0.1"]) as fetch:
        guest(
            fetch,
            f"await fetch({json.dumps(server.url('/private/x'))}); await fetch({json.dumps(server.url('/public'))})",
        )
    assert [s.headers.get("x-key") for s in server.seen] == ["k-private-0123", None]


def test_the_guests_own_authorization_is_not_carried_to_another_origin(server: Server) -> None:
    server.routes["/here"] = lambda h: reply(h, 302, headers={"Location": server.url("/there", host="localhost")})
    allow = [server.url("/"), server.url("/", host="localhost")]
    with pydeno.HttpFetch(allow, allow_addresses=["127.0.0.1", "::1"]) as fetch:
        guest(fetch, f"await fetch({json.dumps(server.url('/here'))}, {{headers: {{Authorization: 'guest'}}}})")
    assert [s.headers.get("authorization") for s in server.seen] == ["guest", None]


@pytest.mark.parametrize("name", ["Host", "Cookie", "Connection", "Transfer-Encoding", "Proxy-Authorization"])
def test_a_header_the_guest_may_not_set_is_refused(server: Server, name: str) -> None:
    with local(server) as fetch:
        got = refusal(fetch, server.url("/"), json.dumps({"headers": {name: "x"}}))
    assert got == [
        "FetchRefused",
        f"fetch refused: GET {server.url('/')}: the guest may not set the {name.lower()} header",
    ]
    assert server.seen == []


def test_set_cookie_is_neither_shown_to_the_guest_nor_sent_back(server: Server) -> None:
    server.routes["/login"] = lambda h: reply(h, 200, b"", {"Set-Cookie": "session=abc; Path=/"})
    with local(server) as fetch:
        got = guest(
            fetch,
            f"""const r = await fetch({json.dumps(server.url("/login"))});
            await fetch({json.dumps(server.url("/after"))});
            return r.headers.get('set-cookie')""",
        )
    assert got is None
    assert "cookie" not in server.seen[1].headers


# --- caps and failures ---------------------------------------------------------------------


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "streamed"])
def test_a_response_over_max_response_bytes_fails(server: Server, declared: bool) -> None:
    server.routes["/big"] = lambda h: reply(h, 200, b"x" * 5000, length=declared)
    with local(server, max_response_bytes=1000) as fetch:
        got = refusal(fetch, server.url("/big"))
    assert got == [
        "FetchFailed",
        f"fetch failed: GET {server.url('/big')}: the response is over max_response_bytes=1000",
    ]


def test_a_server_that_does_not_answer_in_time_is_a_fetch_timeout(server: Server) -> None:
    server.routes["/slow"] = stalled(server)
    with local(server, timeout=0.3) as fetch:
        got = refusal(fetch, server.url("/slow"))
    assert got == ["FetchTimeout", f"fetch timed out after 0.3s: GET {server.url('/slow')}"]


def test_a_method_that_is_not_allowed_is_refused(server: Server) -> None:
    with local(server) as fetch:
        got = refusal(fetch, server.url("/"), "{method: 'DELETE'}")
    assert got == [
        "FetchRefused",
        f"fetch refused: DELETE {server.url('/')}: method DELETE is not allowed (methods=['GET', 'HEAD'])",
    ]
    assert server.seen == []


def test_a_request_body_over_max_request_bytes_is_refused(server: Server) -> None:
    with local(server, methods=["POST"], max_request_bytes=4) as fetch:
        got = refusal(fetch, server.url("/"), "{method: 'POST', body: new Uint8Array(5)}")
    assert got == [
        "FetchRefused",
        f"fetch refused: POST {server.url('/')}: the body of 5 bytes is over max_request_bytes=4",
    ]
    assert server.seen == []


def test_a_closed_port_is_a_fetch_failure() -> None:
    url = f"http://127.0.0.1:{free_port()}/"
    with pydeno.HttpFetch([url], allow_addresses=["127.0.0.1"]) as fetch:
        got = refusal(fetch, url)
    assert got[0] == "FetchFailed"
    assert got[1].startswith(f"fetch failed: GET {url}: ") and "refused" in got[1].lower()


def test_a_closed_http_fetch_fails_every_fetch(server: Server) -> None:
    fetch = local(server)
    fetch.close()
    assert refusal(fetch, server.url("/")) == [
        "FetchFailed",
        f"fetch failed: GET {server.url('/')}: this HttpFetch is closed",
    ]


def test_a_guest_that_poisons_intrinsics_still_gets_a_correct_response(server: Server) -> None:
    server.routes["/j"] = lambda h: reply(h, 200, b'{"a": [1, 2]}', {"Content-Type": "application/json"})
    with local(server) as fetch:
        got = guest(
            fetch,
            f"""const stringify = JSON.stringify;
            JSON.parse = () => 'poisoned';
            const trap = {{set() {{ throw new Error('setter'); }}, configurable: true}};
            Object.defineProperty(Object.prototype, 'status', trap);
            Object.prototype.then = undefined;
            Reflect.apply = () => 'apply';
            TextDecoder.prototype.decode = () => 'decode';
            ArrayBuffer.prototype.slice = () => 'slice';
            String.prototype.toLowerCase = () => 'lower';
            const r = await fetch({json.dumps(server.url("/j"))}, {{headers: [['X-A', '1']]}});
            const out = [r.status, r.headers.get('Content-Type'), await r.json(), (await r.clone?.()) ?? null];
            delete Object.prototype.status;
            return stringify(out)""",
        )
    assert json.loads(got) == [200, "application/json", {"a": [1, 2]}, None]
    assert server.seen[0].headers["x-a"] == "1"


# --- Code Mode ------------------------------------------------------------------------------


def test_the_tool_form_works_in_code_mode(server: Server) -> None:
    with local(server) as fetch:
        tool = fetch.tool()
        assert tool.read_only and tool.name == "fetch"
        with pydeno.CodeMode([tool]) as cm:
            result = cm.execute(f"await tools.fetch({{url: {json.dumps(server.url('/cm'))}}})")
    assert result.ok, result.error
    assert result.value["status"] == 200 and json.loads(result.value["body"]) == {"path": "/cm"}
    assert result.value["url"] == server.url("/cm") and result.value["headers"]["content-type"] == "application/json"


def test_the_tool_form_works_in_async_code_mode_and_is_not_read_only_when_it_may_post(server: Server) -> None:
    async def main() -> pydeno.ExecutionResult:
        with local(server, methods=["GET", "POST"]) as fetch:
            tool = fetch.tool("web.fetch")
            assert not tool.read_only
            async with pydeno.AsyncCodeMode([tool]) as cm:
                return await cm.execute(
                    f"await tools.web.fetch({{url: {json.dumps(server.url('/p'))}, method: 'POST', body: 'b'}})"
                )

    result = anyio.run(main)
    assert result.ok, result.error
    assert result.value["status"] == 200
    assert (server.seen[0].method, server.seen[0].body) == ("POST", b"b")


@pytest.mark.parametrize(
    ("url", "kind"),
    [("http://169.254.169.254/", "fetch_refused"), ("CLOSED", "fetch_failed")],
)
def test_a_fetch_error_in_code_mode_carries_its_kind_in_the_execution_result(url: str, kind: str) -> None:
    if url == "CLOSED":
        url = f"http://127.0.0.1:{free_port()}/"
    with pydeno.HttpFetch([url], allow_addresses=["127.0.0.1"]) as fetch, pydeno.CodeMode([fetch.tool()]) as cm:
        result = cm.execute(f"await tools.fetch({{url: {json.dumps(url)}}})")
    assert not result.ok and result.error is not None
    assert result.error["kind"] == kind


# --- kinds ----------------------------------------------------------------------------------


def test_each_fetch_error_classifies_as_its_kind(server: Server) -> None:
    server.routes["/slow"] = stalled(server)
    cases = {
        "fetch_refused": "http://169.254.169.254/",
        "fetch_failed": f"http://127.0.0.1:{free_port()}/",
        "fetch_timeout": server.url("/slow"),
    }
    allow = list(cases.values())
    with pydeno.HttpFetch(allow, allow_addresses=["127.0.0.1"], timeout=0.3) as fetch, pydeno.Runtime() as rt:
        fetch.attach(rt)
        for kind, url in cases.items():
            with pytest.raises(pydeno.JavaScriptError) as caught:
                rt.eval(f"fetch({json.dumps(url)})")
            assert pydeno.classify_error(caught.value).kind == kind


# --- options -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"allow": "http://a.example/"}, TypeError, "allow must be a list"),
        ({"allow": []}, ValueError, "allow is empty"),
        ({"allow": ["a.example"]}, ValueError, "only http and https"),
        ({"allow": ["http://a.example/?q=1"]}, ValueError, "no query or fragment"),
        ({"allow": ["http://2130706433/"]}, ValueError, "numeric alias"),
        ({"allow": ["http://a.example/"], "allow_addresses": ["10.0.0.1/8"]}, ValueError, "not an IP address"),
        ({"allow": ["http://a.example/"], "methods": ["CONNECT"]}, ValueError, "cannot be allowed"),
        ({"allow": ["http://a.example/"], "timeout": 0}, ValueError, "positive"),
        ({"allow": ["http://a.example/"], "max_redirects": -1}, ValueError, "max_redirects"),
        ({"allow": ["http://a.example/"], "headers": {"Host": "x"}}, ValueError, "set by the connection"),
        ({"allow": ["http://a.example/"], "headers": {"X-Key": "a\nb"}}, ValueError, "control characters"),
    ],
)
def test_bad_options_are_refused_with_a_typed_error_that_says_what_is_wrong(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        pydeno.HttpFetch(**options)
