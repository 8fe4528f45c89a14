"""Appending to a thread's event log: one seq per event, duplicates dropped, in one transaction."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa
from sqlmodel import Session, col, select

from mosoo_core.clock import utcnow
from mosoo_core.ids import new_id
from mosoo_core.streams import StoredEvent
from mosoo_core.tables.sessions import AgentSession, SessionEvent


@dataclass(frozen=True)
class NewEvent:
    type: str
    payload: dict[str, Any]
    run_id: str | None = None
    source_event_id: str | None = None
    occurred_at: datetime | None = None
    # Sent for the first time (its sender re-sends nothing): not looked up among the stored
    # events. Wrongly so, the unique index on (thread, source_event_id) refuses it instead.
    fresh: bool = False


LOOKUP_CHUNK = 500  # (thread, source_event_id) pairs looked up a query at the most
# The order of an event row's values for _EventInsert.
EVENT_COLUMNS = (
    "id",
    "session_id",
    "seq",
    "run_id",
    "type",
    "source_event_id",
    "payload",
    "occurred_at",
    "created_at",
)


@dataclass(frozen=True)
class _EventInsert:
    """How a database stores a group of event rows, prepared once per dialect, with the two
    bind conversions the rows need (SQLAlchemy's own, so a row is stored as it was; the
    other columns are text and integers the database driver takes as they are).

    Control's event writer stores every event through it. `db.execute(insert, rows)`
    compiled each row's parameters in a generic loop, and psycopg's executemany then sent
    one statement a row: a sixth of the writer's time on SQLite, two fifths on PostgreSQL
    (`bench/events.py --writer`). SQLite (and any other driver) gets the same `INSERT` run
    by the driver's executemany; psycopg gets `COPY ... FROM STDIN`, one stream of rows in
    the same transaction, its errors raised as SQLAlchemy's (a unique index's refusal is
    still an IntegrityError)."""

    statement: str
    style: Literal["copy", "positional", "named"]
    payload: Callable[[Any], Any]
    moment: Callable[[datetime], Any]

    @classmethod
    def of(cls, connection: sa.Connection) -> _EventInsert:
        dialect = connection.dialect
        key = (dialect.name, dialect.driver, dialect.paramstyle)
        found = _EVENT_INSERTS.get(key)
        if found is not None:
            return found
        table = SessionEvent.__table__  # type: ignore[attr-defined]

        def bind(column: str) -> Callable[[Any], Any]:
            process = table.c[column].type.dialect_impl(dialect).bind_processor(dialect)
            return process or (lambda value: value)

        payload, moment = bind("payload"), bind("occurred_at")
        if dialect.driver == "psycopg":
            quote = dialect.identifier_preparer.quote
            columns = ", ".join(quote(column) for column in EVENT_COLUMNS)
            made = cls(f"COPY {quote(table.name)} ({columns}) FROM STDIN", "copy", payload, moment)
        else:
            compiled = sa.insert(table).compile(dialect=dialect, column_keys=list(EVENT_COLUMNS))
            positional = compiled.positiontup is not None
            assert not positional or tuple(compiled.positiontup or ()) == EVENT_COLUMNS
            made = cls(str(compiled), "positional" if positional else "named", payload, moment)
        _EVENT_INSERTS[key] = made
        return made

    def run(self, connection: sa.Connection, rows: list[tuple[Any, ...]]) -> None:
        if self.style == "positional":
            connection.exec_driver_sql(self.statement, rows)
        elif self.style == "named":
            connection.exec_driver_sql(
                self.statement, [dict(zip(EVENT_COLUMNS, row, strict=True)) for row in rows]
            )
        else:
            raw = connection.connection.driver_connection
            assert raw is not None
            try:
                with raw.cursor() as cursor, cursor.copy(self.statement) as copy:
                    for row in rows:
                        copy.write_row(row)
            except raw.Error as error:  # psycopg's own: SQLAlchemy's class for it, as usual
                raise sa.exc.DBAPIError.instance(
                    self.statement, None, error, raw.Error, dialect=connection.dialect
                ) from error


_EVENT_INSERTS: dict[tuple[str, str, str], _EventInsert] = {}  # by dialect, driver, paramstyle


def stored_event(row: SessionEvent | sa.Row[Any], duplicate: bool = False) -> StoredEvent:
    """A stored row (an ORM row or the table's columns) as the streams carry it."""
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


def _reserve_seqs(db: Session, counts: Mapping[str, int], now: datetime) -> dict[str, int]:
    """Atomically reserve `counts[thread]` seqs on each thread, in one statement; returns
    each thread's last reserved seq (works on SQLite and PostgreSQL)."""
    params: dict[str, Any] = {"threads": list(counts), "now": now}
    for index, (thread_id, count) in enumerate(counts.items()):
        params[f"thread_{index}"], params[f"count_{index}"] = thread_id, count
    rows = db.execute(_reserve_statement(len(counts)), params).all()
    reserved = {row[0]: int(row[1]) for row in rows}
    if len(reserved) != len(counts):
        raise sa.exc.NoResultFound(f"no thread {sorted(set(counts) - set(reserved))}")
    return reserved


@functools.lru_cache(maxsize=128)
def _reserve_statement(threads: int) -> sa.Update:
    """The reservation for that many threads, made once: its values are bound parameters,
    so SQLAlchemy compiles it once too (the writer reserves for tens of threads a group, and
    building the CASE and its cache key each time was a fifth of a 50-thread group's time)."""
    table = AgentSession.__table__  # type: ignore[attr-defined]
    added = sa.case(
        *(
            (
                table.c.id == sa.bindparam(f"thread_{index}", type_=table.c.id.type),
                sa.bindparam(f"count_{index}", type_=sa.Integer()),
            )
            for index in range(threads)
        )
    )
    return (
        sa.update(table)
        .where(table.c.id.in_(sa.bindparam("threads", expanding=True)))
        .values(
            last_seq=table.c.last_seq + added,
            updated_at=sa.bindparam("now", type_=table.c.updated_at.type),
        )
        .returning(table.c.id, table.c.last_seq)
    )


def _stored(
    db: Session, events_by_thread: Mapping[str, Sequence[NewEvent]]
) -> dict[tuple[str, str], StoredEvent]:
    """The events already stored under these threads' source_event_ids, by (thread, id)."""
    wanted = sorted(
        {
            (session_id, event.source_event_id)
            for session_id, events in events_by_thread.items()
            for event in events
            if event.source_event_id and not event.fresh
        }
    )
    table = SessionEvent.__table__  # type: ignore[attr-defined]
    found: dict[tuple[str, str], StoredEvent] = {}
    for start in range(0, len(wanted), LOOKUP_CHUNK):
        chunk = set(wanted[start : start + LOOKUP_CHUNK])
        rows = db.execute(
            sa.select(table).where(
                table.c.session_id.in_({key[0] for key in chunk}),
                table.c.source_event_id.in_({key[1] for key in chunk}),
            )
        ).all()
        for row in rows:
            if (row.session_id, row.source_event_id) in chunk:
                found[(row.session_id, row.source_event_id)] = stored_event(row, duplicate=True)
    return found


def append_to_threads(
    db: Session, events_by_thread: Mapping[str, Sequence[NewEvent]]
) -> dict[str, list[StoredEvent]]:
    """Store events on several threads at once, each thread's in order with consecutive
    seqs: a query for duplicates (none for `fresh` events), one statement reserving every
    thread's seqs, one insert.
    Answers each thread's events one for one: an event whose source_event_id is already
    stored (or came earlier in this call) is not stored again and answers with the stored
    one, flagged duplicate."""
    db.flush()  # what this unit of work added first (the run these events name)
    known = _stored(db, events_by_thread)
    counts: dict[str, int] = {}
    for session_id, events in events_by_thread.items():
        sources = {event.source_event_id for event in events if event.source_event_id}
        repeats = sum(1 for event in events if event.source_event_id) - len(sources)
        count = (
            len(events) - repeats - sum(1 for source in sources if (session_id, source) in known)
        )
        if count:
            counts[session_id] = count
    now = utcnow()
    next_seq = {
        session_id: last - counts[session_id] + 1
        for session_id, last in (_reserve_seqs(db, counts, now) if counts else {}).items()
    }
    connection = db.connection()
    insert = _EventInsert.of(connection)
    created_at = insert.moment(now)
    rows: list[tuple[Any, ...]] = []
    answers: dict[str, list[StoredEvent]] = {}
    stored_now: dict[tuple[str, str], StoredEvent] = {}
    for session_id, events in events_by_thread.items():
        answered = answers.setdefault(session_id, [])
        for event in events:
            source = event.source_event_id
            if source and (session_id, source) in known:
                answered.append(known[(session_id, source)])
                continue
            if source and (session_id, source) in stored_now:  # given twice in this call
                answered.append(replace(stored_now[(session_id, source)], duplicate=True))
                continue
            seq, occurred_at = next_seq[session_id], event.occurred_at or now
            next_seq[session_id] += 1
            row = (new_id(), session_id, seq, event.run_id, event.type, source)
            rows.append(
                (*row, insert.payload(event.payload), insert.moment(occurred_at), created_at)
            )
            stored = StoredEvent(
                session_id=session_id,
                seq=seq,
                type=event.type,
                payload=event.payload,
                run_id=event.run_id,
                source_event_id=source,
                occurred_at=occurred_at,
            )
            answered.append(stored)
            if source:
                stored_now[(session_id, source)] = stored
    if rows:
        insert.run(connection, rows)
    return answers


def append_events(db: Session, session_id: str, events: list[NewEvent]) -> list[StoredEvent]:
    """Store events in order with consecutive seqs. An event whose source_event_id is already
    stored is not stored again; its original seq is returned (flagged duplicate). A
    source_event_id given twice answers once."""
    answers = append_to_threads(db, {session_id: events})[session_id]
    seen: set[str] = set()
    ordered: list[StoredEvent] = []
    for event, answer in zip(events, answers, strict=True):
        if event.source_event_id:
            if event.source_event_id in seen:
                continue
            seen.add(event.source_event_id)
        ordered.append(answer)
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
