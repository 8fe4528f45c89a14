"""Appending to a thread's event log: one seq per event, duplicates dropped, in one transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from mosoo_core.clock import utcnow
from mosoo_core.streams import StoredEvent
from mosoo_core.tables.sessions import AgentSession, SessionEvent


@dataclass(frozen=True)
class NewEvent:
    type: str
    payload: dict[str, Any]
    run_id: str | None = None
    source_event_id: str | None = None
    occurred_at: datetime | None = None


def stored_event(row: SessionEvent, duplicate: bool = False) -> StoredEvent:
    return StoredEvent(
        session_id=row.session_id,
        seq=row.seq,
        type=row.type,
        payload=row.payload,
        run_id=row.run_id,
        source_event_id=row.source_event_id,
        occurred_at=row.occurred_at,
        duplicate=duplicate,
    )


def _reserve_seqs(db: Session, session_id: str, count: int) -> int:
    """Atomically reserve `count` seqs; returns the last one (works on SQLite and PostgreSQL)."""
    table = AgentSession.__table__  # type: ignore[attr-defined]
    result = db.execute(
        sa.update(table)
        .where(table.c.id == session_id)
        .values(last_seq=table.c.last_seq + count, updated_at=utcnow())
        .returning(table.c.last_seq)
    ).scalar_one()
    return int(result)


def append_events(db: Session, session_id: str, events: list[NewEvent]) -> list[StoredEvent]:
    """Store events in order with consecutive seqs. An event whose source_event_id is already
    stored is not stored again; its original seq is returned (flagged duplicate)."""
    source_ids = [e.source_event_id for e in events if e.source_event_id]
    existing: dict[str, SessionEvent] = {}
    if source_ids:
        rows = db.exec(
            select(SessionEvent).where(
                SessionEvent.session_id == session_id,
                col(SessionEvent.source_event_id).in_(source_ids),
            )
        ).all()
        existing = {row.source_event_id: row for row in rows if row.source_event_id}
    fresh: list[NewEvent] = []
    seen: set[str] = set()
    for event in events:
        if event.source_event_id and (
            event.source_event_id in existing or event.source_event_id in seen
        ):
            continue
        if event.source_event_id:
            seen.add(event.source_event_id)
        fresh.append(event)
    results: list[StoredEvent] = []
    if fresh:
        last = _reserve_seqs(db, session_id, len(fresh))
        first = last - len(fresh) + 1
        now = utcnow()
        for offset, event in enumerate(fresh):
            row = SessionEvent(
                session_id=session_id,
                seq=first + offset,
                run_id=event.run_id,
                type=event.type,
                source_event_id=event.source_event_id,
                payload=event.payload,
                occurred_at=event.occurred_at or now,
                created_at=now,
            )
            db.add(row)
            results.append(stored_event(row))
        db.flush()
    # Answer in the caller's order; a duplicate answers with its original seq.
    ordered: list[StoredEvent] = []
    fresh_results = iter(results)
    answered: set[str] = set()
    for event in events:
        source = event.source_event_id
        if source and source in answered:
            continue
        if source and source in existing:
            ordered.append(stored_event(existing[source], duplicate=True))
        else:
            ordered.append(next(fresh_results))
        if source:
            answered.add(source)
    return ordered


def read_events(
    db: Session, session_id: str, *, after_seq: int = 0, limit: int = 500
) -> list[StoredEvent]:
    rows = db.exec(
        select(SessionEvent)
        .where(SessionEvent.session_id == session_id, SessionEvent.seq > after_seq)
        .order_by(col(SessionEvent.seq))
        .limit(limit)
    ).all()
    return [stored_event(row) for row in rows]
