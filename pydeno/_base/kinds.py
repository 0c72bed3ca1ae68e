"""The error-kind vocabulary: ``classify_error``, ``ErrorInfo`` and the ``KINDS`` catalog.

Every error pydeno can raise maps to one kind, a stable public string that is only ever
added to. Each kind says whether the same work could succeed on a fresh runtime
(``retryable``: only when the worker died or failed to start for environmental reasons)
and whether a larger limit could let it finish (``retry_with_larger_limits``).

How a kind is chosen, in order:

1. The exception's type, where the type is enough (``RuntimeTerminated``,
   ``ToolBudgetError``, ``TypeError``, cancellation, ...).
2. For the types that carry several causes (``WorkerCrashed``, ``RuntimeTimeout``,
   ``JavaScriptError``, ``RuntimeError``), the message, matched only by patterns anchored at
   its start (and at its end where the host's text is the whole message). The host writes
   that start; text from a worker or a guest only ever follows it, so a guest can at worst
   make a failure look less retryable, never more.
3. Typed evidence in the exception's chain (``__cause__``, else ``__context__``): an
   ``OSError`` subclass raised while starting the worker, never its text.

``classify_error`` never raises; anything it does not recognise is ``unknown``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Final, NamedTuple

from .kind_patterns import (
    ABANDONED,
    CLOSED,
    DENIED,
    FULL,
    HOST_FAILURE,
    IMPORT_REFUSED,
    JS_DECODE,
    JS_INFLIGHT,
    JS_TOOL,
    PREFIX,
    TOOL_KINDS,
)

__all__ = [
    "KINDS",
    "Catalog",
    "ErrorInfo",
    "Kind",
    "classify_error",
    "info_of",
]


class Kind(NamedTuple):
    """One row of the catalog: the public triple plus what the docs pages are built from.

    Two readers, two fixes. ``fix`` is for the operator, the Python programmer who runs the
    sandbox: which option to change, what to install. ``model_fix`` is for whoever wrote the
    program, often a model reading a Code Mode or MCP result: what the *program* can change,
    in the program's terms, with no option names (a program cannot change its limits)."""

    retryable: bool
    retry_with_larger_limits: bool
    summary: str
    raised_as: str
    fix: str
    example: str
    model_fix: str


