"""Code Mode: a model writes a program against typed tool APIs; it gets back a result.

``AsyncCodeMode`` (this file) drives an :class:`~pydeno.AsyncRuntime` under asyncio or
trio; ``CodeMode`` (pydeno/_code_mode.py, generated from this file) drives a
:class:`~pydeno.Runtime`. The tools, their declarations, what an execution records and the
result live in :mod:`pydeno._execution`; this driver starts the worker, installs ``tools``
and runs programs. One worker serves a Code Mode's executions, one at a time; a worker that
dies is replaced at the next execution.
"""

from __future__ import annotations

from typing import Any, Unpack

from ._async_runtime import AsyncRuntime
from ._backends import _anyio as backend
from ._checks import code_text, optional_seconds
from ._errors import JavaScriptError
from ._execution import (
    DEFAULT_MAX_OUTPUT_CHARS,
    ApprovePolicy,
    Execution,
    ExecutionResult,
    ToolSet,
    check_output_chars,
    program,
    type_errors,
)
from ._options import RuntimeKwargs, RuntimeOptions
from ._tools import HOST_FUNCTION, Dispatcher, install_script

__all__ = ["AsyncCodeMode"]


class AsyncCodeMode:
    """``AsyncCodeMode(tools, *, max_tool_calls=None, max_output_chars=20000, approve=None,
    clock=None, random_seed=None, **runtime_kwargs)``.

    ``tools`` is a list of :class:`~pydeno.Tool` (plain functions are made into tools).
    ``max_tool_calls`` bounds the tool calls of one execution; ``max_output_chars`` bounds
    each of stdout, stderr and the error message, and the value in the text form;
    ``clock=`` and ``random_seed=`` (runtime options) make executions repeatable: ``Date``
    fixed at the clock, ``Math.random`` and ``crypto`` seeded.
    ``approve`` decides which tools run (``None``: all; ``"read_only"``: only read-only
    ones; a callable ``(name, arguments) -> bool``: asked once per tool and execution for
    every tool that is not read-only). The rest configures the runtime, as for
    :class:`~pydeno.AsyncRuntime`.
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
        self._tools = ToolSet(tools, max_tool_calls=max_tool_calls, approve=approve)
        self.max_output_chars = check_output_chars(max_output_chars)
        options: dict[str, Any] = dict(runtime_kwargs)
        self._user_console = options.pop("on_console", None)
        checked = RuntimeOptions(**options)  # refuse a bad option now, not at the first execution
        self._sandbox: str = checked.sandbox
        self._check_timeout = checked.timeout if checked.timeout is not None else 60.0
        self._options = options
        self._expose = bool(options.get("expose_host_errors", False))
        self._rt: AsyncRuntime | None = None
        self._current: Execution | None = None
        self._closed = False
        self._lock = backend.Lock()

    # -- what a model reads before it writes -------------------------------------------------
    def typescript(self) -> str:
        """The ``.d.ts`` of ``tools``: one interface per schema, JSDoc from descriptions."""
        return self._tools.typescript()

    def describe(self) -> str:
        """A compact prompt text: how to write code against the API, and what is not there."""
        return self._tools.describe()

    # -- running programs -------------------------------------------------------------------
    async def execute(self, code: str, *, timeout: float | None = None, typecheck: bool = False) -> ExecutionResult:
        """Run a program; never raises for a failure of the program or of a limit (the
        result says what failed and why), only for misuse (a closed Code Mode, a bad
        argument). With ``typecheck=True`` deno's type checker first checks the program
        against :meth:`typescript`, in a confined process; type errors are the result
        (kind ``typecheck_failed``) and nothing runs."""
        code = code_text(code)
        timeout = optional_seconds("timeout", timeout)
        if not isinstance(typecheck, bool):
            raise TypeError(f"typecheck must be a bool, got {type(typecheck).__name__}")
        async with self._lock:
            if self._closed:
                raise RuntimeError("the session is closed")
            execution = Execution(self._tools, self.max_output_chars, expose=self._expose)
            if typecheck:
                limit = timeout if timeout is not None else self._check_timeout
                failure = await backend.blocking(
                    lambda: type_errors(self._tools, code, sandbox=self._sandbox, timeout=limit)
                )
                if failure is not None:
                    return execution.result(error=failure)
            self._current = execution
            try:
                rt = await self._runtime()
                value = await rt.eval(program(code), timeout=timeout, lang="ts")
            except Exception as exc:  # noqa: BLE001 - a failed program is a result
                if not isinstance(exc, JavaScriptError):
                    await self._discard()
                return execution.result(error=exc)
            finally:
                self._current = None
            return execution.result(value=value)

    async def _runtime(self) -> AsyncRuntime:
        if self._rt is None:
            rt = AsyncRuntime(**self._options, on_console=self._console)
            try:
                await rt.bind_function(HOST_FUNCTION, Dispatcher(self._call))
                await rt.eval(install_script(list(self._tools.tools), None, 0))
            except BaseException:
                await rt.close()
                raise
            self._rt = rt
        return self._rt

    async def _discard(self) -> None:
        """The worker died or was killed: the next execution starts a fresh one."""
        rt, self._rt = self._rt, None
        if rt is not None:
            await rt.close()

    def _call(self, name: Any, args: Any) -> Any:
        execution = self._current
        if execution is None:
            raise RuntimeError("no execution is running")
        return execution.call(name, args)

    def _console(self, level: str, text: str) -> None:
        execution = self._current
        if execution is not None:
            execution.console(level, text)
        if self._user_console is not None:
            self._user_console(level, text)

    async def close(self) -> None:
        """Kill the worker. Idempotent."""
        self._closed = True
        await self._discard()

    async def __aenter__(self) -> AsyncCodeMode:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
