"""OpenTelemetry tracing, when the ``otel`` extra is installed; nothing at all when it is not.

One trace per instance: the client's ``start`` span → the server's StartInstance span (linked by
the W3C ``traceparent`` in the gRPC metadata) → every step attempt a worker runs (linked by the
``traceparent`` the server stores on the instance and sends in each activation) → the worker's
reports. Spans go to whatever TracerProvider the process configured (the SDK's exporters); without
one the API's no-op tracer records nothing. Without the extra, ``span`` is a shared no-op context
manager and ``traceparent`` is "" (README "Operating Wiggle").
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ._env import env_str

__all__ = [
    "ENABLED",
    "active",
    "span",
    "traceparent",
    "outgoing_metadata",
    "set_incoming",
    "incoming",
    "CLIENT",
    "SERVER",
    "INTERNAL",
]

try:
    from opentelemetry import trace as _trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    ENABLED = True
    _NO_PROVIDER: tuple[type, ...] = (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider)
    _propagator = TraceContextTextMapPropagator()
    CLIENT: Any = _trace.SpanKind.CLIENT
    SERVER: Any = _trace.SpanKind.SERVER
    INTERNAL: Any = _trace.SpanKind.INTERNAL
except ImportError:  # the otel extra is not installed: tracing is off and costs nothing
    ENABLED = False
    CLIENT = SERVER = INTERNAL = None

_NOTHING = contextlib.nullcontext()


def active() -> bool:
    """Tracing is on: the extra is installed *and* the process configured a TracerProvider.

    Without a provider the API's tracer records nothing, yet extracting, attaching and injecting
    the context would still cost every step and every call; so nothing is done until one is set.
    ``get_tracer_provider()`` reads the environment on every call while none is set, so the API's
    module global is read instead (it is what ``set_tracer_provider`` sets), falling back to the
    call where that global is missing or a provider is named by OTEL_PYTHON_TRACER_PROVIDER.
    """
    if not ENABLED:
        return False
    provider = getattr(_trace, "_TRACER_PROVIDER", _UNKNOWN)
    if provider is _UNKNOWN or (provider is None and _PROVIDER_FROM_ENV):
        provider = _trace.get_tracer_provider()
    return provider is not None and not isinstance(provider, _NO_PROVIDER)


_UNKNOWN = object()
_PROVIDER_FROM_ENV = bool(env_str("OTEL_PYTHON_TRACER_PROVIDER"))
_incoming: contextvars.ContextVar[str] = contextvars.ContextVar("wiggle_incoming_traceparent", default="")


def span(
    name: str, kind: Any = None, parent: str = "", attributes: Mapping[str, Any] | None = None
) -> contextlib.AbstractContextManager[Any]:
    """A span named ``name`` under ``parent`` (a traceparent; "" for the current span), or a no-op."""
    if not active():
        return _NOTHING
    return _span(name, kind, parent, attributes)


@contextlib.contextmanager
def _span(name: str, kind: Any, parent: str, attributes: Mapping[str, Any] | None) -> Iterator[Any]:
    ctx = _propagator.extract({"traceparent": parent}) if parent else None
    tracer = _trace.get_tracer("wiggle")
    # The exception is recorded here, not by the SDK: it formats ``str(exc)``, and an exception
    # whose own __str__ raises (a handler's) then left the span with that second exception in
    # place of the handler's, so the step reported the wrong error (outcomes.py ``failure_of``).
    with tracer.start_as_current_span(
        name,
        context=ctx,
        kind=kind or _trace.SpanKind.INTERNAL,
        attributes=dict(attributes or {}),
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except Exception as exc:
            _record(current, exc)
            raise


def _record(current: Any, exc: Exception) -> None:
    """Mark ``current`` failed with ``exc``, whatever ``exc``'s own ``__str__`` does."""
    try:
        text = str(exc)
    except Exception as broken:  # noqa: BLE001 (its __str__ raised: say so, keep the span)
        text = f"<its str() raised {type(broken).__name__}>"
    kind = type(exc).__name__
    current.add_event(
        "exception",
        {"exception.type": f"{type(exc).__module__}.{type(exc).__qualname__}", "exception.message": text},
    )
    current.set_status(_trace.Status(_trace.StatusCode.ERROR, f"{kind}: {text}" if text else kind))


def traceparent() -> str:
    """The current span as a W3C traceparent, or "" (no extra, no provider, no span)."""
    if not active():
        return ""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent", "")


def outgoing_metadata() -> tuple[tuple[str, str], ...] | None:
    """gRPC metadata carrying the current span, or None."""
    value = traceparent()
    return (("traceparent", value),) if value else None


def set_incoming(metadata: Sequence[Any] | None) -> None:
    """Remember the traceparent of an incoming call (its gRPC metadata) for ``incoming()``."""
    if not metadata or not active():
        return
    for item in metadata:
        key, value = item[0], item[1]
        if key == "traceparent" and isinstance(value, str):
            _incoming.set(value)
            return


def incoming() -> str:
    """The traceparent the current call came with ("" if none)."""
    return _incoming.get()
