"""What an owner sees of one run when asking what happened and where the time went: the
frozen snapshot (no secret is ever in it), the sandbox and driver that served it, the timing
of each phase, and for a failed run its error and the events just before it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlmodel import Session, col, select

from mosoo_core import tracing
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_core.ownership import owned_agent, owned_thread
from mosoo_core.sessions._events import stored_event
from mosoo_core.sessions._marks import Phase, run_phases
from mosoo_core.tables.sessions import (
    ACTIVE_RUN_STATUSES,
    AgentSession,
    DriverInstance,
    SessionEvent,
    SessionRun,
)

# Enough to see what led to a failure without replaying the whole thread.
EVENTS_BEFORE_FAILURE = 20
SETUP_LOG_TAIL = 4000
RUN_STATUS_FILTERS = ("all", "active", "completed", "failed", "cancelled", "expired")
PURPOSES = ("all", "preview", "console", "api", "channel")
MAX_REPLAY_EVENTS = 5000


@dataclass(frozen=True)
class RunRow:
    """One run in an Agent's logs."""

    run_id: str
    thread_id: str
    thread_title: str
    purpose: str
    status: str
    model: str
    input_text: str
    created_at: datetime
    finished_at: datetime | None
    error_code: str | None


def agent_runs(
    db: Session,
    account_id: str,
    app_id: str,
    agent_id: str,
    *,
    status: str = "all",
    purpose: str = "all",
    since: datetime | None = None,
    limit: int = 100,
) -> list[RunRow]:
    """The Agent's runs, newest first, filtered by status (`active`: not ended yet), by
    the purpose of their thread and by when they were sent."""
    owned_agent(db, account_id, app_id, agent_id)
    if status not in RUN_STATUS_FILTERS:
        raise InvalidInput(f"Unknown run status {status!r}.", field="status")
    if purpose not in PURPOSES:
        raise InvalidInput(f"Unknown purpose {purpose!r}.", field="purpose")
    query = (
        select(SessionRun, AgentSession)
        .join(AgentSession, col(AgentSession.id) == col(SessionRun.session_id))
        .where(AgentSession.agent_id == agent_id)
    )
    if status == "active":
        query = query.where(col(SessionRun.status).in_(ACTIVE_RUN_STATUSES))
    elif status != "all":
        query = query.where(SessionRun.status == status)
    if purpose != "all":
        query = query.where(AgentSession.purpose == purpose)
    if since is not None:
        query = query.where(SessionRun.created_at >= since)
    rows = db.exec(
        query.order_by(col(SessionRun.created_at).desc(), col(SessionRun.id).desc()).limit(
            max(1, min(limit, 500))
        )
    ).all()
    return [
        RunRow(
            run_id=run.id,
            thread_id=thread.id,
            thread_title=thread.title,
            purpose=thread.purpose,
            status=run.status,
            model=str(run.snapshot.get("model") or ""),
            input_text=run.input_text[:200],
            created_at=run.created_at,
            finished_at=run.finished_at,
            error_code=run.error_code,
        )
        for run, thread in rows
    ]


def run_events(db: Session, account_id: str, run_id: str) -> list[dict[str, Any]]:
    """The run's own events in the public shape, in order, for a replay of its turn."""
    run = _owned_run(db, account_id, run_id)
    rows = db.exec(
        select(SessionEvent)
        .where(SessionEvent.session_id == run.session_id, SessionEvent.run_id == run.id)
        .order_by(col(SessionEvent.seq))
        .limit(MAX_REPLAY_EVENTS)
    ).all()
    return [stored_event(row).to_public() for row in rows]


def _owned_run(db: Session, account_id: str, run_id: str) -> SessionRun:
    run = db.get(SessionRun, run_id) if run_id else None
    if run is None:
        raise NotFound("Run not found.")
    try:
        owned_thread(db, account_id, run.session_id)
    except NotFound:
        raise NotFound("Run not found.") from None
    return run


@dataclass(frozen=True)
class DriverFacts:
    instance_id: str
    runtime: str
    version: str
    capabilities: list[str]
    reconnects: int
    status: str
    disconnected_at: datetime | None


@dataclass(frozen=True)
class RunDiagnostics:
    run_id: str
    thread_id: str
    status: str
    created_at: datetime
    finished_at: datetime | None
    error_code: str | None
    error_message: str | None
    snapshot: dict[str, Any]
    phases: list[Phase]
    sandbox: dict[str, Any]  # the `sandbox` mark's facts: id, image, created or reused
    driver: DriverFacts | None
    setup_log_tail: str
    events_before_failure: list[dict[str, Any]] = field(default_factory=list)
    trace_id: str = ""  # of the run's trace (its snapshot's traceparent), "" when untraced

    @property
    def seconds(self) -> float:
        """From the message to the last moment marked (teardown when it is done)."""
        return sum(phase.seconds for phase in self.phases)


def run_diagnostics(db: Session, account_id: str, run_id: str) -> RunDiagnostics:
    """One run's diagnostics; another owner's run is NotFound, as one that does not exist."""
    run = _owned_run(db, account_id, run_id)
    phases = run_phases(db, run)
    sandbox = next((dict(p.detail) for p in phases if p.name == "sandbox"), {})
    instance = db.get(DriverInstance, run.driver_instance_id) if run.driver_instance_id else None
    driver = (
        DriverFacts(
            instance_id=instance.id,
            runtime=instance.runtime,
            version=instance.driver_version,
            capabilities=list(instance.capabilities),
            reconnects=instance.reconnects,
            status=instance.status,
            disconnected_at=instance.disconnected_at,
        )
        if instance is not None
        else None
    )
    before: list[dict[str, Any]] = []
    if run.status == "failed":
        rows = db.exec(
            select(SessionEvent)
            .where(SessionEvent.session_id == run.session_id, SessionEvent.run_id == run.id)
            .order_by(col(SessionEvent.seq).desc())
            .limit(EVENTS_BEFORE_FAILURE)
        ).all()
        before = [
            {"seq": e.seq, "type": e.type, "occurred_at": e.occurred_at, "payload": e.payload}
            for e in reversed(rows)
        ]
    return RunDiagnostics(
        run_id=run.id,
        thread_id=run.session_id,
        status=run.status,
        created_at=run.created_at,
        finished_at=run.finished_at,
        error_code=run.error_code,
        error_message=run.error_message,
        snapshot=dict(run.snapshot),
        phases=phases,
        sandbox=sandbox,
        driver=driver,
        setup_log_tail=run.setup_log[-SETUP_LOG_TAIL:],
        events_before_failure=before,
        trace_id=tracing.trace_id_of(str(run.snapshot.get("traceparent") or "")),
    )
