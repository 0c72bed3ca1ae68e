"""pydeno: run untrusted JavaScript in supervised Deno workers.

>>> import pydeno
>>> with pydeno.Runtime() as rt:
...     rt.eval("1 + 1")
2
"""

from ._async_runtime import AsyncRuntime
from ._errors import (
    JavaScriptError,
    PydenoError,
    RuntimeForceKilled,
    RuntimeTerminated,
    RuntimeTimeout,
    WorkerCrashed,
)
from ._function import JsFunction
from ._runtime import Runtime
from ._values import Undefined, undefined

__all__ = [
    "AsyncRuntime",
    "JavaScriptError",
    "JsFunction",
    "PydenoError",
    "Runtime",
    "RuntimeForceKilled",
    "RuntimeTerminated",
    "RuntimeTimeout",
    "Undefined",
    "WorkerCrashed",
    "undefined",
]