# The catalog. docs/errors/<kind>.md is generated from it (scripts/gen_error_docs.py) and a
# test fails when a page is missing, extra or stale.
Catalog: Final[dict[str, Kind]] = {
    "js_error": Kind(
        False,
        False,
        "The guest code threw or failed to compile.",
        "JavaScriptError (the guest's own error; a host function's error the guest did not catch is tool_failed)",
        "Fix the JavaScript, or catch the error in the guest; .name, .message and .stack say what happened.",
        'rt.eval("null.x")  # JavaScriptError: Evaluation failed: TypeError: Cannot read properties of null',
        "The program threw an error it did not catch, or did not compile: read the error's name, message and line, "
        "fix the program, or catch the error where it can be handled.",
    ),
    "timeout": Kind(
        False,
        True,
        "A deadline passed before the work finished.",
        "RuntimeTimeout (command exceeded timeout=...); TimeoutError / asyncio.TimeoutError / trio.TooSlowError",
        "Raise timeout= (per runtime or per eval), or make the code finish sooner.",
        'rt.eval("while (true) {}", timeout=0.5)  # RuntimeTimeout: command exceeded timeout=0.5s; worker killed',
        "The program did not finish in time: make it do less work per run (smaller inputs, fewer awaits in series, no"
        " busy loops), or split the work across runs.",
    ),
    "cpu_limit": Kind(
        False,
        True,
        "The worker used more CPU in one command than its cap allows.",
        "RuntimeTimeout carrying the supervisor's CPU-cap message (in one command, or between commands)",
        "Raise cpu_limit=, or make the code do less work per command.",
        "pydeno.Runtime(cpu_limit=0.5).eval('while (true) {}')  # worker used more than 0.5s of CPU ...",
        "The program used too much CPU: do less computation per run (smaller inputs, no busy loops), or split the "
        "work across runs.",
    ),
    "memory_limit": Kind(
        False,
        True,
        "The worker went over max_memory and was stopped.",
        "WorkerCrashed: worker used N bytes, over max_memory=M; killed, or the worker's own V8 heap exit",
        "Raise max_memory=, or reduce what the code keeps alive.",
        "pydeno.Runtime(max_memory=64 * 2**20).eval('const a = []; while (true) a.push(new Uint8Array(1e6))')",
        "The program kept too much in memory: process data in smaller pieces and keep less alive.",
    ),
    "thread_limit": Kind(
        False,
        False,
        "The worker started more threads than a worker may.",
        "WorkerCrashed: worker started N threads (limit L); killed",
        "Start fewer Web Workers; max_threads= caps the worker's threads.",
        "rt.eval('for (let i = 0; i < 200; i++) new Worker(url, {type: \"module\"})')",
        "The program started too many Web Workers: start fewer, and end each one (worker.terminate()) when it is done.",
    ),
    "worker_crashed": Kind(
        True,
        False,
        "The worker process died, hung or failed to start.",
        "any other WorkerCrashed: died, killed by a signal, hung, would not start",
        "Run the work again on a fresh runtime; if it keeps happening, read the stderr line in the message.",
        "# the worker was killed from outside: WorkerCrashed: worker process died (killed by SIGKILL)",
        "Nothing in the program caused this: run it again.",
    ),
    "guest_crashed": Kind(
        False,
        False,
        "The guest's own code ended or crashed its worker; the same code would do it again.",
        "WorkerCrashed: worker died running guest code (exit code N / killed by SIGSEGV / ...)",
        "Fix the guest code: it exits, closes the worker's output, or crashes the engine. Do not retry it.",
        "rt.eval(\"(await import('node:fs')).closeSync(1)\")  # worker died running guest code (exit code 0)",
        "The program ended or crashed the process it runs in: stop closing or writing to the process's standard "
        "streams and stop calling what exits it; running it again would do the same.",
    ),
    "terminated": Kind(
        False,
        False,
        "The runtime was terminated on request.",
        "RuntimeTerminated",
        "Nothing to fix: terminate() was called. Use a fresh runtime for more work.",
        "threading.Timer(1, rt.terminate).start(); rt.eval('await new Promise(() => {})')",
        "The run was stopped from outside; nothing in the program needs to change.",
    ),
    "force_killed": Kind(
        False,
        False,
        "A termination was never acknowledged; the runtime was abandoned.",
        "RuntimeForceKilled",
        "Nothing to fix: the guest was busy when terminate() was called; raise terminate_grace= to wait longer.",
        "threading.Timer(1, rt.terminate).start(); rt.eval('while (true) {}')",
        "The run was stopped from outside while the program was busy; nothing in the program needs to change.",
    ),
    "host_wait": Kind(
        False,
        True,
        "Host callbacks kept the guest waiting longer than max_host_wait.",
        "RuntimeTimeout from max_host_wait",
        "Raise max_host_wait=, or make the host functions answer sooner.",
        "rt = pydeno.Runtime(max_host_wait=1); rt.bind_function('slow', lambda: time.sleep(5)); rt.eval('slow()')",
        "The host's functions spent too long answering the program's calls: make fewer or smaller calls per run.",
    ),
    "max_pause": Kind(
        False,
        True,
        "Tool answers kept an agent run paused longer than max_pause.",
        "the host_wait timeout, classified with via_agent=True (an AgentSandbox run)",
        "Raise max_pause=, or answer paused tool calls sooner.",
        "classify_error(exc, via_agent=True).kind == 'max_pause'",
        "The program waited too long for tool answers: make fewer or smaller tool calls per run.",
    ),
    "host_call_budget": Kind(
        False,
        True,
        "The guest made more host calls than max_host_calls.",
        "WorkerCrashed: guest made more than max_host_calls=N host calls",
        "Raise max_host_calls=, or make fewer host calls (batch them).",
        "pydeno.Runtime(max_host_calls=10) and a guest loop awaiting a bound function 11 times",
        "The program made too many host calls in one run: make fewer calls (batch them: one call with many items "
        "rather than many calls).",
    ),
    "inflight_limit": Kind(
        False,
        True,
        "Too many host calls were outstanding at once.",
        "JavaScriptError / RuntimeError: more than N host calls in flight; too many abandoned tool calls",
        "Raise max_inflight_host_calls=, or await host calls in smaller batches.",
        "rt.eval('Promise.all(Array.from({length: 100}, () => f()))')  # more than 32 host calls in flight",
        "The program had too many calls waiting at once: await them in smaller groups (a few at a time, not all at "
        "once with Promise.all).",
    ),
    "tool_budget": Kind(
        False,
        True,
        "The tool-call budget (max_calls / max_tool_calls) is spent.",
        "ToolBudgetError; a JavaScriptError that names or starts with ToolBudgetError",
        "Raise the tool budget (max_calls= / max_tool_calls=), or make fewer tool calls.",
        "ToolBridge(tools, max_calls=1) and a guest that calls a tool twice without catching",
        "The program used up its tool calls for this run: make fewer tool calls (batch them, and do not call a tool "
        "again for something it already answered).",
    ),
    "tool_not_found": Kind(
        False,
        False,
        "A tool reported that what it was asked for is missing.",
        "ToolNotFoundError; a JavaScriptError that names ToolNotFoundError",
        "Ask the tool for something that exists.",
        "a tool raising pydeno.ToolNotFoundError('no such user') that the guest does not catch",
        "A tool said that what it was asked for does not exist: ask for something that exists (check the name or id),"
        " or handle the error.",
    ),
    "tool_failed": Kind(
        False,
        False,
        "A host tool or function raised an error.",
        "ToolError; a JavaScriptError that names ToolError, or that says a tool or host function failed on the "
        "host (it raised another exception, such as KeyError, that the guest did not catch)",
        "See the tool's error; fix its input or the tool. A tool that failed on the host raised something other "
        "than pydeno.ToolError: fix the tool, raise ToolError with a message meant for the program, or pass "
        "expose_host_errors=True to show the guest its exception's text.",
        "a tool raising pydeno.ToolError('upstream refused') that the guest does not catch",
        "A tool failed: read its message; change the arguments or handle the error in the program. If the message "
        "says the tool failed on the host, the program cannot fix the tool: try other arguments, another tool, or go "
        "on without it.",
    ),
    "protocol_violation": Kind(
        False,
        False,
        "The worker sent something the host refuses; it was discarded.",
        "WorkerCrashed: worker broke protocol, malformed frame, a reused or malformed capability token",
        "Do not write to the worker's stdout from guest code; report it if the guest did not.",
        "# a guest that writes raw bytes to fd 1: WorkerCrashed: worker sent a malformed frame (...)",
        "Do not write to the process's standard output or input from the program (console.log is the way to print).",
    ),
    "sandbox_unavailable": Kind(
        False,
        False,
        "The worker refused to start without a complete OS sandbox.",
        "WorkerCrashed: worker failed to start: an OS sandbox is required but ..., or a failed startup self-test",
        "Run where every OS sandbox layer is available, or choose sandbox='best_effort' knowingly.",
        "pydeno.Runtime(sandbox='require') on a kernel without Landlock",
        "Nothing in the program caused this; the sandbox could not start here, and running the program again will not"
        " help.",
    ),
    "limits_unmeasurable": Kind(
        False,
        False,
        "sandbox='require' but the worker's resource usage cannot be read here.",
        "WorkerCrashed: max_memory ... cannot be enforced on this system under sandbox='require'",
        "Run where the worker's memory, CPU and threads can be read (procfs), or relax sandbox=.",
        "pydeno.Runtime(sandbox='require') where /proc cannot be read for the worker",
        "Nothing in the program caused this; the sandbox could not start here, and running the program again will not"
        " help.",
    ),
    "closed": Kind(
        False,
        False,
        "The runtime, function, stream or session is already closed.",
        "ClosedError (a PydenoError and a RuntimeError): runtime is closed, Runtime/Function/Stream has been "
        "closed, the session is closed / was closed; its note says what closed it",
        "Use a fresh runtime (a closed one never reopens); keep JsFunction handles only while their runtime lives.",
        'rt.close(); rt.eval("1")  # ClosedError: runtime is closed',
        "The sandbox session is closed: start a new run; values kept from earlier runs are gone.",
    ),
    "journal_invalid": Kind(
        False,
        False,
        "An agent journal is malformed, too large or not authentic.",
        "JournalError",
        "Load only journals this service wrote, with the key it signed them with.",
        "AgentSandbox.load(tampered_journal, key=key)",
        "Nothing in the program caused this: the saved state it was resumed from is not valid.",
    ),
    "replay_divergence": Kind(
        False,
        False,
        "Replaying a journal produced a different outcome.",
        "ReplayDivergence",
        "Replay with the same code and tools the journal was recorded with.",
        "AgentSandbox.load(journal, key=key, tools=changed_tools)",
        "Run the same program as before when resuming, or start afresh: the program asked for different tool calls "
        "than were recorded.",
    ),
    "snapshot_invalid": Kind(
        False,
        False,
        "A signed snapshot failed authentication.",
        "SnapshotAuthenticationError",
        "Resume only snapshots this service signed, with the same key.",
        "AgentSandbox.load(snapshot_dumped_while_paused_then_altered, key=key)",
        "Nothing in the program caused this: the saved state it was resumed from is not valid.",
    ),
    "typecheck_failed": Kind(
        False,
        False,
        "A Code Mode program did not type-check against its tools' declarations; nothing ran.",
        "TypeCheckError (CodeMode.execute(code, typecheck=True))",
        "Fix the types the message names (the API is CodeMode.typescript()), or run without typecheck=True.",
        "pydeno.CodeMode([tool]).execute(\"const n: number = 'one'\", typecheck=True)",
        "The program does not type-check against the tools' declarations, so nothing ran: fix the types the message "
        "names (the tools' argument and result types are in the declarations).",
    ),
    "fetch_refused": Kind(
        False,
        False,
        "A guest's fetch was refused by its HttpFetch policy; no request was sent.",
        "FetchRefused (the URL, method, header or address is not allowed)",
        "Fetch only what HttpFetch(allow=[...]) allows, or allow the origin (and a private address) knowingly.",
        "await fetch('http://169.254.169.254/latest/meta-data/')  # FetchRefused: fetch refused: ...",
        "The program fetched a URL, method or header that is not allowed, and no request was sent: fetch only the "
        "allowed URLs.",
    ),
    "fetch_failed": Kind(
        False,
        False,
        "A guest's fetch was sent but got no usable answer (connection failed, or the response broke a cap).",
        "FetchFailed (the request failed, or its response was over a cap)",
        "Check that the server is up and answers within the caps (max_response_bytes=); the request may be retried.",
        "HttpFetch(['http://127.0.0.1:1/'], allow_addresses=['127.0.0.1']): "
        "await fetch('http://127.0.0.1:1/')  # FetchFailed: fetch failed: ... Connection refused",
        "A fetch was sent but got no usable answer (the server was down or its response was too large): ask for less,"
        " or try again later.",
    ),
    "fetch_timeout": Kind(
        False,
        True,
        "A guest's fetch did not finish within the HttpFetch timeout.",
        "FetchTimeout (the request exceeded HttpFetch(timeout=...))",
        "Raise HttpFetch(timeout=), or fetch something that answers sooner.",
        "await fetch(slow_url)  # FetchTimeout: fetch timed out after 1.0s: ...",
        "A fetch did not finish in time: fetch something smaller or faster, or fewer things per run.",
    ),
    "upstream_failed": Kind(
        False,
        False,
        "An upstream MCP server that a tool forwards to failed or went away during the call.",
        "UpstreamError (a tool from pydeno.mcp_tools: its server went away during the call, did not answer it "
        "within timeout=, or broke protocol listing its tools)",
        "Restart or reconnect the MCP server the message names; the call may or may not have taken effect there.",
        "await tools.files.read_file({path: 'a'})  # UpstreamError: MCP server 'files' went away during "
        "tools.files.read_file(): Connection closed",
        "The service behind a tool failed or went away during the call: the call may or may not have taken effect "
        "there; check before repeating it.",
    ),
    "deno_unavailable": Kind(
        False,
        False,
        "The deno binary is missing or cannot be run.",
        "WorkerCrashed: worker failed to start: ... caused by FileNotFoundError or PermissionError",
        "pip install deno (or set PYDENO_DENO to a deno binary that this user can run).",
        "PYDENO_DENO=/nonexistent python -c 'import pydeno; pydeno.Runtime()'",
        "Nothing in the program caused this; the sandbox could not start here, and running the program again will not"
        " help.",
    ),
    "checkout_timeout": Kind(
        True,
        False,
        "A pool had no fresh worker to hand out within checkout_timeout; nothing ran.",
        "CheckoutTimeout (no fresh sandbox within checkout_timeout=...s)",
        "Retry (nothing ran); or raise max_workers= / size=, or checkout_timeout=, of the pool.",
        "pydeno.SandboxPool(size=0, max_workers=1, checkout_timeout=0.1) with its one worker checked out",
        "Nothing in the program caused this: the sandbox was busy and nothing ran; run it again.",
    ),
    "lease_timeout": Kind(
        True,
        False,
        "A session stayed leased elsewhere, or no live slot freed up, within lease_timeout; nothing ran.",
        "LeaseTimeout (session ... is leased elsewhere; or no live slot ...; waited lease_timeout=...s)",
        "Retry once the other lease ends (nothing ran); or raise lease_timeout= or max_live= of the SessionPool.",
        "with sessions.lease('a'): sessions.lease('a', timeout=0.1).__enter__()  # LeaseTimeout",
        "Nothing in the program caused this: the session was busy and nothing ran; run it again.",
    ),
    "session_limit": Kind(
        False,
        True,
        "An owner reached its cap of live sessions or of stored journal bytes; the last stored journal stays.",
        "SessionLimitError (owner ... has ... live sessions, the cap max_live_per_owner=...; or would store "
        "... bytes, over max_bytes_per_owner=...)",
        "End or delete the owner's other sessions, or raise max_live_per_owner= / max_bytes_per_owner= of the "
        "SessionPool.",
        "pydeno.SessionPool(store, key, max_live_per_owner=1): a second session leased at once for the same owner",
        "Too many sessions are open, or too much state is kept: keep less in globalThis between runs, or end other "
        "sessions.",
    ),
    "store_busy": Kind(
        True,
        False,
        "The journal store stayed locked by another process past its busy timeout; nothing was written.",
        "StoreBusy (journal store ... is locked by another process; waited busy_timeout=...s)",
        "Retry (nothing was written); or raise busy_timeout= of the store, or hold its locks for less time.",
        "another process holds an exclusive lock on the SQLite file: SQLiteJournalStore(path, busy_timeout=0.1)",
        "Nothing in the program caused this: the session's state could not be saved just now; run it again.",
    ),
    "store_failed": Kind(
        False,
        False,
        "The journal store could not be read or written (a corrupt file, not a database, no space, no "
        "permission); what it held stays as it was.",
        "StoreError (journal store ... failed: ...)",
        "Repair or replace the store's file (see the message); a journal that was written before stays in it.",
        "SQLiteJournalStore(path) on a file that is not a SQLite database",
        "Nothing in the program caused this: the session's state could not be read or saved.",
    ),
    "actor_died": Kind(
        True,
        False,
        "The Ray actor running the sandbox died (its process or node went away); the pool replaces it.",
        "ActorDied (Ray actor ... died running ...: ...)",
        "Retry (the pool has started a new actor); if actors keep dying, check the nodes' memory and logs.",
        "ray.kill(actor) while pool.eval(...) runs on it",
        "Nothing in the program caused this: run it again.",
    ),
    "invalid_input": Kind(
        False,
        False,
        "A value or argument was refused (wire or API misuse).",
        "TypeError / ValueError (wire errors, bad arguments); JavaScriptError: a value too costly to decode",
        "Pass what the error message asks for.",
        "pydeno.Runtime(timeout=-1)  # ValueError: timeout must be a positive, finite number of seconds",
        "A value was refused: pass what the message asks for (values must be plain data: no functions, class "
        "instances or values too large to send).",
    ),
    "cancelled": Kind(
        False,
        False,
        "The surrounding asyncio task was cancelled.",
        "asyncio.CancelledError (and the async backend's cancellation)",
        "Nothing to fix in pydeno: your code cancelled the task; the runtime was closed.",
        "task.cancel() while it awaits rt.eval(...)",
        "The run was cancelled from outside; nothing in the program needs to change.",
    ),
    "unknown": Kind(
        False,
        False,
        "An error pydeno does not classify.",
        "anything else",
        "Read the exception; it did not come from pydeno's own failure paths.",
        "classify_error(KeyError('x')).kind == 'unknown'",
        "The run failed for a reason the sandbox does not classify: read the message.",
    ),
    "sandbox_denied": Kind(
        False,
        False,
        "The guest asked for something the sandbox never grants: the network, files, environment variables, "
        "subprocesses or system information.",
        "JavaScriptError: no network access in this sandbox, no file access in this sandbox, ... (what deno's "
        "permission checks refuse, in the sandbox's words)",
        "The sandbox grants no network, file, environment, subprocess or system access, and no option changes "
        "that. Give the guest what it needs instead: attach a pydeno.HttpFetch(allow=[...]) for the URLs it may "
        "fetch, pass data in the code or through bound functions and tools, and read files on the host.",
        "rt.eval(\"await fetch('https://example.com/')\")  # JavaScriptError: Evaluation failed: TypeError: "
        'no network access in this sandbox: "example.com:443" was not reached',
        "The program cannot reach the network, files, environment variables or subprocesses from inside the "
        "sandbox: work with the data and the tools it was given (a tool may fetch or read for it).",
    ),
    "import_refused": Kind(
        False,
        False,
        "The guest imported a module the sandbox cannot load: an npm or jsr package, a URL, a file, or a name "
        "the host did not add.",
        'JavaScriptError: module "..." cannot be imported in this sandbox: ..., or npm packages cannot be '
        "imported in this sandbox",
        "The sandbox loads no npm, jsr, remote or file modules. Add a module's source under the name the guest "
        "imports, rt.add_module(specifier, source), or bind a function or tool that does the work on the host.",
        "rt.eval(\"await import('npm:lodash')\")  # JavaScriptError: Evaluation failed: TypeError: "
        "npm packages cannot be imported in this sandbox",
        "The program cannot import packages, URLs or files: use the language's standard objects, node: built-in "
        "modules and the tools it was given, or write the code it needs itself.",
    ),
    "package_unresolved": Kind(
        False,
        False,
        "An npm package given with pydeno.Packages could not be resolved: no such package or version, the "
        "registry could not be reached, or offline and not in the cache.",
        "PackageUnresolved: package '...' could not be resolved: ...",
        "Check the spec's name and version against the registry; when the machine has no registry, run once "
        "where it has one to fill the cache (cache_dir) and the lockfile, then use offline=True.",
        "pydeno.Packages(['no-such-package-xyz@1'])  # PackageUnresolved: package 'no-such-package-xyz@1' "
        "could not be resolved: ...",
        "A package the program needs is not available: write the code without it, or use the packages it was given.",
    ),
    "package_refused": Kind(
        False,
        False,
        "An npm package's bundle was refused: its bytes do not match the lockfile or the cache's hash, or it "
        "needs what the sandbox never grants (files, the network, subprocesses).",
        "PackageRefused: package bundle refused: ...",
        "A hash mismatch means the cached bundle or the lockfile changed: delete the cached file or the "
        "lockfile's entry to bundle again, after checking why it changed. A package that needs node:fs, "
        "node:net and the like cannot work in the sandbox: do that work in a bound function or tool.",
        "pydeno.Packages(['fs-extra@11.2.0'])  # PackageRefused: package bundle refused: 'fs-extra@11.2.0' "
        "needs node:fs (files), ...",
        "A package the program needs is not available: write the code without it, or use the packages it was given.",
    ),
}


