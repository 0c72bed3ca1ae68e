"""``mcp_tools``: the tools of MCP servers as :class:`~pydeno.Tool` objects for Code Mode.

Each tool of each client session becomes ``tools.<server>.<tool>(...)`` in the guest. The
host forwards every call over the session it came from, so connections and credentials stay
on the host and the guest sees only results. Nothing here imports the MCP SDK at import
time: a session is anything with async ``list_tools()`` and ``call_tool(name, arguments)``,
and the SDK's error class is looked up when :func:`mcp_tools` runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import math
import re
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import anyio

from .._base.checks import optional_seconds
from .._base.errors import ToolError, UpstreamError
from .._version import missing_extra
from .tool import Tool

__all__ = ["mcp_tools"]

_IDENTIFIER: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*\Z")
_NOT_IDENTIFIER: Final = re.compile(r"[^A-Za-z0-9_$]")
# JSON-RPC codes the SDK uses for a connection that ended and a request that was not
# answered in time: both are the server's failure, not a refusal of the call.
_CONNECTION_CLOSED: Final = -32000
_REQUEST_TIMEOUT: Final = -32001
# A server whose cursors never end would keep mcp_tools listing forever.
MAX_PAGES: Final = 1000


def js_name(name: str) -> str:
    """An MCP tool name as a JavaScript identifier: each character that cannot be in one
    becomes ``_`` (``list-files`` is ``list_files``), and a leading digit gets a ``_``."""
    mapped = _NOT_IDENTIFIER.sub("_", name) or "_"
    return f"_{mapped}" if mapped[0].isdigit() else mapped


def _field(obj: Any, *names: str) -> Any:
    """The first of names that obj has, as an attribute or (a dict) a key: the SDK's models
    spell fields in snake case, older ones and plain dicts in the wire's camel case."""
    for name in names:
        if isinstance(obj, Mapping):
            if name in obj:
                return obj[name]
        elif hasattr(obj, name):
            return getattr(obj, name)
    return None


