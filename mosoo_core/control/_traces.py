"""The driver's spans, made by control from the events it stores (the sandbox has no network
to export them): `driver.turn` from `run.started` to the run's end, `driver.tool` per tool
call, with the events' own times, parented by the run's `traceparent` (its snapshot). Only
used when tracing exports.

What is open lives in bounded in-memory maps, so the hot path reads nothing; a miss (control
restarted mid-run, or the entry was forgotten) reads the start from the stored event log
instead, so a restart loses no span. A turn ends once: at the run's first stored end event,
whether the driver sent it or control wrote it (`record_run_ends`, e.g. `driver_lost`)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode
from sqlmodel import Session, col, select

from driver.protocol import PUBLIC_EVENT_TYPES, DriverEvent
from mosoo_core import streams, tracing
from mosoo_core.db import session_scope
from mosoo_core.logs import get_logger
from mosoo_core.tables.sessions import SessionEvent, SessionRun

log = get_logger(__name__)
MAX_OPEN = 10_000  # runs (and tool calls) remembered at once; the oldest is forgotten first
END_KINDS = frozenset({"run.completed", "run.failed", "run.cancelled"})
_STARTED = PUBLIC_EVENT_TYPES["run.started"]
_TOOL_STARTED = PUBLIC_EVENT_TYPES["tool.call.started"]

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
    return _nanoseconds_of(moment)


def _nanoseconds_of(moment: datetime) -> int:
    if moment.tzinfo is None:  # SQLite hands stored times back without their (UTC) zone
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
    seqs = {s.source_event_id: s.seq for s in stored if not s.duplicate and s.source_event_id}
    for event in events:
        if event.source_event_id in seqs:
            _record(tracer, traceparent, event, seqs[event.source_event_id])


def record_run_ends(stored: list[streams.StoredEvent]) -> None:
    """Runs that control ended itself (the sweep's `driver_lost`), not the driver: their open
    turns end at the stored end event, a failure with ERROR status and its code."""
    tracer = tracing.driver_tracer()
    if tracer is None:
        return
    for event in stored:
        if event.type not in END_KINDS or event.duplicate or not event.run_id:
            continue
        traceparent = traceparent_of_run(event.run_id)
        if traceparent:
            _end_turn(
                tracer,
                traceparent,
                event.run_id,
                event.type,
                str(event.payload.get("code") or ""),
                _nanoseconds_of(event.occurred_at),
                event.seq,
            )


def _record(tracer: trace.Tracer, traceparent: str, event: DriverEvent, seq: int) -> None:
    at = _nanoseconds(event.occurred_at)
    run_id = event.run_id
    if event.kind == "run.started":
        with _lock:
            _remember(_turns, run_id, _open_turn(tracer, traceparent, run_id, at))
    elif event.kind == "tool.call.started":
        call = str(event.payload.get("tool_call_id") or "")
        with _lock:
            _remember(_tools, (run_id, call), (at, str(event.payload.get("name") or "")))
    elif event.kind == "tool.call.completed":
        _complete_tool(tracer, traceparent, event, at, seq)
    elif event.kind in END_KINDS:
        code = str(event.payload.get("code") or "")
        _end_turn(tracer, traceparent, run_id, event.kind, code, at, seq)


def _open_turn(tracer: trace.Tracer, traceparent: str, run_id: str, at: int) -> trace.Span:
    return tracer.start_span(
        "driver.turn",
        context=tracing.context_from(traceparent),
        start_time=at,
        attributes={"mosoo.run_id": run_id},
    )


def _complete_tool(
    tracer: trace.Tracer, traceparent: str, event: DriverEvent, at: int, seq: int
) -> None:
    run_id = event.run_id
    call = str(event.payload.get("tool_call_id") or "")
    with _lock:
        started = _tools.pop((run_id, call), None)
        turn = _turns.get(run_id)
    if started is None or turn is None:  # forgotten (a restart): what the log says
        stored = _stored_run(run_id, call)
        started = started or stored.tool_started
        if turn is None and stored.turn_open_at(seq):
            turn = _reopen_turn(tracer, traceparent, run_id, stored.started_at)
    if started is None:
        return
    parent = (
        trace.set_span_in_context(turn) if turn is not None else tracing.context_from(traceparent)
    )
    tool = tracer.start_span(
        "driver.tool",
        context=parent,
        start_time=started[0],
        attributes={"mosoo.run_id": run_id, "mosoo.tool_call_id": call, "mosoo.tool": started[1]},
    )
    if event.payload.get("is_error"):
        tool.set_status(Status(StatusCode.ERROR))
    tool.end(end_time=max(at, started[0]))


def _end_turn(
    tracer: trace.Tracer, traceparent: str, run_id: str, kind: str, code: str, at: int, seq: int
) -> None:
    """The one way a turn ends: the open span, or (forgotten) one made from the stored
    `run.started`, unless an earlier end event already ended it."""
    with _lock:
        ended = _turns.pop(run_id, None)
    if ended is None:
        stored = _stored_run(run_id)
        if stored.first_end_seq != seq or stored.started_at is None:
            return
        ended = _open_turn(tracer, traceparent, run_id, stored.started_at)
    ended.set_attribute("mosoo.run_end", kind)
    if kind == "run.failed":
        ended.set_status(Status(StatusCode.ERROR, code))
    ended.end(end_time=at)


def _reopen_turn(
    tracer: trace.Tracer, traceparent: str, run_id: str, started_at: int | None
) -> trace.Span | None:
    if started_at is None:
        return None
    turn = _open_turn(tracer, traceparent, run_id, started_at)
    with _lock:
        _remember(_turns, run_id, turn)
    return turn


class _StoredRun:
    """What the event log says of a run's turn (and one tool call), read on a miss only."""

    def __init__(self, rows: list[SessionEvent], call: str) -> None:
        self.started_at: int | None = None
        self.first_end_seq: int | None = None
        self.tool_started: tuple[int, str] | None = None
        for row in rows:  # in seq order: the first of each counts
            if row.type == _STARTED and self.started_at is None:
                self.started_at = _nanoseconds_of(row.occurred_at)
            elif row.type in END_KINDS and self.first_end_seq is None:
                self.first_end_seq = row.seq
            elif (
                row.type == _TOOL_STARTED
                and call
                and self.tool_started is None
                and str(row.payload.get("tool_call_id") or "") == call
            ):
                name = str(row.payload.get("name") or "")
                self.tool_started = (_nanoseconds_of(row.occurred_at), name)

    def turn_open_at(self, seq: int) -> bool:
        """Whether the turn had started and not yet ended when event `seq` was stored."""
        return self.started_at is not None and (
            self.first_end_seq is None or self.first_end_seq > seq
        )


def _stored_run(run_id: str, call: str = "") -> _StoredRun:
    kinds = [_STARTED, *END_KINDS] + ([_TOOL_STARTED] if call else [])
    try:
        with session_scope() as db:
            rows = db.exec(
                select(SessionEvent)
                .where(SessionEvent.run_id == run_id, col(SessionEvent.type).in_(kinds))
                .order_by(col(SessionEvent.seq))
            ).all()
            return _StoredRun(list(rows), call)
    except Exception as error:  # a span is not worth failing the driver's (stored) batch
        log.warning("trace.log_read_failed", run_id=run_id, error=type(error).__name__)
        return _StoredRun([], call)
