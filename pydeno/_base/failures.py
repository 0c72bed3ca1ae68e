"""The host's own failures: every message that picks a kind, written once.

Each function here makes one failure of the host's (a deadline passed, a limit crossed, the
worker died or broke the protocol, a closed runtime used) and names its kind; the message's
prefix is the host's, exact and anchored, and any text from the worker or the guest only
ever follows it. The hint and the model's hint travel with the exception. The classes are
pydeno/_base/errors.py's; the anchored patterns that classify a message known only by its
text are pydeno/_base/kind_patterns.py's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final, TypeVar

from .checks import human_bytes, limit_text
from .docs_links import note_for
from .errors import ClosedError, JavaScriptError, RuntimeForceKilled, RuntimeTerminated, RuntimeTimeout, WorkerCrashed
from .kind_patterns import DENIED, HOST_FAILURE, IMPORT_REFUSED
from .kinds import Catalog, info_of

__all__ = [
    "FACTORIES",
    "GUEST_DEATH",
    "closed_error",
    "command_timed_out",
    "cpu_between_commands",
    "cpu_in_command",
    "force_killed",
    "guest_ended_worker",
    "handshake_timed_out",
    "heap_exhausted",
    "host_calls_exceeded",
    "host_wait_exceeded",
    "layer_missing",
    "layer_refusal",
    "limit_unmeasurable",
    "over_memory",
    "over_threads",
    "protocol_broken",
    "selftest_failed",
    "selftest_refusal",
    "start_failed",
    "terminated",
    "unmeasurable_refusal",
    "worker_died",
    "worker_reported",
]

# --- The host's own failures ----------------------------------------------------------------
# Every message that picks a kind is written here, once, by the one function that makes that
# failure and names its kind; the hint travels with it. The anchored patterns that classify
# a message stay the contract for an exception known only by its type and text (pickled
# across a process, say): tests/unit/test_error_factories.py checks that each message here
# classifies, through the patterns alone, to the kind its function names.
FACTORIES: list[Callable[..., Exception]] = []

_F = TypeVar("_F", bound=Callable[..., Exception])

GUEST_DEATH: Final = "worker died running guest code"
_GUEST_HINT: Final = (
    "the guest's code ended its worker (an exit, a closed output, or a crash it provoked); the same code "
    "would do it again, so fix the code rather than retrying it"
)
_SANDBOX_HINT: Final = (
    "run `python -m pydeno doctor` to see which OS layer is missing and why; run where every layer "
    "applies, or pass sandbox='best_effort' knowingly"
)


def _factory(fn: _F) -> _F:
    FACTORIES.append(fn)
    return fn


def _secs(seconds: float) -> str:
    """Seconds as a program's reader reads them: ``1 s``, ``0.5 s``."""
    return f"{seconds:g} s"


def _for_model(kind: str, limit: str | None) -> str:
    """The kind's text for a model with the limit's value after its first clause: "The
    program did not finish in time (its limit is 1 s per run): ...". Only the value: the
    option that sets it is the operator's, and a program cannot change it."""
    text = Catalog[kind].model_fix
    if limit is None:
        return text
    head, colon, rest = text.partition(":")
    return f"{head} (its limit is {limit}){colon}{rest}"


def layer_refusal(unavailable: str) -> str:
    """sandbox="require"'s refusal for ``<layer> is unavailable: <why>``."""
    return f"worker failed to start: an OS sandbox is required but {unavailable}"


def selftest_refusal(breaches: tuple[str, ...] | list[str]) -> str:
    return "worker failed to start: sandbox self-test failed: " + "; ".join(breaches)


def unmeasurable_refusal(limit: str) -> str:
    return (
        f"{limit} cannot be enforced on this system (the worker's resource usage cannot be read) "
        "and sandbox='require' demands every protection"
    )


