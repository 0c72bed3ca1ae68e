"""Spans through OpenTelemetry's global tracer provider, when the process has set one.

pydeno never imports OpenTelemetry itself (``pydeno[otel]`` only installs its API): a service
that traces has imported ``opentelemetry.trace`` and set a provider before it runs anything, so
the question "is anyone listening" is a look in ``sys.modules`` and, where the API is loaded, a
look at the global provider: a few dictionary reads per command, and nothing else, while the
provider is the API's placeholder (none set) or its no-op one. Once a real provider is set, each
eval, Code Mode execution, tool call, host call and worker start is a span named
``pydeno.<what>`` (docs/observability.md lists them and their attributes).

Attributes hold what the host measured and names the operator chose (a tool's, a bound
function's), never what the guest wrote: a failure is recorded by its kind, and its message
(which carries the guest's text after the host's prefix) and the code only with
``PYDENO_TRACE_GUEST_TEXT=1`` in the environment, read at each span.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from .._version import __version__
from .kinds import classify_error

__all__ = [
    "GUEST_TEXT_VARIABLE",
    "activate",
    "around",
    "begin",
    "deactivate",
    "end",
    "guest_text",
    "tracer",
]

GUEST_TEXT_VARIABLE: Final = "PYDENO_TRACE_GUEST_TEXT"
# How long an attribute holding the guest's code may be, with guest text asked for.
_MAX_CODE_CHARS: Final = 4096

# The tracer of the provider it came from: a provider set later (tests set and reset the
# global one) gets a tracer of its own.
_provider: Any = None
_tracer: Any = None


# The API's global provider, read directly: its getter looks in the environment at each call,
# which would cost an untraced eval several percent where the API is loaded but unused. A
# provider named by OTEL_PYTHON_TRACER_PROVIDER is made by that getter at its first call.
_UNSET: Final[Any] = object()
_named_in_environment: bool | None = None


def tracer() -> Any | None:
    """The tracer to start spans with, or None when no provider is set (the usual case,
    where it costs a look in sys.modules, and one more where the API is loaded)."""
    global _provider, _tracer, _named_in_environment
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    provider = getattr(trace, "_TRACER_PROVIDER", _UNSET)
    if provider is None:
        if _named_in_environment is None:
            _named_in_environment = bool(os.environ.get("OTEL_PYTHON_TRACER_PROVIDER"))
        if not _named_in_environment:
            return None
        provider = trace.get_tracer_provider()
    elif provider is _UNSET:
        provider = trace.get_tracer_provider()
    if provider is _provider:
        return _tracer
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    _provider, _tracer = provider, provider.get_tracer("pydeno", __version__)
    return _tracer


def guest_text() -> bool:
    """Whether the operator asked for the guest's text (code, failure messages) in spans."""
    return os.environ.get(GUEST_TEXT_VARIABLE, "").strip().lower() in {"1", "true", "yes", "on"}


def begin(name: str, attributes: Mapping[str, Any] | None = None, *, code: str | None = None) -> Any | None:
    """A started span, the child of the current one, or None when nobody traces. ``code`` is
    the guest's code, kept as ``pydeno.code`` only with guest text asked for."""
    found = tracer()
    if found is None:
        return None
    span = found.start_span(name, attributes=attributes)
    if code is not None and guest_text():
        span.set_attribute("pydeno.code", code[:_MAX_CODE_CHARS])
    return span


def end(span: Any | None, error: BaseException | None = None, attributes: Mapping[str, Any] | None = None) -> None:
    """End a span from begin (None: nothing), with error recorded by its kind."""
    if span is None:
        return
    if attributes:
        span.set_attributes(attributes)
    if error is not None:
        _record(span, error)
    span.end()


def _record(span: Any, error: BaseException) -> None:
    trace = sys.modules["opentelemetry.trace"]
    info = classify_error(error)
    qualified = _type_name(error)
    span.set_attributes(
        {
            # The semantic conventions' low-cardinality failure class: the kind where pydeno
            # knows one, else the exception's type.
            "error.type": info.kind if info.kind != "unknown" else qualified,
            "pydeno.error.kind": info.kind,
            "pydeno.error.retryable": info.retryable,
            "pydeno.error.retry_with_larger_limits": info.retry_with_larger_limits,
        }
    )
    if guest_text():
        span.record_exception(error)
        span.set_status(trace.Status(trace.StatusCode.ERROR, f"{info.kind}: {error}"))
    else:
        # The exception's type only: its message and traceback carry the guest's text.
        span.add_event("exception", {"exception.type": qualified, "pydeno.error.kind": info.kind})
        span.set_status(trace.Status(trace.StatusCode.ERROR, info.kind))


def _type_name(error: BaseException) -> str:
    """The exception's type as a user imports it: ``ValueError``, ``pydeno.RuntimeTimeout``."""
    cls = type(error)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    if cls.__module__.startswith("pydeno.") and getattr(sys.modules.get("pydeno"), cls.__name__, None) is cls:
        return f"pydeno.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def activate(span: Any | None) -> object | None:
    """Make span the current one in this context (None: nothing): the token to give
    deactivate, for the spans started meanwhile to be its children."""
    if span is None:
        return None
    trace = sys.modules["opentelemetry.trace"]
    token: object = sys.modules["opentelemetry.context"].attach(trace.set_span_in_context(span))
    return token


def deactivate(token: object | None) -> None:
    if token is not None:
        sys.modules["opentelemetry.context"].detach(token)


def around(name: str, attributes: Mapping[str, Any], run: Callable[[], Any]) -> Any:
    """run() inside a span named name: its result, or, where run() returns an awaitable (an
    async tool or host function), an awaitable that ends the span once it is done. Nobody
    tracing: run() itself."""
    span = begin(name, attributes)
    if span is None:
        return run()
    token = activate(span)
    try:
        result = run()
    except BaseException as exc:
        end(span, exc)
        raise
    finally:
        deactivate(token)
    if hasattr(result, "__await__"):
        return _finish(span, result)
    end(span)
    return result


async def _finish(span: Any, pending: Awaitable[Any]) -> Any:
    # Current again in the context that awaits, for what runs there.
    token = activate(span)
    error: BaseException | None = None
    try:
        return await pending
    except BaseException as exc:
        error = exc
        raise
    finally:
        deactivate(token)
        end(span, error)
