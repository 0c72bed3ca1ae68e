"""The one tool ``pydeno mcp`` serves, as a client sees it: its description, its input and
output schemas, the checks of a call's arguments, and a result shaped to fit
--max-result-bytes."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Final

from mcp import types

from .._base.checks import optional_size
from .._base.options import DEFAULT_MAX_MEMORY
from .._base.packages import prompt_line
from .._code_mode.api import CodeModeTools
from .._code_mode.core import Execution
from .._code_mode.result import DEFAULT_MAX_OUTPUT_CHARS, ExecutionResult, _cut_text
from .mcp_config import DEFAULT_MAX_RESULT_BYTES, TOOL_NAME, ServerConfig


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"


def tool_description(config: ServerConfig) -> str:
    """What a model reads about run_javascript: what a program can do and what comes back."""
    memory = optional_size("max_memory", config.runtime.get("max_memory", DEFAULT_MAX_MEMORY), 0)
    limits = f"at most {config.timeout:g} s per call (the `timeout` argument may lower it, never raise it)"
    if memory is not None:
        limits += f", {_size(memory)} of memory"
    limits += f", programs up to {config.max_code_bytes} bytes"
    if config.store is not None:
        state = (
            "Top-level declarations (`let`, `const`, `function`, `class`) and globals persist from call to call in "
            "this session, so a later call can use what an earlier one defined, even after the server restarts. "
            "A call that hits a limit is not kept; what earlier calls defined stays. The session is kept by "
            "running its calls again, so in it `Date.now()` stays at the session's start and `Math.random` is "
            "seeded."
        )
    elif config.session:
        state = (
            "Top-level declarations (`let`, `const`, `function`, `class`) and globals persist from call to call in "
            "this session, so a later call can use what an earlier one defined. A call that hits a limit loses "
            "them: the next call starts on a fresh runtime."
        )
    else:
        state = (
            "Each call runs on a fresh runtime: nothing persists between calls, so send everything a program "
            "needs in that program."
        )
    return "\n".join(
        [
            "Run a JavaScript or TypeScript program (types are stripped, not checked) in a sandboxed Deno "
            "worker and get back its result.",
            "- The result is the value of the program's last expression; top-level `await` works. A top-level "
            "`return` works too: the program then runs as an async function body, whose declarations never persist.",
            "- console.log / info / debug output comes back as `stdout`, console.warn / error as `stderr` "
            f"(each cut at {DEFAULT_MAX_OUTPUT_CHARS} characters).",
            "- No network, no file system, no environment, no subprocesses, no `Deno`, `process` or `require`, "
            f"no remote imports, {prompt_line(config.runtime.get('packages'))}: only the language and its standard "
            "objects (JSON, Math, Date, Intl, RegExp, typed arrays, Promise, ...).",
            f"- Limits: {limits}.",
            f"- {state}",
            "- The value comes back as JSON; what JSON cannot hold is a tagged object such as "
            '`{"$type": "undefined"}` or `{"$type": "bytes", "base64": "..."}`. A whole result is at most '
            f'{_size(config.max_result_bytes)}: a bigger value comes back as `{{"$type": "truncated", ...}}` with a '
            "preview, so return what you need, not everything.",
            "- A failed run (an exception, a syntax error, a limit) is an error result: `error.kind` says what "
            "failed (js_error, timeout, memory_limit, ...), `error.message` and `error.line` where, and "
            "`error.hint` how to fix it.",
        ]
    )


INPUT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "code": {
            "type": "string",
            "description": "The program: TypeScript or JavaScript. Its last expression's value is the result.",
        },
        "timeout": {
            "type": "number",
            "exclusiveMinimum": 0,
            "description": "Seconds this call may take; lowers the server's limit, never raises it.",
        },
    },
    "required": ["code"],
    "additionalProperties": False,
}

_NULLABLE_INT: Final = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
OUTPUT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean", "description": "True when the program finished and `value` is its result."},
        "value": {"description": "The program's value as JSON (null when it failed)."},
        "stdout": {"type": "string"},
        "stderr": {"type": "string"},
        "error": {
            "description": "Null when ok; else what failed.",
            "anyOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "message": {"type": "string"},
                        "line": _NULLABLE_INT,
                        "column": _NULLABLE_INT,
                        "excerpt": {
                            "anyOf": [{"type": "string"}, {"type": "null"}],
                            "description": "For a program that did not compile: its line as written, a caret "
                            "under the place.",
                        },
                        "kind": {"type": "string"},
                        "retryable": {"type": "boolean"},
                        "retry_with_larger_limits": {"type": "boolean"},
                        "hint": {"type": "string", "description": "What the program can change."},
                        "value": {"description": "What the program threw, when it is not an Error."},
                    },
                    "required": ["name", "message", "kind", "retryable", "retry_with_larger_limits", "hint"],
                },
            ],
        },
        "tool_calls": {"type": "array", "items": {"type": "object"}},
        "duration_s": {"type": "number"},
        "truncated": {"type": "array", "items": {"type": "string"}},
        "cpu_seconds": {"type": "number", "description": "CPU time (user + system) the worker used for the run."},
        "peak_rss_bytes": {
            "type": "integer",
            "description": "The worker's largest resident memory sampled during the run, or at its end.",
        },
        "host_calls": {"type": "integer", "description": "Host-function calls the run made."},
    },
    "required": [
        "ok",
        "value",
        "stdout",
        "stderr",
        "error",
        "tool_calls",
        "duration_s",
        "truncated",
        "cpu_seconds",
        "peak_rss_bytes",
        "host_calls",
    ],
}


def tool(config: ServerConfig) -> types.Tool:
    return types.Tool(
        name=TOOL_NAME,
        title="Run JavaScript",
        description=tool_description(config),
        input_schema=INPUT_SCHEMA,
        output_schema=OUTPUT_SCHEMA,
        annotations=types.ToolAnnotations(
            title="Run JavaScript",
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=not config.session,
            open_world_hint=False,
        ),
    )


def call_arguments(arguments: Any, max_code_bytes: int) -> tuple[str, float | None]:
    """The call's ``code`` and ``timeout``; a TypeError or ValueError says what was wrong."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        raise TypeError(f"{TOOL_NAME} takes an object of arguments {{code, timeout?}}, got {type(arguments).__name__}")
    extra = sorted(str(k) for k in arguments if k not in ("code", "timeout"))
    if extra:
        raise ValueError(
            f"{TOOL_NAME} got unknown argument(s) {', '.join(map(repr, extra))}: it takes only 'code' and 'timeout'"
        )
    if "code" not in arguments:
        raise ValueError(f"{TOOL_NAME} needs the argument 'code': the program, as a string")
    code = arguments["code"]
    if not isinstance(code, str):
        raise TypeError(f"{TOOL_NAME}: 'code' must be a string (TypeScript or JavaScript), got {type(code).__name__}")
    size = len(code.encode("utf-8", "surrogatepass"))
    if size > max_code_bytes:
        raise ValueError(
            f"{TOOL_NAME}: 'code' is {size} bytes (UTF-8), over this server's limit of {max_code_bytes} "
            "(--max-code-bytes): send a shorter program"
        )
    timeout = arguments.get("timeout")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError(f"{TOOL_NAME}: 'timeout' must be a number of seconds, got {type(timeout).__name__}")
        if not math.isfinite(timeout) or timeout <= 0:
            raise ValueError(f"{TOOL_NAME}: 'timeout' must be a positive number of seconds, got {timeout!r}")
        timeout = float(timeout)
    return code, timeout


