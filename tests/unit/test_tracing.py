"""mosoo_core.tracing: off unless OTEL_EXPORTER_OTLP_ENDPOINT is set, then W3C headers of real
spans that round-trip, exported to a real OTLP/HTTP receiver; JSON log lines carry the ids."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator

import pytest
import structlog
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from mosoo_core import logs, tracing
from tests.support.otlp_receiver import OtlpReceiver


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    tracing.shutdown()
    yield
    tracing.shutdown()


def test_without_an_endpoint_nothing_is_configured_and_traceparent_is_empty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(tracing.ENDPOINT_VARIABLE, raising=False)
    tracing.configure("web")
    assert not tracing.enabled()
    assert tracing.driver_tracer() is None
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)
    with tracing.tracer().start_as_current_span("run.enqueue") as span:
        assert not span.is_recording()
        assert tracing.traceparent() == ""
    assert tracing.traceparent() == ""
    assert tracing.trace_id_of("") == ""


def test_with_an_endpoint_a_spans_traceparent_round_trips_and_is_exported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with OtlpReceiver() as receiver:
        monkeypatch.setenv(tracing.ENDPOINT_VARIABLE, receiver.endpoint)
        tracing.configure("worker")
        assert tracing.enabled()
        with tracing.tracer().start_as_current_span("run.dispatch") as span:
            header = tracing.traceparent()
            context = span.get_span_context()
        version, trace_id, span_id, flags = header.split("-")
        assert (version, trace_id, span_id) == (
            "00",
            trace.format_trace_id(context.trace_id),
            trace.format_span_id(context.span_id),
        )
        assert int(flags, 16) & 1  # sampled
        assert tracing.trace_id_of(header) == trace.format_trace_id(context.trace_id)
        with tracing.tracer().start_as_current_span(
            "child", context=tracing.context_from(header)
        ) as child:
            assert child.get_span_context().trace_id == context.trace_id
        tracing.shutdown()  # flushes
        spans = {s.name: s for s in receiver.spans}
    assert spans["run.dispatch"].service == "mosoo-worker"
    assert spans["child"].parent_span_id == trace.format_span_id(context.span_id)
    assert spans["child"].trace_id == trace.format_trace_id(context.trace_id)


def test_a_malformed_traceparent_starts_a_new_trace() -> None:
    assert (
        not trace.get_current_span(tracing.context_from("00-nonsense")).get_span_context().is_valid
    )
    assert tracing.trace_id_of("garbage") == ""


def test_control_gets_a_second_provider_for_the_drivers_spans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with OtlpReceiver() as receiver:
        monkeypatch.setenv(tracing.ENDPOINT_VARIABLE, receiver.endpoint)
        tracing.configure("control")
        driver = tracing.driver_tracer()
        assert driver is not None
        driver.start_span("driver.turn", start_time=1_000, context=tracing.context_from("")).end(
            end_time=2_000
        )
        tracing.shutdown()
        (span,) = receiver.spans
    assert (span.service, span.start_ns, span.end_ns) == ("mosoo-driver", 1_000, 2_000)


def test_json_log_lines_carry_trace_and_span_ids_only_inside_a_valid_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with OtlpReceiver() as receiver:
        monkeypatch.setenv(tracing.ENDPOINT_VARIABLE, receiver.endpoint)
        tracing.configure("web")
        out = io.StringIO()
        structlog.configure(
            processors=[logs.add_trace_ids, structlog.processors.JSONRenderer()],
            logger_factory=structlog.PrintLoggerFactory(file=out),
        )
        try:
            log = structlog.get_logger("t")
            log.info("outside")
            with tracing.tracer().start_as_current_span("run.enqueue") as span:
                log.info("inside")
        finally:
            structlog.reset_defaults()
            tracing.shutdown()
    outside, inside = (json.loads(line) for line in out.getvalue().splitlines())
    assert "trace_id" not in outside and "span_id" not in outside
    assert inside["trace_id"] == trace.format_trace_id(span.get_span_context().trace_id)
    assert inside["span_id"] == trace.format_span_id(span.get_span_context().span_id)


def test_the_untraced_path_costs_next_to_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a timed assertion: prints what the no-op path costs per call."""
    monkeypatch.delenv(tracing.ENDPOINT_VARIABLE, raising=False)
    tracing.configure("web")
    calls = 100_000
    began = time.perf_counter()
    for _ in range(calls):
        if tracing.enabled():  # what every traced call site asks first
            pytest.fail("tracing is off")
    guard = (time.perf_counter() - began) / calls
    began = time.perf_counter()
    for _ in range(calls):
        tracing.traceparent()
    header = (time.perf_counter() - began) / calls
    began = time.perf_counter()
    event: dict[str, object] = {}
    for _ in range(calls):
        logs.add_trace_ids(None, "info", event)
    log_ids = (time.perf_counter() - began) / calls
    print(
        f"\nno-op tracing: enabled() {guard * 1e9:.0f} ns, traceparent() {header * 1e9:.0f} ns, "
        f"log processor {log_ids * 1e9:.0f} ns per call"
    )
    assert event == {}
