"""The runtime drivers: ``AsyncRuntime`` for async code (anyio: asyncio or trio), and its
sync twin ``Runtime`` (pydeno/_runtime/_sync.py), generated from pydeno/_runtime/_async.py, which
waits with ``poll()`` in the calling thread: no event loop and no thread hop.

The driver writes frames, waits on the worker's pipes (``pydeno/_runtime/backends/``) and calls the
host's functions. It talks to one object, the runtime's supervisor
(:mod:`pydeno.host.process.supervisor`), which speaks for the core (:mod:`pydeno.host.wire.core`,
where every rule lives) and the worker's process.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Unpack, cast

from .._base import tracing
from .._base.checks import Lang, NeedsAsyncWith, code_text, is_typescript, module_specifier, source_text
from .._base.determinism import prelude
from .._base.errors import JavaScriptError
from .._base.options import RuntimeKwargs, checked_options
from .._base.stats import Stats
from ..host.process.monitor import Watch
from ..host.process.supervisor import Supervisor
from ..host.process.worker import WorkerProcess
from ..host.wire.connection import Hello, HostCall
from ..host.wire.core import (
    NEED_DATA,
    AddModule,
    AddPackage,
    Bind,
    Call,
    Command,
    Eval,
    EvalModule,
    LoadWasm,
    Request,
    bind_check,
    wasm_check,
)
from .backends import anyio as backend
from .function import JsFunction, function_id
from .spans import worker_attributes
from .stepping import GuestCall, Pending
from .syntax import place_error

__all__ = ["AsyncRuntime", "AsyncSteps"]


class _Queue:
    """The runtime's lock (calls from several tasks or threads are serialised), which also
    times each wait for it behind another caller's command: ``queue_wait_seconds``. Taking it
    unopposed, or again from inside the command that holds it, reads no clock."""

    __slots__ = ("_lock", "_record", "_take")

    def __init__(self, record: Callable[[float], None]) -> None:
        self._lock = backend.Lock()
        self._take = backend.acquirer(self._lock)
        self._record = record

    async def __aenter__(self) -> None:
        if await self._take():
            return
        started = time.perf_counter()
        await self._lock.__aenter__()
        self._record(time.perf_counter() - started)

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._lock.__aexit__(*exc_info)


class Meter:
    """What one stretch of a runtime's work used (a Code Mode execution): made by
    :meth:`AsyncRuntime._meter` at its start, read by :meth:`read` at its end, which takes
    the worker's figures once more, or those it had when it ended if it died meanwhile."""

    __slots__ = ("_cpu", "_host_calls", "_rt")

    def __init__(self, rt: AsyncRuntime) -> None:
        self._rt = rt
        sup = rt._sup
        if sup.watch is not None:
            sup.watch.reset_window()
        self._cpu = sup.worker_cpu()
        self._host_calls = sup.host_calls

    def read(self) -> tuple[float, int, int]:
        """(CPU seconds, peak RSS bytes, host calls) since the start: the peak is the largest
        RSS the monitor sampled meanwhile, else the worker's RSS now (or as it ended)."""
        sup = self._rt._sup
        cpu = sup.worker_cpu() - self._cpu
        peak = sup.watch.window_peak if sup.watch is not None else 0
        return max(0.0, cpu), peak or sup.worker_rss(), sup.host_calls - self._host_calls


