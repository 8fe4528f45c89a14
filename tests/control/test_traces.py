"""The driver's spans across what control itself does (mosoo_core/control/_traces.py): a run
control fails (the sweep's `driver_lost`) closes its `driver.turn` with ERROR and the code, a
control restart mid-run (the in-memory maps emptied) still makes the turn and the tool span
from the stored events, and a turn ends once, even when the driver's late end follows."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from sqlmodel import Session

from driver.protocol import DriverEvent
from mosoo_core import tracing
from mosoo_core.control import _traces
from mosoo_core.control.server import sweep_once
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.sessions import DriverInstance, SessionRun
from tests.control.conftest import Booted, boot_fixture

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
DISPATCH_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{DISPATCH_SPAN}-01"
T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Control exports the driver's spans, into memory; nothing is remembered before or after."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_driver_provider", provider)
    _restart_control()
    yield exporter
    _restart_control()
    provider.shutdown()


def _restart_control() -> None:
    """What a control restart loses: everything `_traces` remembers in memory."""
    for remembered in (_traces._turns, _traces._tools, _traces._traceparents):
        remembered.clear()


def _traced_run(db: Session) -> Booted:
    booted = boot_fixture(db)
    run = db.get(SessionRun, booted.run_id)
    assert run is not None
    run.snapshot = {**run.snapshot, "traceparent": TRACEPARENT}
    db.add(run)
    db.commit()
    return booted


def _deliver(db: Session, booted: Booted, *events: tuple[str, str, int, dict[str, Any]]) -> None:
    """What control's ingest does with a driver's batch: store it, commit, make the spans."""
    batch = [
        DriverEvent(
            source_event_id=source,
            run_id=booted.run_id,
            kind=kind,
            occurred_at=(T0 + timedelta(seconds=second)).isoformat(),
            payload=payload,
        )
        for source, kind, second, payload in events
    ]
    db.expire_all()  # the sweep may have changed the run in a session of its own
    instance = db.get(DriverInstance, booted.instance_id)
    assert instance is not None
    stored = driver_plane.ingest_driver_events(db, instance, batch)
    db.commit()
    _traces.record_driver_events(_traces.run_traceparent(db, booted.run_id), batch, stored)


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def _ns(second: int) -> int:
    return int((T0 + timedelta(seconds=second)).timestamp()) * 1_000_000_000


def _lose_the_driver(db: Session, booted: Booted) -> None:
    """Its last heartbeat long ago: the sweep fails its run with `driver_lost`."""
    instance = db.get(DriverInstance, booted.instance_id)
    assert instance is not None
    instance.status = "disconnected"
    instance.disconnected_at = datetime.now(UTC) - timedelta(minutes=5)
    db.add(instance)
    db.commit()
    assert sweep_once(1000) > 0


def test_a_run_the_sweep_fails_ends_its_open_turn_with_error_and_the_code(
    db: Session, exported: InMemorySpanExporter
) -> None:
    booted = _traced_run(db)
    _deliver(db, booted, ("e1", "run.started", 1, {}))
    assert _named(exported, "driver.turn") == []  # open while the run runs
    _lose_the_driver(db, booted)
    (turn,) = _named(exported, "driver.turn")
    assert turn.status.status_code == StatusCode.ERROR
    assert turn.status.description == "driver_lost"
    assert (turn.attributes or {})["mosoo.run_end"] == "run.failed"
    assert turn.start_time == _ns(1)
    assert turn.parent is not None and f"{turn.parent.span_id:016x}" == DISPATCH_SPAN
    # The driver comes back and reports its own end: the turn was ended once, not again.
    _deliver(db, booted, ("e2", "run.completed", 9, {}))
    assert len(_named(exported, "driver.turn")) == 1


def test_a_run_the_sweep_fails_after_a_control_restart_still_ends_its_turn(
    db: Session, exported: InMemorySpanExporter
) -> None:
    booted = _traced_run(db)
    _deliver(db, booted, ("e1", "run.started", 1, {}))
    _restart_control()
    _lose_the_driver(db, booted)
    (turn,) = _named(exported, "driver.turn")
    assert turn.start_time == _ns(1)  # the stored run.started's time
    assert turn.status.status_code == StatusCode.ERROR
    assert turn.status.description == "driver_lost"
    assert turn.context is not None and f"{turn.context.trace_id:032x}" == TRACE_ID


def test_a_control_restart_mid_run_loses_neither_the_turn_nor_the_tool_call(
    db: Session, exported: InMemorySpanExporter
) -> None:
    booted = _traced_run(db)
    _deliver(
        db,
        booted,
        ("e1", "run.started", 1, {}),
        ("e2", "tool.call.started", 2, {"tool_call_id": "call_1", "name": "bash"}),
    )
    _restart_control()
    _deliver(
        db,
        booted,
        ("e3", "tool.call.completed", 4, {"tool_call_id": "call_1", "is_error": False}),
        ("e4", "run.completed", 6, {"final_text": "done"}),
    )
    (turn,) = _named(exported, "driver.turn")
    (tool,) = _named(exported, "driver.tool")
    assert (turn.start_time, turn.end_time) == (_ns(1), _ns(6))
    assert (tool.start_time, tool.end_time) == (_ns(2), _ns(4))
    assert tool.parent is not None and turn.context is not None
    assert tool.parent.span_id == turn.context.span_id
    assert (tool.attributes or {})["mosoo.tool"] == "bash"
    assert turn.status.status_code == StatusCode.UNSET


def test_a_restart_between_the_tool_call_and_the_runs_failure_keeps_the_code(
    db: Session, exported: InMemorySpanExporter
) -> None:
    booted = _traced_run(db)
    _deliver(db, booted, ("e1", "run.started", 1, {}))
    _restart_control()
    _deliver(db, booted, ("e2", "run.failed", 3, {"code": "model_error", "message": "x"}))
    (turn,) = _named(exported, "driver.turn")
    assert (turn.start_time, turn.end_time) == (_ns(1), _ns(3))
    assert (turn.status.status_code, turn.status.description) == (StatusCode.ERROR, "model_error")


def test_without_tracing_a_swept_run_reads_and_remembers_nothing(
    db: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracing, "_driver_provider", None)
    booted = _traced_run(db)
    _deliver(db, booted, ("e1", "run.started", 1, {}))
    _restart_control()
    _lose_the_driver(db, booted)
    assert _traces._turns == {} and _traces._traceparents == {}
