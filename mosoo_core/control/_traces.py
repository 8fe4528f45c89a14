"""The driver's spans, made by control from the events it stores (the sandbox has no network
to export them): `driver.turn` from `run.started` to the run's end, `driver.tool` per tool
call, with the events' own times, parented by the run's `traceparent` (its snapshot). Only
used when tracing exports; what is open lives in bounded in-memory maps."""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode
from sqlmodel import Session

from driver.protocol import DriverEvent
from mosoo_core import streams, tracing
from mosoo_core.db import session_scope
from mosoo_core.tables.sessions import SessionRun

MAX_OPEN = 10_000  # runs (and tool calls) remembered at once; the oldest is forgotten first
END_KINDS = frozenset({"run.completed", "run.failed", "run.cancelled"})

_lock = threading.Lock()
_traceparents: OrderedDict[str, str] = OrderedDict()  # run id -> its traceparent
_turns: OrderedDict[str, trace.Span] = OrderedDict()  # run id -> its open driver.turn
_tools: OrderedDict[tuple[str, str], tuple[int, str]] = OrderedDict()  # start ns, tool name


def _remember(store: OrderedDict[Any, Any], key: Any, value: Any) -> None:
    store[key] = value
    store.move_to_end(key)
    while len(store) > MAX_OPEN:
        store.popitem(last=False)


def run_traceparent(db: Session, run_id: str) -> str:
    """The run's `traceparent` (from its snapshot; "" when it has none)."""
    with _lock:
        known = _traceparents.get(run_id)
    if known is not None:
        return known
    run = db.get(SessionRun, run_id)
    header = str((run.snapshot or {}).get("traceparent") or "") if run is not None else ""
    with _lock:
        _remember(_traceparents, run_id, header)
    return header


def traceparent_of_run(run_id: str) -> str:
    """`run_traceparent` in a session of its own."""
    with session_scope() as db:
        return run_traceparent(db, run_id)


def _nanoseconds(occurred_at: str) -> int:
    try:
        moment = datetime.fromisoformat(occurred_at.replace("Z", "+00:00"))
    except ValueError:
        moment = datetime.now(UTC)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1_000_000_000)


def record_driver_events(
    traceparent: str, events: list[DriverEvent], stored: list[streams.StoredEvent]
) -> None:
    """Open, close or make the driver's spans for the events of one batch stored for the
    first time (a re-sent duplicate changes nothing)."""
    tracer = tracing.driver_tracer()
    if tracer is None or not traceparent:
        return
    fresh = {s.source_event_id for s in stored if not s.duplicate and s.source_event_id}
    for event in events:
        if event.source_event_id in fresh:
            _record(tracer, traceparent, event)


def _record(tracer: trace.Tracer, traceparent: str, event: DriverEvent) -> None:
    at = _nanoseconds(event.occurred_at)
    run_id = event.run_id
    if event.kind == "run.started":
        opened = tracer.start_span(
            "driver.turn",
            context=tracing.context_from(traceparent),
            start_time=at,
            attributes={"mosoo.run_id": run_id},
        )
        with _lock:
            _remember(_turns, run_id, opened)
    elif event.kind == "tool.call.started":
        call = str(event.payload.get("tool_call_id") or "")
        with _lock:
            _remember(_tools, (run_id, call), (at, str(event.payload.get("name") or "")))
    elif event.kind == "tool.call.completed":
        call = str(event.payload.get("tool_call_id") or "")
        with _lock:
            started = _tools.pop((run_id, call), None)
            turn = _turns.get(run_id)
        if started is None:
            return
        parent = (
            trace.set_span_in_context(turn)
            if turn is not None
            else tracing.context_from(traceparent)
        )
        tool = tracer.start_span(
            "driver.tool",
            context=parent,
            start_time=started[0],
            attributes={
                "mosoo.run_id": run_id,
                "mosoo.tool_call_id": call,
                "mosoo.tool": started[1],
            },
        )
        if event.payload.get("is_error"):
            tool.set_status(Status(StatusCode.ERROR))
        tool.end(end_time=max(at, started[0]))
    elif event.kind in END_KINDS:
        with _lock:
            ended = _turns.pop(run_id, None)
        if ended is None:
            return
        ended.set_attribute("mosoo.run_end", event.kind)
        if event.kind == "run.failed":
            ended.set_status(Status(StatusCode.ERROR, str(event.payload.get("code") or "")))
        ended.end(end_time=at)
