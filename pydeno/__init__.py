"""pydeno: run untrusted JavaScript in supervised Deno worker processes.

>>> import pydeno
>>> with pydeno.Runtime() as rt:
...     rt.eval("1 + 1")
2
"""

import importlib
import logging
from typing import TYPE_CHECKING, Any, Final

from ._base.errors import (
    ActorDied,
    CheckoutTimeout,
    ClosedError,
    FetchFailed,
    FetchRefused,
    FetchTimeout,
    JavaScriptError,
    JournalError,
    LeaseTimeout,
    PackageError,
    PackageRefused,
    PackageUnresolved,
    PydenoError,
    ReplayDivergence,
    RuntimeForceKilled,
    RuntimeTerminated,
    RuntimeTimeout,
    SessionLimitError,
    SnapshotAuthenticationError,
    StoreBusy,
    StoreError,
    ToolBudgetError,
    ToolError,
    ToolNotFoundError,
    TypeCheckError,
    UpstreamError,
    WorkerCrashed,
)
from ._base.kinds import KINDS, ErrorInfo, classify_error
from ._base.values import Undefined, undefined
from ._runtime._sync import Runtime
from ._runtime.function import JsFunction
from ._version import __version__ as __version__

# What an eval needs is imported with the package; every other public name is imported on
# its first use (``pydeno.CodeMode``, ``from pydeno import CodeMode``), so a service that only
# evaluates never loads JSON Schema, anyio, SQLite or the HTTP client.
_LAZY: Final = {
    "AgentSandbox": "._agents._sync",
    "AsyncAgentSandbox": "._agents._async",
    "AsyncCodeMode": "._code_mode._async",
    "AsyncRuntime": "._runtime._async",
    "AsyncSandboxPool": "._pools._async",
    "AsyncSessionPool": "._agents.sessions._async",
    "CodeMode": "._code_mode._sync",
    "ExecutionResult": "._code_mode.result",
    "HttpFetch": "._tools.fetch.client",
    "JournalStore": "._agents.sessions.store",
    "LayerStatus": "._runtime.sandbox_status",
    "MemoryJournalStore": "._agents.sessions.store",
    "Packages": "._base.packages",
    "PausedToolCall": "._tools.approval",
    "RetryPolicy": "._pools.retry.policy",
    "SQLiteJournalStore": "._agents.sessions.store",
    "SandboxPool": "._pools._sync",
    "SandboxStatus": "._runtime.sandbox_status",
    "SessionPool": "._agents.sessions._sync",
    "Tool": "._tools.tool",
    "ToolBridge": "._tools.bridge",
    "mcp_tools": "._tools.mcp",
    "run_with_retry": "._pools.retry._sync",
    "run_with_retry_async": "._pools.retry._async",
    "sandbox_status": "._runtime.sandbox_status",
    "tool": "._tools.tool",
}

if TYPE_CHECKING:
    from ._agents._async import AsyncAgentSandbox
    from ._agents._sync import AgentSandbox
    from ._agents.sessions._async import AsyncSessionPool
    from ._agents.sessions._sync import SessionPool
    from ._agents.sessions.store import JournalStore, MemoryJournalStore, SQLiteJournalStore
    from ._base.packages import Packages
    from ._code_mode._async import AsyncCodeMode
    from ._code_mode._sync import CodeMode
    from ._code_mode.result import ExecutionResult
    from ._pools._async import AsyncSandboxPool
    from ._pools._sync import SandboxPool
    from ._pools.retry._async import run_with_retry_async
    from ._pools.retry._sync import run_with_retry
    from ._pools.retry.policy import RetryPolicy
    from ._runtime._async import AsyncRuntime
    from ._runtime.sandbox_status import LayerStatus, SandboxStatus, sandbox_status
    from ._tools.approval import PausedToolCall
    from ._tools.bridge import ToolBridge
    from ._tools.fetch.client import HttpFetch
    from ._tools.mcp import mcp_tools
    from ._tools.tool import Tool, tool


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pydeno' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "ActorDied",
    "AgentSandbox",
    "AsyncAgentSandbox",
    "AsyncCodeMode",
    "AsyncRuntime",
    "AsyncSandboxPool",
    "AsyncSessionPool",
    "CheckoutTimeout",
    "ClosedError",
    "CodeMode",
    "ErrorInfo",
    "ExecutionResult",
    "FetchFailed",
    "FetchRefused",
    "FetchTimeout",
    "HttpFetch",
    "JavaScriptError",
    "JournalError",
    "JournalStore",
    "JsFunction",
    "KINDS",
    "LayerStatus",
    "LeaseTimeout",
    "MemoryJournalStore",
    "PackageError",
    "PackageRefused",
    "PackageUnresolved",
    "Packages",
    "PausedToolCall",
    "PydenoError",
    "ReplayDivergence",
    "RetryPolicy",
    "Runtime",
    "RuntimeForceKilled",
    "RuntimeTerminated",
    "RuntimeTimeout",
    "SQLiteJournalStore",
    "SandboxPool",
    "SandboxStatus",
    "SessionLimitError",
    "SessionPool",
    "SnapshotAuthenticationError",
    "StoreBusy",
    "StoreError",
    "Tool",
    "ToolBridge",
    "ToolBudgetError",
    "ToolError",
    "ToolNotFoundError",
    "TypeCheckError",
    "Undefined",
    "UpstreamError",
    "WorkerCrashed",
    "classify_error",
    "mcp_tools",
    "run_with_retry",
    "run_with_retry_async",
    "sandbox_status",
    "tool",
    "undefined",
]

# A library's records reach the application's handlers, and nowhere without them.
logging.getLogger("pydeno").addHandler(logging.NullHandler())