class AsyncRuntime(NeedsAsyncWith):
    """A JavaScript runtime in its own deno worker process.

    ``AsyncRuntime(timeout=30.0, max_memory=512 MiB, ...)``: docs/limits.md describes every
    option and what it bounds. The sync runtime starts its worker in the constructor and
    waits for its handshake there; the async one does both at its first use (``async with``
    or the first command), off the event loop. Calls from several tasks or threads are
    serialised; :meth:`terminate` may be called from any.
    """

    def __init__(self, **options: Unpack[RuntimeKwargs]) -> None:
        self._sup = Supervisor(
            checked_options(type(self), options),
            make_function=lambda fid: JsFunction(self, fid),
            function_id=lambda value: function_id(value, self) if isinstance(value, JsFunction) else None,
        )
        self._lock = _Queue(self._sup.record_queue_wait)
        self._pipes = backend.Pipes()
        self._startup_deadline = 0.0
        self._steps = AsyncSteps(self)
        # unasync: self._ready()

    # -- public API -------------------------------------------------------------------
    async def eval(self, code: str, *, timeout: float | None = None, lang: Lang = "js") -> Any:
        """Evaluate code and return its value (a returned promise is awaited). With
        ``lang="ts"`` (or ``"typescript"``; ``"js"`` or ``"javascript"`` is the default, any
        case) the code is TypeScript: the worker strips its types with Deno's own transpiler
        first, and an error's positions point into the code as written. Code that does not
        compile raises a SyntaxError with its ``line`` and ``column`` and a note showing the
        place."""
        return await self._eval(code_text(code), timeout, typescript=is_typescript(lang))

    async def _eval(
        self, code: str, timeout: float | None, *, typescript: bool, program: bool = False, internal: bool = False
    ) -> Any:
        """eval; ``program``: the code is a Code Mode program (TypeScript the host wrapped in a
        block or async function, whose body is the top level of its import declarations);
        ``internal``: the host runs it for itself, and stats() leaves it out (and no span)."""
        request = Eval(code, typescript, program)
        span = None if internal else tracing.begin("pydeno.eval", code=code)
        if span is None:
            return await self._evaluate(request, timeout, internal)
        return await self._traced(span, lambda: self._evaluate(request, timeout, internal))

    async def _evaluate(self, request: Eval, timeout: float | None, internal: bool) -> Any:
        async with self._lock:
            await self._ready()
            try:
                return await self._run(request, timeout, internal=internal)
            except JavaScriptError as exc:
                place_error(exc, request.code, typescript=request.typescript)
                raise

    async def _traced(self, span: Any, run: Callable[[], Any]) -> Any:
        """What run() gives, awaited with span current (docs/observability.md#traces); the span
        ends with the worker's figures: its pid, the CPU it used meanwhile, its peak RSS."""
        sup = self._sup
        cpu = sup.worker_cpu()
        token = tracing.activate(span)
        error: BaseException | None = None
        try:
            return await run()
        except BaseException as exc:
            error = exc
            raise
        finally:
            tracing.deactivate(token)
            tracing.end(span, error, worker_attributes(sup, cpu))

    async def add_module(self, specifier: str, source: str) -> None:
        """Add an ES module (JavaScript or TypeScript, types stripped) that guest code may
        import by ``specifier``: statically from module code, with ``import()``, or with an
        import declaration at an eval's top level (which runs as a ``const`` from
        ``import()``). Only added modules (and Deno's ``node:`` modules) resolve; adding a
        specifier again replaces its source for imports from then on."""
        specifier = module_specifier(specifier)
        source = source_text(source)
        async with self._lock:
            await self._ready()
            await self._run(AddModule(specifier, source), None)

    async def load_wasm(self, name: str, module: bytes | bytearray | memoryview) -> None:
        """Compile a WebAssembly module from its bytes and give it to the guest as the global
        ``name``, a ``WebAssembly.Module`` (guest: ``new WebAssembly.Instance(name, imports)``);
        binding a name again replaces it. The guest's instance gets only the imports the guest
        passes: WebAssembly adds no capability. Needs ``jitless=False`` (V8 without its JIT has
        no WebAssembly): under ``jitless=True`` it raises ValueError, as it does for a name
        that is not a JavaScript identifier, a reserved word or ``WebAssembly``, and for a
        module over ``max_message_bytes``; a module that does not compile raises a
        JavaScriptError named CompileError. docs/security.md#webassembly says what
        ``jitless=False`` costs."""
        name, data = wasm_check(self._sup.options, name, module)
        async with self._lock:
            await self._ready()
            await self._run(LoadWasm(name, data), None)

    async def eval_module(self, source: str, *, timeout: float | None = None) -> dict[str, Any]:
        """Run module code (JavaScript or TypeScript; it may import added modules) and return
        its exports as a dict. Each call loads a new module: for repeated work, export a
        function once and call it."""
        source = source_text(source)
        async with self._lock:
            await self._ready()
            try:
                value = await self._run(EvalModule(source), timeout)
            except JavaScriptError as exc:
                place_error(exc, source, typescript=True)
                raise
        if not isinstance(value, dict):
            raise TypeError(f"the module's exports arrived as {type(value).__name__}, not a dict")
        return value

    async def bind_function(self, name: str, fn: Callable[..., Any]) -> None:
        """Expose fn (sync or async) to the guest as the global async function ``name``."""
        name = bind_check(name, fn)
        async with self._lock:
            await self._ready()
            await self._run(Bind(name, fn), None)

    def terminate(self) -> None:
        """Stop the running command from any thread or task: it raises RuntimeTerminated,
        or RuntimeForceKilled if the worker does not acknowledge within terminate_grace.
        Either way the runtime is closed; with no command running it is simply closed."""
        self._sup.terminate()

    async def close(self) -> None:
        """Kill the worker and release everything. Idempotent. Reaping the worker and
        removing its cgroup wait on the kernel: the async driver waits for them off the loop."""
        if not self._sup.closed:
            await backend.blocking(self._sup.close)

    @property
    def closed(self) -> bool:
        return self._sup.closed

    @property
    def _closed_by(self) -> str:
        """What closed the runtime ("" while it is open), for a closed handle's note."""
        return self._sup.closed_by

    def stats(self) -> dict[str, Any]:
        """This runtime's figures as a new JSON-ready dict (docs/observability.md):
        ``commands``, ``host_calls``, ``cpu_seconds``, ``peak_rss_bytes``, ``workers_started``,
        ``workers_killed`` and ``queue_wait_seconds``. The live worker's CPU time and RSS are
        read when it is called; a closed runtime's figures stay readable."""
        return self._sup.stats().as_dict()

    async def __aenter__(self) -> AsyncRuntime:
        async with self._lock:
            await self._ready()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __del__(self) -> None:
        sup = getattr(self, "_sup", None)
        if sup is not None and not sup.closed:
            sup.discard()

    # -- the driver ---------------------------------------------------------------------
    async def _ready(self) -> None:
        """Start the worker and wait for its handshake, once, then hold it to its sandbox
        mode. What blocks in that (staging the worker's files, the fork, joining its cgroup)
        runs off the event loop in the async driver."""
        sup = self._sup
        if sup.ready():
            return
        span = None
        try:
            if sup.process is None:
                span = tracing.begin("pydeno.worker_start", {"pydeno.sandbox": sup.options.sandbox})
                self._pipes.attach(await backend.blocking(sup.spawn))
                self._startup_deadline = sup.startup_deadline()
            # The handshake, which no host call can interrupt.
            while sup.step(None) is NEED_DATA:
                while not await self._receive(None, self._startup_deadline):
                    pass
            await backend.blocking(sup.started)
            options = sup.options
            # What the options ask of a fresh worker before its first command.
            requests: list[Request] = []
            if options.random_seed is not None or options.clock_ms is not None:
                requests.append(Eval(prelude(options.random_seed, options.clock_ms)))
            for bundle in options.packages.bundles if options.packages is not None else ():
                requests.append(AddPackage(bundle.specifier, tuple(bundle.requires), bundle.source))
            for request in requests:
                await self._run(request, None, internal=True)
        except BaseException as exc:
            sup.fail_startup(exc)
            if span is not None:
                tracing.end(span, exc, worker_attributes(sup, 0.0))
            raise
        if span is not None:
            tracing.end(span, None, worker_attributes(sup, 0.0))

    async def _call_function(self, fn: JsFunction, args: list[Any], timeout: float | None) -> Any:
        async with self._lock:
            function_id(fn, self)
            await self._ready()
            return await self._run(Call(fn._id, args), timeout)

    def _release_function(self, function_id: int) -> None:
        self._sup.release_function(function_id)

    async def _run(self, request: Request, timeout: float | None, *, internal: bool = False) -> Any:
        """A request to its outcome, running the host functions it calls."""
        command = await self._begin(request, timeout, internal=internal)
        while (step := await self._advance(command)) is not None:
            await self._call_host(command, *step)
        return self._sup.finish(command)

    # A command in steps: begin it, advance it to its next host call (which the caller runs,
    # or hands to someone else, as an agent's approval flow does) and answer that, until it
    # completes. Any failure or interruption ends the command (Core.abandon).
    async def _begin(self, request: Request, timeout: float | None, *, internal: bool = False) -> Command:
        command = self._sup.request(request, timeout, internal=internal)
        try:
            await self._send(command.take_data(), command)
        except BaseException as exc:
            self._sup.abandon(command, exc)
            raise
        return command

    async def _advance(self, command: Command) -> tuple[HostCall, Callable[..., Any]] | None:
        """Run the command until it needs a host function, returned with the function (its
        time now counts as host wait), or until it completes (None)."""
        sup = self._sup
        try:
            while (step := sup.step(command)) is not None:
                if step is NEED_DATA:
                    # Stepped again only once bytes came: nothing else can change what it finds.
                    while not await self._receive(command, math.inf):
                        pass
                elif isinstance(step, bytes):
                    await self._send(step, command)  # a host call refused: too many in flight
                else:
                    return step  # type: ignore[return-value]
        except BaseException as exc:
            sup.abandon(command, exc)
            raise
        return None

    async def _answer(
        self,
        command: Command,
        call: HostCall,
        result: Any = None,
        error: Exception | None = None,
        *,
        overran: bool = False,
    ) -> None:
        """Send the reply to call (its value, or error as the guest is shown it); a function
        that overran the host-wait budget fails the command instead."""
        try:
            await self._send(self._sup.answer(call, result, error, overran=overran), command)
        except BaseException as exc:
            self._sup.abandon(command, exc)
            raise

    async def _call_host(self, command: Command, call: HostCall, target: Callable[..., Any]) -> None:
        """Run a host call's function, awaited within the command's host-wait budget (one
        that outlives it fails the command: the monitor has killed the worker by then), and
        answer the guest."""
        error: Exception | None = None
        try:
            called = tracing.around("pydeno.host_call", {"pydeno.function.name": call.name}, lambda: target(*call.args))
            finished, result = await backend.resolve_within(self._sup.host_call_left(), called)
        except Exception as exc:  # noqa: BLE001 - shown to the guest as an Error (Core.settle_host_call)
            # (or, once the runtime has failed, raised by it: the command ends with it)
            finished, result, error = True, None, exc
        except BaseException as exc:
            self._sup.abandon(command, exc)
            raise
        await self._answer(command, call, result, error, overran=not finished)

    async def _receive(self, command: Command | None, startup_deadline: float) -> bool:
        """Read what the worker sent, or wait a while for it: whether bytes came. Raises past
        a deadline (the command's, the start-up's, a termination's grace)."""
        sup = self._sup
        process = sup.process_open()
        if sup.ingest(process.read()):
            # A worker that never stops sending (console output, say) still has a deadline.
            sup.remaining(command, startup_deadline)
            await self._pipes.after_data()  # async-only
            return True
        wait = sup.remaining(command, startup_deadline)
        if sup.answer_expected():
            # An answer is due any moment: look again (the async driver lets other tasks run
            # first; the sync one looks at once, a loop bounded by the core's window).
            await self._pipes.look_again()  # async-only
            return False
        await self._pipes.readable(process, wait)
        return False

    async def _send(self, data: bytes, command: Command | None) -> None:
        sup = self._sup
        # A threading lock (held across awaits in the async driver): only terminate()
        # contends for it, and that never blocks on it (it queues its frame instead).
        with sup.write_lock:
            rest = sup.push(memoryview(sup.outbox(data)))
            while rest is not None:
                process = sup.process_open()
                await self._pipes.writable(process, sup.remaining(command))
                rest = sup.push(rest)


