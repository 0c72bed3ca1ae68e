"""The anchored patterns of the host's and the sandbox's own messages: the contract by which a
message, read from its start, picks an error kind (tests/unit/test_error_factories.py checks
that each message the host writes classifies through them alone)."""

from __future__ import annotations

import re
from typing import Final


class LazyPattern:
    """A pattern compiled on its first use. Classifying is a failure's path: compiled with the
    module, these patterns were a share of every ``import pydeno``. Two threads that use one
    first may both compile it, to equal patterns."""

    __slots__ = ("_compiled", "_source")

    def __init__(self, source: str) -> None:
        self._source = source
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self._source)
        return compiled

    def match(self, text: str) -> re.Match[str] | None:
        return self.compiled.match(text)

    def fullmatch(self, text: str) -> re.Match[str] | None:
        return self.compiled.fullmatch(text)


# Anchored patterns for the host's own messages. fullmatch where the host wrote the whole
# message; a prefix match (re.match) where worker text may follow.
# A float as the host formats it: repr(float), so 0.5 but also 1e-05 and 1e+16.
_NUM = r"\d+(?:\.\d+)?(?:e[+-]\d+)?"
FULL: Final[list[tuple[str, LazyPattern]]] = [
    ("timeout", LazyPattern(rf"command exceeded timeout={_NUM}s; worker killed")),
    ("cpu_limit", LazyPattern(rf"worker used more than {_NUM}s of CPU in one command and was killed")),
    ("cpu_limit", LazyPattern(rf"worker used more than {_NUM}s of CPU between commands and was killed")),
    (
        "host_wait",
        LazyPattern(
            rf"host callbacks kept the guest waiting for more than {_NUM}s in one command \(max_host_wait\); "
            "worker killed"
        ),
    ),
    ("memory_limit", LazyPattern(r"worker used \d+ bytes, over max_memory=\d+; killed")),
    ("memory_limit", LazyPattern(r"worker ran out of its V8 heap \(sized from max_memory=\d+\) and was stopped")),
    ("thread_limit", LazyPattern(r"worker started \d+ threads \(limit \d+\); killed")),
    ("host_call_budget", LazyPattern(r"guest made more than max_host_calls=\d+ host calls")),
]
ABANDONED: Final = LazyPattern(r"too many abandoned tool calls in this session")
PREFIX: Final[list[tuple[str, LazyPattern]]] = [
    ("guest_crashed", LazyPattern(r"worker died running guest code \(")),
    ("protocol_violation", LazyPattern(r"worker broke protocol: ")),
    ("protocol_violation", LazyPattern(r"worker sent a malformed frame \(")),
    ("sandbox_unavailable", LazyPattern(r"worker failed to start: an OS sandbox is required but ")),
    ("sandbox_unavailable", LazyPattern(r"worker failed to start: sandbox self-test failed: ")),
    (
        "limits_unmeasurable",
        LazyPattern(r"(?:max_memory|cpu_limit|max_threads) cannot be enforced on this system \("),
    ),
]
CLOSED: Final = frozenset(
    {
        "runtime is closed",
        "Runtime has been closed",
        "Function has been closed",
        "Stream has been closed",
        "the session is closed",
        "the session was closed",
        "the session pool is closed",
    }
)
# A JavaScriptError is "Evaluation failed: " + the guest's "Name: message". Only the Name
# and the message (its start, or the whole of it for the sandbox's refusals) are read, and
# every kind they can give is as non-retryable as js_error itself, with no larger limit that
# would help, so a guest that writes such text gains nothing.
JS_INFLIGHT: Final = LazyPattern(r"(?:Error: )?more than \d+ host calls in flight\Z")
# The worker's refusal of a value whose decoding would amplify (max_decode_ratio): a refused
# value, as invalid_input as the host's own refusals of what it is given.
JS_DECODE: Final = LazyPattern(
    r"(?:result|arguments to \S+\(\)) could not be converted: value would take about \d+ bytes of host memory "
)
# A host function's failure that the guest did not catch (pydeno/_base/errors.py guest_error
# writes it): it raised something other than a ToolError. A guest that writes it itself gets
# tool_failed, as non-retryable as js_error.
HOST_FAILURE: Final = LazyPattern(
    r"((?:host function )?\S+\(\)) failed on the host \((\w+)\)(; its details are hidden)?"
)
# The sandbox's own account of what deno's permission checks and module loader refuse (the
# worker writes it, worker/main.ts and worker/modules.ts; guest text only as a quoted name).
_QUOTED = r'"(?:[^"\\\n]|\\.)*"'
DENIED: Final = LazyPattern(
    r"no (network access|file access|environment variables|subprocesses|system information|native libraries"
    rf"|operating system access|Deno namespace) in this sandbox(?:: {_QUOTED} was not (?:reached|read|written|run"
    r"|loaded))?"
)
IMPORT_REFUSED: Final = LazyPattern(
    rf"module ({_QUOTED}) cannot be imported in this sandbox: (npm packages are not available|jsr packages are not "
    "available|remote modules are not available|files are not available|it was not added; only added modules, "
    r"packages the host provided \(packages=\) and node: built-ins can be imported)|(npm) packages cannot be "
    "imported in this sandbox"
)
TOOL_KINDS: Final = {
    "ToolBudgetError": "tool_budget",
    "ToolNotFoundError": "tool_not_found",
    "ToolError": "tool_failed",
    "FetchRefused": "fetch_refused",
    "FetchFailed": "fetch_failed",
    "FetchTimeout": "fetch_timeout",
    "UpstreamError": "upstream_failed",
}
JS_TOOL: Final = LazyPattern("(" + "|".join(TOOL_KINDS) + r")\b")
