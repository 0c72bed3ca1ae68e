"""What ``pydeno mcp``'s flags choose: :class:`ServerConfig` and the defaults of its limits."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Final

from .._base.options import DEFAULT_TIMEOUT, RuntimeKwargs

if TYPE_CHECKING:
    from .._agents.sessions.store import SQLiteJournalStore

TOOL_NAME: Final = "run_javascript"
DEFAULT_PORT: Final = 8765
DEFAULT_POOL_SIZE: Final = 2
# A one-shot client (the TypeScript SDK's) leaves without ending its session: two minutes
# without a call gives its worker back, while a model's slow turn between two calls of one
# conversation still finds its declarations. Under pressure the least recently used idle
# session gives way sooner (--max-sessions).
DEFAULT_IDLE_TIMEOUT: Final = 120.0
DEFAULT_MAX_CODE_BYTES: Final = 100_000
# The most deno workers alive at once, warm spares and sessions' workers included.
DEFAULT_MAX_WORKERS: Final = 16
# Each session holds a worker: the cap is what keeps many clients from holding them all.
DEFAULT_MAX_SESSIONS: Final = 16
# Over stdio one process serves one client: with --store, its one session is kept under this
# id, so the next server started on the same store resumes it.
STDIO_SESSION: Final = "stdio"
# Calls that may wait for a worker (or for their session's running call) at once.
DEFAULT_MAX_QUEUED: Final = 32
# One JSON-RPC message: far over --max-code-bytes, the size of the SDK's own HTTP body cap.
DEFAULT_MAX_MESSAGE_BYTES: Final = 4 * 2**20
# One tool result, text and structured content together: well under the 10 MiB at which the
# TypeScript SDK drops a stdio message (and the connection with it).
DEFAULT_MAX_RESULT_BYTES: Final = 2**20
HTTP_PATH: Final = "/mcp"
SESSION_HEADER: Final = "mcp-session-id"
# How long a stopping HTTP server waits for open streams before it cuts them.
GRACEFUL_SHUTDOWN: Final = 2


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """What ``pydeno mcp``'s flags chose; ``runtime`` holds the workers' limits."""

    http: bool = False
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    session: bool = False
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    pool_size: int = DEFAULT_POOL_SIZE
    max_code_bytes: int = DEFAULT_MAX_CODE_BYTES
    max_sessions: int = DEFAULT_MAX_SESSIONS
    max_workers: int = DEFAULT_MAX_WORKERS
    max_queued: int = DEFAULT_MAX_QUEUED
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    allow_hosts: tuple[str, ...] = ()
    timeout: float = DEFAULT_TIMEOUT
    runtime: RuntimeKwargs = dataclasses.field(default_factory=RuntimeKwargs)
    # --store: where sessions are kept across restarts (None: in the workers only), and the
    # key that signs them.
    store: SQLiteJournalStore | None = None
    store_key: bytes = dataclasses.field(default=b"", repr=False)
