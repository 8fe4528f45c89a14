"""Pet sandboxes and the profile changes that need them recreated.

A Pet sandbox is built once from the Agent's kind, environment and skills (mounted or
installed into it) and then shared by every run, so changing one of those leaves the running
sandbox behind: the change is *pending* until applied. Apply checkpoints `/workspace`,
removes the sandbox and lets the next run create a fresh one from the current profile with
the workspace restored (`runs.sandbox_for`). Model, prompt, tools and provider options need
no Apply: every run boots a fresh driver with the current profile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import IO, cast

from sqlmodel import Session, col, select

from mosoo_core import agents, environments, skills
from mosoo_core.db import session_scope
from mosoo_core.errors import Conflict
from mosoo_core.files import get_store, pet_checkpoint_key
from mosoo_core.files.store import ChunkReader
from mosoo_core.logs import get_logger
from mosoo_core.runtime.labels import LABEL_BUILT_FROM, installation_label
from mosoo_core.runtime.sandbox import (
    LABEL_SUBJECT,
    WORKSPACE,
    SandboxBackend,
    SandboxError,
    SandboxRef,
    get_backend,
)
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.sessions import ACTIVE_RUN_STATUSES, AgentSession, DriverInstance, SessionRun

log = get_logger(__name__)


@dataclass(frozen=True)
class PetSandbox:
    """The Agent's Pet sandbox as it is now. `pending` names the fields of
    `agents.SANDBOX_FIELDS` changed since it was built (empty without a sandbox)."""

    exists: bool
    state: str = ""
    pending: list[str] = field(default_factory=list)


def _subject(agent_id: str) -> str:
    return f"agent:{agent_id}"


def _ever_had_driver(db: Session, agent_id: str) -> bool:
    return (
        db.exec(
            select(DriverInstance.id).where(DriverInstance.subject == _subject(agent_id)).limit(1)
        ).first()
        is not None
    )


def _active_run(db: Session, agent_id: str) -> bool:
    return (
        db.exec(
            select(SessionRun.id)
            .join(AgentSession, col(AgentSession.id) == col(SessionRun.session_id))
            .where(
                AgentSession.agent_id == agent_id, col(SessionRun.status).in_(ACTIVE_RUN_STATUSES)
            )
            .limit(1)
        ).first()
        is not None
    )


def pet_sandbox_status(
    account_id: str, app_id: str, agent_id: str, backend: SandboxBackend | None = None
) -> PetSandbox:
    """Whether the Agent has a Pet sandbox and which sandbox fields of the draft differ from
    what it was built from. NotFound for another owner's Agent."""
    with session_scope() as db:
        agent = agents.get_agent(db, account_id, app_id, agent_id)
        if not _ever_had_driver(db, agent_id):
            return PetSandbox(exists=False)  # no run ever made one: no backend to ask
        # The revision a new thread would freeze now: what Apply would build from.
        revision_id = environments.revision_for_thread(db, app_id, agent.environment_id).id
        skill_versions = [
            bound.version_id for bound in skills.bound_skills(db, app_id, agent.skills)
        ]
    backend = backend or get_backend()
    refs = pet_sandboxes(backend, agent_id)
    if not refs:
        return PetSandbox(exists=False)
    ref = refs[0]
    return PetSandbox(
        exists=True,
        state=ref.state,
        pending=agents.pending_sandbox_fields(
            agent, ref.labels.get(LABEL_BUILT_FROM), revision_id, skill_versions
        ),
    )


class CheckpointFailed(Conflict):
    """The workspace could not be saved, so the sandbox was kept as it was."""


def refuse_during_run(db: Session, agent_id: str, then: str) -> None:
    """Conflict while a run of the Agent is active: its sandbox is in use."""
    if _active_run(db, agent_id):
        raise Conflict(f"A run is in progress. Stop it or wait for it to finish, then {then}.")


def pet_sandboxes(backend: SandboxBackend, agent_id: str) -> list[SandboxRef]:
    """The Agent's Pet sandbox (a list: a crash between create and remove may leave two)."""
    return backend.list_by_label({LABEL_SUBJECT: _subject(agent_id), **installation_label()})


def stop_pet_drivers(db: Session, agent_id: str) -> list[str]:
    """Mark every driver of the Agent's sandbox stopped; the ids of those that were live."""
    drivers = db.exec(
        select(DriverInstance).where(
            DriverInstance.subject == _subject(agent_id), DriverInstance.status != "stopped"
        )
    ).all()
    for driver in drivers:
        driver_plane.mark_stopped(db, driver.id)
    return [driver.id for driver in drivers]


def checkpoint_and_remove(
    app_id: str, agent_id: str, refs: list[SandboxRef], backend: SandboxBackend, then: str
) -> None:
    """Save `/workspace` of the Agent's sandbox where the next one restores it from
    (`runs._restore_pet_workspace`), then remove the sandbox. If saving fails the sandbox
    stays and CheckpointFailed says why; a run that started meanwhile is a Conflict (and the
    sandbox stays for it). `then` ends the advice ("apply", "recreate")."""
    store = get_store()
    key = pet_checkpoint_key(app_id, agent_id)
    try:
        if refs[0].state != "running":
            backend.start(refs[0])  # reading the workspace needs it running
        store.put(key, cast(IO[bytes], ChunkReader(backend.get_archive(refs[0], WORKSPACE))))
    except (SandboxError, OSError) as error:
        store.delete(key)  # a broken checkpoint must never be restored
        message = getattr(error, "message", None) or str(error)
        log.warning("pet.checkpoint_failed", agent_id=agent_id, error=message[:300])
        raise CheckpointFailed(
            f"The workspace could not be saved, so the sandbox was kept as it was: {message[:300]}"
        ) from None
    with session_scope() as db:
        if _active_run(db, agent_id):
            # A message arrived while the workspace was being saved: that run needs the sandbox.
            store.delete(key)
            raise Conflict(f"A run started meanwhile. Wait for it to finish, then {then} again.")
        stop_pet_drivers(db, agent_id)
    for ref in refs:
        backend.remove(ref)


def apply_pet_changes(
    account_id: str, app_id: str, agent_id: str, backend: SandboxBackend | None = None
) -> str:
    """Recreate the Agent's Pet sandbox so pending changes take effect: refused (Conflict)
    while a run of the Agent is active; `/workspace` is checkpointed first and, if that
    fails, the old sandbox stays and the Conflict says why. Returns "recreated", or "none"
    when there is no sandbox (the next run builds one from the current profile anyway)."""
    with session_scope() as db:
        agents.owned_agent(db, account_id, app_id, agent_id)
        refuse_during_run(db, agent_id, "apply")
    backend = backend or get_backend()
    refs = pet_sandboxes(backend, agent_id)
    if not refs:
        return "none"
    checkpoint_and_remove(app_id, agent_id, refs, backend, "apply")
    log.info("pet.recreated", agent_id=agent_id, sandboxes=len(refs))
    return "recreated"
