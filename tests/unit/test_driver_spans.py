"""The driver's spans, made by control from the events it stores: a turn from run.started to the
run's end, one tool span per completed call, at the events' own times, under the run's trace;
a re-sent duplicate makes nothing twice, and what is remembered stays bounded."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy.engine import Engine

from driver.protocol import DriverEvent
from mosoo_core import tracing
from mosoo_core.control import _traces
from mosoo_core.streams import StoredEvent
from tests.support.otlp_receiver import OtlpReceiver

RUN = "run_traced"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
DISPATCH_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{DISPATCH_SPAN}-01"


def _event(n: int, kind: str, second: int, **payload: object) -> DriverEvent:
    at = datetime(2026, 12, 1, 12, 0, second, tzinfo=UTC).isoformat()
    return DriverEvent(
        source_event_id=f"e{n}", run_id=RUN, kind=kind, occurred_at=at, payload=payload
    )


def _stored(events: list[DriverEvent], duplicate: bool = False) -> list[StoredEvent]:
    return [
        StoredEvent(
            session_id="s",
            seq=i,
            type=e.kind,
            payload=e.payload,
            run_id=e.run_id,
            source_event_id=e.source_event_id,
            occurred_at=datetime.now(UTC),
            duplicate=duplicate,
        )
        for i, e in enumerate(events)
    ]


@pytest.fixture
def receiver(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    # `engine`: a call or turn control does not remember is looked up in the (empty) log.
    with OtlpReceiver() as receiver:
        tracing.shutdown()
        monkeypatch.setenv(tracing.ENDPOINT_VARIABLE, receiver.endpoint)
        tracing.configure("control")
        try:
            yield receiver
        finally:
            tracing.shutdown()
            for remembered in (_traces._turns, _traces._tools, _traces._traceparents):
                remembered.clear()


def test_a_turn_and_its_tool_call_become_spans_at_the_events_times(
    receiver: OtlpReceiver,
) -> None:
    first = [
        _event(1, "run.started", 1),
        _event(2, "tool.call.started", 2, tool_call_id="call_1", name="bash"),
    ]
    second = [
        _event(3, "tool.call.completed", 4, tool_call_id="call_1", is_error=False),
        _event(4, "run.completed", 6, final_text="done"),
    ]
    _traces.record_driver_events(TRACEPARENT, first, _stored(first))
    _traces.record_driver_events(TRACEPARENT, second, _stored(second))
    # Re-sent after a reconnect: stored as duplicates, nothing made again.
    _traces.record_driver_events(TRACEPARENT, first + second, _stored(first + second, True))
    tracing.shutdown()
    spans = {s.name: s for s in receiver.spans}
    assert len(receiver.spans) == 2
    turn, tool = spans["driver.turn"], spans["driver.tool"]
    assert {turn.service, tool.service} == {"mosoo-driver"}
    assert (turn.trace_id, turn.parent_span_id) == (TRACE_ID, DISPATCH_SPAN)
    assert (tool.trace_id, tool.parent_span_id) == (TRACE_ID, turn.span_id)
    assert (tool.end_ns - tool.start_ns, turn.end_ns - turn.start_ns) == (2 * 10**9, 5 * 10**9)
    assert tool.attributes["mosoo.tool"] == "bash"


def test_an_untraced_run_or_a_call_never_started_makes_no_span(receiver: OtlpReceiver) -> None:
    lone = [_event(5, "tool.call.completed", 3, tool_call_id="call_unknown")]
    _traces.record_driver_events(TRACEPARENT, lone, _stored(lone))
    started = [_event(6, "run.started", 1), _event(7, "run.failed", 2, code="x")]
    _traces.record_driver_events("", started, _stored(started))
    tracing.shutdown()
    assert receiver.spans == []


def test_what_is_remembered_is_bounded(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_traces, "MAX_OPEN", 3)
    for n in range(10):
        event = _event(100 + n, "tool.call.started", 1, tool_call_id=f"call_{n}", name="bash")
        _traces.record_driver_events(TRACEPARENT, [event], _stored([event]))
    assert len(_traces._tools) == 3
