"""Idle Assistants (Pets) are hibernated: the beat (`tasks.hibernate_idle_pets`) saves the
`/workspace` of every Pet sandbox left without a run for `MOSOO_PET_IDLE_MINUTES` and removes
the container, as the owner's Hibernate does (`pet_operations.hibernate_idle`, recorded with
`SYSTEM_ACTOR`). The next message builds the sandbox again with the workspace restored, the
chat saying "Waking the assistant…" meanwhile (`runs`). An open owner's terminal keeps its
Assistant awake, and its close counts as activity (`terminal`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlmodel import Session, col, select

from mosoo_core import streams
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.logs import get_logger
from mosoo_core.runtime import pet_operations, terminal
from mosoo_core.runtime.labels import installation_label
from mosoo_core.runtime.sandbox import LABEL_SUBJECT, SandboxBackend, SandboxError, get_backend
from mosoo_core.settings import get_settings
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.pets import PetOperation
from mosoo_core.tables.sessions import ACTIVE_RUN_STATUSES, AgentSession, SessionRun

log = get_logger(__name__)

_PET_SUBJECT = "agent:"
_HIBERNATING_KEY = "mosoo:pet:hibernating:{}"
_HIBERNATING_SECONDS = 900  # longer than any save; a dead worker's mark goes by itself


@dataclass(frozen=True)
class IdlePet:
    app_id: str
    agent_id: str


def idle_pets(
    db: Session, agent_ids: Iterable[str], *, now: datetime, idle: timedelta
) -> list[IdlePet]:
    """Which of these Agents (those whose sandbox exists) are Assistants idle for longer than
    `idle`: no active run, and their last activity older than that. The last activity is the
    latest of: a run's end (its creation if it never ended), the sandbox's making without a
    run (a Wake or Recreate), an owner's terminal opened or closed, and a failed or refused
    idle hibernation (so a failing one is tried again once per idle time, not at every
    tick). With none of these, it is idle."""
    wanted = sorted(set(agent_ids))
    if not wanted:
        return []
    pets = db.exec(
        select(Agent.id, Agent.app_id).where(col(Agent.id).in_(wanted), Agent.kind == "pet")
    ).all()
    if not pets:
        return []
    pet_ids = [agent_id for agent_id, _ in pets]
    busy = set(
        db.exec(
            select(AgentSession.agent_id)
            .join(SessionRun, col(SessionRun.session_id) == col(AgentSession.id))
            .where(
                col(AgentSession.agent_id).in_(pet_ids),
                col(SessionRun.status).in_(ACTIVE_RUN_STATUSES),
            )
        ).all()
    )
    last_run = dict(
        db.exec(
            select(
                AgentSession.agent_id,
                sa.func.max(sa.func.coalesce(SessionRun.finished_at, SessionRun.created_at)),
            )
            .join(SessionRun, col(SessionRun.session_id) == col(AgentSession.id))
            .where(col(AgentSession.agent_id).in_(pet_ids))
            .group_by(col(AgentSession.agent_id))
        ).all()
    )
    made_or_tried = sa.or_(
        sa.and_(
            col(PetOperation.operation).in_(("wake", "recreate", terminal.OPENED, terminal.CLOSED)),
            col(PetOperation.outcome) == "done",
        ),
        sa.and_(
            col(PetOperation.operation) == "hibernate",
            col(PetOperation.account_id) == pet_operations.SYSTEM_ACTOR,
            col(PetOperation.outcome) != "done",
        ),
    )
    last_operation = dict(
        db.exec(
            select(PetOperation.agent_id, sa.func.max(PetOperation.created_at))
            .where(col(PetOperation.agent_id).in_(pet_ids), made_or_tried)
            .group_by(col(PetOperation.agent_id))
        ).all()
    )
    idle_before = now - idle
    found: list[IdlePet] = []
    for agent_id, app_id in pets:
        if agent_id in busy:
            continue
        moments = [m for m in (last_run.get(agent_id), last_operation.get(agent_id)) if m]
        if not moments or max(moments) < idle_before:
            found.append(IdlePet(app_id=app_id, agent_id=agent_id))
    return found


def hibernate_idle_pets(
    backend: SandboxBackend | None = None, *, now: datetime | None = None
) -> int:
    """Hibernate every idle Assistant whose sandbox exists and that no owner's terminal is
    open on; how many were hibernated. A failure (the workspace could not be saved) keeps that
    sandbox running, is logged and recorded, and does not stop the others."""
    backend = backend or get_backend()
    try:
        refs = backend.list_by_label(installation_label())
    except SandboxError as error:
        log.warning("pet.idle_list_failed", error=error.message[:300])
        return 0
    agent_ids = [
        ref.labels[LABEL_SUBJECT].removeprefix(_PET_SUBJECT)
        for ref in refs
        if ref.labels.get(LABEL_SUBJECT, "").startswith(_PET_SUBJECT)
    ]
    idle = timedelta(minutes=get_settings().pet_idle_minutes)
    with session_scope() as db:
        found = idle_pets(db, agent_ids, now=now or utcnow(), idle=idle)
    hibernated = 0
    client = streams.sync_client() if found else None
    for pet in found:
        key = _HIBERNATING_KEY.format(pet.agent_id)
        # A slow tick and the next never save one workspace at once (a failed save deletes it).
        if client is None or terminal.has_open_terminal(pet.agent_id, client):
            continue
        if not client.set(key, "1", nx=True, ex=_HIBERNATING_SECONDS):
            continue
        try:
            pet_operations.hibernate_idle(pet.app_id, pet.agent_id, backend)
        except Exception as error:  # recorded already; one Pet's failure keeps no other awake
            log.warning(
                "pet.idle_hibernate_failed",
                agent_id=pet.agent_id,
                error=getattr(error, "message", type(error).__name__)[:300],
            )
            continue
        finally:
            client.delete(key)
        hibernated += 1
        log.info("pet.idle_hibernated", agent_id=pet.agent_id)
    return hibernated
