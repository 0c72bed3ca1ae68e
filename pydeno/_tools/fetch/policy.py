"""What a guest's request may be, decided without I/O: URL prefixes and the URLs under them,
canonical hosts, header options, methods, and which addresses the host may connect to.
pydeno/_tools/fetch/client.py applies it to every request and every redirect hop;
pydeno/_tools/fetch/transport.py to every address a name resolves to.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import httpx

__all__ = [
    "BAD_VALUE",
    "FORBIDDEN_REQUEST",
    "STANDARD_METHODS",
    "TOKEN",
    "AddressPolicy",
    "Entry",
    "IPAddress",
    "IPNetwork",
    "Refusal",
    "Target",
    "allow_entry",
    "beyond_latin_1",
    "headers_option",
    "method_option",
    "network",
    "parse_url",
    "strings",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_MAX_URL: Final = 8192
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}

# Names the guest may not set: the host owns the connection, the framing and the encoding,
# and there is no cookie jar to speak for (the fetch standard forbids much the same list).
FORBIDDEN_REQUEST: Final = frozenset(
    {
        "accept-encoding",
        "connection",
        "content-length",
        "cookie",
        "cookie2",
        "expect",
        "host",
        "http2-settings",
        "keep-alive",
        "set-cookie",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
BAD_VALUE: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_BAD_URL: Final = re.compile(r"[\x00-\x20\x7f\\]")
_LABEL: Final = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\Z")
_NUMERIC_LABEL: Final = re.compile(r"[0-9]+|0x[0-9a-f]*\Z")
_OCTET: Final = re.compile(r"(?:0|[1-9][0-9]{0,2})\Z")

# Addresses that answer with a cloud instance's credentials. A network in allow_addresses
# never covers them; only the address itself, allowed on its own, does.
_METADATA: Final[frozenset[IPAddress]] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",
        "169.254.169.253",
        "169.254.169.123",
        "169.254.170.2",
        "169.254.170.23",
        "100.100.100.200",
        "168.63.129.16",
        "192.0.0.192",
        "fd00:ec2::254",
        "fd00:ec2::253",
        "fd00:ec2::23",
    )
)
_CGNAT: Final = ipaddress.ip_network("100.64.0.0/10")
_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")


class Refusal(Exception):
    """Why a URL or an address is not allowed (made into the error by the caller)."""


# --- URLs -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    url: httpx.URL
    scheme: str
    host: str
    port: int
    segments: tuple[str, ...]

    @property
    def origin(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)


def _canonical_host(raw: str) -> str:
    if ":" in raw:
        if "%" in raw:
            raise Refusal("an IPv6 zone index is not allowed")
        try:
            return ipaddress.IPv6Address(raw).compressed
        except ValueError:
            raise Refusal(f"{raw!r} is not an IPv6 address") from None
    if not raw:
        raise Refusal("the URL has no host")
    if raw.endswith("."):
        raise Refusal("the host ends with a dot; write it without the trailing dot")
    labels = raw.split(".")
    if _NUMERIC_LABEL.match(labels[-1]):
        if len(labels) == 4 and all(_OCTET.match(p) and int(p) <= 255 for p in labels):
            return raw
        raise Refusal(f"{raw!r} is a numeric alias of an address; write an IPv4 address as four decimal octets")
    if len(raw) > 253 or not all(_LABEL.match(label) for label in labels):
        raise Refusal(f"{raw!r} is not a valid host name")
    import idna

    for label in labels:
        if label.startswith("xn--"):
            try:
                idna.decode(label)
            except idna.IDNAError:
                raise Refusal(f"{raw!r} has a label that is not valid IDNA") from None
    return raw


def _segments(raw_path: str) -> tuple[str, ...]:
    """The path's segments, percent-decoded, refusing what could climb out of a prefix once
    a server decodes it."""
    out = []
    for part in raw_path.split("/")[1:]:
        lowered = part.lower()
        if "%2f" in lowered or "%5c" in lowered:
            raise Refusal("the path has an encoded '/' or '\\'")
        decoded = urllib.parse.unquote(part, errors="strict")
        # Some servers read "..;x" as ".." with a path parameter.
        if decoded.partition(";")[0] in (".", ".."):
            raise Refusal("the path has a '.' or '..' segment (percent-encoded or not)")
        if BAD_VALUE.search(decoded) or "\t" in decoded:
            raise Refusal("the path has a control character")
        out.append(decoded)
    return tuple(out)


def parse_url(text: Any) -> Target:
    if not isinstance(text, str):
        raise Refusal(f"the URL must be a string, got {type(text).__name__}")
    if len(text) > _MAX_URL:
        raise Refusal(f"the URL is longer than {_MAX_URL} characters")
    if _BAD_URL.search(text):
        raise Refusal("the URL has a space, a control character or a backslash")
    import httpx

    try:
        url = httpx.URL(text)
    except (httpx.InvalidURL, UnicodeError, ValueError) as exc:
        raise Refusal(f"the URL is not valid ({exc})") from None
    scheme = url.scheme
    if scheme not in _DEFAULT_PORTS:
        raise Refusal(f"only http and https URLs are allowed, not {scheme or 'a relative URL'}")
    if url.userinfo:
        raise Refusal("the URL has user information (user@host); send credentials as headers")
    host = _canonical_host(url.raw_host.decode("ascii"))
    port = url.port if url.port is not None else _DEFAULT_PORTS[scheme]
    if not 1 <= port <= 65535:
        raise Refusal(f"port {port} is out of range")
    path = url.raw_path.decode("ascii").partition("?")[0]
    try:
        segments = _segments(path)
    except UnicodeDecodeError:
        raise Refusal("the path's percent-encoding is not UTF-8") from None
    return Target(url.copy_with(fragment=None), scheme, host, port, segments)


@dataclass(frozen=True, slots=True)
class Entry:
    text: str
    origin: tuple[str, str, int]
    segments: tuple[str, ...]
    headers: tuple[tuple[str, str], ...]

    def covers(self, target: Target) -> bool:
        n = len(self.segments)
        return target.origin == self.origin and target.segments[:n] == self.segments


def allow_entry(text: Any, headers: Any) -> Entry:
    if not isinstance(text, str):
        raise TypeError(f"each allow entry must be a URL prefix string, got {type(text).__name__}")
    try:
        target = parse_url(text)
    except Refusal as exc:
        raise ValueError(f"allow entry {text!r}: {exc}") from None
    if target.url.query or "#" in text:
        raise ValueError(f"allow entry {text!r}: a prefix has no query or fragment")
    segments = target.segments
    # "/v1/" and "/v1" both mean /v1 and everything under it.
    if segments and segments[-1] == "":
        segments = segments[:-1]
    if "" in segments:
        raise ValueError(f"allow entry {text!r}: the path has an empty segment")
    return Entry(text, target.origin, segments, headers_option(f"allow entry {text!r}: headers", headers))


def beyond_latin_1(value: str) -> str | None:
    """The first character of value that is not one byte in Latin-1 (None: there is none).
    A header value is bytes: the fetch standard's ByteString, one character per byte."""
    return next((c for c in value if ord(c) > 0xFF), None)