KINDS: Final[dict[str, tuple[bool, bool, str]]] = {
    name: (kind.retryable, kind.retry_with_larger_limits, kind.summary) for name, kind in Catalog.items()
}


class ErrorInfo(NamedTuple):
    """What a failure means for the caller: the kind and what to do about it.

    Immutable, and equal to another with the same four fields. A named tuple rather than a
    dataclass: the dataclasses module, with the inspect and ast modules it loads, would
    otherwise be a third of what ``import pydeno`` costs.
    """

    kind: str
    retryable: bool
    summary: str
    retry_with_larger_limits: bool

    def to_dict(self) -> dict[str, object]:
        return dict(self._asdict())


def info_of(kind: str) -> ErrorInfo:
    row = Catalog[kind]
    return ErrorInfo(kind, row.retryable, row.summary, row.retry_with_larger_limits)


def _chain(exc: BaseException, handling: BaseException | None = None) -> Iterator[BaseException]:
    """exc's causes: __cause__, else the implicit __context__; cycles cut. ``handling`` stands
    in for both while exc has neither: it is the exception being handled where exc is being
    made, which becomes its __context__ (and, with ``raise ... from``, its __cause__) once
    exc is raised there."""
    seen = {id(exc)}
    current: BaseException | None = exc.__cause__ or exc.__context__ or handling
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _kind_of(exc: BaseException, via_agent: bool, handling: BaseException | None = None) -> str:
    # A failure the host made names its kind (pydeno/_base/failures.py's factories).
    authored = getattr(exc, "_authored_kind", None)
    if isinstance(authored, str) and authored in Catalog:
        return "max_pause" if authored == "host_wait" and via_agent else authored
    # pydeno's own exceptions say by their class how their kind is found (errors.py's
    # KIND_RULE): a kind of their own, the guest error's rule, or their message's.
    rule = getattr(type(exc), "KIND_RULE", None)
    if isinstance(rule, tuple) and len(rule) == 2 and isinstance(exc, Exception):
        how, kind = rule
        if how == "type":
            return str(kind)
        if how == "guest":
            return _javascript_kind(exc)
        if how == "message":
            return _message_kind(exc, str(kind), via_agent, handling)
    # asyncio.TimeoutError is TimeoutError.
    if isinstance(exc, TimeoutError) or _is_backend_timeout(exc):
        return "timeout"
    # Looked up, not imported: no asyncio cancellation exists before asyncio is loaded.
    asyncio = sys.modules.get("asyncio")
    if (asyncio is not None and isinstance(exc, asyncio.CancelledError)) or _is_backend_cancellation(exc):
        return "cancelled"
    if isinstance(exc, RuntimeError):
        message = str(exc)
        if message in CLOSED:
            return "closed"
        if ABANDONED.fullmatch(message):
            return "inflight_limit"
        return "unknown"
    if isinstance(exc, (TypeError, ValueError)):
        return "invalid_input"
    return "unknown"


