"""Runtime options: their names, defaults and checks, in one place.

``RuntimeKwargs`` is what :class:`pydeno.Runtime`, :class:`pydeno.AsyncRuntime`, the pools,
the agent sandboxes and the command line accept; ``RuntimeOptions`` checks them once, so a bad
option fails where it is passed, before any worker starts. A leaf: it imports nothing of
pydeno above the argument checks, so every layer may use it.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any, Final, Literal, TypedDict

from ._checks import count, optional_count, optional_seconds, seconds
from ._determinism import check_clock, check_seed
from .host._protocol import DEFAULT_DECODE_RATIO

__all__ = [
    "DEFAULT_MAX_MEMORY",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_STARTUP_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "SANDBOX_MODES",
    "ConsoleHandler",
    "RuntimeKwargs",
    "RuntimeOptions",
    "SandboxMode",
]

DEFAULT_TIMEOUT: Final = 30.0
DEFAULT_MAX_MEMORY: Final = 512 * 2**20
DEFAULT_MAX_MESSAGE_BYTES: Final = 64 * 2**20
DEFAULT_STARTUP_TIMEOUT: Final = 10.0

SandboxMode = Literal["require", "best_effort", "off"]
SANDBOX_MODES: Final[tuple[SandboxMode, ...]] = ("require", "best_effort", "off")

ConsoleHandler = Callable[[str, str], Any]


class RuntimeKwargs(TypedDict, total=False):
    """The keyword arguments of :class:`pydeno.Runtime` and :class:`pydeno.AsyncRuntime`;
    docs/limits.md says exactly what each bounds."""

    timeout: float | None
    cpu_limit: float | None
    max_memory: int | None
    max_threads: int | None
    max_host_calls: int | None
    max_host_wait: float | None
    max_inflight_host_calls: int
    max_message_bytes: int
    max_decode_ratio: int
    max_console_bytes: int
    jitless: bool
    startup_timeout: float
    terminate_grace: float
    on_console: ConsoleHandler | None
    expose_host_errors: bool
    sandbox: SandboxMode
    random_seed: int | None
    clock: datetime.datetime | float | None


class RuntimeOptions:
    """Validated keyword arguments of a runtime; a bad one raises TypeError/ValueError."""

    def __init__(
        self,
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        cpu_limit: float | None = None,
        max_memory: int | None = DEFAULT_MAX_MEMORY,
        max_threads: int | None = 64,
        max_host_calls: int | None = 10_000,
        max_host_wait: float | None = None,
        max_inflight_host_calls: int = 32,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_decode_ratio: int = DEFAULT_DECODE_RATIO,
        max_console_bytes: int = 1 << 20,
        jitless: bool = True,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        terminate_grace: float = 1.0,
        on_console: ConsoleHandler | None = None,
        expose_host_errors: bool = False,
        sandbox: SandboxMode = "require",
        random_seed: int | None = None,
        clock: datetime.datetime | float | None = None,
    ) -> None:
        self.timeout = optional_seconds("timeout", timeout)
        self.cpu_limit = optional_seconds("cpu_limit", cpu_limit)
        self.max_memory = optional_count("max_memory", max_memory, 32 * 2**20)
        self.max_threads = optional_count("max_threads", max_threads, 1)
        self.max_host_calls = optional_count("max_host_calls", max_host_calls, 0)
        self.max_host_wait = optional_seconds("max_host_wait", max_host_wait)
        self.max_inflight_host_calls = count("max_inflight_host_calls", max_inflight_host_calls, 1)
        self.max_message_bytes = count("max_message_bytes", max_message_bytes, 1024)
        self.max_decode_ratio = count("max_decode_ratio", max_decode_ratio, 1)
        self.max_console_bytes = count("max_console_bytes", max_console_bytes, 0)
        if not isinstance(jitless, bool):
            raise TypeError(f"jitless must be True or False, got {type(jitless).__name__}")
        self.jitless = jitless
        self.startup_timeout = seconds("startup_timeout", startup_timeout)
        self.terminate_grace = seconds("terminate_grace", terminate_grace)
        if on_console is not None and not callable(on_console):
            raise TypeError("on_console must be a callable (level, text) or None")
        self.on_console = on_console
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
