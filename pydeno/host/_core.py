"""The runtime core shared by :class:`pydeno.Runtime` and :class:`pydeno.AsyncRuntime`.

Everything that is a rule lives here once: argument checks, the worker's configuration,
which event means what, host-authored messages, how a host function's exception is shown
to the guest, and what state a failure leaves the runtime in. The two drivers only write
bytes, wait for descriptors and call the host's functions (plainly, or awaited).
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable
from typing import Any, Final

from .._errors import RuntimeTimeout, WorkerCrashed
from .._function import JsFunction
from .._values import MAX_DEPTH, Codec
from ._process import WorkerConfig, WorkerProcess
from ._wire import Completed, Connection, Console, Event, Hello, HostCall, ProtocolError

__all__ = ["NEED_DATA", "Core", "RuntimeOptions"]

log = logging.getLogger("pydeno.console")

DEFAULT_TIMEOUT: Final = 30.0
DEFAULT_MAX_MEMORY: Final = 512 * 2**20
DEFAULT_MAX_MESSAGE_BYTES: Final = 64 * 2**20
DEFAULT_STARTUP_TIMEOUT: Final = 10.0
# While waiting, drivers wake at least this often to drain stderr and check the worker.
TICK: Final = 0.25

_IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*\Z")
# Names a bound function may not take: reserved words, and globals the guest relies on.
_RESERVED: Final = frozenset(
    (
        "break case catch class const continue debugger default delete do else enum export extends "
        "false finally for function if import in instanceof new null return super switch this throw "
        "true try typeof var void while with yield let static implements interface package private "
        "protected public await arguments eval undefined NaN Infinity globalThis console"
    ).split()
)
_LEVELS: Final = {
    "log": logging.INFO,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}

ConsoleHandler = Callable[[str, str], Any]


class _NeedData:
    """The sentinel :meth:`Core.pump` returns when it needs more bytes from the worker."""

    __slots__ = ()


NEED_DATA: Final = _NeedData()


def _seconds(name: str, value: Any, *, allow_none: bool) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        alternative = " or None" if allow_none else ""
        raise TypeError(f"{name} must be a number of seconds{alternative}, got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return float(value)


def _count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


class RuntimeOptions:
    """Validated keyword arguments of a runtime; a bad one raises TypeError/ValueError."""

    def __init__(
        self,
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        max_memory: int = DEFAULT_MAX_MEMORY,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        jitless: bool = True,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        on_console: ConsoleHandler | None = None,
        expose_host_errors: bool = False,
    ) -> None:
        self.timeout = _seconds("timeout", timeout, allow_none=True)
        self.max_memory = _count("max_memory", max_memory, 32 * 2**20)
        self.max_message_bytes = _count("max_message_bytes", max_message_bytes, 1024)
        if not isinstance(jitless, bool):
            raise TypeError(f"jitless must be True or False, got {type(jitless).__name__}")
        self.jitless = jitless
        self.startup_timeout: float = _seconds("startup_timeout", startup_timeout, allow_none=False) or 0.0
        if on_console is not None and not callable(on_console):
            raise TypeError("on_console must be a callable (level, text) or None")
        self.on_console = on_console
        if not isinstance(expose_host_errors, bool):
            raise TypeError("expose_host_errors must be True or False")
        self.expose_host_errors = expose_host_errors

    def worker_config(self) -> WorkerConfig:
        return WorkerConfig(
            max_memory=self.max_memory,
            max_message_bytes=self.max_message_bytes,
            jitless=self.jitless,
            max_depth=MAX_DEPTH,
        )


class Core:
    """One runtime's state: options, the worker process, the protocol connection."""

    def __init__(self, options: RuntimeOptions, driver: Any) -> None:
        self.options = options
        self.driver = driver
        self.codec = Codec(self._make_function, self._function_id, options.max_message_bytes)
        self.connection = Connection(self.codec, options.max_message_bytes)
        self.functions: dict[str, Callable[..., Any]] = {}
        self.process: WorkerProcess | None = None
        self.closed = False

    # -- lifetime --------------------------------------------------------------------
    def spawn(self) -> WorkerProcess:
        self.process = WorkerProcess(self.options.worker_config())
        return self.process

    def close(self) -> None:
        self.closed = True
        if self.process is not None:
            self.process.close()

    def check_open(self) -> WorkerProcess:
        if self.closed or self.process is None:
            raise RuntimeError("runtime is closed")
        return self.process

    # -- values ----------------------------------------------------------------------
    def _make_function(self, function_id: int) -> JsFunction:
        self.connection.live_functions.add(function_id)
        return JsFunction(self, self.driver, function_id)

    def _function_id(self, fn: JsFunction) -> int:
        if fn._core is not self:
            raise ValueError("a JsFunction can only be passed back to the runtime it came from")
        if fn.closed:
            raise RuntimeError("Function has been closed")
        return fn._id

    def check_function(self, fn: JsFunction) -> None:
        if fn.closed:
            raise RuntimeError("Function has been closed")
        self._function_id(fn)

    # -- commands --------------------------------------------------------------------
    def deadline(self, timeout: float | None) -> tuple[float, float | None]:
        """(monotonic deadline or inf, the limit in seconds) for one command."""
        limit = self.options.timeout if timeout is None else _seconds("timeout", timeout, allow_none=False)
        return (math.inf if limit is None else time.monotonic() + limit), limit

    @staticmethod
    def check_code(code: Any) -> str:
        if not isinstance(code, str):
            raise TypeError(f"code must be a str of JavaScript, got {type(code).__name__}")
        return code

    def bind_check(self, name: Any, fn: Any) -> str:
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        if not _IDENTIFIER.match(name) or name in _RESERVED:
            raise ValueError(
                f"{name!r} cannot be a guest global: use a JavaScript identifier "
                "(letters, digits, _ or $, not starting with a digit) that is not a reserved word"
            )
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        return name

    # -- events ----------------------------------------------------------------------
    def pump(self) -> HostCall | _NeedData | None:
        """Apply buffered events until one needs the driver: a host call to run, None when
        a request completed (the driver checks whether it was its own), or NEED_DATA."""
        while True:
            try:
                event = self.connection.next_event()
            except ProtocolError as err:
                raise self.protocol_failure(err) from None
            if event is None:
                return NEED_DATA
            call = self.handle(event)
            if call is not None or isinstance(event, (Completed, Hello)):
                return call

    def ingest(self, data: bytes | None) -> bool:
        """Feed what a read returned; True if there was data, raise if the worker is gone."""
        if data is None:
            raise self.died()
        if data:
            self.connection.feed(data)
            return True
        return False

    def remaining(self, deadline: float, limit: float | None) -> float:
        """Seconds until the deadline, at most TICK; raise the timeout if it has passed."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise self.timed_out(limit)
        return min(left, TICK)

    def handle(self, event: Event) -> HostCall | None:
        """Apply an event; return a host call for the driver to run, else None."""
        if isinstance(event, HostCall):
            return event
        if isinstance(event, Console):
            handler = self.options.on_console
            if handler is None:
                log.log(_LEVELS.get(event.level, logging.INFO), "%s", event.text)
            else:
                handler(event.level, event.text)
        # Hello and Completed carry nothing further to do here.
        assert isinstance(event, (Console, Hello, Completed))
        return None

    def host_error_reply(self, call: HostCall, exc: BaseException) -> bytes:
        """The reply that shows a host function's exception to the guest as an Error whose
        name is the exception's class; the text only when the caller opted in."""
        name = type(exc).__name__
        if self.options.expose_host_errors:
            message = str(exc)
        else:
            message = (
                f"host function {call.name}() raised {name} (details hidden; pass expose_host_errors=True to show them)"
            )
        return self.connection.reply_error(call.call_id, name, message)

    # -- failures: each kills the worker, closes the runtime and returns the error -------
    def _fail(self, exc: Exception) -> Exception:
        self.close()
        return exc

    def protocol_failure(self, err: ProtocolError) -> Exception:
        return self._fail(WorkerCrashed(err.crash_message()))

    def died(self) -> Exception:
        process = self.check_open()
        process.kill()
        prefix = "worker process died" if self.connection.hello is not None else "worker exited during startup"
        return self._fail(WorkerCrashed(process.death_message(prefix)))

    def timed_out(self, limit: float | None) -> Exception:
        if self.connection.hello is None:
            return self._fail(
                WorkerCrashed(
                    "worker did not complete its handshake within "
                    f"startup_timeout={self.options.startup_timeout}s; killed"
                )
            )
        return self._fail(RuntimeTimeout(f"command exceeded timeout={limit}s; worker killed"))

    def interrupted(self) -> None:
        """The caller abandoned a command (cancellation, KeyboardInterrupt): the worker's
        state is unknown, so it is killed and the runtime closed."""
        self.close()

    def startup_deadline(self) -> float:
        return time.monotonic() + self.options.startup_timeout