@_factory
def command_timed_out(limit: float | None) -> RuntimeTimeout:
    return RuntimeTimeout(
        f"command exceeded timeout={limit}s; worker killed",
        hint=f"raise timeout= (now {limit}), or make the code finish sooner",
        model_hint=_for_model("timeout", None if limit is None else f"{_secs(limit)} per run"),
        _kind="timeout",
    )


@_factory
def cpu_in_command(cpu_limit: float) -> RuntimeTimeout:
    return RuntimeTimeout(
        f"worker used more than {cpu_limit}s of CPU in one command and was killed",
        hint=f"raise cpu_limit= (now {cpu_limit}), or make the code do less work per command",
        model_hint=_for_model("cpu_limit", f"{_secs(cpu_limit)} of CPU per run"),
        _kind="cpu_limit",
    )


@_factory
def cpu_between_commands(allowance: float, cpu_limit: float | None) -> RuntimeTimeout:
    return RuntimeTimeout(
        f"worker used more than {allowance}s of CPU between commands and was killed",
        hint=(
            "the guest left work running after its command returned (Web Workers, timers, promises); "
            f"stop it before returning, or raise cpu_limit= (now {cpu_limit})"
        ),
        model_hint=(
            f"The program left work running after its run ended (Web Workers, timers, promises) and that work "
            f"used more than {_secs(allowance)} of CPU: finish or stop all of it before the run ends."
        ),
        _kind="cpu_limit",
    )


@_factory
def host_wait_exceeded(max_host_wait: float) -> RuntimeTimeout:
    return RuntimeTimeout(
        f"host callbacks kept the guest waiting for more than {max_host_wait}s in one command (max_host_wait); "
        "worker killed",
        hint=f"raise max_host_wait= (now {max_host_wait}), or make the host functions answer sooner",
        model_hint=_for_model("host_wait", f"{_secs(max_host_wait)} of waiting per run"),
        _kind="host_wait",
    )


@_factory
def over_memory(used: int, max_memory: int) -> WorkerCrashed:
    """A worker stopped over max_memory, by the monitor or by the kernel."""
    return WorkerCrashed(
        f"worker used {used} bytes, over max_memory={max_memory}; killed",
        hint=f"raise max_memory= (now {limit_text(max_memory)}), or reduce what the code keeps alive",
        model_hint=_for_model("memory_limit", human_bytes(max_memory)),
        _kind="memory_limit",
    )


@_factory
def heap_exhausted(max_memory: int) -> WorkerCrashed:
    return WorkerCrashed(
        f"worker ran out of its V8 heap (sized from max_memory={max_memory}) and was stopped",
        hint=f"raise max_memory= (now {limit_text(max_memory)}), or reduce what the code keeps alive",
        model_hint=_for_model("memory_limit", human_bytes(max_memory)),
        _kind="memory_limit",
    )


@_factory
def over_threads(threads: int, max_threads: int) -> WorkerCrashed:
    """A worker stopped over max_threads, by the monitor or by the kernel."""
    return WorkerCrashed(
        f"worker started {threads} threads (limit {max_threads}); killed",
        hint=f"start fewer Web Workers, or raise max_threads= (now {max_threads})",
        model_hint=_for_model("thread_limit", f"{max_threads} threads"),
        _kind="thread_limit",
    )


@_factory
def host_calls_exceeded(limit: int) -> WorkerCrashed:
    return WorkerCrashed(
        f"guest made more than max_host_calls={limit} host calls",
        hint=f"raise max_host_calls= (now {limit}), or batch the guest's host calls",
        model_hint=_for_model("host_call_budget", f"{limit} calls per run"),
        _kind="host_call_budget",
    )


@_factory
def protocol_broken(detail: str, *, malformed: bool) -> WorkerCrashed:
    """A frame the host refused; detail (which may quote the worker) follows the prefix."""
    message = f"worker sent a malformed frame ({detail})" if malformed else f"worker broke protocol: {detail}"
    return WorkerCrashed(message, _kind="protocol_violation")


@_factory
def layer_missing(unavailable: str) -> WorkerCrashed:
    return WorkerCrashed(layer_refusal(unavailable), hint=_SANDBOX_HINT, _kind="sandbox_unavailable")


