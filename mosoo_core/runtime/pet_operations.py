"""What an owner can do to an Assistant's (Pet's) sandbox, and what it is doing now.

Restart stops its drivers and keeps the container; Recreate saves `/workspace` (memory,
what every thread wrote), removes the container and builds a new one from the current
profile with the workspace restored; Hibernate saves and removes only (the next message, or
Wake, builds it again); Reset removes the container and every saved workspace, keeping the
Agent's configuration, threads, usage and logs. Each is refused while a run of the Agent is
active and is recorded (`PetOperation`) for the Agent's Logs, refusals and failures too.
The saving is Apply's own (`pets.checkpoint_and_remove`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, get_args

from sqlmodel import Session, col, select

from mosoo_core import agents, environments, skills, streams
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.errors import Conflict, InvalidInput, MosooError
from mosoo_core.files import get_store, pet_checkpoint_key
from mosoo_core.logs import get_logger
from mosoo_core.ownership import account_agent
from mosoo_core.runtime import pets, runs
from mosoo_core.runtime.sandbox import SandboxBackend, SandboxError, get_backend
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.pets import PetOperation

log = get_logger(__name__)

Operation = Literal["restart", "recreate", "reset", "hibernate", "wake"]
OPERATIONS: tuple[str, ...] = get_args(Operation)
SandboxState = Literal["running", "stopped", "hibernated", "none"]
# The `account_id` of an operation nobody asked for (idle hibernation): never an account's id.
SYSTEM_ACTOR = "system"


@dataclass(frozen=True)
class SandboxStatus:
    """The Agent's sandbox now. `running` (or `stopped`: the container exists but is not
    running), `hibernated` (no container, its workspace saved) or `none`. Use figures are
    None without a container, or where the backend cannot tell."""

    state: SandboxState
    sandbox_id: str = ""
    image: str = ""
    started_at: datetime | None = None
    uptime_seconds: int | None = None
    cpu_percent: float | None = None
    memory_bytes: int | None = None
    memory_limit_bytes: int | None = None
    pending: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class OperationResult:
    operation: str
    message: str  # what happened, for the owner
    seconds: float


@dataclass(frozen=True)
class OperationRecord:
    """One line of the Agent's Logs."""

    id: str
    operation: str
    outcome: str  # done | refused | failed
    error: str
    account_id: str  # who asked for it; SYSTEM_ACTOR when the system did
    duration_ms: int
    created_at: datetime


def pet_agent(db: Session, account_id: str, agent_id: str) -> Agent:
    """The account's Agent (NotFound otherwise, the same for another owner's), refused unless
    it is an Assistant."""
    agent = account_agent(db, account_id, agent_id)
    if agent.kind != "pet":
        raise Conflict("Only an Assistant has a sandbox of its own: a Task gets one per run.")
    return agent


def sandbox_status(
    db: Session, account_id: str, agent_id: str, backend: SandboxBackend | None = None
) -> SandboxStatus:
    """The Agent's sandbox, its uptime and use (about a second: CPU use is sampled). NotFound
    for another owner's Agent, Conflict for a Task."""
    agent = pet_agent(db, account_id, agent_id)
    saved = get_store().exists(pet_checkpoint_key(agent.app_id, agent.id))
    status = pets.pet_sandbox_status(account_id, agent.app_id, agent.id, backend)
    if not status.exists:
        return SandboxStatus(state="hibernated" if saved else "none")
    backend = backend or get_backend()
    refs = pets.pet_sandboxes(backend, agent.id)
    if not refs:
        return SandboxStatus(state="hibernated" if saved else "none")
    ref = refs[0]
    try:
        stats = backend.stats(ref)
    except SandboxError as error:
        # It went between the listing and the sample: say so rather than fail the page.
        log.info("pet.stats_failed", agent_id=agent.id, error=error.message[:300])
        return SandboxStatus(state="hibernated" if saved else "none")
    started = stats.started_at
    return SandboxStatus(
        state="running" if ref.state == "running" else "stopped",
        sandbox_id=ref.id,
        image=stats.image,
        started_at=started,
        uptime_seconds=int((utcnow() - started).total_seconds()) if started else None,
        cpu_percent=stats.cpu_percent,
        memory_bytes=stats.memory_bytes,
        memory_limit_bytes=stats.memory_limit_bytes,
        pending=status.pending,
    )


