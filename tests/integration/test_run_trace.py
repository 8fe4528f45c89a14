"""One trace per run, end to end: a real `mosoo web` takes the message over HTTP (continuing
the caller's `traceparent`), and its request span, the worker, control and the driver's spans
(made by control from its events) reach a real OTLP/HTTP receiver under one trace id,
parented in order, and the provider sees that trace id too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import identity, tracing
from mosoo_core.sessions import diagnostics
from mosoo_core.tables.sessions import SessionRun
from tests.support.openai_server import TextTurn, ToolCall, ToolCallsTurn
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.support.redis_db import db_number
from tests.support.stack import make_agent, new_thread, runtime_stack, send, wait_run

# Once, on PostgreSQL, as the other real-stack journeys: the spans cross processes, not SQL
# dialects (test_run_end_to_end keeps the core run path on SQLite).
pytestmark = pytest.mark.integration
REDIS_DB = db_number(10)
REQUEST = "POST /api/v1/threads/{thread_id}/events"
EXPECTED = {
    REQUEST: "mosoo-web",
    "run.enqueue": "mosoo-web",
    "run.dispatch": "mosoo-worker",
    "control.ingest": "mosoo-control",
    "gateway.upstream": "mosoo-control",
    "driver.turn": "mosoo-driver",
    "driver.tool": "mosoo-driver",
}
# The caller's own trace, which the request continues.
CALLER_TRACE = "5b8efff798038103d269b633813fc60c"
CALLER_SPAN = "eee19b7ec3c1b174"
SERVER_KIND = 2  # OTLP's SPAN_KIND_SERVER


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


def _complete(spans: list[ReceivedSpan]) -> bool:
    names = {s.name for s in spans if s.trace_id == CALLER_TRACE}
    return set(EXPECTED) <= names and sum(s.name == "gateway.upstream" for s in spans) >= 2


def test_one_message_makes_one_trace_from_the_request_to_the_model_call(
    engine: Engine,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    receiver: OtlpReceiver,
) -> None:
    exporting = {
        tracing.ENDPOINT_VARIABLE: receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    with runtime_stack(
        engine, database_url, tmp_path, monkeypatch, redis_db=REDIS_DB, extra_env=exporting
    ) as stack:
        web = stack.start_web()
        stack.model.add(
            ToolCallsTurn([ToolCall("bash", {"command": "pwd"}, id="call_pwd")]),
            TextTurn("In /workspace.", usage={"prompt_tokens": 5, "completion_tokens": 3}),
        )
        owner = make_agent(stack.engine, stack.model.base_url, "sk-trace-e2e")
        thread_id = new_thread(stack.engine, owner)
        with Session(stack.engine) as db:
            token = identity.create_access_token(db, owner.account_id, "trace e2e").secret
            db.commit()
        posted = httpx.post(
            f"{web}/api/v1/threads/{thread_id}/events",
            headers={
                "Authorization": f"Bearer {token}",
                "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01",
            },
            json={"type": "user_message", "text": "pwd?"},
            timeout=30,
        )
        assert posted.status_code == 202, posted.text
        run = wait_run(stack.engine, posted.json()["run"]["id"])
        assert run.status == "completed", (run.error_code, run.error_message)
        spans = receiver.wait_for(_complete, timeout=30)
        with Session(stack.engine) as db:
            stored = db.get(SessionRun, run.id)
            assert stored is not None
            traceparent = stored.snapshot["traceparent"]
            found = diagnostics.run_diagnostics(db, owner.account_id, run.id)
        model_requests = stack.model.chat_requests
        worker_log = (stack.logs / "worker.log").read_text()

    # The web's other requests (its health checks) are traces of their own.
    assert {s.name for s in spans if s.trace_id != CALLER_TRACE} <= {"GET /api/health"}
    spans = [s for s in spans if s.trace_id == CALLER_TRACE]
    by_name: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    (request,) = by_name[REQUEST]
    (enqueue,) = by_name["run.enqueue"]
    (dispatch,) = by_name["run.dispatch"]
    (turn,) = by_name["driver.turn"]
    (tool,) = by_name["driver.tool"]
    assert {s.name: s.service for s in spans} == EXPECTED
    # The request: a server span named by its route, under the caller's span.
    assert (request.parent_span_id, request.kind) == (CALLER_SPAN, SERVER_KIND)
    assert request.attributes == {
        "http.request.method": "POST",
        "http.route": "/api/v1/threads/{thread_id}/events",
        "http.response.status_code": 202,
    }
    # Parent links in order: the request, the enqueue under it, the worker under that, the
    # rest under the dispatch (the boot payload's traceparent), the tool call under the turn.
    assert enqueue.parent_span_id == request.span_id
    assert dispatch.parent_span_id == enqueue.span_id
    assert turn.parent_span_id == dispatch.span_id
    assert tool.parent_span_id == turn.span_id
    assert tool.attributes["mosoo.tool_call_id"] == "call_pwd"
    assert request.start_ns <= enqueue.start_ns <= enqueue.end_ns <= request.end_ns
    assert turn.start_ns <= tool.start_ns <= tool.end_ns <= turn.end_ns
    assert all(s.parent_span_id == dispatch.span_id for s in by_name["control.ingest"])
    gateway = by_name["gateway.upstream"]
    assert all(s.parent_span_id == dispatch.span_id for s in gateway)
    assert enqueue.start_ns <= dispatch.start_ns <= turn.start_ns
    # The run froze the dispatch span's header; Diagnostics show its trace id.
    assert traceparent.split("-")[1:3] == [dispatch.trace_id, dispatch.span_id]
    assert found.trace_id == CALLER_TRACE
    # The provider got each call's traceparent: the trace's id, its gateway span's id.
    sent = [r.headers["traceparent"].split("-") for r in model_requests]
    assert len(sent) == 2 and {part[1] for part in sent} == {CALLER_TRACE}
    assert {part[2] for part in sent} <= {s.span_id for s in gateway}
    # The worker's JSON lines written inside its dispatch span carry the trace's ids.
    assert f'"trace_id": "{CALLER_TRACE}"' in worker_log


def test_without_an_endpoint_a_run_exports_nothing_and_freezes_no_traceparent(
    engine: Engine,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    receiver: OtlpReceiver,
) -> None:
    monkeypatch.delenv(tracing.ENDPOINT_VARIABLE, raising=False)
    with runtime_stack(engine, database_url, tmp_path, monkeypatch, redis_db=REDIS_DB) as stack:
        tracing.shutdown()
        tracing.configure("web")
        assert not tracing.enabled()
        stack.model.add(TextTurn("Hello."))
        owner = make_agent(stack.engine, stack.model.base_url, "sk-trace-off")
        run = wait_run(
            stack.engine,
            send(stack.engine, owner.account_id, new_thread(stack.engine, owner), "hi"),
        )
        assert run.status == "completed", (run.error_code, run.error_message)
        with Session(stack.engine) as db:
            found = diagnostics.run_diagnostics(db, owner.account_id, run.id)
        assert found.snapshot["traceparent"] == "" and found.trace_id == ""
        assert all("traceparent" not in r.headers for r in stack.model.chat_requests)
    assert receiver.posts == 0 and receiver.spans == []