def refused(exc: BaseException) -> ExecutionResult:
    """The result of a call that never ran: the reason, classified like any other failure."""
    return Execution(CodeModeTools([], max_tool_calls=None, approve=None), DEFAULT_MAX_OUTPUT_CHARS).result(error=exc)


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _json_size(text: str) -> int:
    return _utf8(json.dumps(text, ensure_ascii=False))


# What a result's JSON-RPC message holds besides its text and its structured content.
_ENVELOPE: Final = 512


def call_result(result: ExecutionResult, max_bytes: int = DEFAULT_MAX_RESULT_BYTES) -> types.CallToolResult:
    """The tool result: its text form and its structured content, both together at most
    max_bytes of JSON (the text gets at most a third when they do not fit)."""
    room = max_bytes - _ENVELOPE
    text = str(result)
    structured = result.to_dict()
    text_size = _json_size(text)
    if text_size + _utf8(json.dumps(structured, ensure_ascii=False)) > room:
        if text_size > room // 3:
            note = f"\n... (cut: the result is over this server's limit of {max_bytes} bytes, --max-result-bytes)"
            text = _cut_text(text, room // 3 - _json_size(note), _utf8) + note
            text_size = _json_size(text)
        structured = result._bounded(room - text_size, _utf8, "max_result_bytes")
        if text != str(result):
            structured["truncated"] = sorted({*structured["truncated"], "text"})
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=not result.ok,
    )