def headers_option(what: str, headers: Any) -> tuple[tuple[str, str], ...]:
    if headers is None:
        return ()
    if not isinstance(headers, Mapping):
        raise TypeError(f"{what} must be a mapping of header name to value, got {type(headers).__name__}")
    out = []
    for name, value in headers.items():
        if not isinstance(name, str) or not TOKEN.match(name):
            raise ValueError(f"{what}: {name!r} is not a valid header name")
        if not isinstance(value, str) or BAD_VALUE.search(value):
            # The value is a secret: never repeat it.
            raise ValueError(f"{what}: the value of {name!r} must be a str without control characters")
        if beyond_latin_1(value) is not None:
            raise ValueError(
                f"{what}: the value of {name!r} has a character beyond Latin-1; a header value is sent as one "
                "byte per character, so percent-encode or base64 other text"
            )
        if name.lower() in FORBIDDEN_REQUEST:
            raise ValueError(f"{what}: {name!r} is set by the connection, not by a header option")
        out.append((name.lower(), value))
    return tuple(out)


# --- addresses ------------------------------------------------------------------------------


def _embedded_v4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, NAT64, 6to4), if any."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.sixtofour


def _why_not_public(ip: IPAddress) -> str | None:
    if ip in _METADATA:
        return "a cloud metadata address"
    checks = (
        (ip.is_loopback, "a loopback address"),
        (ip.is_unspecified, "an unspecified address"),
        (ip.is_link_local, "a link-local address"),
        (ip.is_multicast, "a multicast address"),
        (isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT, "a shared (CGNAT) address"),
        (ip.is_private, "a private address"),
        (ip.is_reserved, "a reserved address"),
        (not ip.is_global, "not a public address"),
    )
    return next((why for bad, why in checks if bad), None)


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    allowed: tuple[IPNetwork, ...]

    def refusal(self, ip: IPAddress) -> str | None:
        """None if the host may connect to ip, else why not."""
        v4 = _embedded_v4(ip)
        candidates: list[IPAddress] = [ip] if v4 is None else [v4]
        for candidate in candidates:
            why = _why_not_public(candidate)
            if why is None:
                continue
            if candidate in _METADATA:
                allowed = any(net.num_addresses == 1 and candidate in net for net in self.allowed)
            else:
                allowed = any(candidate in net for net in self.allowed)
            if not allowed:
                return why
        return None


STANDARD_METHODS: Final = frozenset({"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"})


def method_option(method: str) -> str:
    if not TOKEN.match(method):
        raise ValueError(f"methods: {method!r} is not an HTTP method name")
    upper = method.upper()
    if upper in ("CONNECT", "TRACE"):
        raise ValueError(f"methods: {upper} cannot be allowed (it would tunnel or echo the host's headers)")
    return upper if upper in STANDARD_METHODS else method


def strings(name: str, values: Any) -> list[str]:
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a list of strings, got {type(values).__name__}")
    out = list(values)
    for value in out:
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a list of strings, got an item of type {type(value).__name__}")
    return out


def network(text: str) -> IPNetwork:
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise ValueError(f"allow_addresses: {text!r} is not an IP address or network ({exc})") from None
