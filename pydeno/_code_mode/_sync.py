"""Generated from pydeno/_code_mode/_async.py by scripts/unasync.py: edit that file, not this one.

Code Mode: a model writes a program against typed tool APIs; it gets back a result.

``AsyncCodeMode`` (this file) drives an :class:`~pydeno.AsyncRuntime` under asyncio or
trio; ``CodeMode`` (pydeno/_code_mode/_sync.py, generated from this file) drives a
:class:`~pydeno.Runtime`. What a program may call and its declarations live in
:mod:`pydeno._code_mode.api`, what an execution records in :mod:`pydeno._code_mode.core`;
this driver starts the worker, installs ``tools`` and runs programs. One worker serves a
Code Mode's executions, one at a time; a worker that dies is replaced at the next execution.

A :class:`~pydeno.AsyncSessionPool` made with ``code_mode=True`` hands out a Code Mode bound to
a session (``_in_session``): its programs run as a REPL's inputs, so their declarations stay,
and each one is journaled by the agent sessions' own core (pydeno/_agents/core.py): the program,
every tool call's answer as the program received it, and how it ended. Restoring the session
runs the journal's programs again on a fresh worker, each tool call answered from the journal.
"""

from __future__ import annotations

from typing import Any, Unpack

from .._agents.core import SessionCore, session_clock
from .._agents.journal import Journal, RunRecord, check_mode
from .._base.checks import NeedsWith, code_text, optional_seconds
from .._base.errors import JavaScriptError, JournalError, ToolError
from .._base.failures import closed_error
from .._base.options import RuntimeKwargs, checked_options, console_handler
from .._runtime._sync import Runtime
from .._runtime.backends import sync as backend
from .._runtime.stepping import GuestCall, Pending
from .._tools.approval import UNANSWERED, ApprovePolicy, PausedToolCall
from .._tools.bridge import HOST_FUNCTION, Dispatcher, ToolBridge, install_script
from .api import CodeModeTools, type_errors
from .core import _OPEN, Execution, PendingCall, program
from .result import DEFAULT_MAX_OUTPUT_CHARS, ExecutionResult, check_output_chars

__all__ = ["CodeMode"]


