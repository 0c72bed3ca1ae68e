"""Runtime options: their names, defaults and checks, in one place.

``RuntimeKwargs`` is what :class:`pydeno.Runtime`, :class:`pydeno.AsyncRuntime`, the pools,
the agent sandboxes and the command line accept; ``RuntimeOptions`` checks them once, so a bad
option fails where it is passed, before any worker starts, and :func:`checked_options` does it
for a public class, so that a name it does not take is refused in that class's name. A leaf:
it imports nothing of pydeno above the argument checks, so every layer may use it.
"""

from __future__ import annotations

import datetime
import logging
import sys
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final, Literal, TypedDict

from ..host.wire.protocol import DEFAULT_DECODE_RATIO
from .checks import count, optional_count, optional_seconds, optional_size, seconds, size
from .determinism import check_clock, check_seed
from .packages import Packages

__all__ = [
    "DEFAULT_MAX_MEMORY",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_STARTUP_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "OPTION_NAMES",
    "SANDBOX_MODES",
    "CONSOLE_DESTINATIONS",
    "ConsoleDestination",
    "ConsoleHandler",
    "RuntimeKwargs",
    "RuntimeOptions",
    "SandboxMode",
    "check_option_names",
    "checked_options",
    "console_handler",
]

DEFAULT_TIMEOUT: Final = 30.0
DEFAULT_MAX_MEMORY: Final = 512 * 2**20
DEFAULT_MAX_MESSAGE_BYTES: Final = 64 * 2**20
DEFAULT_STARTUP_TIMEOUT: Final = 10.0

SandboxMode = Literal["require", "best_effort", "off"]
SANDBOX_MODES: Final[tuple[SandboxMode, ...]] = ("require", "best_effort", "off")

ConsoleHandler = Callable[[str, str], Any]
# Where on_console may name instead of a callable (docs/quickstart.md, "Console output").
ConsoleDestination = Literal["print", "stderr", "log"]
CONSOLE_DESTINATIONS: Final[tuple[ConsoleDestination, ...]] = ("print", "stderr", "log")

console_log: Final = logging.getLogger("pydeno.console")
_LOGGING_LEVELS: Final = {
    "log": logging.INFO,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}
_TO_STDERR: Final = frozenset({"warn", "error"})


def _to_logger(level: str, text: str) -> None:
    console_log.log(_LOGGING_LEVELS.get(level, logging.INFO), "%s", text)


def _to_stderr(level: str, text: str) -> None:
    # The stream is looked up at each line: a redirect (contextlib.redirect_stderr, a test's
    # capture) made after the runtime started still applies.
    print(text, file=sys.stderr, flush=True)


def _to_print(level: str, text: str) -> None:
    print(text, file=sys.stderr if level in _TO_STDERR else sys.stdout, flush=True)


def _by_default(level: str, text: str) -> None:
    """on_console=None: the logger once logging is configured (a handler anywhere on the
    logger's way to the root, as logging.basicConfig() or a framework adds), else stderr, so
    that the first console.log of a script that never set up logging is seen."""
    if _logging_configured():
        _to_logger(level, text)
    else:
        _to_stderr(level, text)


def _logging_configured() -> bool:
    """Logger.hasHandlers(), but not counting the NullHandler that pydeno, as a library,
    puts on its own logger."""
    logger: logging.Logger | None = console_log
    while logger is not None:
        if any(type(handler) is not logging.NullHandler for handler in logger.handlers):
            return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


_DESTINATIONS: Final[dict[str, ConsoleHandler]] = {"print": _to_print, "stderr": _to_stderr, "log": _to_logger}


def console_handler(on_console: object) -> ConsoleHandler:
    """The callable that on_console names: itself, one of CONSOLE_DESTINATIONS, or (None) the
    default; anything else is refused, naming the choices."""
    if on_console is None:
        return _by_default
    if callable(on_console):
        return on_console
    choices = "on_console must be a callable (level, text), 'print', 'stderr', 'log' or None"
    if not isinstance(on_console, str):
        raise TypeError(f"{choices}, got {type(on_console).__name__}")
    handler = _DESTINATIONS.get(on_console)
    if handler is None:
        import difflib  # only a refusal suggests a name: not loaded by import pydeno

        close = difflib.get_close_matches(on_console, CONSOLE_DESTINATIONS, n=1)
        suggestion = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"{choices}, got {on_console!r}{suggestion}")
    return handler


class RuntimeKwargs(TypedDict, total=False):
    """The keyword arguments of :class:`pydeno.Runtime` and :class:`pydeno.AsyncRuntime`;
    docs/limits.md says exactly what each bounds. A byte count is an int or a size as text
    (``"256M"``, ``"1.5GiB"``: powers of 1024)."""

    timeout: float | None
    cpu_limit: float | None
    max_memory: int | str | None
    max_threads: int | None
    max_host_calls: int | None
    max_host_wait: float | None
    max_inflight_host_calls: int
    max_message_bytes: int | str
    max_decode_ratio: int
    max_console_bytes: int | str
    jitless: bool
    startup_timeout: float
    terminate_grace: float
    on_console: ConsoleHandler | ConsoleDestination | None
    expose_host_errors: bool
    sandbox: SandboxMode
    random_seed: int | None
    clock: datetime.datetime | float | None
    packages: Packages | None