def _message_kind(exc: BaseException, otherwise: str, via_agent: bool, handling: BaseException | None) -> str:
    """The kind a host-authored message names (RuntimeTimeout, WorkerCrashed), else
    ``otherwise``; read only where the type is not enough, so a __str__ that raises costs the
    message kinds, never a kind the type alone decides."""
    message = str(exc)
    for kind, pattern in FULL:
        if pattern.fullmatch(message):
            return "max_pause" if kind == "host_wait" and via_agent else kind
    for kind, pattern in PREFIX:
        if pattern.match(message):
            return kind
    starting = otherwise == "worker_crashed" and message.startswith("worker failed to start: ")
    if starting and any(isinstance(cause, (FileNotFoundError, PermissionError)) for cause in _chain(exc, handling)):
        return "deno_unavailable"
    return otherwise


def _javascript_kind(exc: BaseException) -> str:
    name = getattr(exc, "name", "") or ""
    message = getattr(exc, "message", "") or ""
    for candidate in (name, message):
        found = JS_TOOL.match(candidate)
        if found:
            return TOOL_KINDS[found.group(1)]
    if HOST_FAILURE.match(message):
        return "tool_failed"
    if DENIED.fullmatch(message):
        return "sandbox_denied"
    if IMPORT_REFUSED.fullmatch(message):
        return "import_refused"
    if JS_INFLIGHT.match(message):
        return "inflight_limit"
    if JS_DECODE.match(message):
        return "invalid_input"
    return "js_error"