@_factory
def selftest_failed(breaches: tuple[str, ...] | list[str]) -> WorkerCrashed:
    return WorkerCrashed(selftest_refusal(breaches), hint=_SANDBOX_HINT, _kind="sandbox_unavailable")


@_factory
def limit_unmeasurable(limit: str) -> WorkerCrashed:
    return WorkerCrashed(
        unmeasurable_refusal(limit),
        hint=f"run where this process can read /proc/<pid>/stat of its workers, or set {limit}=None knowingly",
        _kind="limits_unmeasurable",
    )


@_factory
def handshake_timed_out(startup_timeout: float) -> WorkerCrashed:
    return WorkerCrashed(
        f"worker did not complete its handshake within startup_timeout={startup_timeout}s; killed",
        hint=f"retry on a fresh runtime; raise startup_timeout= (now {startup_timeout}) if the machine is overloaded",
        _kind="worker_crashed",
    )


@_factory
def worker_died(message: str) -> WorkerCrashed:
    """A death the environment may have caused: message is the worker process's account of
    it (``worker process died (...)``, ``worker exited during startup (...)``)."""
    return WorkerCrashed(message, _kind="worker_crashed")


@_factory
def guest_ended_worker(message: str) -> WorkerCrashed:
    """A death the guest's own code caused: message starts with GUEST_DEATH."""
    return WorkerCrashed(message, hint=_GUEST_HINT, _kind="guest_crashed")


@_factory
def start_failed(reason: str, cause: BaseException | None = None) -> WorkerCrashed:
    """A worker that could not be started: reason follows the prefix. A missing or
    unrunnable deno binary (cause a FileNotFoundError or PermissionError) is its own kind."""
    unavailable = isinstance(cause, (FileNotFoundError, PermissionError))
    exc = WorkerCrashed(
        f"worker failed to start: {reason}", _kind="deno_unavailable" if unavailable else "worker_crashed"
    )
    # The typed evidence travels with it, as ``raise ... from cause`` would set it.
    exc.__cause__ = cause
    return exc


@_factory
def closed_error(message: str, why: str | None = None) -> ClosedError:
    """What a closed runtime, function handle or session raises when used: the kind table's
    exact message, and a hint that says what closed it (``why``, host-authored: close() was
    called, or the failure that closed it, quoted)."""
    fix = Catalog["closed"].fix
    return ClosedError(message, hint=f"{why}. {fix}" if why else fix, _kind="closed")


@_factory
def terminated() -> RuntimeTerminated:
    return RuntimeTerminated("runtime was terminated on request", _kind="terminated")


@_factory
def force_killed(grace: float) -> RuntimeForceKilled:
    return RuntimeForceKilled(
        f"worker did not acknowledge termination within terminate_grace={grace}s; killed",
        hint=f"nothing to fix if the guest was busy; raise terminate_grace= (now {grace}) to wait longer",
        _kind="force_killed",
    )


# The worker's refusal to send a value larger than a frame may be: the result, or a host
# call's arguments (which the guest meets as a TypeError it may leave uncaught). Only the
# hint is read from it, with the host's own limit, never the number in the text: the kind
# stays js_error, so a guest that writes such text gains nothing.
_OVER_FRAME: Final = re.compile(
    r"(?:result|arguments to (\S+)\(\)) could not be converted: value is larger than max_message_bytes="
)


