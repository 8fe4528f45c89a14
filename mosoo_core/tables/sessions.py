"""Threads (sessions), runs, the event log, driver instances and their command queue."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from mosoo_core.clock import utcnow
from mosoo_core.db import UTCDateTime
from mosoo_core.ids import new_id

SESSION_STATUSES = ("idle", "running", "rescheduling", "terminated")
ACTIVE_RUN_STATUSES = ("queued", "booting", "running", "waiting_input")
TERMINAL_RUN_STATUSES = ("completed", "failed", "cancelled", "expired")


def _id() -> Any:  # a Field, typed Any so it can stand for the column's value type
    return Field(default_factory=new_id, primary_key=True, max_length=26)


def _now() -> Any:
    return Field(default_factory=utcnow, sa_type=UTCDateTime)


class AgentSession(SQLModel, table=True):
    """A thread: the conversation of one Agent with one caller."""

    __tablename__ = "agent_session"
    id: str = _id()
    app_id: str = Field(foreign_key="app.id", index=True, ondelete="CASCADE", max_length=26)
    agent_id: str = Field(foreign_key="agent.id", index=True, ondelete="CASCADE", max_length=26)
    title: str = Field(default="", max_length=80)
    status: str = Field(default="idle", max_length=16, index=True)
    purpose: str = Field(default="preview", max_length=16)  # preview | console | api | channel
    end_user_id: str | None = Field(default=None, max_length=200, index=True)
    agent_version: int | None = (
        None  # the published version this thread runs; None = the draft (Preview)
    )
    # The environment revision the thread froze when it started (None: none existed).
    environment_revision_id: str | None = Field(
        default=None, foreign_key="environment_revision.id", ondelete="SET NULL", max_length=26
    )
    last_seq: int = 0
    archived_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    created_at: datetime = _now()
    updated_at: datetime = _now()


class SessionRun(SQLModel, table=True):
    __tablename__ = "session_run"
    id: str = _id()
    session_id: str = Field(
        foreign_key="agent_session.id", index=True, ondelete="CASCADE", max_length=26
    )
    app_id: str = Field(max_length=26, index=True)
    status: str = Field(default="queued", max_length=16, index=True)
    input_text: str = Field(default="", sa_type=sa.Text)
    # The files the message named: [{file_id, name, media_type, size}], mounted for this run only.
    attachments: list[dict[str, Any]] = Field(default_factory=list, sa_type=sa.JSON)
    # The frozen execution snapshot (model, prompt, tools ...) resolved at dispatch.
    snapshot: dict[str, Any] = Field(default_factory=dict, sa_type=sa.JSON)
    driver_instance_id: str | None = Field(default=None, max_length=26, index=True)
    error_code: str | None = Field(default=None, max_length=64)
    error_message: str | None = Field(default=None, max_length=2000)
    # The output of the environment's setup script when this run made a new sandbox (its
    # secrets masked, the last 64 KiB): the run's diagnostics.
    setup_log: str = Field(default="", sa_type=sa.Text)
    error_retryable: bool | None = None
    created_at: datetime = _now()
    started_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class RunMark(SQLModel, table=True):
    """One moment of a run's life (dispatch, sandbox ready, hello, first token, teardown...),
    written by the process that saw it (worker or control) when it happened. The phases of
    the run's diagnostics are the spans between consecutive marks (sessions/_marks.py)."""

    __tablename__ = "run_mark"
    __table_args__ = (sa.UniqueConstraint("run_id", "name", name="uq_run_mark_name"),)
    id: str = _id()
    run_id: str = Field(foreign_key="session_run.id", index=True, ondelete="CASCADE", max_length=26)
    name: str = Field(max_length=32)
    at: datetime = Field(sa_type=UTCDateTime)
    # A few facts of that moment, never a secret: {"created": true, "sandbox": "...", ...}.
    detail: dict[str, Any] = Field(default_factory=dict, sa_type=sa.JSON)