def _is_backend_timeout(exc: BaseException) -> bool:
    # trio.fail_after raises TooSlowError, which is not a TimeoutError: the caller's deadline.
    cls = type(exc)
    return cls.__name__ == "TooSlowError" and cls.__module__.startswith("trio")


def _is_backend_cancellation(exc: BaseException) -> bool:
    # trio's Cancelled is not an asyncio.CancelledError; compare by type, never by text.
    cls = type(exc)
    return cls.__name__ == "Cancelled" and cls.__module__.startswith("trio")


def classify_error(exc: BaseException, *, via_agent: bool = False) -> ErrorInfo:
    """The kind of exc and what it means for a retry. Never raises."""
    try:
        return info_of(_kind_of(exc, via_agent))
    except Exception:  # noqa: BLE001 - the contract is "never raises"
        return info_of("unknown")


def classify_new(exc: BaseException, handling: BaseException | None) -> ErrorInfo:
    """classify_error for an exception being constructed (PydenoError's .kind and note):
    ``raise WorkerCrashed(...) from err`` sets __cause__ only after __init__, so the
    exception being handled there (``sys.exception()``) stands in for it. Never raises."""
    try:
        return info_of(_kind_of(exc, False, handling))
    except Exception:  # noqa: BLE001 - the contract is "never raises"
        return info_of("unknown")