def _mcp_error_types() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = []
    try:
        from mcp.shared import exceptions
    except ImportError:
        return ()
    for name in ("MCPError", "McpError"):
        cls = getattr(exceptions, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


def _gone_types() -> tuple[type[BaseException], ...]:
    """What a transport raises when the other end is gone (anyio's stream errors, OS errors)."""
    return (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError, EOFError)


def _code_of(exc: BaseException) -> int | None:
    code = _field(getattr(exc, "error", None), "code")
    if code is None:
        code = getattr(exc, "code", None)
    return code if isinstance(code, int) else None


def _message_of(exc: BaseException) -> str:
    message = _field(getattr(exc, "error", None), "message")
    return message if isinstance(message, str) and message else (str(exc) or type(exc).__name__)


def _block(block: Any) -> Any:
    """One content block as the guest receives it: a text block as its string, any other
    (image, audio, resource, resource link) as its MCP JSON object."""
    if _field(block, "type") == "text" and isinstance(_field(block, "text"), str):
        return _field(block, "text")
    if isinstance(block, Mapping):
        return dict(block)
    dump = getattr(block, "model_dump", None)
    if callable(dump):
        return dump(by_alias=True, exclude_none=True, mode="json")
    raise ToolError(f"an MCP content block of type {type(block).__name__} cannot be passed to the program")


def _text_of(content: Any) -> str:
    texts = [str(_field(b, "text")) for b in content or () if _field(b, "type") == "text"]
    return "\n".join(texts) if texts else "(the tool gave no text)"


class _Forward:
    """The function behind one MCP tool: call it over its session and map the result."""

    def __init__(self, server: str, session: Any, mcp_name: str, name: str, options: _Options) -> None:
        self.server = server
        self.session = session
        self.mcp_name = mcp_name
        self.name = name
        self.options = options

    async def __call__(self, arguments: dict[str, Any]) -> Any:
        where = f"MCP server {self.server!r}"
        call = f"tools.{self.name}()"
        if _event_loop() is not self.options.loop:
            # The sync CodeMode runs async tools in a loop of its own, where the session's
            # streams never move: the call would wait out its timeout and then blame the server.
            raise ToolError(
                f"{call} was called outside the event loop its MCP session belongs to: run MCP tools with "
                "pydeno.AsyncCodeMode, in that loop"
            )
        _check_json(arguments, call, "$")
        timeout = self.options.timeout
        try:
            # The session's own read timeout may be unset, and the program's timeout= does
            # not count host time (only max_host_wait= bounds it): a call never answered
            # must still end, and as the upstream's failure rather than the program's.
            with anyio.fail_after(timeout):
                result = await self.session.call_tool(self.mcp_name, arguments)
        except TimeoutError as exc:
            raise UpstreamError(f"{where} did not answer {call} within timeout={timeout}s") from exc
        except self.options.error_types as exc:
            code = _code_of(exc)
            if code == _CONNECTION_CLOSED:
                raise UpstreamError(f"{where} went away during {call}: {_message_of(exc)}") from exc
            if code == _REQUEST_TIMEOUT:
                raise UpstreamError(f"{where} did not answer {call} in time: {_message_of(exc)}") from exc
            raise ToolError(f"{where} refused {call}: {_message_of(exc)} (MCP error {code})") from exc
        except _gone_types() as exc:
            detail = str(exc) or "the connection closed"
            raise UpstreamError(f"{where} went away during {call}: {type(exc).__name__}: {detail}") from exc
        content = _field(result, "content")
        if _field(result, "is_error", "isError"):
            raise ToolError(f"{call} failed: {_text_of(content)}")
        structured = _field(result, "structured_content", "structuredContent")
        if structured is not None:
            return structured
        blocks = [_block(b) for b in content or ()]
        if not blocks:
            return None
        return blocks[0] if len(blocks) == 1 else blocks


@dataclasses.dataclass(frozen=True)
class _Options:
    timeout: float | None
    error_types: tuple[type[BaseException], ...]
    loop: object


def _event_loop() -> object:
    """What identifies the running event loop: asyncio's loop, or trio's run token."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            return trio.lowlevel.current_trio_token()
        except RuntimeError:
            pass
    return None


def _check_json(value: Any, call: str, path: str) -> None:
    """Refuse what JSON cannot carry to the server (bytes, undefined, a Date, a function,
    NaN), which a permissive input schema lets through."""
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if math.isfinite(value):
            return
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_json(item, call, f"{path}[{i}]")
        return
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_json(item, call, f"{path}.{key}")
        return
    raise ToolError(f"{call}: invalid arguments: {path}: an MCP server takes JSON, and {_what(value)} is not JSON")


def _what(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    return {"bytes": "a Uint8Array", "Undefined": "undefined", "datetime": "a Date", "JsFunction": "a function"}.get(
        type(value).__name__, f"a {type(value).__name__}"
    )


async def _listing(server: str, session: Any) -> list[Any]:
    """Every tool the session lists, following its cursors."""
    list_tools: Callable[..., Awaitable[Any]] = session.list_tools
    try:
        parameters = inspect.signature(list_tools).parameters
    except (TypeError, ValueError):
        parameters = {}  # type: ignore[assignment]
    tools: list[Any] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        if cursor is None:
            page = await list_tools()
        elif "cursor" in parameters:
            page = await list_tools(cursor=cursor)
        elif "params" in parameters:
            try:
                from mcp.types import PaginatedRequestParams
            except ImportError as exc:
                missing = missing_extra(exc, "pydeno.mcp_tools", "mcp", frozenset({"mcp"}))
                if missing is None:
                    raise
                raise missing from exc

            page = await list_tools(params=PaginatedRequestParams(cursor=cursor))
        else:
            raise TypeError(
                f"MCP session {server!r} returned a next cursor, but its list_tools() takes neither cursor= nor params="
            )
        tools.extend(_field(page, "tools") or ())
        cursor = _field(page, "next_cursor", "nextCursor")
        if cursor is None:
            return tools
        if cursor in seen:
            raise UpstreamError(f"MCP server {server!r} listed its tools with a cursor it had already given")
        seen.add(cursor)
    raise UpstreamError(f"MCP server {server!r} listed its tools in more than {MAX_PAGES} pages")


def _description(tool: Any) -> str | None:
    title = _field(tool, "title") or _field(_field(tool, "annotations"), "title")
    description = _field(tool, "description")
    if title and description:
        return f"{title}{'' if str(title).endswith(('.', '!', '?', ':')) else '.'} {description}"
    return str(title or description) if (title or description) else None


def _check_sessions(sessions: Any) -> dict[str, Any]:
    if not isinstance(sessions, Mapping):
        raise TypeError(
            "mcp_tools() takes a mapping of server names to MCP client sessions, e.g. "
            f'{{"files": session}}, got {type(sessions).__name__}'
        )
    checked: dict[str, Any] = {}
    for server, session in sessions.items():
        if not isinstance(server, str):
            raise TypeError(f"an MCP server's name must be a str, got {type(server).__name__}")
        if not _IDENTIFIER.match(server):
            raise ValueError(
                f"MCP server name {server!r} is not a JavaScript identifier (letters, digits, _ or $, not starting "
                f"with a digit): it becomes tools.<name> in the program; call it e.g. {js_name(server)!r}"
            )
        for method in ("list_tools", "call_tool"):
            if not callable(getattr(session, method, None)):
                raise TypeError(
                    f"MCP server {server!r}: {type(session).__name__} has no {method}(); pass an mcp.ClientSession, "
                    "an mcp.Client, or an object with async list_tools() and call_tool(name, arguments)"
                )
        checked[server] = session
    return checked


async def mcp_tools(sessions: Mapping[str, Any], *, timeout: float | None = 30.0) -> list[Tool]:
    """``await mcp_tools({"files": session, ...}, timeout=30.0)``: every tool of every MCP
    session as a :class:`~pydeno.Tool` named ``<server>.<tool>``, for
    :class:`~pydeno.AsyncCodeMode`.

    Each tool keeps the server's input schema (arguments are checked on the host before
    the call is sent), its output schema, its title and description, and its
    ``readOnlyHint`` as ``read_only``. A tool name that is not a JavaScript identifier is
    mapped (``list-files`` is ``tools.files.list_files``); two that map to one name are
    refused. A call returns the tool's structured content when it has some, else its
    content: one block as its value (a text block as its string, others as their MCP JSON
    object), several as a list of those. A result marked ``isError`` and an MCP error
    raise :class:`~pydeno.ToolError`; a server that goes away during a call, or does not
    answer it within ``timeout`` seconds (``None``: wait as long as the session does),
    raises :class:`~pydeno.UpstreamError`. Arguments must be JSON.
    """
    checked = _check_sessions(sessions)
    options = _Options(optional_seconds("timeout", timeout), _mcp_error_types(), _event_loop())
    error_types = options.error_types
    out: list[Tool] = []
    for server, session in checked.items():
        try:
            listed = await _listing(server, session)
        except error_types as exc:
            raise UpstreamError(f"MCP server {server!r} refused to list its tools: {_message_of(exc)}") from exc
        except _gone_types() as exc:
            raise UpstreamError(f"MCP server {server!r} went away while listing its tools: {exc}") from exc
        names: dict[str, str] = {}
        for listed_tool in listed:
            mcp_name = _field(listed_tool, "name")
            if not isinstance(mcp_name, str):
                raise UpstreamError(f"MCP server {server!r} listed a tool without a name")
            short = js_name(mcp_name)
            if short in names:
                raise ValueError(
                    f"MCP server {server!r}: tools {names[short]!r} and {mcp_name!r} are both "
                    f"tools.{server}.{short} in the program; rename one on the server"
                )
            names[short] = mcp_name
            name = f"{server}.{short}"
            annotations = _field(listed_tool, "annotations")
            out.append(
                Tool(
                    name,
                    _Forward(server, session, mcp_name, name, options),
                    description=_description(listed_tool) or "",
                    input_schema=_field(listed_tool, "input_schema", "inputSchema") or {"type": "object"},
                    output_schema=_field(listed_tool, "output_schema", "outputSchema"),
                    read_only=_field(annotations, "read_only_hint", "readOnlyHint") is True,
                )
            )
    return out