def worker_reported(
    name: str, message: str, stack: str, thrown: list[object] | None = None, *, max_message_bytes: int
) -> JavaScriptError:
    """The JavaScriptError for an error the worker reported (thrown: [the value], for a thrown
    value that is not an Error). Some get a fix of their own instead of their kind's generic
    one: a value over max_message_bytes names that limit, a host function's failure the guest
    did not catch names the function and how to show its details, and a refusal of the sandbox
    names what gives the guest that access instead."""
    exc = JavaScriptError(name, message, stack)
    if thrown:
        exc.value = thrown[0]
        exc.has_value = True
    kind = getattr(exc, "kind", None)
    hint = model_hint = None
    found = _OVER_FRAME.match(message)
    failed = HOST_FAILURE.match(message)
    if kind == "js_error" and found is not None:
        what = f"pass less to {found.group(1)}()" if found.group(1) else "return less from the code"
        hint = (
            f"{what} (a smaller value, or the rest in later calls), "
            f"or raise max_message_bytes= (now {limit_text(max_message_bytes)})"
        )
        told = what.replace("the code", "the program")
        model_hint = (
            f"{told[0].upper()}{told[1:]}: a smaller value, or the rest in later calls "
            f"(a value may be at most {human_bytes(max_message_bytes)})"
        )
    elif kind == "tool_failed" and failed is not None:
        where, raised = failed.group(1), failed.group(2)
        shown = (
            "pass expose_host_errors=True to show the guest (and this error) its text"
            if failed.group(3)
            else "its text is shown to the guest because expose_host_errors=True"
        )
        # The host's words first; what the worker reported (which function, which class)
        # only after them, as everywhere.
        hint = (
            "a host function or tool raised an exception that is not a pydeno.ToolError, and the guest did not "
            f"catch it ({where} raised {raised}): fix the function, or raise pydeno.ToolError with a message meant "
            f"for the program; {shown}"
        )
    elif kind in ("sandbox_denied", "import_refused"):
        hint, model_hint = _refusal_hints(message)
    if hint is None:
        return exc
    # The note made at construction is the one that names the fix: it is replaced.
    info = info_of(str(kind))
    notes = exc.__notes__
    notes[notes.index(note_for(info, Catalog[info.kind].fix))] = note_for(info, hint)
    exc.hint = hint  # type: ignore[attr-defined]
    if model_hint is not None:
        exc.model_hint = model_hint  # type: ignore[attr-defined]
    return exc


# What the operator can do instead of what the sandbox refused, by what it refused; and, where
# the kind's generic text says less, what the program can.
_WITHHELD: Final = {
    "network access": (
        "the sandbox has no network: attach a pydeno.HttpFetch(allow=[...]) to the runtime to give the guest a fetch() "
        "of the URLs you allow (HttpFetch.tool() in Code Mode)",
        "The program cannot reach the network from the sandbox: use the data it was given, or a tool that fetches "
        "for it if it has one.",
    ),
    "file access": (
        "the sandbox has no file system: read or write the files on the host and pass their contents in (in the "
        "code, or through a bound function or tool)",
        "The program cannot read or write files in the sandbox: use the data it was given, or a tool that reads "
        "for it if it has one.",
    ),
    "environment variables": (
        "the sandbox has no environment variables: pass the values the guest needs in the code or through a bound "
        "function",
        None,
    ),
}
_NOT_LOADED: Final = (
    "the sandbox loads no npm, jsr, remote or file modules: add the module's source under the name the guest "
    "imports with rt.add_module({spec}, source) (one ES module, its own imports added too), or do the work on "
    "the host in a bound function or tool"
)


def _refusal_hints(message: str) -> tuple[str, str | None]:
    """The operator's and the program's fix for a refusal of the sandbox (sandbox_denied,
    import_refused) that message, matched whole, states."""
    denied = DENIED.fullmatch(message)
    if denied is not None:
        operator, model = _WITHHELD.get(
            denied.group(1),
            (
                f"the sandbox grants no {denied.group(1)}, and no option changes that: do that work on the host, "
                "in a bound function or tool the guest may call",
                None,
            ),
        )
        return operator, model
    refused = IMPORT_REFUSED.fullmatch(message)
    spec = (refused.group(1) if refused is not None else None) or '"npm:<package>"'
    if refused is not None and (refused.group(2) or "").startswith("it was not added"):
        return (
            f"add the module before the code that imports it: rt.add_module({spec}, source) (its own imports too)",
            None,
        )
    return _NOT_LOADED.format(spec=spec), None