def list_operations(
    db: Session, account_id: str, agent_id: str, limit: int = 50
) -> list[OperationRecord]:
    """The Agent's sandbox operations, newest first. NotFound for another owner's Agent."""
    pet_agent(db, account_id, agent_id)
    rows = db.exec(
        select(PetOperation)
        .where(PetOperation.agent_id == agent_id)
        .order_by(col(PetOperation.created_at).desc(), col(PetOperation.id).desc())
        .limit(limit)
    ).all()
    return [
        OperationRecord(
            id=row.id,
            operation=row.operation,
            outcome=row.outcome,
            error=row.error,
            account_id=row.account_id,
            duration_ms=row.duration_ms,
            created_at=row.created_at,
        )
        for row in rows
    ]


def run_operation(
    account_id: str,
    agent_id: str,
    operation: str,
    *,
    confirm_name: str = "",
    backend: SandboxBackend | None = None,
) -> OperationResult:
    """Do one operation on the Agent's sandbox and record it, whatever the outcome. NotFound
    for another owner's Agent (nothing recorded); Conflict for a Task, while a run is active,
    or when the sandbox cannot do it now (the message says why); InvalidInput (`confirm_name`)
    when a reset is not confirmed with the Agent's name. Runs in the caller's thread: a
    recreate or wake takes seconds (saving and restoring the workspace, making a container)."""
    if operation not in OPERATIONS:
        raise InvalidInput(f"Unknown operation {operation!r}.", field="operation")
    with session_scope() as db:
        agent = pet_agent(db, account_id, agent_id)
        app_id, name = agent.app_id, agent.name
    work: Callable[[], str] = {
        "restart": lambda: _restart(app_id, agent_id, backend),
        "recreate": lambda: _recreate(account_id, app_id, agent_id, backend),
        "reset": lambda: _reset(app_id, agent_id, name, confirm_name, backend),
        "hibernate": lambda: _hibernate(app_id, agent_id, backend),
        "wake": lambda: _wake(account_id, app_id, agent_id, backend),
    }[operation]
    return _recorded(account_id, agent_id, operation, work)


def hibernate_idle(app_id: str, agent_id: str, backend: SandboxBackend | None = None) -> None:
    """Hibernate as the owner's Hibernate does, asked by the system (`SYSTEM_ACTOR`) for an
    Assistant left idle (`pet_idle`); refused and failed attempts are recorded the same way."""
    _recorded(SYSTEM_ACTOR, agent_id, "hibernate", lambda: _hibernate(app_id, agent_id, backend))


def _recorded(
    account_id: str, agent_id: str, operation: str, work: Callable[[], str]
) -> OperationResult:
    """Do `work` and record how it went, whatever the outcome."""
    started = time.monotonic()
    try:
        message = work()
    except SandboxError as error:
        record_operation(account_id, agent_id, operation, "failed", error.message, started)
        raise Conflict(f"The sandbox could not {operation}: {error.message[:300]}") from None
    except MosooError as error:
        failed = isinstance(error, pets.CheckpointFailed)
        record_operation(
            account_id,
            agent_id,
            operation,
            "failed" if failed else "refused",
            error.message,
            started,
        )
        raise
    except Exception as error:  # the object store, the database: the log still says it failed
        record_operation(
            account_id, agent_id, operation, "failed", f"{type(error).__name__}", started
        )
        raise
    record_operation(account_id, agent_id, operation, "done", "", started)
    seconds = round(time.monotonic() - started, 3)
    log.info("pet.operation", agent_id=agent_id, operation=operation, seconds=seconds)
    return OperationResult(operation=operation, message=message, seconds=seconds)


def record_operation(
    account_id: str, agent_id: str, operation: str, outcome: str, error: str, started: float
) -> None:
    """One line of the Agent's Logs: `operation` by `account_id`, begun at `started`
    (time.monotonic()), its outcome (done | refused | failed) and why when not done."""
    with session_scope() as db:
        db.add(
            PetOperation(
                agent_id=agent_id,
                account_id=account_id,
                operation=operation,
                outcome=outcome,
                error=error[:1000],
                duration_ms=int((time.monotonic() - started) * 1000),
            )
        )


def _resolved(backend: SandboxBackend | None) -> SandboxBackend:
    return backend or get_backend()


def _restart(app_id: str, agent_id: str, backend: SandboxBackend | None) -> str:
    with session_scope() as db:
        pets.refuse_during_run(db, agent_id, "restart")
    sandbox = _resolved(backend)
    refs = pets.pet_sandboxes(sandbox, agent_id)
    if not refs:
        raise Conflict("There is no sandbox to restart: the next message builds one.")
    if refs[0].state != "running":
        sandbox.start(refs[0])
    with session_scope() as db:
        # Told to stop, not killed: the next message boots a fresh driver in the same container.
        stopped = pets.stop_pet_drivers(db, agent_id)
        for instance_id in stopped:
            driver_plane.enqueue_command(db, instance_id, "session.stop", {"reason": "restart"})
    for instance_id in stopped:
        streams.notify_driver(instance_id)
    return "The driver was restarted; the sandbox and its files stay."


