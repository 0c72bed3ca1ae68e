"""OpenTelemetry's global tracer provider, taken back after a test or a docs page set one."""

from __future__ import annotations

import sys


def reset_global_provider() -> None:
    """Unset the API's global provider (the API lets a process set it once): the rest of the
    suite then runs untraced, as most services do. Nothing if the API was never loaded."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return
    from opentelemetry.util._once import Once

    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]
