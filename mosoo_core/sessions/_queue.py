"""A thread's prompt queue: messages sent while its run is still starting wait their turn.

A message sent while the thread's active run is `queued` or `booting` (waiting for a worker,
an environment build, or a hibernated Assistant waking) is stored at once, its `user.message`
event in order, with a run in `pending` (not an active status: a thread still has one active
run). When a run ends, however it ends, the oldest pending run becomes `queued`, in the same
transaction, so a thread with pending runs always has an active one; the worker hands it on
once the ended run's sandbox is released (`runtime.run_queue`). Stop cancels the pending runs
with the active one. Both sides take the thread's lock first (`lock_thread`), so a message
racing a run's end is either queued behind it or becomes the next active run, never left
pending behind nothing."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Session, col, select

from mosoo_core.clock import utcnow
from mosoo_core.sessions._events import NewEvent, append_events
from mosoo_core.streams import StoredEvent
from mosoo_core.tables.sessions import ACTIVE_RUN_STATUSES, AgentSession, SessionRun

PENDING = "pending"
# A run not started yet: a message sent meanwhile waits behind it (else it is refused).
STARTING_RUN_STATUSES = ("queued", "booting")
MAX_PENDING_MESSAGES = 10


def lock_thread(db: Session, session_id: str) -> AgentSession | None:
    """Hold the thread's write lock until the transaction ends (PostgreSQL: its row; SQLite:
    the database) and read it afresh. A no-op UPDATE rather than SELECT ... FOR UPDATE,
    which SQLite ignores: its first write is what serializes two writers."""
    table = AgentSession.__table__  # type: ignore[attr-defined]
    db.execute(sa.update(table).where(table.c.id == session_id).values(last_seq=table.c.last_seq))
    return db.exec(
        select(AgentSession)
        .where(AgentSession.id == session_id)
        .execution_options(populate_existing=True)
    ).first()


def active_run(db: Session, session_id: str) -> SessionRun | None:
    """The thread's active run (one at most; the newest, should a race ever leave two)."""
    return db.exec(
        select(SessionRun)
        .where(SessionRun.session_id == session_id, col(SessionRun.status).in_(ACTIVE_RUN_STATUSES))
        .order_by(col(SessionRun.created_at).desc())
    ).first()


def pending_runs(db: Session, session_id: str) -> list[SessionRun]:
    """The thread's runs waiting their turn, oldest first."""
    return list(
        db.exec(
            select(SessionRun)
            .where(SessionRun.session_id == session_id, SessionRun.status == PENDING)
            .order_by(col(SessionRun.created_at), col(SessionRun.id))
        ).all()
    )


def promote_oldest_pending(db: Session, session_id: str) -> SessionRun | None:
    """The thread's oldest pending run becomes `queued`: its turn has come. Call with the
    thread locked and no run of it active."""
    pending = pending_runs(db, session_id)
    if not pending:
        return None
    pending[0].status = "queued"
    db.add(pending[0])
    return pending[0]


def cancel_pending(
    db: Session, session_id: str, *, now: datetime | None = None
) -> list[StoredEvent]:
    """Cancel every run waiting its turn (Stop), each with its `run.cancelled` event."""
    now = now or utcnow()
    stored: list[StoredEvent] = []
    for run in pending_runs(db, session_id):
        run.status, run.finished_at = "cancelled", now
        db.add(run)
        stored += append_events(
            db, session_id, [NewEvent(type="run.cancelled", payload={}, run_id=run.id)]
        )
    return stored