class CodeMode(NeedsWith):
    """``CodeMode(tools, *, max_tool_calls=None, max_output_chars=20000, approve=None,
    clock=None, random_seed=None, **runtime_kwargs)``.

    ``tools`` is a list of :class:`~pydeno.Tool` (plain functions are made into tools).
    ``max_tool_calls`` bounds the tool calls of one execution; ``max_output_chars`` bounds
    each of stdout, stderr and the error message, and the value in the text form;
    ``clock=`` and ``random_seed=`` (runtime options) make executions repeatable: ``Date``
    fixed at the clock, ``Math.random`` and ``crypto`` seeded.
    ``approve`` decides which tools that are not read-only run (``None``: all;
    ``"read_only"``: none; ``"ask"``: each call pauses :meth:`start`; a callable ``(name,
    arguments) -> bool``: asked once per tool and execution; a mapping of tool names to any
    of ``True``, ``False``, ``"ask"`` or a callable: per tool, the others refused). The rest
    configures the runtime, as for :class:`~pydeno.Runtime`.
    """

    def __init__(
        self,
        tools: Any,
        *,
        max_tool_calls: int | None = None,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        approve: ApprovePolicy = None,
        **runtime_kwargs: Unpack[RuntimeKwargs],
    ) -> None:
        packages = runtime_kwargs.get("packages")
        self._tools = CodeModeTools(tools, max_tool_calls=max_tool_calls, approve=approve, packages=packages)
        self.max_output_chars = check_output_chars(max_output_chars)
        options: dict[str, Any] = dict(runtime_kwargs)
        console = options.pop("on_console", None)
        # None: the result alone keeps the program's console output.
        self._user_console = None if console is None else console_handler(console)
        checked = checked_options(type(self), options)  # refuse a bad option now, not at the first execution
        self._sandbox: str = checked.sandbox
        self._check_timeout = checked.timeout if checked.timeout is not None else 60.0
        self._options = options
        self._expose = checked.expose_host_errors
        self._rt: Runtime | None = None
        self._current: Execution | None = None
        self._paused: tuple[PausedToolCall, Execution, Pending, GuestCall, PendingCall] | None = None
        self._closed = False
        self._lock = backend.Lock()
        # REPL mode (the MCP server's sessions): a program is not wrapped in a block, so its
        # top-level let, const and class stay for the next execution on the same worker.
        self._repl = False
        # A session's journal (a SessionPool's Code Mode), and whether it is being replayed,
        # when the caller's own console handler is not told the programs' output again.
        self._session: SessionCore | None = None
        self._quiet = False

    @classmethod
    def _in_session(
        cls,
        tools: Any,
        *,
        max_tool_calls: int | None,
        max_output_chars: int,
        approve: ApprovePolicy,
        runtime_kwargs: dict[str, Any],
        journal: Journal | None = None,
        runtime: Runtime | None = None,
    ) -> CodeMode:
        """A session's Code Mode: new, or restored from journal by running its programs again
        with their recorded tool answers (no tool runs). ``runtime``, if given, is a worker
        started elsewhere whose on_console is route_console; the Code Mode owns it."""
        try:
            options = dict(runtime_kwargs)
            seed, clock = session_clock(options)
            self = cls(tools, max_output_chars=max_output_chars, approve=approve, **options)
            if journal is not None:
                check_mode(journal, code_mode=True)
                if journal.kind != "journal":
                    raise JournalError("journal is a snapshot of a paused run, which no Code Mode session writes")
                max_tool_calls, seed, clock = journal.max_tool_calls, journal.seed, journal.clock_ms
            # The session's budget is the bridge's, across its programs; its executions have none
            # of their own.
            bridge = ToolBridge(dict(self._tools.tools), max_calls=max_tool_calls)
            self._session = SessionCore(bridge, expose_errors=self._expose, seed=seed, clock_ms=clock, code_mode=True)
            self._tools.in_session, self._tools.session_calls = True, bridge.max_calls
            self._repl = True
        except BaseException:
            if runtime is not None:
                runtime.close()
            raise
        self._install(runtime if runtime is not None else Runtime(**self._options, on_console=self._console))
        if journal is not None:
            try:
                self._replay(journal)
            except BaseException:
                self.close()
                raise
        return self

    @property
    def closed(self) -> bool:
        """Whether it runs no more programs: close() was called, or, for a SessionPool's Code
        Mode, its worker died (the session's next lease restores it from its journal)."""
        if self._closed:
            return True
        return self._session is not None and (self._rt is None or self._rt.closed)

    # -- what a model reads before it writes -------------------------------------------------
    def typescript(self) -> str:
        """The ``.d.ts`` of ``tools``: one interface per schema, JSDoc from descriptions."""
        return self._tools.typescript()

    def describe(self) -> str:
        """A compact prompt text: how to write code against the API, and what is not there."""
        return self._tools.describe()

    # -- running programs -------------------------------------------------------------------
    def execute(self, code: str, *, timeout: float | None = None, typecheck: bool = False) -> ExecutionResult:
        """Run a program; never raises for a failure of the program or of a limit (the
        result says what failed and why), only for misuse (a closed Code Mode, a bad
        argument). With ``typecheck=True`` deno's type checker first checks the program
        against :meth:`typescript`, in a confined process; type errors are the result
        (kind ``typecheck_failed``) and nothing runs. A tool whose approval is ``"ask"`` is
        refused here: :meth:`start` is what pauses for it."""
        code, timeout = self._arguments(code, timeout, typecheck)
        with self._lock:
            execution, refused = self._begin(code, timeout, typecheck)
            if refused is not None:
                return refused
            with execution.running(self._console):
                if self._session is not None:
                    return self._run_in_session(execution, code, timeout)
                return self._run(execution, code, timeout)

    def _run(self, execution: Execution, code: str, timeout: float | None) -> ExecutionResult:
        self._current = execution
        try:
            rt = self._runtime()
            execution.usage = rt._steps.meter()
            try:
                value = rt._steps.eval(self._source(code), timeout, lang="ts", program=not self._repl)
            except JavaScriptError as exc:
                returning = execution.returning(exc)
                if returning is None:
                    raise
                value = rt._steps.eval(returning, timeout, lang="ts", program=True)
        except Exception as exc:  # noqa: BLE001 - a failed program is a result
            self._after_failure(exc)
            return execution.result(error=exc)
        finally:
            self._current = None
        return execution.result(value=value)

    def _run_in_session(
        self, execution: Execution, code: str, timeout: float | None, replay: RunRecord | None = None
    ) -> ExecutionResult:
        """Run a session's program in steps, journaled; when replay is its record, each tool
        call is answered from it, and a failure other than the program's own error (recorded
        as it) is raised, not returned."""
        session, rt = self._session, self._rt
        assert session is not None and rt is not None
        execution.usage = rt._steps.meter()
        session.begin_run(code, replay)
        try:
            command = rt._steps.start(self._source(code), timeout, lang="ts", program=False)
        except Exception as exc:
            session.abandon_run()
            self._after_failure(exc)
            if replay is not None:
                execution.ended(exc)
                raise
            return execution.result(error=exc)
        result = self._drive(execution, command, timeout, replaying=replay is not None)
        assert isinstance(result, ExecutionResult)  # a session's calls never pause
        return result

    def _replay(self, journal: Journal) -> None:
        """Run the journal's programs again on this Code Mode's fresh worker, each tool call
        answered from the journal; ReplayDivergence if one asks for other calls or ends
        otherwise than recorded."""
        assert self._session is not None
        self._quiet = True
        try:
            for run in journal.runs:
                execution = Execution(
                    self._tools, self.max_output_chars, expose=self._expose, code=run.code, replay=True
                )
                with execution.running(self._console):
                    self._run_in_session(execution, run.code, None, replay=run)
        finally:
            self._quiet = False
        self._session.replayed(journal)

    def _journal(self, key: bytes) -> bytes:
        """A session's signed journal: its finished programs, and every tool call it was
        charged (a SessionPool writes it when a lease ends, its worker alive or not)."""
        with backend.exclusive(self._lock):
            if self._session is None:
                raise RuntimeError("only a SessionPool's Code Mode keeps a journal")
            return self._session.dump(key)

    def start(
        self, code: str, *, timeout: float | None = None, typecheck: bool = False
    ) -> ExecutionResult | PausedToolCall:
        """Run a program as :meth:`execute` does, but stop at each call of a tool whose
        approval is ``"ask"``: return it as a :class:`~pydeno.PausedToolCall` (``.name``,
        ``.args``) and wait for the caller. ``paused.resume()`` approves it (the tool runs),
        ``paused.resume(error="why")`` refuses it (the program gets a ToolError), and
        ``paused.resume(value=...)`` answers it without running the tool; each returns the
        next PausedToolCall or the ExecutionResult. The execution's timeout runs on while
        it is paused."""
        code, timeout = self._arguments(code, timeout, typecheck)
        if self._session is not None:
            raise RuntimeError(
                "a Code Mode session runs programs with execute(): start() pauses at a tool call, which a "
                "session does not keep from one lease to the next"
            )
        with self._lock:
            execution, refused = self._begin(code, timeout, typecheck)
            if refused is not None:
                return refused
            with execution.running(self._console):
                try:
                    rt = self._runtime()
                    execution.usage = rt._steps.meter()
                    command = rt._steps.start(self._source(code), timeout, lang="ts", program=not self._repl)
                except Exception as exc:  # noqa: BLE001 - a failed program is a result
                    self._after_failure(exc)
                    return execution.result(error=exc)
                return self._drive(execution, command, timeout)

    def _drive(
        self, execution: Execution, command: Pending, timeout: float | None = None, *, replaying: bool = False
    ) -> ExecutionResult | PausedToolCall:
        """Answer the program's tool calls until it finishes or asks for approval; a
        session's program is journaled as it goes (see _run_in_session for ``replaying``)."""
        rt, session = self._rt, self._session
        assert rt is not None
        self._current = execution
        # The program's own error, recorded (or checked against its record) as its end.
        finished = False
        try:
            while True:
                call = rt._steps.next_call(command)
                if call is None:
                    try:
                        value = rt._steps.outcome(command)
                    except JavaScriptError as exc:
                        returning = execution.returning(exc)
                        if returning is None:
                            if session is not None:
                                session.finish_run(error=exc)
                            finished = True
                            raise
                    else:
                        if session is not None:
                            session.finish_run(value)
                        return execution.result(value=value)
                    command = rt._steps.start(returning, timeout, lang="ts", program=True)
                    continue
                if session is not None:
                    value, error = self._journaled(rt, execution, command, call)
                    rt._steps.answer(command, call, value, error)
                    continue
                pending, value, error = self._decide(rt, execution, command, call)
                if pending is not None:
                    paused = PausedToolCall(self, pending.tool.name, [pending.arguments])
                    self._paused = (paused, execution, command, call, pending)
                    return paused
                rt._steps.answer(command, call, value, error)
        except Exception as exc:
            self._paused = None
            if session is not None and not finished:
                session.abandon_run()
            self._after_failure(exc, abandoned=rt._steps.in_command)
            if replaying and not finished:
                execution.ended(exc)
                raise
            return execution.result(error=exc)
        finally:
            self._current = None

    def _journaled(
        self, rt: Runtime, execution: Execution, command: Pending, call: GuestCall
    ) -> tuple[Any, Exception | None]:
        """A session's tool call, and the answer the program gets: from the journal during a
        replay; a refusal when the session's budget is spent or there is no such tool; else
        the call decided and run as any program's. Recorded as the program receives it."""
        session = self._session
        assert session is not None
        # ReplayDivergence, here, is the replay's failure: it is not the program's to catch.
        action = session.on_call(call.args, pause=False)
        if action.kind == "answer":
            execution.answered(action.name, action.args, action.error)
            return action.value, action.error
        try:
            pending = execution.begin(action.name, action.args)
            if pending.decision == "ask":
                name = pending.tool.name
                execution.refuse(pending, f"tools.{name}() needs approval, which a session cannot pause for")
            result = rt._steps.resolve(command, call, execution.run(pending))
        except Exception as exc:  # noqa: BLE001 - the guest receives it as an Error
            return session.settle(action.name, error=exc, convertible=rt._steps.convertible)
        return session.settle(action.name, result, convertible=rt._steps.convertible)

    def _decide(
        self, rt: Runtime, execution: Execution, command: Pending, call: GuestCall
    ) -> tuple[PendingCall | None, Any, Exception | None]:
        """A host call of the program's: the pending call to pause at, or its answer."""
        try:
            name, args = call.args if isinstance(call.args, list) and len(call.args) == 2 else (None, None)
            pending = execution.begin(name, args)
            if pending.decision == "ask":
                return pending, None, None
            return None, rt._steps.resolve(command, call, execution.run(pending)), None
        except Exception as exc:  # noqa: BLE001 - the guest receives it as an Error
            return None, None, exc

    def _resume(self, paused: PausedToolCall, value: Any, error: Exception | None) -> Any:
        with self._lock:
            if self._paused is None or self._paused[0] is not paused or paused.answered:
                raise RuntimeError("this tool call was already answered, or its program ended")
            _, execution, command, call, pending = self._paused
            self._paused = None
            paused.answered = True
            with execution.running(self._console):
                return self._answer_paused(execution, command, call, pending, value, error)

    def _answer_paused(
        self,
        execution: Execution,
        command: Pending,
        call: GuestCall,
        pending: PendingCall,
        value: Any,
        error: Exception | None,
    ) -> Any:
        """A paused call answered (or run, or refused), and the program driven on."""
        rt = self._rt
        assert rt is not None
        answer: Any = None
        if error is not None:
            try:
                execution.refuse(pending, str(error))
            except ToolError as refused:
                error = refused
        elif value is UNANSWERED:
            self._current = execution
            try:
                answer = rt._steps.resolve(command, call, execution.run(pending))
            except Exception as exc:  # noqa: BLE001 - the guest receives it as an Error
                error = exc
            finally:
                self._current = None
        else:
            pending.record["outcome"] = "answered"
            answer = value
        try:
            rt._steps.answer(command, call, answer, error)
        except Exception as exc:  # noqa: BLE001 - a failed program is a result
            self._after_failure(exc, abandoned=rt._steps.in_command)
            return execution.result(error=exc)
        return self._drive(execution, command)

    def _arguments(self, code: Any, timeout: Any, typecheck: Any) -> tuple[str, float | None]:
        code = code_text(code)
        timeout = optional_seconds("timeout", timeout)
        if not isinstance(typecheck, bool):
            raise TypeError(f"typecheck must be a bool, got {type(typecheck).__name__}")
        return code, timeout

    def _begin(self, code: str, timeout: float | None, typecheck: bool) -> tuple[Execution, ExecutionResult | None]:
        """A new execution, and its result already if the type check refused the program."""
        if self.closed:
            if self._closed:
                raise closed_error("the session is closed", "close() was called on the Code Mode")
            gone = self._rt._steps.closed_by if self._rt is not None else "it was discarded"
            raise closed_error(
                "the session is closed",
                f"its worker is gone ({gone}); lease the session again: that restores it from its journal",
            )
        if self._paused is not None:
            raise RuntimeError("a program is paused at a tool call: resume it first")
        execution = Execution(self._tools, self.max_output_chars, expose=self._expose, code=code)
        if not typecheck:
            return execution, None
        limit = timeout if timeout is not None else self._check_timeout
        failure = backend.blocking(lambda: type_errors(self._tools, code, sandbox=self._sandbox, timeout=limit))
        return execution, None if failure is None else execution.result(error=failure)

    def _after_failure(self, exc: Exception, *, abandoned: bool = False) -> None:
        """A worker that died, was killed, or was left mid-command: the next execution
        starts a fresh one. A program's own error leaves the worker as it was."""
        if abandoned or not isinstance(exc, JavaScriptError):
            self._discard()

    def _source(self, code: str) -> str:
        # The pad keeps line 1's columns one more, as a program's brace makes them, so an
        # error's position is read back the same way in both modes.
        return " " * len(_OPEN) + code if self._repl else program(code)

    def _runtime(self) -> Runtime:
        # A runtime closed under an execution (cancelled mid-program, which kills the worker)
        # is replaced like one that died.
        if self._rt is None or self._rt.closed:
            self._rt = None
            self._install(Runtime(**self._options, on_console=self._console))
        assert self._rt is not None
        return self._rt

    def _use(self, rt: Runtime) -> None:
        """Run the next execution on rt, a runtime started elsewhere (a pool's fresh worker),
        instead of starting one. Its console handler must be route_console (pydeno/_code_mode/core.py);
        it is closed with this Code Mode, or replaced by a new one of its own if it dies."""
        if self._rt is not None:
            raise RuntimeError("this Code Mode already has a runtime")
        self._install(rt)

    def _install(self, rt: Runtime) -> None:
        try:
            if self._session is not None:
                # Before any program: the session's seeded random and fixed clock.
                rt.eval(self._session.prelude())
            rt.bind_function(HOST_FUNCTION, Dispatcher(self._call))
            rt.eval(install_script(list(self._tools.tools), None, 0))
        except BaseException:
            rt.close()
            raise
        self._rt = rt

    def _discard(self) -> None:
        """The worker died or was killed: the next execution starts a fresh one; a session's
        does not (its state is its journal's, which its next lease replays), and keeps the
        closed runtime, whose figures its pool reads."""
        rt = self._rt
        if self._session is None:
            self._rt = None
        if rt is not None:
            rt.close()

    def _call(self, name: Any, args: Any) -> Any:
        execution = self._current
        if execution is None:
            raise RuntimeError("no execution is running")
        return execution.call(name, args)

    def _console(self, level: str, text: str) -> None:
        execution = self._current
        if execution is not None:
            execution.console(level, text)
        if self._user_console is not None and not self._quiet:
            self._user_console(level, text)

    def close(self) -> None:
        """Kill the worker (a paused program ends with it). Idempotent."""
        self._closed = True
        paused, self._paused = self._paused, None
        if paused is not None:
            paused[1].ended(None, {"pydeno.abandoned": True})
        self._discard()

    def __enter__(self) -> CodeMode:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
