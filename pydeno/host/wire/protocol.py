"""The wire contract: everything the host and the worker must agree on, written once.

worker/protocol.ts is generated from this module (``python scripts/gen_protocol.py``) and
worker/main.ts and worker/codec.ts take their constants from it; tests/meta/test_protocol.py
fails while the two files disagree, or while either side keeps a copy of its own. To change
the contract: edit this table, regenerate, and raise PROTOCOL_VERSION when a worker built
from the old table would misread the new host (or the reverse). The ``#:`` comment above a
constant is its documentation in the generated file too.

A leaf: it imports nothing at all, so that programs outside the package load it by path
(the hostile fake workers, and the generator) without the package or its dependencies. The
names are plain ints, not IntEnums: the wire's hot path compares frame kinds, and a member
is slower there (measured on CPython 3.11: 61 ns a comparison against 52 ns, 153 ns to pack
a small frame against 137 ns).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

# -- Framing --

#: The version in the worker's handshake; the host refuses any other.
PROTOCOL_VERSION: Final = 5
#: The big-endian unsigned length of its payload that starts every frame, in bytes; the
#: payload is one msgpack array whose first item is the frame's kind.
FRAME_HEADER_BYTES: Final = 4

# -- Frame kinds, host -> worker --

H_EVAL: Final = 1
H_CALL: Final = 2
#: Travels in front of the next other frame, so closing a handle never does I/O itself.
H_RELEASE: Final = 3
H_REPLY: Final = 4
H_BIND: Final = 5
H_TERMINATE: Final = 6
#: An eval of TypeScript: the worker strips its types with Deno's transpiler first.
H_EVAL_TS: Final = 7
#: Adds (or replaces) a module the guest may import by its specifier.
H_MODULE: Final = 8
#: Runs module code; its result is the module's exports.
H_EVAL_MODULE: Final = 9
#: Adds an npm package the host bundled: one CommonJS script and the node: built-ins it requires.
H_PACKAGE: Final = 10
#: Compiles a WebAssembly module (its bytes a msgpack bin) and binds it as a guest global.
H_WASM: Final = 11
#: A Code Mode program: an eval of TypeScript the host wrapped in a block (or an async
#: function), whose body is the program's top level, where its import declarations are.
H_EVAL_PROGRAM: Final = 12
#: Each host frame's items after its kind.
HOST_FRAMES: Final[dict[int, tuple[str, ...]]] = {
    H_EVAL: ("request_id", "code"),
    H_CALL: ("request_id", "function_id", "args"),
    H_RELEASE: ("function_ids",),
    H_REPLY: ("call_id", "ok", "value_or_name_and_message"),
    H_BIND: ("request_id", "name"),
    H_TERMINATE: (),
    H_EVAL_TS: ("request_id", "code"),
    H_MODULE: ("request_id", "specifier", "source"),
    H_EVAL_MODULE: ("request_id", "source"),
    H_PACKAGE: ("request_id", "specifier", "requires", "source"),
    H_WASM: ("request_id", "name", "module"),
    H_EVAL_PROGRAM: ("request_id", "code"),
}

# -- Frame kinds, worker -> host --

#: Once, first: nothing else is accepted before it.
W_HELLO: Final = 0
W_RESULT: Final = 1
#: thrown is [] for an Error (name, message and stack are its own), else [the value thrown].
W_ERROR: Final = 2
W_HOSTCALL: Final = 3
W_CONSOLE: Final = 4
#: Acknowledges H_TERMINATE; the worker exits right after it.
W_TERMINATED: Final = 5
#: A run of a long array result's items; the W_RESULT that follows carries the last run.
W_PART: Final = 6
#: Each worker frame's items after its kind.
WORKER_FRAMES: Final[dict[int, tuple[str, ...]]] = {
    W_HELLO: ("protocol", "deno_version", "v8_version", "breaches"),
    W_RESULT: ("request_id", "value"),
    W_ERROR: ("request_id", "name", "message", "stack", "thrown"),
    W_HOSTCALL: ("call_id", "function_name", "args"),
    W_CONSOLE: ("level", "text"),
    W_TERMINATED: (),
    W_PART: ("request_id", "items"),
}
#: The levels a W_CONSOLE frame may name.
CONSOLE_LEVELS: Final = ("log", "info", "debug", "warn", "error")

# -- msgpack extension types in values --

#: undefined; a payload of one zero byte.
EXT_UNDEFINED: Final = 0
#: An integer beyond 2**53 either way: a sign byte (1 negative, 0 not), then hex digits.
EXT_BIGINT: Final = 1
#: A Date: milliseconds since the epoch, a big-endian float64.
EXT_DATE: Final = 2
#: A guest function: its handle id, a big-endian uint32.
EXT_FUNCTION: Final = 3
#: A Set: its items as one msgpack array.
EXT_SET: Final = 4
#: A plain JSON-shaped value as UTF-8 JSON text (the fast lane of large values).
EXT_JSON: Final = 5
#: Marks a map as an Error object; a payload of one zero byte. It is the map's first key, and
#: its value is [name, message, stack]; the map's other keys are strings: "cause" and "errors"
#: when the Error has them, then its other own properties.
EXT_ERROR: Final = 6

# -- The decode budget (pydeno/host/wire/budget.py), which the worker charges as the host does --

#: The allowance of host memory per byte of a frame, unless max_decode_ratio= says otherwise.
DEFAULT_DECODE_RATIO: Final = 40
#: What every frame's allowance has on top of its bytes.
DECODE_FLOOR: Final = 1 << 20
#: The most any token costs per byte of it: a frame that small against its allowance is not read.
MAX_COST_PER_BYTE: Final = 128

# -- The worker's process --

#: The environment variable the worker's start settings travel in, as JSON: what every worker
#: of one staging shares, so that a worker can be started before the runtime it will serve
#: (the zygote's spare, pydeno/host/process/launcher.py). Not the command line: the guest can
#: read that back (Deno.args in a Web Worker, process.argv), and the self-test's targets would
#: tell it where the host keeps its files.
SETTINGS_VARIABLE: Final = "PYDENO_WORKER_SETTINGS"
#: Each start setting, with the TypeScript type the worker reads it as.
START_SETTINGS: Final[dict[str, str]] = {
    "selftest": "{ env: Record<string, string> } | null",
}
#: Each of one worker's own settings, with the TypeScript type the worker reads it as. They
#: are the host's first frame on the worker's stdin (the settings frame, below), which the worker waits
#: for once its start-up needs them: its limits, and the mailbox's path.
WORKER_SETTINGS: Final[dict[str, str]] = {
    "max_message_bytes": "number",
    "max_depth": "number",
    "max_decode_ratio": "number",
    "max_console_chars": "number",
    "max_inflight_host_calls": "number",
    "max_console_bytes": "number",
    "memory_growth": "number",
    "mailbox": "string | null",
}
#: The settings frame: a frame's length header, then WORKER_SETTINGS as UTF-8 JSON, not
#: msgpack (the worker reads it before its codec is set up), at most this many bytes of it.
MAX_SETTINGS_BYTES: Final = 1 << 16
#: The Deno permissions the host grants for the worker's part of the sandbox self-test (its
#: environment; the launcher probes the rest), which the worker revokes before its handshake.
SELFTEST_GRANTS: Final = ("env",)
#: Every Deno permission a grant could give: the worker revokes them all and exits if any
#: stays granted, before its handshake.
DENO_PERMISSIONS: Final = ("read", "write", "net", "run", "env", "ffi", "sys")
#: The mailbox file's size (pydeno/host/process/mailbox.py): a little-endian count of the bytes the
#: host has written to the worker's stdin.
MAILBOX_COUNT_BYTES: Final = 8
#: What starts a line the worker itself writes to stderr before it exits with one of the codes
#: below; the host takes the reason for EXIT_PERMISSION_KEPT from the last such line. (The
#: launcher writes its own prefix, pydeno/host/process/launcher.py's PREFIX.)
WORKER_PREFIX: Final = "pydeno worker: "

# -- Exit codes --
# The worker's process runs the launcher (pydeno/host/process/launcher.py) first when it is confined,
# and both programs exit with these: one code, one meaning, whichever program it comes from.

#: The host hung up (closed the worker's stdin or stdout, or was gone before the worker
#: started), or sent H_TERMINATE.
EXIT_DONE: Final = 0
#: The worker cannot go on: a frame it could not read (the two ends disagree), a state the
#: guest left that Deno's own code fails in, or a launcher that failed before deno ran.
EXIT_INTERNAL: Final = 70
#: The launcher refused to start deno: a sandbox layer the kernel refused under
#: sandbox="require" (its stderr line says which).
EXIT_UNAVAILABLE: Final = 71
#: A permission granted for the self-test is still granted after the worker revoked them all.
EXIT_PERMISSION_KEPT: Final = 72
#: The launcher could not execute deno (the shell's code for a command that cannot run).
EXIT_EXEC_FAILED: Final = 127
