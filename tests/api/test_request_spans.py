"""The web process's span per API request (mosoo_web/api/request_spans.py): a SERVER span
named by the route template, never the raw path or query; it continues a caller's
`traceparent`, the run's `run.enqueue` (made in the thread pool) is its child, and with
tracing off the middleware is not installed at all."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from sqlalchemy.engine import Engine

from mosoo_core import tracing
from mosoo_web.api import build_api
from mosoo_web.api.request_spans import RequestSpans
from tests.api.conftest import ApiOwner

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """This process exports, into memory (what `tracing.configure` makes, minus OTLP)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_provider", provider)
    yield exporter
    provider.shutdown()


@pytest.fixture
def traced_client(api_env: Engine, exported: InMemorySpanExporter) -> Iterator[TestClient]:
    with TestClient(build_api(), base_url="http://127.0.0.1") as client:
        yield client


def _servers(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]


def test_a_request_span_is_named_by_its_route_and_carries_no_id_query_or_header(
    traced_client: TestClient, owner: ApiOwner, exported: InMemorySpanExporter
) -> None:
    answer = traced_client.get(
        "/api/v1/threads/thr_secretid?token=sk-leak",
        headers={**owner.headers, "X-Private": "do-not-record"},
    )
    assert answer.status_code == 404
    (span,) = _servers(exported)
    assert span.name == "GET /api/v1/threads/{thread_id}"
    assert dict(span.attributes or {}) == {
        "http.request.method": "GET",
        "http.route": "/api/v1/threads/{thread_id}",
        "http.response.status_code": 404,
    }
    assert span.parent is None and span.status.status_code == StatusCode.UNSET
    recorded = repr((span.name, dict(span.attributes or {}), span.events))
    assert "thr_secretid" not in recorded and "sk-leak" not in recorded
    assert owner.token not in recorded and "do-not-record" not in recorded


def test_console_endpoints_and_unmatched_paths_get_low_cardinality_names(
    traced_client: TestClient, exported: InMemorySpanExporter
) -> None:
    assert traced_client.get("/api/health").status_code in (200, 503)
    assert traced_client.get("/api/v1/no/such/thing-01ABC").status_code == 404
    assert traced_client.request("BREW", "/api/health").status_code == 405
    names = [s.name for s in _servers(exported)]
    assert names == ["GET /api/health", "GET /api/v1/{path}", "_OTHER /api/health"]


def test_a_callers_traceparent_is_continued_and_run_enqueue_is_the_requests_child(
    traced_client: TestClient, owner: ApiOwner, exported: InMemorySpanExporter
) -> None:
    thread_id = traced_client.post(
        f"/api/v1/agents/{owner.agent_id}/threads", headers=owner.headers, json={}
    ).json()["thread"]["id"]
    exported.clear()
    posted = traced_client.post(
        f"/api/v1/threads/{thread_id}/events",
        headers={**owner.headers, "traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"},
        json={"type": "user_message", "text": "hello"},
    )
    assert posted.status_code == 202, posted.text
    (request,) = _servers(exported)
    (enqueue,) = [s for s in exported.get_finished_spans() if s.name == "run.enqueue"]
    assert request.name == "POST /api/v1/threads/{thread_id}/events"
    assert request.context is not None and enqueue.context is not None
    assert f"{request.context.trace_id:032x}" == TRACE_ID
    assert request.parent is not None and f"{request.parent.span_id:016x}" == CALLER_SPAN
    assert enqueue.parent is not None and enqueue.parent.span_id == request.context.span_id
    assert enqueue.context.trace_id == request.context.trace_id


def test_a_request_the_server_fails_is_an_error_span_without_the_exception(
    api_env: Engine, exported: InMemorySpanExporter
) -> None:
    api = build_api()
    api.add_api_route("/api/boom/{item_id}", _boom, methods=["GET"])
    with TestClient(api, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        assert client.get("/api/boom/7").status_code == 500
    (span,) = _servers(exported)
    assert span.name == "GET /api/boom/{item_id}"
    assert span.status.status_code == StatusCode.ERROR
    assert (span.attributes or {})["http.response.status_code"] == 500
    assert not span.events  # the exception (and its message) is not recorded


def _boom(item_id: str) -> None:
    raise RuntimeError(f"secret detail {item_id}")


def test_without_tracing_the_middleware_is_not_installed(api_env: Engine) -> None:
    assert not tracing.enabled()
    installed: list[object] = [m.cls for m in build_api().user_middleware]
    assert installed and RequestSpans not in installed


def test_a_global_tracer_provider_gets_no_spans_of_fastapis_own(
    api_env: Engine, owner: ApiOwner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FastAPI's native telemetry is off in both apps: with a process-wide provider (what
    `opentelemetry-instrument` sets), a request that fails still records nothing there, so
    no exception message reaches a span; Mosoo's spans come from its own provider only."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(otel_trace, "_TRACER_PROVIDER", provider)
    assert otel_trace.get_tracer_provider() is provider
    with TestClient(build_api(), base_url="http://127.0.0.1") as client:
        assert client.get("/api/v1/threads/thr_x", headers=owner.headers).status_code == 404
        assert client.get("/api/health").status_code in (200, 503)
    provider.force_flush()
    assert exporter.get_finished_spans() == ()
