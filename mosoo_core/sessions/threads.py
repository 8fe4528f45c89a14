"""The Threads inbox: sections, filters, rename, automatic titles, archive and delete.

Sections: Working (an active run, or the thread is `running` / `rescheduling`), Completed
(neither working nor archived) and Archived. A thread that is working shows under Working
even when archived, so nothing busy hides in the archive.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Session, col, select

from mosoo_core.clock import utcnow
from mosoo_core.errors import Conflict, InvalidInput, NotFound
from mosoo_core.files import remove_thread_files
from mosoo_core.identity import get_app
from mosoo_core.ownership import owned_thread
from mosoo_core.sessions import _drivers
from mosoo_core.sessions.service import active_run
from mosoo_core.sessions.titles import TITLE_MAX_CHARS, clip_at_word
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import (
    ACTIVE_RUN_STATUSES,
    AgentSession,
    DriverInstance,
    SessionEvent,
    SessionRun,
)

SECTIONS = ("working", "completed", "archived")
PREVIEW_MAX_CHARS = 80  # an untitled row shows its first message clipped to this
MAX_LIST_LIMIT = 200
WORKING_STATUSES = ("running", "rescheduling")


@dataclass(frozen=True)
class ThreadRow:
    """One thread as the inbox shows it. `title` is the stored title, `display_title` what
    to show (the title, or the first message clipped when there is none yet)."""

    id: str
    app_id: str
    agent_id: str
    agent_name: str
    title: str
    display_title: str
    status: str
    section: str
    purpose: str
    end_user_id: str | None
    agent_version: int | None
    archived: bool
    last_run_status: str | None
    last_run_error_code: str | None
    last_run_error_message: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class DeletedThread:
    """What `delete_thread` removed from the database and what lives outside it: the file
    objects no other row uses (`object_keys`), the checkpoints under the thread's prefix,
    the Cattle sandboxes labelled `subject` or with a driver of `driver_instance_ids`."""

    thread_id: str
    app_id: str
    agent_id: str
    subject: str
    driver_instance_ids: list[str]
    live_driver_instance_ids: list[str]
    object_keys: list[str]


def _working_clause() -> sa.ColumnElement[bool]:
    has_active_run = (
        select(SessionRun.id)
        .where(
            SessionRun.session_id == AgentSession.id,
            col(SessionRun.status).in_(ACTIVE_RUN_STATUSES),
        )
        .exists()
    )
    return sa.or_(col(AgentSession.status).in_(WORKING_STATUSES), has_active_run)


def _last_run_status() -> sa.ScalarSelect[str]:
    return (
        select(SessionRun.status)
        .where(SessionRun.session_id == AgentSession.id)
        .order_by(col(SessionRun.created_at).desc(), col(SessionRun.id).desc())
        .limit(1)
        .scalar_subquery()
    )


def _section_clause(section: str) -> sa.ColumnElement[bool]:
    working = _working_clause()
    if section == "working":
        return working
    archived = col(AgentSession.archived_at).is_not(None)
    return sa.and_(sa.not_(working), archived if section == "archived" else sa.not_(archived))


def _filters(
    app_id: str,
    *,
    agent_id: str | None,
    failed: bool | None,
    end_user_id: str | None,
    ids: Sequence[str] | None,
) -> list[sa.ColumnElement[bool]]:
    clauses: list[sa.ColumnElement[bool]] = [col(AgentSession.app_id) == app_id]
    if agent_id:
        clauses.append(col(AgentSession.agent_id) == agent_id)
    if end_user_id is not None:
        clauses.append(col(AgentSession.end_user_id) == end_user_id)
    if ids is not None:
        clauses.append(col(AgentSession.id).in_(list(ids)))
    if failed is not None:
        last = _last_run_status()
        clauses.append(last == "failed" if failed else sa.or_(last.is_(None), last != "failed"))
    return clauses


def list_threads(
    db: Session,
    account_id: str,
    app_id: str,
    *,
    section: str | None = None,
    agent_id: str | None = None,
    failed: bool | None = None,
    end_user_id: str | None = None,
    ids: Sequence[str] | None = None,
    limit: int = 50,
    before: str | None = None,
) -> list[ThreadRow]:
    """The App's threads, most recently active first. `failed=True` keeps threads whose last
    run failed (False: those whose last run did not). `before` is the id of the last row of
    the previous page."""
    get_app(db, account_id, app_id)
    if section is not None and section not in SECTIONS:
        raise InvalidInput("section must be working, completed or archived.", field="section")
    if not (1 <= limit <= MAX_LIST_LIMIT):
        raise InvalidInput(f"limit must be between 1 and {MAX_LIST_LIMIT}.", field="limit")
    query = (
        select(AgentSession, Agent.name, _working_clause().label("working"))
        .join(Agent, col(Agent.id) == AgentSession.agent_id)
        .where(
            *_filters(app_id, agent_id=agent_id, failed=failed, end_user_id=end_user_id, ids=ids)
        )
    )
    if section is not None:
        query = query.where(_section_clause(section))
    if before:
        cursor = db.get(AgentSession, before)
        if cursor is None or cursor.app_id != app_id:
            raise InvalidInput("before must be the id of a thread of this App.", field="before")
        query = query.where(
            sa.or_(
                col(AgentSession.updated_at) < cursor.updated_at,
                sa.and_(
                    col(AgentSession.updated_at) == cursor.updated_at,
                    col(AgentSession.id) < cursor.id,
                ),
            )
        )
    query = query.order_by(col(AgentSession.updated_at).desc(), col(AgentSession.id).desc()).limit(
        limit
    )
    found = db.exec(query).all()
    return _rows(db, [(row, name, bool(is_working)) for row, name, is_working in found])


def count_threads(
    db: Session,
    account_id: str,
    app_id: str,
    *,
    agent_id: str | None = None,
    failed: bool | None = None,
    end_user_id: str | None = None,
) -> dict[str, int]:
    """How many threads each section holds under the same filters as `list_threads`."""
    get_app(db, account_id, app_id)
    clauses = _filters(app_id, agent_id=agent_id, failed=failed, end_user_id=end_user_id, ids=None)
    counts = {}
    for section in SECTIONS:
        query = (
            select(sa.func.count())
            .select_from(AgentSession)
            .where(*clauses, _section_clause(section))
        )
        counts[section] = int(db.exec(query).one())
    return counts


def _rows(db: Session, found: list[tuple[AgentSession, str, bool]]) -> list[ThreadRow]:
    ids = [row.id for row, _name, _working in found]
    last_runs = _last_runs(db, ids)
    untitled = [row.id for row, _name, _working in found if not row.title]
    first_messages = _first_messages(db, untitled)
    rows = []
    for thread, agent_name, is_working in found:
        run = last_runs.get(thread.id)
        section = (
            "working"
            if is_working
            else ("archived" if thread.archived_at is not None else "completed")
        )
        display = thread.title or clip_at_word(
            " ".join(first_messages.get(thread.id, "").split()), PREVIEW_MAX_CHARS
        )
        rows.append(
            ThreadRow(
                id=thread.id,
                app_id=thread.app_id,
                agent_id=thread.agent_id,
                agent_name=agent_name,
                title=thread.title,
                display_title=display or "New thread",
                status=thread.status,
                section=section,
                purpose=thread.purpose,
                end_user_id=thread.end_user_id,
                agent_version=thread.agent_version,
                archived=thread.archived_at is not None,
                last_run_status=run.status if run else None,
                last_run_error_code=run.error_code if run else None,
                last_run_error_message=run.error_message if run else None,
                created_at=thread.created_at,
                updated_at=thread.updated_at,
            )
        )
    return rows


def _last_runs(db: Session, thread_ids: list[str]) -> dict[str, SessionRun]:
    if not thread_ids:
        return {}
    ranked = (
        select(
            col(SessionRun.id).label("run_id"),
            sa.func.row_number()
            .over(
                partition_by=SessionRun.session_id,
                order_by=(col(SessionRun.created_at).desc(), col(SessionRun.id).desc()),
            )
            .label("rank"),
        )
        .where(col(SessionRun.session_id).in_(thread_ids))
        .subquery()
    )
    runs = db.exec(
        select(SessionRun).join(ranked, ranked.c.run_id == SessionRun.id).where(ranked.c.rank == 1)
    ).all()
    return {run.session_id: run for run in runs}


def _first_messages(db: Session, thread_ids: list[str]) -> dict[str, str]:
    if not thread_ids:
        return {}
    first = (
        select(SessionEvent.session_id, sa.func.min(SessionEvent.seq).label("seq"))
        .where(col(SessionEvent.session_id).in_(thread_ids), SessionEvent.type == "user.message")
        .group_by(col(SessionEvent.session_id))
        .subquery()
    )
    events = db.exec(
        select(SessionEvent).join(
            first,
            sa.and_(first.c.session_id == SessionEvent.session_id, first.c.seq == SessionEvent.seq),
        )
    ).all()
    return {event.session_id: str(event.payload.get("text", "")) for event in events}


def get_thread(
    db: Session, account_id: str, thread_id: str, *, app_id: str | None = None
) -> ThreadRow:
    """One thread as an inbox row; NotFound for a thread the account does not own and, with
    `app_id`, for one of another App (a page of one App never shows another's thread)."""
    thread = owned_thread(db, account_id, thread_id)
    if app_id is not None and thread.app_id != app_id:
        raise NotFound("Thread not found.")
    agent = db.get(Agent, thread.agent_id)
    is_working = thread.status in WORKING_STATUSES or active_run(db, thread.id) is not None
    return _rows(db, [(thread, agent.name if agent else "", is_working)])[0]


def rename_thread(db: Session, account_id: str, thread_id: str, title: str) -> ThreadRow:
    """Set a thread's title: 1 to 80 characters, whitespace collapsed."""
    thread = owned_thread(db, account_id, thread_id)
    clean = " ".join((title or "").split())
    if not clean:
        raise InvalidInput("Give the thread a title.", field="title")
    if len(clean) > TITLE_MAX_CHARS:
        raise InvalidInput(f"Titles are at most {TITLE_MAX_CHARS} characters.", field="title")
    if thread.archived_at is not None:
        raise Conflict(
            "This thread is archived. Unarchive it to rename it.", code="thread_archived"
        )
    thread.title = clean
    db.add(thread)
    db.flush()
    return get_thread(db, account_id, thread_id)


def archive_thread(db: Session, account_id: str, thread_id: str) -> ThreadRow:
    """Archive a thread (read-only until unarchived). Refused while a run is active."""
    thread = owned_thread(db, account_id, thread_id)
    if thread.status in WORKING_STATUSES or active_run(db, thread.id) is not None:
        raise Conflict(
            "The agent is still working in this thread. Stop the run or wait for it to finish, then archive.",
            code="thread_active",
        )
    if thread.archived_at is None:
        thread.archived_at = utcnow()
        db.add(thread)
        db.flush()
    return get_thread(db, account_id, thread_id)


def unarchive_thread(db: Session, account_id: str, thread_id: str) -> ThreadRow:
    thread = owned_thread(db, account_id, thread_id)
    if thread.archived_at is not None:
        thread.archived_at = None
        db.add(thread)
        db.flush()
    return get_thread(db, account_id, thread_id)


def delete_thread(db: Session, account_id: str, thread_id: str) -> DeletedThread:
    """Delete a thread's rows: events, runs and file records go with it (foreign-key
    cascade). Its live drivers are told to stop and marked stopped. Objects, checkpoints and
    sandboxes are the caller's: use `mosoo_core.runtime.threads.delete_thread_everywhere`."""
    thread = owned_thread(db, account_id, thread_id)
    drivers = db.exec(select(DriverInstance).where(DriverInstance.session_id == thread.id)).all()
    live = [driver.id for driver in drivers if driver.status != "stopped"]
    for driver in drivers:
        if driver.status != "stopped":
            # A Pet driver lives on in the Agent's shared sandbox: it must end itself.
            _drivers.enqueue_command(db, driver.id, "session.stop", {"reason": "thread deleted"})
            _drivers.mark_stopped(db, driver.id)
    object_keys = remove_thread_files(db, thread.id)
    deleted = DeletedThread(
        thread_id=thread.id,
        app_id=thread.app_id,
        agent_id=thread.agent_id,
        subject=f"session:{thread.id}",
        driver_instance_ids=[driver.id for driver in drivers],
        live_driver_instance_ids=live,
        object_keys=object_keys,
    )
    db.delete(thread)
    db.flush()
    return deleted
