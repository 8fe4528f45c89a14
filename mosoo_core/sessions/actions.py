"""What every front door (console, public API, CLI) does to a thread beyond the database:
store the change, publish its events to the thread's stream, then wake the worker or the
driver. Each function is one unit of work of its own (it commits before it publishes).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlmodel import Session, col, select

from mosoo_core import agents, identity, streams, tasks_client
from mosoo_core.db import Connectable, session_scope
from mosoo_core.errors import Conflict, InvalidInput
from mosoo_core.ownership import account_agent, owned_thread, owned_thread_row, thread_in_account
from mosoo_core.prepared import PreparedRead
from mosoo_core.sessions import service, threads
from mosoo_core.sessions.service import RunView, Sent, SessionView, session_view
from mosoo_core.streams import StoredEvent
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import SESSION_STATUSES, AgentSession, SessionRun

THREADS_PAGE_MAX = 100
IDS_MAX = 100
_THREADS: sa.Table = AgentSession.__table__  # type: ignore[attr-defined]
_RUNS: sa.Table = SessionRun.__table__  # type: ignore[attr-defined]
_RUN_FIELDS = [field.name for field in dataclasses.fields(RunView)]
_LATEST = _RUNS.alias("latest_run")
# Built once, one query: the thread's columns and its latest run's (those a RunView shows, not
# the run's snapshot), if it has one. API clients poll it.
_THREAD_WITH_LATEST_RUN = PreparedRead(
    thread_in_account(
        sa.select(_THREADS, *(_LATEST.c[name].label(f"run_{name}") for name in _RUN_FIELDS))
    ).outerjoin_from(
        _THREADS,
        _LATEST,
        _LATEST.c.id
        == sa.select(_RUNS.c.id)
        .where(_RUNS.c.session_id == _THREADS.c.id)
        .order_by(_RUNS.c.created_at.desc())
        .limit(1)
        .scalar_subquery(),
    )
)


@dataclass(frozen=True)
class StartedThread:
    thread: SessionView
    run: RunView | None
    events: list[StoredEvent]


@dataclass(frozen=True)
class ThreadPage:
    threads: list[SessionView]
    next_cursor: str | None


def list_account_agents(db: Session, account_id: str) -> list[agents.AgentView]:
    """The Agents of every App of the account, oldest first within each App."""
    found: list[agents.AgentView] = []
    for app in identity.list_apps(db, account_id):
        found += agents.list_agents(db, account_id, app.id)
    return found


def require_runnable(db: Session, thread: AgentSession) -> None:
    """Refuse a message when the profile the thread runs (its pinned version, or the draft in
    Preview) has readiness blockers."""
    agent = db.get(Agent, thread.agent_id)
    profile = agents.thread_profile(db, agent, thread.agent_version) if agent is not None else None
    if profile is None:
        raise Conflict(
            "The agent version this thread runs no longer exists.", code="readiness_blocked"
        )
    readiness = agents.readiness(db, profile)
    if not readiness.ready:
        raise Conflict(
            "Finish the agent's setup first: " + " ".join(b.message for b in readiness.blockers),
            code="readiness_blocked",
        )


def _dispatch(account_id: str, sent: Sent) -> None:
    streams.publish_events(sent.events)
    if sent.run.status != "queued":
        return  # it waits its turn: the worker dispatches it when the run before it ends
    try:
        tasks_client.enqueue_run_dispatch(sent.run.id)
    except Exception:
        # Nothing would pick the run up: close it so the thread takes a message again.
        with session_scope() as db:
            cancelled = service.cancel_active_run(db, account_id, sent.run.session_id)
        streams.publish_events(cancelled)
        raise Conflict(
            "The message is saved, but the worker could not be reached to run it. Try again.",
            code="worker_unavailable",
        ) from None


def start_thread(
    account_id: str,
    agent_id: str,
    *,
    purpose: str,
    message: str | None = None,
    file_ids: Sequence[str] = (),
    end_user_id: str | None = None,
    title: str | None = None,
) -> StartedThread:
    """A new thread pinned to the Agent's published version, with an optional first message
    (then its run is handed to the worker)."""
    if file_ids and message is None:
        raise InvalidInput("Files are attached to a message: add a message.", field="file_ids")
    with session_scope() as db:
        agent = account_agent(db, account_id, agent_id)
        created = service.create_session(
            db, account_id, agent.app_id, agent.id, purpose=purpose, end_user_id=end_user_id
        )
        thread = owned_thread(db, account_id, created.id)
        require_runnable(db, thread)
        if title and title.strip():
            threads.rename_thread(db, account_id, thread.id, title)
        sent = (
            service.send_message(db, account_id, thread.id, message, file_ids=file_ids)
            if message is not None
            else None
        )
        view = session_view(thread)
    if sent is None:
        return StartedThread(thread=view, run=None, events=[])
    _dispatch(account_id, sent)
    return StartedThread(thread=view, run=sent.run, events=sent.events)


def send_and_dispatch(
    account_id: str,
    thread_id: str,
    text: str,
    *,
    file_ids: Sequence[str] = (),
    refuse_archived: bool = False,
) -> Sent:
    """Store the user's message on a thread and hand its run to the worker. The console
    unarchives a thread on a new message; the API refuses archived threads
    (`refuse_archived`)."""
    with session_scope() as db:
        thread = owned_thread(db, account_id, thread_id)
        if refuse_archived and thread.archived_at is not None:
            raise Conflict(
                "This thread is archived. Unarchive it to send messages.", code="thread_archived"
            )
        require_runnable(db, thread)
        sent = service.send_message(db, account_id, thread_id, text, file_ids=file_ids)
    _dispatch(account_id, sent)
    return sent


def stop_run(account_id: str, thread_id: str) -> list[StoredEvent]:
    """Stop the active run: cancelled at once when no driver has it yet, and a sandbox still
    booting for it is released now (not at the next sweep); else the driver is told. Returns
    the events stored now (none when the driver will report the cancellation)."""
    with session_scope() as db:
        owned_thread(db, account_id, thread_id)
        run = service.active_run(db, thread_id)
        run_id = run.id if run is not None else ""
        instance_id = run.driver_instance_id if run is not None else None
        events = service.cancel_active_run(db, account_id, thread_id)
    streams.publish_events(events)
    if instance_id and events:
        # Its dispatcher, while alive, sees the stop and releases the boot itself; this
        # teardown is for a dispatcher that died (the sandbox sweep is the last resort).
        with contextlib.suppress(Exception):  # logged by tasks_client
            tasks_client.enqueue_run_finish(run_id)
    elif instance_id:
        streams.notify_driver(instance_id)
    return events


def answer_permission(account_id: str, thread_id: str, request_id: str, decision: str) -> None:
    """Allow once / Reject a pending permission request and wake the driver holding it."""
    with session_scope() as db:
        owned_thread(db, account_id, thread_id)
        run = service.active_run(db, thread_id)
        instance_id = run.driver_instance_id if run is not None else None
        service.resolve_permission(db, account_id, thread_id, request_id, decision)
    if instance_id:
        streams.notify_driver(instance_id)


def thread_with_latest_run(
    db: Connectable, account_id: str, thread_id: str
) -> tuple[SessionView, RunView | None]:
    """The thread and its most recent run (active or finished; None before the first message).
    Reads columns, not ORM rows, in one query: the API's most frequent call."""
    row = owned_thread_row(db, account_id, thread_id, _THREAD_WITH_LATEST_RUN)
    latest = RunView(**{name: getattr(row, f"run_{name}") for name in _RUN_FIELDS})
    return session_view(row), latest if latest.id is not None else None


