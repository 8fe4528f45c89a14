"""One trace per run (OpenTelemetry): off unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set, then each
process exports its spans over OTLP/HTTP as `mosoo-<service>`. Off, the API's no-op tracer
answers and `traceparent()` is "", so nothing is made, sent or stored."""

from __future__ import annotations

import os
import threading
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
_PROPAGATOR = TraceContextTextMapPropagator()
_NO_OP = trace.NoOpTracer()
_lock = threading.Lock()
_provider: Any = None  # the SDK's TracerProvider, when exporting
_driver_provider: Any = None  # control only: the driver's spans, made from its events


def configure(service: str) -> None:
    """Called once at the start of each process (web, worker, control). Exports only when
    `OTEL_EXPORTER_OTLP_ENDPOINT` is set; a second call keeps the first provider."""
    global _provider, _driver_provider
    if not os.environ.get(ENDPOINT_VARIABLE):
        return
    with _lock:
        if _provider is not None:
            return
        _provider = _exporting_provider(f"mosoo-{service}")
        if service == "control":
            _driver_provider = _exporting_provider("mosoo-driver")
        # Not made the API's global provider: Mosoo's spans all come from `tracer()`, and
        # the context (what logs and headers read) needs no provider.


def _exporting_provider(name: str) -> Any:
    # Imported here: a process that does not export never loads the SDK or the exporter.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def enabled() -> bool:
    """Whether this process exports spans (the endpoint was set when it configured)."""
    return _provider is not None


def tracer() -> trace.Tracer:
    """This process's tracer; the API's no-op tracer when not exporting."""
    if _provider is not None:
        return _provider.get_tracer("mosoo")  # type: ignore[no-any-return]
    return _NO_OP


def driver_tracer() -> trace.Tracer | None:
    """Control's tracer for the driver's spans (`mosoo-driver`); None when not exporting."""
    if _driver_provider is None:
        return None
    return _driver_provider.get_tracer("mosoo.driver")  # type: ignore[no-any-return]


def traceparent(span: trace.Span | None = None) -> str:
    """The W3C `traceparent` header of `span` (default: the current one); "" when none."""
    context = trace.set_span_in_context(span) if span is not None else None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=context)
    return carrier.get("traceparent", "")


def context_from(header: str) -> Context:
    """A context whose parent is the span a `traceparent` names (empty, a new trace, when the
    header is "" or malformed)."""
    if not header:
        return Context()
    return _PROPAGATOR.extract({"traceparent": header}, context=Context())


def trace_id_of(header: str) -> str:
    """The trace id a `traceparent` carries ("" when none)."""
    span = trace.get_current_span(context_from(header)).get_span_context()
    return trace.format_trace_id(span.trace_id) if span.is_valid else ""


def shutdown() -> None:
    """Flush and drop this process's providers (tests configure more than once)."""
    global _provider, _driver_provider
    with _lock:
        for provider in (_provider, _driver_provider):
            if provider is not None:
                provider.shutdown()
        _provider = _driver_provider = None
