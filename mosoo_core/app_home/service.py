"""What `/apps/{id}` shows: the getting-started checklist, each step ticked from the App's
own rows, the ready-to-paste API and CLI examples with its real ids, and for a working App
its Agents, recent threads, the runs that failed in the last day and what today and this
month cost."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, func, select

from mosoo_core import agents, sessions
from mosoo_core.clock import utcnow
from mosoo_core.ownership import owned_app
from mosoo_core.tables.agents import Agent, AgentVersion
from mosoo_core.tables.sessions import AgentSession, SessionRun
from mosoo_core.tables.vault import ProviderCredential
from mosoo_core.usage import CostTotal, app_cost

# The getting-started steps, in order: a provider key, an Agent, a Preview chat, a published
# version, a thread started from the API.
STEPS = ("provider", "agent", "preview", "publish", "api")
RECENT_THREADS = 5
FAILED_RUNS = 5
FAILED_WINDOW = timedelta(days=1)
# The placeholders the examples use: the token is never printed, only named.
TOKEN_VARIABLE = "$MOSOO_TOKEN"
AGENT_PLACEHOLDER = "$AGENT_ID"
EXAMPLE_MESSAGE = "Hello"


@dataclass(frozen=True)
class ChecklistStep:
    key: str  # one of STEPS
    done: bool


@dataclass(frozen=True)
class ApiExample:
    """How to call the App from a shell. `agent_id` is the first published Agent's (else the
    first Agent's, which must be published first; None: the App has none and the examples
    say `$AGENT_ID`)."""

    base_url: str
    agent_id: str | None
    agent_name: str | None
    agent_published: bool
    curl: str
    cli: str


@dataclass(frozen=True)
class AgentSummary:
    id: str
    name: str
    status: str  # draft | published
    published_version: int | None
    ready: bool
    blocker_count: int
    last_activity: datetime


@dataclass(frozen=True)
class FailedRun:
    run_id: str
    thread_id: str
    thread_title: str
    agent_id: str
    agent_name: str
    error_code: str | None
    error_message: str | None
    failed_at: datetime


@dataclass(frozen=True)
class AppHome:
    app_id: str
    app_name: str
    steps: list[ChecklistStep]
    example: ApiExample
    agents: list[AgentSummary]
    recent_threads: list[sessions.ThreadRow]
    failed_runs: list[FailedRun]  # newest first, at most FAILED_RUNS
    failed_runs_total: int  # in the last day
    cost_today: CostTotal
    cost_month: CostTotal  # the UTC month to date, today included

    @property
    def getting_started(self) -> bool:
        """The checklist shows until every step is done."""
        return not all(step.done for step in self.steps)

    @property
    def working(self) -> bool:
        """The App's activity shows once it has an Agent."""
        return bool(self.agents)


def _exists(db: Session, query: Any) -> bool:
    return db.exec(query.limit(1)).first() is not None


def checklist(db: Session, account_id: str, app_id: str) -> list[ChecklistStep]:
    """Which getting-started steps the App has done, read from its rows: a provider
    credential, an Agent, a Preview run (a message sent in Preview), a published version
    (ever), a thread started from the API. Another owner's App: NotFound."""
    owned_app(db, account_id, app_id)
    done = {
        "provider": _exists(
            db, select(ProviderCredential.id).where(ProviderCredential.app_id == app_id)
        ),
        "agent": _exists(db, select(Agent.id).where(Agent.app_id == app_id)),
        "preview": _exists(
            db,
            select(SessionRun.id)
            .join(AgentSession, col(AgentSession.id) == col(SessionRun.session_id))
            .where(AgentSession.app_id == app_id, AgentSession.purpose == "preview"),
        ),
        "publish": _exists(
            db,
            select(AgentVersion.id)
            .join(Agent, col(Agent.id) == col(AgentVersion.agent_id))
            .where(Agent.app_id == app_id),
        ),
        "api": _exists(
            db,
            select(AgentSession.id).where(
                AgentSession.app_id == app_id, AgentSession.purpose == "api"
            ),
        ),
    }
    return [ChecklistStep(key=key, done=done[key]) for key in STEPS]