class RuntimeOptions:
    """Validated keyword arguments of a runtime; a bad one raises TypeError/ValueError."""

    def __init__(
        self,
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        cpu_limit: float | None = None,
        max_memory: int | str | None = DEFAULT_MAX_MEMORY,
        max_threads: int | None = 64,
        max_host_calls: int | None = 10_000,
        max_host_wait: float | None = None,
        max_inflight_host_calls: int = 32,
        max_message_bytes: int | str = DEFAULT_MAX_MESSAGE_BYTES,
        max_decode_ratio: int = DEFAULT_DECODE_RATIO,
        max_console_bytes: int | str = 1 << 20,
        jitless: bool = True,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        terminate_grace: float = 1.0,
        on_console: ConsoleHandler | ConsoleDestination | None = None,
        expose_host_errors: bool = False,
        sandbox: SandboxMode = "require",
        random_seed: int | None = None,
        clock: datetime.datetime | float | None = None,
        packages: Packages | None = None,
    ) -> None:
        self.timeout = optional_seconds("timeout", timeout)
        self.cpu_limit = optional_seconds("cpu_limit", cpu_limit)
        self.max_memory = optional_size("max_memory", max_memory, 32 * 2**20)
        self.max_threads = optional_count("max_threads", max_threads, 1)
        self.max_host_calls = optional_count("max_host_calls", max_host_calls, 0)
        self.max_host_wait = optional_seconds("max_host_wait", max_host_wait)
        self.max_inflight_host_calls = count("max_inflight_host_calls", max_inflight_host_calls, 1)
        self.max_message_bytes = size("max_message_bytes", max_message_bytes, 1024)
        self.max_decode_ratio = count("max_decode_ratio", max_decode_ratio, 1)
        self.max_console_bytes = size("max_console_bytes", max_console_bytes, 0)
        if not isinstance(jitless, bool):
            raise TypeError(f"jitless must be True or False, got {type(jitless).__name__}")
        self.jitless = jitless
        self.startup_timeout = seconds("startup_timeout", startup_timeout)
        self.terminate_grace = seconds("terminate_grace", terminate_grace)
        self.on_console = console_handler(on_console)
        if not isinstance(expose_host_errors, bool):
            raise TypeError("expose_host_errors must be True or False")
        self.expose_host_errors = expose_host_errors
        if not isinstance(sandbox, str):
            raise TypeError(f"sandbox must be 'require', 'best_effort' or 'off', got {type(sandbox).__name__}")
        if sandbox not in SANDBOX_MODES:
            raise ValueError(
                f"sandbox must be 'require' (every OS layer, or refuse to start), 'best_effort' "
                f"(what this system allows, with a warning) or 'off' (no OS layers), got {sandbox!r}"
            )
        self.sandbox: SandboxMode = sandbox
        self.random_seed = check_seed(random_seed)
        self.clock_ms = check_clock(clock)
        if packages is not None and not isinstance(packages, Packages):
            raise TypeError(
                f"packages must be a pydeno.Packages, e.g. packages=pydeno.Packages(['zod@3.23.8']), not "
                f"{type(packages).__name__}"
            )
        self.packages = packages


OPTION_NAMES: Final = frozenset(RuntimeKwargs.__optional_keys__ | RuntimeKwargs.__required_keys__)


def check_option_names(
    called: Callable[..., Any], options: Mapping[str, Any], *, without: Collection[str] = ()
) -> None:
    """Refuse a keyword that neither ``called`` (a public class, or a method such as
    ``AgentSandbox.load``, whose **kwargs are runtime options) nor the runtime accepts, as
    Python would, but in the name of what the user called and with the closest name it takes:
    ``Runtime() got an unexpected keyword argument 'timeot'; did you mean 'timeout'?``.
    ``without`` are runtime options ``called`` does not take (an agent session's
    max_host_wait)."""
    unknown = next((name for name in options if name not in OPTION_NAMES), None)
    if unknown is None:
        return
    label, own = _signature(called)
    accepted = sorted((OPTION_NAMES - set(without)) | own)
    import difflib  # only a refusal suggests a name: not loaded by import pydeno

    close = difflib.get_close_matches(unknown, accepted, n=1)
    message = f"{label}() got an unexpected keyword argument {unknown!r}"
    if close:
        raise TypeError(f"{message}; did you mean {close[0]!r}?")
    # The accepted names, since none is close: a path to a docs file would not exist where
    # pydeno is installed from a wheel.
    raise TypeError(f"{message}; it accepts: {', '.join(accepted)}")


def _signature(called: Callable[..., Any]) -> tuple[str, set[str]]:
    """What the user called, as they wrote it (``SandboxPool``, ``AgentSandbox.load``), and
    the keywords it takes besides the runtime's options."""
    import inspect  # not with the package: it loads the ast module, a share of its import

    if isinstance(called, type):
        public = next((c for c in called.__mro__ if not c.__name__.startswith("_")), called)
        label, function = public.__name__, inspect.signature(public)
    else:
        label, function = called.__qualname__, inspect.signature(called)
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    names = {p.name for p in function.parameters.values() if p.kind in kinds}
    return label, names - {"self", "cls"}


def checked_options(called: Callable[..., Any], options: Mapping[str, Any]) -> RuntimeOptions:
    """``RuntimeOptions(**options)``, refusing an unknown name in the name of ``called``."""
    check_option_names(called, options)
    return RuntimeOptions(**options)
