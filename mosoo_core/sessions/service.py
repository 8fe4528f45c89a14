"""Threads for front doors (console, API, CLI): ownership checked on every call."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, select

from mosoo_core.environments import revision_for_thread
from mosoo_core.errors import Conflict, InvalidInput, NotFound
from mosoo_core.files import bind_attachments
from mosoo_core.identity import get_app
from mosoo_core.ownership import owned_thread
from mosoo_core.sessions import _drivers, _queue
from mosoo_core.sessions._events import NewEvent, append_events, read_events
from mosoo_core.sessions._queue import MAX_PENDING_MESSAGES
from mosoo_core.sessions._runs import finish_run, set_session_status
from mosoo_core.sessions.titles import title_untitled_thread
from mosoo_core.streams import StoredEvent
from mosoo_core.tables.agents import Agent, AgentVersion
from mosoo_core.tables.sessions import AgentSession, SessionRun

MAX_MESSAGE_CHARS = 100_000


@dataclass(frozen=True)
class SessionView:
    id: str
    app_id: str
    agent_id: str
    title: str
    status: str
    purpose: str
    end_user_id: str | None
    last_seq: int
    archived: bool
    created_at: datetime
    updated_at: datetime
    agent_version: int | None = None  # the pinned published version; None = the draft


@dataclass(frozen=True)
class RunView:
    id: str
    session_id: str
    status: str
    error_code: str | None
    error_message: str | None
    error_retryable: bool | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True)
class Sent:
    run: RunView
    events: list[StoredEvent]


def session_view(row: AgentSession | sa.Row[Any]) -> SessionView:
    """From the ORM row, or from a row of the table's columns (a read that changes nothing)."""
    return SessionView(
        id=row.id,
        app_id=row.app_id,
        agent_id=row.agent_id,
        title=row.title,
        status=row.status,
        purpose=row.purpose,
        end_user_id=row.end_user_id,
        last_seq=row.last_seq,
        archived=row.archived_at is not None,
        created_at=row.created_at,
        updated_at=row.updated_at,
        agent_version=row.agent_version,
    )


def run_view(row: SessionRun) -> RunView:
    return RunView(
        id=row.id,
        session_id=row.session_id,
        status=row.status,
        error_code=row.error_code,
        error_message=row.error_message,
        error_retryable=row.error_retryable,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
    )


def create_session(
    db: Session,
    account_id: str,
    app_id: str,
    agent_id: str,
    *,
    purpose: str = "preview",
    end_user_id: str | None = None,
) -> SessionView:
    """Start an empty thread with an Agent of the account's App. Preview threads run the
    draft; every other thread pins the published version and is refused while there is none."""
    get_app(db, account_id, app_id)
    agent = db.get(Agent, agent_id) if agent_id else None
    if agent is None or agent.app_id != app_id:
        raise NotFound("Agent not found.")
    if end_user_id is not None and not (0 < len(end_user_id) <= 200):
        raise InvalidInput("end_user_id must be 1 to 200 characters.", field="end_user_id")
    agent_version: int | None = None
    environment_id = agent.environment_id
    if purpose != "preview":
        if agent.status != "published" or agent.published_version is None:
            raise Conflict(
                "This agent is not published. Publish it to start threads outside Preview.",
                code="agent_not_published",
            )
        agent_version = agent.published_version
        version = db.exec(
            select(AgentVersion).where(
                AgentVersion.agent_id == agent.id, AgentVersion.number == agent_version
            )
        ).one()
        environment_id = (version.profile or {}).get("environment_id")
    # The thread keeps the environment revision current now: later edits reach later threads.
    revision = revision_for_thread(db, app_id, environment_id)
    row = AgentSession(
        app_id=app_id,
        agent_id=agent_id,
        purpose=purpose,
        end_user_id=end_user_id,
        agent_version=agent_version,
        environment_revision_id=revision.id,
    )
    db.add(row)
    db.flush()
    return session_view(row)


def get_session(db: Session, account_id: str, session_id: str) -> SessionView:
    return session_view(owned_thread(db, account_id, session_id))


def active_run(db: Session, session_id: str) -> SessionRun | None:
    """The thread's active run (messages waiting their turn are `pending`, not active)."""
    return _queue.active_run(db, session_id)