def list_agent_threads(
    db: Session,
    account_id: str,
    agent_id: str,
    *,
    end_user_id: str | None = None,
    status: str | None = None,
    archived: bool | None = None,
    ids: Sequence[str] = (),
    limit: int = 20,
    cursor: str | None = None,
) -> ThreadPage:
    """An Agent's threads, newest first, one page at a time (`cursor` is the last id seen)."""
    agent = account_agent(db, account_id, agent_id)
    if not (1 <= limit <= THREADS_PAGE_MAX):
        raise InvalidInput(f"limit must be between 1 and {THREADS_PAGE_MAX}.", field="limit")
    if status is not None and status not in SESSION_STATUSES:
        raise InvalidInput(f"status must be one of {', '.join(SESSION_STATUSES)}.", field="status")
    if len(ids) > IDS_MAX:
        raise InvalidInput(f"Ask for at most {IDS_MAX} ids at once.", field="ids")
    query = select(AgentSession).where(
        AgentSession.agent_id == agent.id, AgentSession.app_id == agent.app_id
    )
    if end_user_id is not None:
        query = query.where(AgentSession.end_user_id == end_user_id)
    if status is not None:
        query = query.where(AgentSession.status == status)
    if archived is True:
        query = query.where(col(AgentSession.archived_at).is_not(None))
    elif archived is False:
        query = query.where(col(AgentSession.archived_at).is_(None))
    if ids:
        query = query.where(col(AgentSession.id).in_(list(ids)))
    if cursor:
        query = query.where(col(AgentSession.id) < cursor)
    rows = db.exec(query.order_by(col(AgentSession.id).desc()).limit(limit + 1)).all()
    page = [session_view(row) for row in rows[:limit]]
    return ThreadPage(threads=page, next_cursor=page[-1].id if len(rows) > limit else None)
