"""The event log's own insert (`_events._EventInsert`: the driver's executemany on SQLite,
COPY on PostgreSQL) stores what the ORM reads back unchanged, keeps SQLAlchemy's text for
timestamps on SQLite, and refuses a repeated event with SQLAlchemy's IntegrityError, the
call's other events with it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlmodel import Session, col, select

from mosoo_core import sessions
from mosoo_core.identity import list_apps, sign_in_identity
from mosoo_core.migrations import upgrade
from mosoo_core.sessions._events import NewEvent, append_to_threads
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import SessionEvent

PAYLOAD = {
    "text": 'héllo \u2014 \U0001f600 "quoted" \\ back',
    "nested": {"list": [1, 2.5, None, True], "empty": {}},
    "n": 7,
}


def _threads(db: Session, count: int) -> list[str]:
    account = sign_in_identity(
        db, provider="email", subject="log@example.com", email="log@example.com"
    )
    app_id = list_apps(db, account.id)[0].id
    agent = Agent(app_id=app_id, name="Logger", model="m")
    db.add(agent)
    db.flush()
    return [sessions.create_session(db, account.id, app_id, agent.id).id for _ in range(count)]


def _rows(db: Session, thread_id: str) -> list[SessionEvent]:
    return list(
        db.exec(
            select(SessionEvent)
            .where(SessionEvent.session_id == thread_id)
            .order_by(col(SessionEvent.seq))
        ).all()
    )


def test_rows_read_back_as_they_were_given(db: Session) -> None:
    first, second = _threads(db, 2)
    moments = [
        datetime(2026, 12, 7, 3, 47, 7, 538220, tzinfo=UTC),
        datetime(2026, 12, 7, 3, 47, 8, tzinfo=UTC),  # no microseconds
        datetime(2026, 12, 7, 9, 17, 9, 1, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    ]
    answers = append_to_threads(
        db,
        {
            first: [
                NewEvent("agent.message.delta", PAYLOAD, "run-1", "src-1", moments[0], True),
                NewEvent("agent.message.delta", {}, "run-1", "src-2", moments[1], True),
            ],
            second: [NewEvent("run.started", {"a": [1]}, None, None, moments[2])],
        },
    )
    db.commit()
    db.expire_all()
    rows = _rows(db, first) + _rows(db, second)
    assert [(r.session_id, r.seq) for r in rows] == [(first, 1), (first, 2), (second, 1)]
    assert [r.payload for r in rows] == [PAYLOAD, {}, {"a": [1]}]
    assert [r.run_id for r in rows] == ["run-1", "run-1", None]
    assert [r.source_event_id for r in rows] == ["src-1", "src-2", None]
    assert [r.occurred_at for r in rows] == moments
    assert all(r.occurred_at.tzinfo == UTC and r.created_at.tzinfo == UTC for r in rows)
    assert len({r.created_at for r in rows}) == 1  # one call, one moment
    assert len({r.id for r in rows}) == 3
    assert [a.seq for a in answers[first] + answers[second]] == [1, 2, 1]

    if db.get_bind().dialect.name == "sqlite":
        # The text SQLAlchemy's DATETIME writes: older rows and every comparison rely on it.
        stored = db.exec(  # type: ignore[call-overload]
            sa.text("SELECT occurred_at FROM session_event ORDER BY occurred_at")
        ).scalars()
        assert list(stored) == [
            "2026-12-07 03:47:07.538220",
            "2026-12-07 03:47:08.000000",
            "2026-12-07 03:47:09.000001",
        ]
    later = db.exec(select(SessionEvent).where(col(SessionEvent.occurred_at) > moments[1])).all()
    assert [r.source_event_id for r in later] == [None]


def test_a_repeated_fresh_event_is_an_integrity_error_and_stores_nothing_of_the_call(
    engine: sa.Engine,
) -> None:
    with Session(engine) as db:
        (thread,) = _threads(db, 1)
        append_to_threads(db, {thread: [NewEvent("x", {}, "run-1", "src-1", fresh=True)]})
        db.commit()
    with Session(engine) as db:
        with pytest.raises(sa.exc.IntegrityError):
            append_to_threads(
                db,
                {
                    thread: [
                        NewEvent("x", {}, "run-1", "src-2", fresh=True),
                        NewEvent("x", {}, "run-1", "src-1", fresh=True),  # stored before
                    ]
                },
            )
        db.rollback()
        # The session goes on after the rollback; nothing of the refused call was kept.
        assert [r.source_event_id for r in _rows(db, thread)] == ["src-1"]
        append_to_threads(db, {thread: [NewEvent("x", {}, "run-1", "src-2")]})
        db.commit()
        assert [(r.seq, r.source_event_id) for r in _rows(db, thread)] == [
            (1, "src-1"),
            (2, "src-2"),
        ]


def test_a_driver_with_named_parameters_stores_the_same_rows(tmp_path: Path) -> None:
    """The insert's third form, for a database driver that takes named parameters (psycopg
    uses COPY, SQLite's default is positional): SQLite made to take `:name`."""
    url = f"sqlite:///{tmp_path / 'named.db'}"
    upgrade(url)
    engine = sa.create_engine(url, paramstyle="named")
    moment = datetime(2026, 12, 7, 3, 47, 7, 538220, tzinfo=UTC)
    with Session(engine) as db:
        (thread,) = _threads(db, 1)
        append_to_threads(db, {thread: [NewEvent("x", PAYLOAD, "run-1", "src-1", moment)]})
        db.commit()
        (row,) = _rows(db, thread)
    engine.dispose()
    assert (row.seq, row.payload, row.occurred_at, row.source_event_id) == (
        1,
        PAYLOAD,
        moment,
        "src-1",
    )