def _save_and_remove(app_id: str, agent_id: str, backend: SandboxBackend, then: str) -> bool:
    """Apply's checkpoint-then-remove; False when there was no container to save."""
    with session_scope() as db:
        pets.refuse_during_run(db, agent_id, then)
    refs = pets.pet_sandboxes(backend, agent_id)
    if not refs:
        return False
    pets.checkpoint_and_remove(app_id, agent_id, refs, backend, then)
    return True


def _hibernate(app_id: str, agent_id: str, backend: SandboxBackend | None) -> str:
    if not _save_and_remove(app_id, agent_id, _resolved(backend), "hibernate"):
        raise Conflict("There is no running sandbox to hibernate.")
    return (
        "The workspace was saved and the sandbox removed; the next message or Wake brings it back."
    )


def _recreate(account_id: str, app_id: str, agent_id: str, backend: SandboxBackend | None) -> str:
    sandbox = _resolved(backend)
    saved = _save_and_remove(app_id, agent_id, sandbox, "recreate")
    if not saved and not get_store().exists(pet_checkpoint_key(app_id, agent_id)):
        raise Conflict("There is no sandbox to recreate: the next message builds one.")
    reason = _cannot_wake_now(account_id, app_id, agent_id)
    if reason:
        return f"The workspace was saved and the sandbox removed; {reason}"
    _build(account_id, app_id, agent_id, sandbox)
    return "The sandbox was rebuilt from the current profile, its workspace restored."


def _reset(
    app_id: str, agent_id: str, name: str, confirm_name: str, backend: SandboxBackend | None
) -> str:
    if confirm_name != name:
        raise InvalidInput(
            "Type the Agent's name exactly to confirm the reset.", field="confirm_name"
        )
    with session_scope() as db:
        pets.refuse_during_run(db, agent_id, "reset")
    sandbox = _resolved(backend)
    refs = pets.pet_sandboxes(sandbox, agent_id)
    with session_scope() as db:
        pets.stop_pet_drivers(db, agent_id)
    for ref in refs:
        sandbox.remove(ref)
    # The Pet's saved workspace lives in a folder of its own (runs.pet_checkpoint_key).
    get_store().delete_prefix(pet_checkpoint_key(app_id, agent_id).rsplit("/", 1)[0])
    return "The sandbox and its saved workspace were wiped; the next message starts afresh."


def _wake(account_id: str, app_id: str, agent_id: str, backend: SandboxBackend | None) -> str:
    with session_scope() as db:
        pets.refuse_during_run(db, agent_id, "wake it")
    sandbox = _resolved(backend)
    if pets.pet_sandboxes(sandbox, agent_id):
        raise Conflict("The sandbox is already awake.")
    if not get_store().exists(pet_checkpoint_key(app_id, agent_id)):
        raise Conflict("There is nothing to wake: the next message builds a fresh sandbox.")
    reason = _cannot_wake_now(account_id, app_id, agent_id)
    if reason:
        raise Conflict(f"The sandbox cannot be woken here: {reason}")
    _build(account_id, app_id, agent_id, sandbox)
    return "The sandbox was built again with its workspace restored."


def _cannot_wake_now(account_id: str, app_id: str, agent_id: str) -> str:
    """Why the sandbox must wait for a message to be built ("" when it can be built now): a
    setup script and an environment's packages run within a run (its log, its grant)."""
    with session_scope() as db:
        agent = agents.get_agent(db, account_id, app_id, agent_id)
        revision = environments.revision_for_thread(db, app_id, agent.environment_id)
        if revision.setup_script.strip() or revision.packages_hash:
            return "its environment's setup runs with the next message, which builds it."
    return ""


def _build(account_id: str, app_id: str, agent_id: str, backend: SandboxBackend) -> None:
    """Make the Pet sandbox as a run would (`runs.sandbox_for`): from the current profile,
    its skills mounted, the saved workspace restored. The next message boots its driver."""
    with session_scope() as db:
        agent = agents.get_agent(db, account_id, app_id, agent_id)
        revision = environments.revision_for_thread(db, app_id, agent.environment_id)
        bound = skills.bound_skills(db, app_id, agent.skills)
        plan = runs.BootPlan(
            run_id="",
            session_id="",
            app_id=app_id,
            agent_id=agent_id,
            kind="pet",
            subject=f"agent:{agent_id}",
            instance_id="",
            payload_json="",
            built_from=agents.sandbox_fingerprint(
                agent, revision.id, [item.version_id for item in bound]
            ),
            network_policy=revision.network_policy,
            skills=tuple(bound),
        )
    runs.sandbox_for(backend, plan)
