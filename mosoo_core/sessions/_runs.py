"""Runs move through their statuses as the driver reports; the thread follows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import defer
from sqlmodel import Session, col, select

from driver.protocol import PUBLIC_EVENT_TYPES, DriverEvent
from mosoo_core.clock import utcnow
from mosoo_core.sessions import _queue
from mosoo_core.sessions._drivers import DriverRefused
from mosoo_core.sessions._events import NewEvent, append_events, append_to_threads
from mosoo_core.sessions._marks import mark_driver_events
from mosoo_core.streams import StoredEvent
from mosoo_core.tables.sessions import ACTIVE_RUN_STATUSES, AgentSession, DriverInstance, SessionRun

DRIVER_LOST_AFTER = timedelta(seconds=120)


def _parse_time(value: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else None


def set_session_status(
    db: Session, session: AgentSession, status: str, **extra: Any
) -> list[StoredEvent]:
    """Change a thread's status and log a `session.status` event (nothing when unchanged)."""
    if session.status == status:
        return []
    session.status = status
    db.add(session)
    db.flush()
    return append_events(
        db, session.id, [NewEvent(type="session.status", payload={"status": status, **extra})]
    )


def finish_run(
    db: Session,
    run: SessionRun,
    status: str,
    *,
    code: str | None = None,
    message: str | None = None,
    retryable: bool | None = None,
    emit_event: bool = False,
    now: datetime | None = None,
) -> list[StoredEvent]:
    """Close a run (completed, failed, cancelled, expired). The thread's oldest message
    waiting its turn becomes its next run (`queued`: the worker dispatches it once this run's
    sandbox is released, see `runtime.run_queue`); with none the thread is idle again."""
    if run.status not in ACTIVE_RUN_STATUSES:
        return []
    run.status = status
    run.finished_at = now or utcnow()
    if status == "failed":
        run.error_code, run.error_message, run.error_retryable = code, message, retryable
    db.add(run)
    stored: list[StoredEvent] = []
    if emit_event:
        payload: dict[str, Any] = {}
        if status == "failed":
            payload = {"code": code, "message": message, "retryable": bool(retryable)}
        stored += append_events(
            db, run.session_id, [NewEvent(type=f"run.{status}", payload=payload, run_id=run.id)]
        )
    session = _queue.lock_thread(db, run.session_id)
    # Another active run: this one was finished twice by racing processes; one promotes.
    if session is not None and _queue.active_run(db, session.id) is None:
        promoted = _queue.promote_oldest_pending(db, session.id)
        stored += set_session_status(db, session, "running" if promoted else "idle")
    return stored


_RUN_STATUS_BY_KIND = {
    "run.started": "running",
    "permission.requested": "waiting_input",
    "permission.resolved": "running",
}
_FINISHED_BY_KIND = {
    "run.completed": "completed",
    "run.cancelled": "cancelled",
    "run.failed": "failed",
}


@dataclass(frozen=True)
class DriverBatch:
    """One `events` message of a driver. `may_repeat`: it may hold events sent before (a
    driver re-sends what was not acknowledged after it reconnects), so each is looked up
    among the stored ones; without, a repeated one is refused by the unique index instead."""

    instance_id: str
    events: Sequence[DriverEvent]
    may_repeat: bool = True


# The event kinds that change their run (`_apply`); the others only add to its thread's log.
_TRANSITION_KINDS = frozenset({*_RUN_STATUS_BY_KIND, *_FINISHED_BY_KIND})
# Not the run's spec, input or setup log (kilobytes each, read again for every batch).
_LARGE_RUN_COLUMNS = ("snapshot", "input_text", "attachments", "setup_log")


def ingest_driver_events(
    db: Session, instance: DriverInstance, events: list[DriverEvent]
) -> list[StoredEvent]:
    """Store a driver's batch (one transaction, duplicates dropped) and apply run transitions.
    Events for a run that this driver instance does not serve are refused."""
    return ingest_driver_batches(db, [DriverBatch(instance.id, events)])[0]


