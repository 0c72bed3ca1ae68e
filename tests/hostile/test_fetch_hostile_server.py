"""HttpFetch against a hostile server on 127.0.0.1 that writes raw answers http.server would not:
whatever the server says or redirects to, the guest sees none of the host's injected headers,
header bytes beyond Latin-1 are refused or read as Latin-1, a malformed answer is a fetch failure
without the secret in its message, and a guest header that would split the request is refused
before anything is sent."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

import pydeno
from tests.support.fetch_guests import SECRET, guest, refusal

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow


RawAnswer = Callable[[bytes], bytes]


@dataclass
class RawServer:
    """A raw-socket HTTP server on 127.0.0.1 that answers each path with the bytes its
    route makes of the request it read (its head): a server that can say anything."""

    port: int
    routes: dict[str, RawAnswer] = field(default_factory=dict)
    requests: list[bytes] = field(default_factory=list)

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def header_of(request: bytes, name: str) -> bytes:
    for line in request.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name.lower().encode():
            return value.strip()
    return b""


@contextlib.contextmanager
def raw_serving() -> Iterator[RawServer]:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    state = RawServer(listener.getsockname()[1])
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    head += chunk
                state.requests.append(head)
                path = head.split(b" ", 2)[1].decode("latin-1") if head.count(b" ") >= 2 else "/"
                route = state.routes.get(path.partition("?")[0])
                answer = route(head) if route else b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
                conn.sendall(answer)

    thread = threading.Thread(target=serve, name="test-raw-http-server")
    thread.start()
    try:
        yield state
    finally:
        stop.set()
        thread.join()
        listener.close()


@pytest.fixture
def raw() -> Iterator[RawServer]:
    with raw_serving() as state:
        yield state


def answer(status: str, headers: Sequence[tuple[bytes, bytes]] = (), body: bytes = b"") -> bytes:
    lines = [b"HTTP/1.1 " + status.encode("latin-1")]
    lines += [name + b": " + value for name, value in headers]
    lines.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def raw_fetch(raw: RawServer, **options: Any) -> pydeno.HttpFetch:
    options.setdefault("allow_addresses", ["127.0.0.1"])
    return pydeno.HttpFetch([raw.url("/")], **options)


TOKEN = SECRET.split()[1]


def test_a_server_that_reflects_an_injected_header_anywhere_in_the_response_head_shows_the_guest_none_of_it(
    raw: RawServer,
) -> None:
    def reflect(request: bytes) -> bytes:
        sent = header_of(request, "authorization")  # b"Bearer <token>"
        token = sent.split()[1]
        return answer(
            "200 OK " + sent.decode(),
            [
                (b"X-" + token, b"name"),
                (b"X-" + token.upper(), b"upper-case name"),
                (b"X-Token", token),
                (b"X-Token-Upper", token.upper()),
                (b"X-Token-Encoded", urllib.parse.quote(sent.decode()).encode()),
                (b"X-Kept", b"kept"),
            ],
        )

    raw.routes["/me"] = reflect
    with raw_fetch(raw, headers={"Authorization": SECRET}) as fetch:
        got = guest(
            fetch, f"const r = await fetch({json.dumps(raw.url('/me'))}); return [r.statusText, [...r.headers]]"
        )
    assert header_of(raw.requests[0], "authorization") == SECRET.encode()
    assert TOKEN.lower() not in json.dumps(got).lower()
    status_text, headers = got
    assert status_text == "OK [redacted]"
    assert headers == [["x-kept", "kept"], ["content-length", "0"]]


def test_a_redirect_that_carries_an_injected_header_into_the_url_shows_the_guest_none_of_it(raw: RawServer) -> None:
    def bounce(request: bytes) -> bytes:
        token = header_of(request, "x-api-key")
        return answer("302 Found", [(b"Location", b"/landing?k=" + token + b"&K=" + token.upper())])

    raw.routes["/go"] = bounce
    raw.routes["/landing"] = lambda request: answer("200 OK", body=b"x" * 100)
    with raw_fetch(raw, headers={"X-Api-Key": TOKEN}) as fetch:
        got = guest(fetch, f"return (await fetch({json.dumps(raw.url('/go'))})).url")
        assert got == raw.url("/landing?k=[redacted]&K=[redacted]")
    # An error on the redirected hop names that hop's URL: scrubbed the same way.
    with raw_fetch(raw, headers={"X-Api-Key": TOKEN}, max_response_bytes=10) as fetch:
        failed = refusal(fetch, raw.url("/go"))
    assert failed[0] == "FetchFailed" and TOKEN.lower() not in failed[1].lower()
    assert failed[1].startswith(f"fetch failed: GET {raw.url('/landing?k=[redacted]&K=[redacted]')}: ")


@pytest.mark.parametrize(
    ("location", "why"),
    [
        (b"data:text/plain,hello", "a data: URL; only http and https URLs are followed"),
        (b"javascript:alert(1)", "a javascript: URL; only http and https URLs are followed"),
        (b"JavaScript:alert(1)", "a javascript: URL; only http and https URLs are followed"),
        (b"file:///etc/passwd", "a file: URL; only http and https URLs are followed"),
        (b"http://[::1", "a Location that is not a valid URL"),
        ("http://€.example/".encode(), "a Location that is not a valid URL"),
    ],
    ids=["data", "javascript", "upper-case scheme", "file", "unclosed bracket", "not a valid name"],
)
def test_a_redirect_to_a_non_http_or_malformed_location_is_refused_as_fetch_refused(
    raw: RawServer, location: bytes, why: str
) -> None:
    raw.routes["/jump"] = lambda request: answer("302 Found", [(b"Location", location)])
    with raw_fetch(raw) as fetch, pydeno.Runtime() as rt:
        fetch.attach(rt)
        with pytest.raises(pydeno.JavaScriptError) as caught:
            rt.eval(f"fetch({json.dumps(raw.url('/jump'))})")
        # In manual mode the redirect itself is the answer, Location and all.
        manual = rt.eval(
            f"(async () => {{ const r = await fetch({json.dumps(raw.url('/jump'))}, {{redirect: 'manual'}});"
            "return [r.status, r.headers.get('location')] })()"
        )
    assert pydeno.classify_error(caught.value).kind == "fetch_refused"
    assert f"FetchRefused: fetch refused: redirect from GET {raw.url('/jump')} to {why}" in str(caught.value)
    assert manual == [302, location.decode("latin-1")]
    assert len(raw.requests) == 2


@pytest.mark.parametrize("value", ["€uro", "emoji 🙂", "\u0100"])
def test_a_guest_header_value_beyond_latin_1_is_refused_and_nothing_is_sent(raw: RawServer, value: str) -> None:
    with raw_fetch(raw) as fetch, pydeno.Runtime() as rt:
        fetch.attach(rt)
        with pytest.raises(pydeno.JavaScriptError) as caught:
            rt.eval(f"fetch({json.dumps(raw.url('/'))}, {{headers: {{'X-Note': {json.dumps(value)}}}}})")
    assert pydeno.classify_error(caught.value).kind == "fetch_refused"
    first = next(c for c in value if ord(c) > 0xFF)
    assert (
        f"FetchRefused: fetch refused: GET {raw.url('/')}: the x-note header has a character beyond Latin-1 "
        f"(U+{ord(first):04X}); encode the value first, for example with encodeURIComponent()"
    ) in str(caught.value)
    assert raw.requests == []


def test_a_latin_1_header_value_is_sent_byte_for_byte_both_ways(raw: RawServer) -> None:
    raw.routes["/echo"] = lambda request: answer("200 OK", [(b"X-Echo", header_of(request, "x-note"))])
    with raw_fetch(raw) as fetch:
        got = guest(
            fetch,
            f"const r = await fetch({json.dumps(raw.url('/echo'))}, {{headers: {{'X-Note': 'café'}}}});"
            "return r.headers.get('x-echo')",
        )
    assert header_of(raw.requests[0], "x-note") == "café".encode("latin-1")
    assert got == "café"


def test_a_response_header_of_utf_8_bytes_reaches_the_guest_as_their_latin_1_reading(raw: RawServer) -> None:
    raw.routes["/utf"] = lambda request: answer("200 OK", [(b"X-Price", "9 €".encode())])
    with raw_fetch(raw) as fetch:
        got = guest(fetch, f"return (await fetch({json.dumps(raw.url('/utf'))})).headers.get('x-price')")
    # As the fetch standard has it: a header value is bytes, and each byte is one character.
    assert got == "9 €".encode().decode("latin-1")


def test_an_injected_header_value_beyond_latin_1_is_refused_when_the_fetch_is_made() -> None:
    with pytest.raises(ValueError, match=r"the value of 'X-Key' has a character beyond Latin-1") as info:
        pydeno.HttpFetch(["http://a.example/"], headers={"X-Key": "k€y-0123456789"})
    assert "k€y" not in str(info.value)


@pytest.mark.parametrize(
    ("head", "what"),
    [
        (b"HTTP/1.1 200 O\x01K\r\nContent-Length: 0\r\n\r\n", "its reason phrase"),
        (b"HTTP/1.1 200 OK\r\nX-Bad: a\x01b\r\nContent-Length: 0\r\n\r\n", "the x-bad header"),
        (b"HTTP/1.1 200 OK\r\nX-Bad: a\x7fb\r\nContent-Length: 0\r\n\r\n", "the x-bad header"),
    ],
    ids=["reason phrase", "header value", "delete character"],
)
def test_a_response_head_with_a_control_character_is_a_fetch_failure(raw: RawServer, head: bytes, what: str) -> None:
    raw.routes["/bad"] = lambda request: head
    with raw_fetch(raw) as fetch, pydeno.Runtime() as rt:
        fetch.attach(rt)
        with pytest.raises(pydeno.JavaScriptError) as caught:
            rt.eval(f"fetch({json.dumps(raw.url('/bad'))})")
    assert pydeno.classify_error(caught.value).kind == "fetch_failed"
    assert (
        f"FetchFailed: fetch failed: GET {raw.url('/bad')}: the server's answer has a control character in {what}"
        in str(caught.value)
    )


def test_a_broken_answer_that_repeats_an_injected_header_fails_without_the_secret_in_the_message(
    raw: RawServer,
) -> None:
    # h11 quotes the line it cannot parse; the server put the token in it.
    raw.routes["/broken"] = lambda request: (
        b"HTTP/1.1 200 OK\r\nno colon " + header_of(request, "x-api-key").split()[1] + b"\r\nContent-Length: 0\r\n\r\n"
    )
    with raw_fetch(raw, headers={"X-Api-Key": "Key " + TOKEN}) as fetch:
        got = refusal(fetch, raw.url("/broken"))
    assert got[0] == "FetchFailed" and got[1].startswith(f"fetch failed: GET {raw.url('/broken')}: ")
    assert TOKEN.lower() not in got[1].lower()


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ([["X-A\r\nX-Injected", "1"]], "'X-A\\x0d\\x0aX-Injected' is not a valid header name"),
        ([["X-A", "1\r\nX-Injected: 1"]], "the x-a header has a control character"),
        ([["X-A", "1\nX-Injected: 1"]], "the x-a header has a control character"),
        ([["X-A", "a\x00b"]], "the x-a header has a control character"),
    ],
    ids=["CR LF in a name", "CR LF in a value", "LF in a value", "NUL in a value"],
)
def test_a_guest_header_that_would_split_the_request_is_refused_and_nothing_is_sent(
    raw: RawServer, headers: list[list[str]], why: str
) -> None:
    with raw_fetch(raw) as fetch:
        got = refusal(fetch, raw.url("/"), json.dumps({"headers": headers}))
    assert got == ["FetchRefused", f"fetch refused: GET {raw.url('/')}: {why}"]
    assert raw.requests == []


def test_a_redirect_whose_scheme_is_an_injected_value_is_refused_without_naming_it(raw: RawServer) -> None:
    raw.routes["/jump"] = lambda request: answer("302 Found", [(b"Location", header_of(request, "x-api-key") + b":x")])
    with raw_fetch(raw, headers={"X-Api-Key": TOKEN}) as fetch:
        got = refusal(fetch, raw.url("/jump"))
    assert got == [
        "FetchRefused",
        f"fetch refused: redirect from GET {raw.url('/jump')} to a [redacted]: URL; "
        "only http and https URLs are followed",
    ]