def _example_texts(base_url: str, agent_id: str) -> tuple[str, str]:
    # The URL in double quotes: `$AGENT_ID` (an App with no Agent yet) must still expand.
    url = base_url.rstrip("/")
    body = '{"message": "' + EXAMPLE_MESSAGE + '"}'
    curl = "\n".join(
        (
            f'curl -X POST "{url}/api/v1/agents/{agent_id}/threads" \\',
            f'  -H "Authorization: Bearer {TOKEN_VARIABLE}" \\',
            '  -H "Content-Type: application/json" \\',
            f"  -d {shlex.quote(body)}",
        )
    )
    cli = "\n".join(
        (
            f"export MOSOO_URL={shlex.quote(url)}",
            f'mosoo run {agent_id} "{EXAMPLE_MESSAGE}"',
        )
    )
    return curl, cli


def api_example(db: Session, account_id: str, app_id: str, *, public_url: str) -> ApiExample:
    """The `curl` and CLI commands that start a thread on the App's first published Agent,
    against `public_url` (the console's public URL), with the access token left as
    `$MOSOO_TOKEN`. Another owner's App: NotFound."""
    owned_app(db, account_id, app_id)
    rows = db.exec(
        select(Agent).where(Agent.app_id == app_id).order_by(col(Agent.created_at), col(Agent.id))
    ).all()
    published = [row for row in rows if row.status == "published"]
    chosen = published[0] if published else (rows[0] if rows else None)
    curl, cli = _example_texts(public_url, chosen.id if chosen else AGENT_PLACEHOLDER)
    return ApiExample(
        base_url=public_url.rstrip("/"),
        agent_id=chosen.id if chosen else None,
        agent_name=chosen.name if chosen else None,
        agent_published=bool(published),
        curl=curl,
        cli=cli,
    )


def _agent_summaries(db: Session, account_id: str, app_id: str) -> list[AgentSummary]:
    activity = agents.last_activity_by_agent(db, account_id, app_id)
    found = []
    for view in agents.list_agents(db, account_id, app_id):
        readiness = agents.readiness(db, view)
        found.append(
            AgentSummary(
                id=view.id,
                name=view.name,
                status=view.status,
                published_version=view.published_version,
                ready=readiness.ready,
                blocker_count=len(readiness.blockers),
                last_activity=activity.get(view.id, view.updated_at),
            )
        )
    return found


def _failed_runs(db: Session, app_id: str, since: datetime) -> tuple[list[FailedRun], int]:
    failed_at = func.coalesce(SessionRun.finished_at, SessionRun.created_at)
    clauses = (
        SessionRun.app_id == app_id,
        SessionRun.status == "failed",
        failed_at >= since,
    )
    total = int(db.exec(select(sa.func.count()).select_from(SessionRun).where(*clauses)).one())
    rows = db.exec(
        select(SessionRun, AgentSession, Agent.name)
        .join(AgentSession, col(AgentSession.id) == col(SessionRun.session_id))
        .join(Agent, col(Agent.id) == col(AgentSession.agent_id))
        .where(*clauses)
        .order_by(failed_at.desc(), col(SessionRun.id).desc())
        .limit(FAILED_RUNS)
    ).all()
    return [
        FailedRun(
            run_id=run.id,
            thread_id=thread.id,
            thread_title=thread.title or run.input_text[:80],
            agent_id=thread.agent_id,
            agent_name=agent_name,
            error_code=run.error_code,
            error_message=run.error_message,
            failed_at=run.finished_at or run.created_at,
        )
        for run, thread, agent_name in rows
    ], total


def app_home(
    db: Session,
    account_id: str,
    app_id: str,
    *,
    public_url: str,
    now: datetime | None = None,
) -> AppHome:
    """Everything the App home shows, for the App's owner (another owner's App: NotFound).
    Costs are USD micros of the App's usage records, days in UTC."""
    app = owned_app(db, account_id, app_id)
    now = now or utcnow()
    today = now.astimezone(UTC).date()
    failed, failed_total = _failed_runs(db, app_id, now - FAILED_WINDOW)
    return AppHome(
        app_id=app.id,
        app_name=app.name,
        steps=checklist(db, account_id, app_id),
        example=api_example(db, account_id, app_id, public_url=public_url),
        agents=_agent_summaries(db, account_id, app_id),
        recent_threads=sessions.list_threads(db, account_id, app_id, limit=RECENT_THREADS),
        failed_runs=failed,
        failed_runs_total=failed_total,
        cost_today=app_cost(db, app_id, start=today, end=today),
        cost_month=app_cost(db, app_id, start=today.replace(day=1), end=today),
    )