class AsyncSteps:
    """The stepping API of one runtime (``rt._steps``): pydeno/_runtime/stepping.py says how the
    features use it. Each step holds the runtime's lock."""

    __slots__ = ("_rt",)

    def __init__(self, rt: AsyncRuntime) -> None:
        self._rt = rt

    async def start(
        self, code: str, timeout: float | None = None, *, lang: Lang = "js", program: bool = False
    ) -> Pending:
        """Start evaluating code; its host calls come from next_call."""
        rt = self._rt
        request = Eval(code_text(code), is_typescript(lang), program)
        async with rt._lock:
            await rt._ready()
            return await rt._begin(request, timeout)

    async def next_call(self, pending: Pending) -> GuestCall | None:
        """The command's next host call (its time counts as host wait until answered), or
        None once it completed."""
        rt = self._rt
        async with rt._lock:
            step = await rt._advance(cast(Command, pending))
        return None if step is None else step[0]

    async def answer(
        self, pending: Pending, call: GuestCall, value: Any = None, error: Exception | None = None
    ) -> None:
        """Answer a host call with its value, or with an error the guest receives."""
        rt = self._rt
        async with rt._lock:
            await rt._answer(cast(Command, pending), cast(HostCall, call), value, error)

    async def resolve(self, pending: Pending, call: GuestCall, result: Any) -> Any:
        """What a host function returned for call (awaited, if it is awaitable) within the
        command's host-wait budget: past it the command fails, as the monitor's kill says."""
        rt = self._rt
        finished, value = await backend.resolve_within(rt._sup.host_call_left(), result)
        if not finished:
            await rt._answer(cast(Command, pending), cast(HostCall, call), overran=True)
        return value

    async def eval(self, code: str, timeout: float | None = None, *, lang: Lang = "js", program: bool = False) -> Any:
        """eval, for a Code Mode program too (program=True: the host wrapped its code)."""
        return await self._rt._eval(code_text(code), timeout, typescript=is_typescript(lang), program=program)

    @property
    def closed_by(self) -> str:
        """What closed the runtime ("" while it is open), for a note."""
        return self._rt._sup.closed_by

    def outcome(self, pending: Pending) -> Any:
        """The completed command's value, or raise its error."""
        return self._rt._sup.finish(cast(Command, pending))

    def stop(self) -> None:
        """Stop a worker its owner is done with but retires later: it runs nothing more
        (Supervisor.stop); its runtime must serve no further command."""
        self._rt._sup.stop()

    def retire(self) -> Future[None] | None:
        """Close the runtime of a worker its owner is done with: killed now, its teardown
        finished in the background; the future says when (Supervisor.retire)."""
        return self._rt._sup.retire()

    async def warm_up(self, code: str) -> None:
        """Evaluate code the host runs for itself (a pool's warm-up): a command stats() does
        not count."""
        await self._rt._eval(code_text(code), None, typescript=False, internal=True)

    def stats(self) -> Stats:
        """stats() as a Stats, for the pools to merge."""
        return self._rt._sup.stats()

    def meter(self) -> Meter:
        """Start measuring what the runtime's worker uses from now (Meter.read)."""
        return Meter(self._rt)

    def worker_cpu(self) -> float:
        """CPU seconds the worker has used so far: where a span's figures start."""
        return self._rt._sup.worker_cpu()

    def span_attributes(self, cpu_before: float) -> dict[str, Any]:
        """The worker's figures for a span begun when it had used cpu_before seconds."""
        return worker_attributes(self._rt._sup, cpu_before)

    @property
    def in_command(self) -> bool:
        return self._rt._sup.in_command

    def convertible(self, value: Any) -> tuple[str, str] | None:
        """None if value can be a host function's result, else the (name, message) of the
        Error the guest would receive instead."""
        return self._rt._sup.convertible(value)

    def has_function(self, name: str) -> bool:
        return name in self._rt._sup.functions

    async def install(self, name: str, fn: Callable[..., Any], script: str, *, blocks: bool = False) -> None:
        """Bind fn as the host function name, then evaluate script, the guest code built on
        it (a ToolBridge's ``tools``, HttpFetch's ``fetch``): one path for both flavours, made
        by the twins. blocks: fn waits on I/O, so an async runtime runs it in a thread."""
        await self._rt.bind_function(name, backend.blocking_function(fn) if blocks else fn)
        await self._rt.eval(script)

    def function_names(self) -> list[str]:
        """The names of the host functions bound so far."""
        return list(self._rt._sup.functions)

    def alive(self) -> bool:
        """Open, and its worker still running."""
        sup = self._rt._sup
        process = sup.process
        return not sup.closed and process is not None and process.poll() is None

    def worker_state(self) -> tuple[WorkerProcess | None, Hello | None, Watch | None]:
        """The worker process, its handshake and its watch, for the sandbox report."""
        sup = self._rt._sup
        return sup.process, sup.hello, sup.watch
