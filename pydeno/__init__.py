"""pydeno: run untrusted JavaScript in supervised Deno worker processes.

>>> import pydeno
>>> with pydeno.Runtime() as rt:
...     rt.eval("1 + 1")
2
"""

import logging

from ._agents._async import AsyncAgentSandbox
from ._agents._sync import AgentSandbox
from ._agents.sessions._async import AsyncSessionPool
from ._agents.sessions._sync import SessionPool
from ._agents.sessions.store import JournalStore, MemoryJournalStore, SQLiteJournalStore
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
from ._base.packages import Packages
from ._base.values import Undefined, undefined
from ._code_mode._async import AsyncCodeMode
from ._code_mode._sync import CodeMode
from ._code_mode.result import ExecutionResult
from ._pools._async import AsyncSandboxPool
from ._pools._sync import SandboxPool
from ._pools.retry._async import run_with_retry_async
from ._pools.retry._sync import run_with_retry
from ._pools.retry.policy import RetryPolicy
from ._runtime._async import AsyncRuntime
from ._runtime._sync import Runtime
from ._runtime.function import JsFunction
from ._runtime.sandbox_status import LayerStatus, SandboxStatus, sandbox_status
from ._tools.approval import PausedToolCall
from ._tools.bridge import ToolBridge
from ._tools.fetch.client import HttpFetch
from ._tools.mcp import mcp_tools
from ._tools.tool import Tool, tool
from ._version import __version__ as __version__

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