def ingest_driver_batches(db: Session, batches: Sequence[DriverBatch]) -> list[list[StoredEvent]]:
    """Store the batches of several drivers in the caller's transaction, with a query or
    statement for all of them at each step, and apply their run transitions. Each batch is
    answered with its events one for one (duplicates flagged, with their stored seq), then
    what its transitions stored. A batch naming a run its driver does not serve refuses
    the call (`foreign_run`) before anything is stored."""
    run_ids = {event.run_id for batch in batches for event in batch.events}
    # Who serves each run and its thread, as plain columns: most events change no run, and
    # loading tens of runs as ORM objects was a fifth of a 50-thread group's time.
    served = {
        row[0]: (row[1], row[2])
        for row in db.execute(
            select(SessionRun.id, SessionRun.driver_instance_id, SessionRun.session_id).where(
                col(SessionRun.id).in_(run_ids)
            )
        ).all()
    }
    for batch in batches:
        for run_id in {event.run_id for event in batch.events}:
            server = served.get(run_id)
            if server is None or server[0] != batch.instance_id:
                raise DriverRefused("foreign_run", "event names a run this driver does not serve")
    # Looked up once per run, not per event: thousands of events a second pass through here.
    thread_of = {run_id: session_id for run_id, (_, session_id) in served.items()}
    by_thread: dict[str, list[NewEvent]] = {}
    for batch in batches:
        fresh_batch = not batch.may_repeat
        for event in batch.events:
            by_thread.setdefault(thread_of[event.run_id], []).append(
                NewEvent(
                    type=PUBLIC_EVENT_TYPES.get(event.kind, event.kind),
                    payload=event.payload,
                    run_id=event.run_id,
                    source_event_id=event.source_event_id,
                    occurred_at=_parse_time(event.occurred_at),
                    fresh=fresh_batch,
                )
            )
    answers = {
        session_id: iter(stored) for session_id, stored in append_to_threads(db, by_thread).items()
    }
    results: list[list[StoredEvent]] = []
    for batch in batches:
        stored = [next(answers[thread_of[event.run_id]]) for event in batch.events]
        fresh: dict[str, list[DriverEvent]] = {}
        for event, result in zip(batch.events, list(stored), strict=True):
            if not result.duplicate:
                fresh.setdefault(event.run_id, []).append(event)
                if event.kind in _TRANSITION_KINDS:
                    stored += _apply(db, _run_to_change(db, event.run_id), event)
        for run_id, run_events in fresh.items():
            mark_driver_events(db, run_id, run_events)
        results.append(stored)
    return results


def _run_to_change(db: Session, run_id: str) -> SessionRun:
    run = db.get(
        SessionRun,
        run_id,
        options=[defer(getattr(SessionRun, name)) for name in _LARGE_RUN_COLUMNS],
    )
    assert run is not None  # read above, in this transaction
    return run


def _apply(db: Session, run: SessionRun, event: DriverEvent) -> list[StoredEvent]:
    if event.kind in _RUN_STATUS_BY_KIND and run.status in ACTIVE_RUN_STATUSES:
        run.status = _RUN_STATUS_BY_KIND[event.kind]
        if event.kind == "run.started" and run.started_at is None:
            run.started_at = utcnow()
        db.add(run)
        return []
    status = _FINISHED_BY_KIND.get(event.kind)
    if status is None:
        return []
    if status != "failed":
        return finish_run(db, run, status)
    payload = event.payload
    return finish_run(
        db,
        run,
        "failed",
        code=str(payload.get("code") or "run_failed")[:64],
        message=str(payload.get("message") or "")[:2000],
        retryable=bool(payload.get("retryable")),
    )


def sweep_lost_drivers(
    db: Session, *, heartbeat_interval: timedelta, now: datetime | None = None
) -> list[StoredEvent]:
    """Missed heartbeats: the instance is `disconnected` and its threads `rescheduling`;
    120 s later their active runs fail with `driver_lost` and the threads are usable again."""
    now = now or utcnow()
    stored: list[StoredEvent] = []
    silent_since = now - 3 * heartbeat_interval
    for instance in db.exec(
        select(DriverInstance).where(
            DriverInstance.status == "connected",
            col(DriverInstance.last_heartbeat_at) < silent_since,
        )
    ).all():
        instance.status = "disconnected"
        instance.disconnected_at = instance.last_heartbeat_at or now
        db.add(instance)
    for instance in db.exec(
        select(DriverInstance).where(DriverInstance.status == "disconnected")
    ).all():
        active = db.exec(
            select(SessionRun).where(
                SessionRun.driver_instance_id == instance.id,
                col(SessionRun.status).in_(ACTIVE_RUN_STATUSES),
            )
        ).all()
        lost = (
            instance.disconnected_at is not None
            and instance.disconnected_at <= now - DRIVER_LOST_AFTER
        )
        for run in active:
            session = db.get(AgentSession, run.session_id)
            if lost:
                stored += finish_run(
                    db,
                    run,
                    "failed",
                    code="driver_lost",
                    message="The sandbox's driver stopped answering for 120 seconds.",
                    retryable=True,
                    emit_event=True,
                    now=now,
                )
            elif session is not None:
                stored += set_session_status(db, session, "rescheduling")
        if lost:
            instance.status = "lost"
            instance.resume_token_hash = None
            db.add(instance)
    return stored
