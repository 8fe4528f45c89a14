"""Publishing: immutable numbered versions of an Agent's profile, and which one a thread runs."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlmodel import Session, col, func, select

from mosoo_core.agents.service import AgentView, agent_view, readiness
from mosoo_core.errors import Conflict, InvalidInput, NotFound
from mosoo_core.ownership import owned_agent
from mosoo_core.tables.agents import Agent, AgentVersion

# What a version freezes: everything a run needs from the profile.
PROFILE_FIELDS = (
    "name",
    "description",
    "runtime",
    "kind",
    "provider_credential_id",
    "model",
    "system_prompt",
    "tools",
    "provider_options",
    "environment_id",
    "skills",
    "mcp_servers",
    "mcp_policies",
)
# Fields versions published before they existed do not hold: such a version runs without them,
# never with whatever the draft binds today.
_ABSENT_MEANS: dict[str, Any] = {
    "environment_id": None,
    "skills": [],
    "mcp_servers": [],
    "mcp_policies": {},
}
MAX_SUMMARY_CHARS = 200


@dataclass(frozen=True)
class VersionView:
    id: str
    agent_id: str
    number: int
    summary: str
    profile: dict[str, Any]
    created_at: datetime


def version_view(row: AgentVersion) -> VersionView:
    return VersionView(
        id=row.id,
        agent_id=row.agent_id,
        number=row.number,
        summary=row.summary,
        profile=copy.deepcopy(row.profile),
        created_at=row.created_at,
    )


def frozen_profile(agent: Agent) -> dict[str, Any]:
    # Deep copies: the JSON columns of the draft must never share objects with a version.
    return {name: copy.deepcopy(getattr(agent, name)) for name in PROFILE_FIELDS}


def publish_agent(
    db: Session, account_id: str, app_id: str, agent_id: str, summary: str = ""
) -> VersionView:
    """Freeze the draft as the next numbered version and make it the published one.
    Refused while readiness has blockers."""
    agent = owned_agent(db, account_id, app_id, agent_id)
    summary = " ".join((summary or "").split())
    if len(summary) > MAX_SUMMARY_CHARS:
        raise InvalidInput(
            f"Summaries are at most {MAX_SUMMARY_CHARS} characters.", field="summary"
        )
    ready = readiness(db, agent_view(agent))
    if not ready.ready:
        reasons = " ".join(blocker.message for blocker in ready.blockers)
        raise Conflict(f"The agent cannot be published yet: {reasons}")
    # Lock the row (PostgreSQL) so two concurrent publishes cannot take the same number.
    locked = db.get(Agent, agent.id, with_for_update=True)
    assert locked is not None
    latest = db.exec(
        select(func.max(AgentVersion.number)).where(AgentVersion.agent_id == agent.id)
    ).one()
    version = AgentVersion(
        agent_id=agent.id, number=(latest or 0) + 1, summary=summary, profile=frozen_profile(locked)
    )
    locked.status = "published"
    locked.published_version = version.number
    db.add_all([version, locked])
    db.flush()
    return version_view(version)


def unpublish_agent(db: Session, account_id: str, app_id: str, agent_id: str) -> AgentView:
    """Back to draft: no new threads outside Preview; versions and pinned threads are kept."""
    agent = owned_agent(db, account_id, app_id, agent_id)
    agent.status = "draft"
    agent.published_version = None
    db.add(agent)
    db.flush()
    return agent_view(agent)


def list_versions(db: Session, account_id: str, app_id: str, agent_id: str) -> list[VersionView]:
    """The Agent's versions, newest first."""
    owned_agent(db, account_id, app_id, agent_id)
    rows = db.exec(
        select(AgentVersion)
        .where(AgentVersion.agent_id == agent_id)
        .order_by(col(AgentVersion.number).desc())
    ).all()
    return [version_view(row) for row in rows]


def get_version(
    db: Session, account_id: str, app_id: str, agent_id: str, number: int
) -> VersionView:
    owned_agent(db, account_id, app_id, agent_id)
    row = _version_row(db, agent_id, number)
    if row is None:
        raise NotFound("Version not found.")
    return version_view(row)


def _version_row(db: Session, agent_id: str, number: int) -> AgentVersion | None:
    return db.exec(
        select(AgentVersion).where(AgentVersion.agent_id == agent_id, AgentVersion.number == number)
    ).first()


def thread_profile(db: Session, agent: Agent, agent_version: int | None) -> AgentView | None:
    """The profile a thread runs: the live draft when it pins no version, otherwise that
    version's frozen profile (None if the version is gone)."""
    view = agent_view(agent)
    if agent_version is None:
        return view
    row = _version_row(db, agent.id, agent_version)
    if row is None:
        return None
    frozen = {
        name: copy.deepcopy(row.profile[name]) for name in PROFILE_FIELDS if name in row.profile
    }
    for name, absent in _ABSENT_MEANS.items():
        frozen.setdefault(name, copy.deepcopy(absent))
    return dataclasses.replace(view, **frozen)