def send_message(
    db: Session, account_id: str, session_id: str, text: str, *, file_ids: Sequence[str] = ()
) -> Sent:
    """Store the user's message and queue a run. While the thread's active run has not
    started yet (`queued`, `booting`: a worker, an environment build or a waking Assistant
    to wait for) the message waits its turn behind it, its run `pending` (at most
    `MAX_PENDING_MESSAGES`); once that run is running, a message is refused.
    `file_ids` names uploaded attachments of the thread's Agent: they are bound to the thread
    and mounted for this run only (see `mosoo_core.files.bind_attachments` for the rules).
    The caller enqueues `dispatch_run(run.id)` after committing when the run is `queued`."""
    session = owned_thread(db, account_id, session_id)
    text = (text or "").strip()
    if not text:
        raise InvalidInput("Write a message first.", field="text")
    if len(text) > MAX_MESSAGE_CHARS:
        raise InvalidInput(
            f"Messages are limited to {MAX_MESSAGE_CHARS:,} characters.", field="text"
        )
    # Held until commit: a run ending meanwhile sees this message, or this message sees it end.
    locked = _queue.lock_thread(db, session.id)
    if locked is None:  # deleted since it was read
        raise NotFound("Thread not found.")
    session = locked
    if session.status == "terminated":
        raise Conflict("This thread has ended.")
    current = _queue.active_run(db, session.id)
    if current is not None and current.status not in _queue.STARTING_RUN_STATUSES:
        raise Conflict(
            "The agent is still working on the previous message. Wait for it or press Stop."
        )
    if current is not None and len(_queue.pending_runs(db, session.id)) >= MAX_PENDING_MESSAGES:
        raise Conflict(
            f"{MAX_PENDING_MESSAGES} messages are already waiting for the agent. Wait for it "
            "to answer them or press Stop.",
            code="queue_full",
        )
    if session.archived_at is not None:
        session.archived_at = None  # a new message unarchives (PRODUCT.md)
    title_untitled_thread(db, session, text)
    run = SessionRun(
        session_id=session.id,
        app_id=session.app_id,
        input_text=text,
        status="queued" if current is None else _queue.PENDING,
    )
    attachments: list[dict[str, Any]] = []
    if file_ids:
        attachments = bind_attachments(db, session, run.id, file_ids)
        run.attachments = attachments
    db.add(run)
    db.flush()
    payload: dict[str, Any] = {"text": text}
    if attachments:
        payload["attachments"] = attachments
    events = append_events(
        db, session.id, [NewEvent(type="user.message", payload=payload, run_id=run.id)]
    )
    events += set_session_status(db, session, "running")
    return Sent(run=run_view(run), events=events)


def cancel_active_run(db: Session, account_id: str, session_id: str) -> list[StoredEvent]:
    """Stop: the messages waiting their turn are cancelled at once; the active run too when
    no driver has it yet, else its driver is told (and reports the cancellation)."""
    session = owned_thread(db, account_id, session_id)
    run = active_run(db, session.id)
    if run is None:
        return []
    # Before the active run: its end must find no message left to promote.
    events = _queue.cancel_pending(db, session.id)
    if run.driver_instance_id is None or run.status in ("queued", "booting"):
        return events + finish_run(db, run, "cancelled", emit_event=True)
    _drivers.enqueue_command(
        db, run.driver_instance_id, "turn.cancel", {"run_id": run.id, "reason": "user"}
    )
    return events


def resolve_permission(
    db: Session, account_id: str, session_id: str, request_id: str, decision: str
) -> None:
    """Allow once / Reject a pending permission request of the active run."""
    if decision not in ("allow_once", "reject_once"):
        raise InvalidInput("decision must be allow_once or reject_once.", field="decision")
    session = owned_thread(db, account_id, session_id)
    run = active_run(db, session.id)
    if run is None or run.driver_instance_id is None:
        raise Conflict("Nothing is waiting for a decision.")
    pending = _pending_permission_ids(db, session.id, run.id)
    if request_id not in pending:
        raise NotFound("Permission request not found.")
    _drivers.enqueue_command(
        db,
        run.driver_instance_id,
        "permission.resolve",
        {"request_id": request_id, "decision": decision},
    )


def _pending_permission_ids(db: Session, session_id: str, run_id: str) -> set[str]:
    requested: set[str] = set()
    for event in read_events(db, session_id, after_seq=0, limit=100_000):
        if event.run_id != run_id:
            continue
        request_id = str(event.payload.get("request_id", ""))
        if event.type == "tool.confirmation.required":
            requested.add(request_id)
        elif event.type == "tool.confirmation.resolved":
            requested.discard(request_id)
    return requested


def list_events(
    db: Session, account_id: str, session_id: str, *, after_seq: int = 0, limit: int = 500
) -> list[StoredEvent]:
    owned_thread(db, account_id, session_id)
    if after_seq < 0 or not (1 <= limit <= 1000):
        raise InvalidInput("after_seq must be ≥ 0 and limit between 1 and 1000.")
    return read_events(db, session_id, after_seq=after_seq, limit=limit)


def get_run(db: Session, account_id: str, run_id: str) -> RunView:
    run = db.get(SessionRun, run_id) if run_id else None
    if run is None:
        raise NotFound("Run not found.")
    owned_thread(db, account_id, run.session_id)
    return run_view(run)
