"""Driver instances: single-use boot tokens, rotating resume tokens, heartbeats and the
command queue that lives in the database until the driver reports each command done."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from driver.protocol import COMMAND_KINDS, Assignment, Command, CommandUpdate, Hello
from mosoo_core import vault
from mosoo_core.clock import utcnow
from mosoo_core.db import commit_refusal
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_core.ids import new_id
from mosoo_core.ownership import owned_agent, owned_thread
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import DriverCommand, DriverInstance

BOOT_TOKEN_TTL = timedelta(seconds=60)


class DriverRefused(Exception):
    """A driver message that must be refused; `code` goes to the driver in `close`."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class NewDriver:
    instance_id: str
    boot_token: str  # goes into the boot payload once; only its digest is stored


@dataclass(frozen=True)
class DriverWelcome:
    instance_id: str
    session_id: str | None
    app_id: str
    connection_id: str
    resume_token: str


def register_driver(
    db: Session,
    *,
    app_id: str,
    subject: str,
    runtime: str,
    session_id: str | None = None,
    now: datetime | None = None,
) -> NewDriver:
    """A driver about to boot: its id and single-use boot token (valid 60 s)."""
    now = now or utcnow()
    token = secrets.token_urlsafe(32)
    instance = DriverInstance(
        app_id=app_id,
        subject=subject,
        session_id=session_id,
        runtime=runtime,
        boot_token_hash=_digest(token),
        boot_token_expires_at=now + BOOT_TOKEN_TTL,
        created_at=now,
    )
    db.add(instance)
    db.flush()
    return NewDriver(instance_id=instance.id, boot_token=token)


def accept_hello(db: Session, hello: Hello, *, now: datetime | None = None) -> DriverWelcome:
    """Check a driver's hello: a boot token works once within 60 s for its own instance;
    after that only the latest resume token does. Rotates the resume token."""
    now = now or utcnow()
    instance = db.exec(
        select(DriverInstance)
        .where(DriverInstance.id == hello.driver_instance_id)
        .with_for_update()
    ).first()
    if instance is None or instance.status in ("stopped", "lost"):
        raise DriverRefused("unknown_instance", "no such driver instance")
    if hello.boot_token:
        if not hmac.compare_digest(instance.boot_token_hash, _digest(hello.boot_token)):
            raise DriverRefused("bad_token", "boot token does not belong to this instance")
        if instance.boot_token_used_at is not None:
            raise DriverRefused("token_replayed", "boot token was already used")
        if instance.boot_token_expires_at <= now:
            raise DriverRefused("token_expired", "boot token expired")
        instance.boot_token_used_at = now
    elif hello.resume_token:
        if instance.resume_token_hash is None or not hmac.compare_digest(
            instance.resume_token_hash, _digest(hello.resume_token)
        ):
            raise DriverRefused("bad_token", "resume token is not valid for this instance")
    else:
        raise DriverRefused("bad_token", "hello carries no token")
    if hello.runtime != instance.runtime:
        # The boot token was presented and is burned (and the row lock released) even so.
        db.add(instance)
        commit_refusal(
            db,
            DriverRefused(
                "runtime_mismatch", f"instance runs {instance.runtime!r}, not {hello.runtime!r}"
            ),
        )
    resume_token = secrets.token_urlsafe(32)
    instance.resume_token_hash = _digest(resume_token)
    instance.connection_id = new_id()
    instance.status = "connected"
    instance.last_heartbeat_at = now
    instance.disconnected_at = None
    # What this backend supports (the protocol refuses unknown names), for the console.
    instance.capabilities = list(hello.capabilities)
    # For the run's diagnostics: which driver served it, and whether it had to come back.
    instance.driver_version = hello.driver_version
    if not hello.boot_token:
        instance.reconnects += 1
    db.add(instance)
    db.flush()
    return DriverWelcome(
        instance_id=instance.id,
        session_id=instance.session_id,
        app_id=instance.app_id,
        connection_id=instance.connection_id,
        resume_token=resume_token,
    )


def live_capabilities(
    db: Session,
    account_id: str,
    *,
    agent_id: str | None = None,
    thread_id: str | None = None,
) -> list[str] | None:
    """What the running driver reported in hello (PROTOCOL.md): the one serving the Pet
    Agent `agent_id` (its shared sandbox), or the thread `thread_id` (a Pet's or a Task's
    driver of that thread). None when no driver is ready: the console uses the catalog then.
    Exactly one of `agent_id` and `thread_id`; another owner's id is NotFound."""
    if (agent_id is None) == (thread_id is None):
        raise InvalidInput("Name an Agent or a thread.", field="agent_id")
    query = select(DriverInstance).where(
        DriverInstance.status == "connected", col(DriverInstance.ready_at).is_not(None)
    )
    if thread_id is not None:
        thread = owned_thread(db, account_id, thread_id)
        query = query.where(DriverInstance.session_id == thread.id)
    else:
        agent = db.get(Agent, agent_id) if agent_id else None
        if agent is None:
            raise NotFound("Agent not found.")
        owned_agent(db, account_id, agent.app_id, agent.id)
        query = query.where(DriverInstance.subject == f"agent:{agent.id}")
    # The newest first: an `acp` thread's earlier driver stays connected beside the next one.
    instance = db.exec(
        query.order_by(col(DriverInstance.created_at).desc(), col(DriverInstance.id).desc())
    ).first()
    return list(instance.capabilities) if instance is not None else None