class SessionEvent(SQLModel, table=True):
    """The event log: the source of truth for everything a viewer sees."""

    __tablename__ = "session_event"
    __table_args__ = (
        sa.UniqueConstraint("session_id", "seq", name="uq_session_event_seq"),
        sa.UniqueConstraint("session_id", "source_event_id", name="uq_session_event_source"),
    )
    id: str = _id()
    # No index of its own: uq_session_event_seq leads with it (one B-tree fewer per event).
    session_id: str = Field(foreign_key="agent_session.id", ondelete="CASCADE", max_length=26)
    seq: int
    run_id: str | None = Field(default=None, max_length=64, index=True)
    type: str = Field(max_length=48)  # the public event type of PRODUCT.md
    source_event_id: str | None = Field(default=None, max_length=64)
    payload: dict[str, Any] = Field(default_factory=dict, sa_type=sa.JSON)
    occurred_at: datetime = _now()
    created_at: datetime = _now()


class DriverInstance(SQLModel, table=True):
    """One driver process in one sandbox, with its boot and resume credentials (digests)."""

    __tablename__ = "driver_instance"
    id: str = _id()
    app_id: str = Field(max_length=26, index=True)
    subject: str = Field(max_length=64, index=True)  # agent:{id} (Pet) | session:{id} (Cattle)
    session_id: str | None = Field(default=None, max_length=26, index=True)
    runtime: str = Field(max_length=32)
    status: str = Field(default="booting", max_length=16, index=True)
    boot_token_hash: str = Field(max_length=64)
    boot_token_expires_at: datetime = Field(sa_type=UTCDateTime)
    boot_token_used_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    resume_token_hash: str | None = Field(default=None, max_length=64)
    connection_id: str | None = Field(default=None, max_length=26)
    sandbox_id: str | None = Field(default=None, max_length=128)
    last_heartbeat_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    disconnected_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    ready_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    # A warm pool member's driver: when it said `ready {standby}` (warm, waiting for a run).
    standby_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    # What the driver's backend said it supports in hello (PROTOCOL.md); [] before hello.
    capabilities: list[str] = Field(default_factory=list, sa_type=sa.JSON)
    driver_version: str = Field(default="", max_length=64)
    # Hellos with a resume token: the driver lost its connection and came back.
    reconnects: int = Field(default=0)
    created_at: datetime = _now()


class DriverCommand(SQLModel, table=True):
    """Commands for a driver stay here, ordered by seq, until it reports them done."""

    __tablename__ = "driver_command"
    __table_args__ = (
        sa.UniqueConstraint("driver_instance_id", "seq", name="uq_driver_command_seq"),
    )
    id: str = _id()
    driver_instance_id: str = Field(
        foreign_key="driver_instance.id", index=True, ondelete="CASCADE", max_length=26
    )
    seq: int
    kind: str = Field(max_length=32)
    payload: dict[str, Any] = Field(default_factory=dict, sa_type=sa.JSON)
    status: str = Field(
        default="pending", max_length=16, index=True
    )  # pending|accepted|completed|failed
    error: str | None = Field(default=None, max_length=4096)
    created_at: datetime = _now()
    updated_at: datetime = _now()


class ModelGrant(SQLModel, table=True):
    """The opaque token a run's driver uses as its API key at the model gateway. Bound to
    the run, one provider credential and the allowed models; dies with the run."""

    __tablename__ = "model_grant"
    id: str = _id()
    token_hash: str = Field(max_length=64, unique=True)
    run_id: str = Field(foreign_key="session_run.id", index=True, ondelete="CASCADE", max_length=26)
    app_id: str = Field(max_length=26)
    credential_id: str = Field(max_length=26)
    allowed_models: list[str] = Field(default_factory=list, sa_type=sa.JSON)
    expires_at: datetime = Field(sa_type=UTCDateTime)
    created_at: datetime = _now()