def _live_instance(db: Session, instance_id: str, connection_id: str) -> DriverInstance:
    instance = db.get(DriverInstance, instance_id)
    if instance is None or instance.connection_id != connection_id:
        raise DriverRefused("superseded", "a newer connection replaced this one")
    return instance


def record_heartbeat(
    db: Session, instance_id: str, connection_id: str, *, now: datetime | None = None
) -> None:
    instance = _live_instance(db, instance_id, connection_id)
    instance.last_heartbeat_at = now or utcnow()
    if instance.status == "disconnected":
        instance.status = "connected"
        instance.disconnected_at = None
    db.add(instance)


def mark_ready(
    db: Session,
    instance_id: str,
    connection_id: str,
    *,
    standby: bool = False,
    capabilities: list[str] | None = None,
    now: datetime | None = None,
) -> None:
    """The driver said ready: for its run, or (`standby`, a warm pool member) for one to be
    assigned. A driver that got its run by `assign` names its backend's capabilities here."""
    instance = _live_instance(db, instance_id, connection_id)
    if standby:
        instance.standby_at = instance.standby_at or (now or utcnow())
    else:
        instance.ready_at = instance.ready_at or (now or utcnow())
    if capabilities is not None:
        instance.capabilities = list(capabilities)
    db.add(instance)


def mark_disconnected(
    db: Session, instance_id: str, connection_id: str, *, now: datetime | None = None
) -> bool:
    """The socket closed; returns False when a newer connection already took over."""
    instance = db.get(DriverInstance, instance_id)
    if (
        instance is None
        or instance.connection_id != connection_id
        or instance.status != "connected"
    ):
        return False
    instance.status = "disconnected"
    instance.disconnected_at = now or utcnow()
    db.add(instance)
    return True


def mark_stopped(db: Session, instance_id: str) -> None:
    instance = db.get(DriverInstance, instance_id)
    if instance is not None:
        instance.status = "stopped"
        instance.resume_token_hash = None
        db.add(instance)


def enqueue_command(
    db: Session, instance_id: str, kind: str, payload: dict[str, Any]
) -> DriverCommand:
    """Queue a command for a driver; seqs are consecutive per instance."""
    if kind not in COMMAND_KINDS:
        raise ValueError(f"unknown command kind {kind!r}")
    last = db.exec(
        select(sa.func.max(DriverCommand.seq)).where(
            DriverCommand.driver_instance_id == instance_id
        )
    ).one()
    command = DriverCommand(
        driver_instance_id=instance_id, seq=(last or 0) + 1, kind=kind, payload=payload
    )
    db.add(command)
    db.flush()
    return command


def enqueue_assignment(db: Session, instance_id: str, assignment: Assignment) -> DriverCommand:
    """Give a standby driver its run (`assign`). The assignment holds the run's grants and
    secret variables: it is stored sealed for this instance and opened only by
    `commands_to_send` as control sends it; the row's copy is wiped once the command is done."""
    instance = db.get(DriverInstance, instance_id)
    if instance is None:
        raise NotFound("Driver instance not found.")
    sealed = vault.seal_in_transit(
        instance.app_id, instance.id, assignment.model_dump_json().encode()
    )
    return enqueue_command(db, instance_id, "assign", {"sealed": sealed})


def commands_to_send(db: Session, instance_id: str, *, after_seq: int = 0) -> list[Command]:
    """The driver's unfinished commands as it receives them, oldest first: an assignment is
    opened here. One that cannot be opened (the master key changed meanwhile) is failed with
    the reason, which fails its run, rather than stopping the commands after it."""
    messages = []
    for row in undelivered_commands(db, instance_id, after_seq=after_seq):
        payload = row.payload
        if row.kind == "assign":
            instance = db.get(DriverInstance, row.driver_instance_id)
            try:
                opened = vault.open_in_transit(
                    instance.app_id if instance is not None else "",
                    row.driver_instance_id,
                    row.payload.get("sealed") or {},
                )
            except vault.VaultError as error:
                row.status, row.error, row.payload = "failed", str(error)[:4096], {}
                row.updated_at = utcnow()
                db.add(row)
                continue
            payload = Assignment.model_validate_json(opened).model_dump(mode="json")
        messages.append(Command(command_id=row.id, seq=row.seq, kind=row.kind, payload=payload))
    return messages


def undelivered_commands(
    db: Session, instance_id: str, *, after_seq: int = 0
) -> list[DriverCommand]:
    """Commands the driver has not finished, oldest first (re-sent after a reconnect)."""
    return list(
        db.exec(
            select(DriverCommand)
            .where(
                DriverCommand.driver_instance_id == instance_id,
                col(DriverCommand.status).in_(["pending", "accepted"]),
                DriverCommand.seq > after_seq,
            )
            .order_by(col(DriverCommand.seq))
        ).all()
    )


def apply_command_update(db: Session, instance_id: str, update: CommandUpdate) -> DriverCommand:
    """Record a driver's progress on one of ITS commands; another instance's id is refused."""
    command = db.get(DriverCommand, update.command_id)
    if command is None or command.driver_instance_id != instance_id:
        raise DriverRefused("unknown_command", "command does not belong to this driver")
    if command.status in ("completed", "failed"):
        return command
    command.status = update.status
    command.error = update.error
    command.updated_at = utcnow()
    if command.kind == "assign" and update.status in ("completed", "failed"):
        command.payload = {}  # the sealed run (grants, secrets) is of no more use
    db.add(command)
    return command
