"""Environments: what a sandbox is built from (packages, setup script, variables, network).

An environment is a name with a pointer to its current revision; every save is a new,
immutable revision. A thread keeps the revision it started with, so an environment that is
deleted is only marked deleted while its revisions stay for the threads that froze them.
A build is keyed by the content hash of a revision's packages: two revisions (of any
environment) with the same packages share one build and one image layer.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from mosoo_core.clock import utcnow
from mosoo_core.db import UTCDateTime
from mosoo_core.ids import new_id

NETWORK_POLICIES = ("none", "limited", "full")
BUILD_STATUSES = ("queued", "building", "ready", "failed")


def _id() -> Any:  # a Field, typed Any so it can stand for the column's value type
    return Field(default_factory=new_id, primary_key=True, max_length=26)


def _now() -> Any:
    return Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)


class Environment(SQLModel, table=True):
    __tablename__ = "environment"
    __table_args__ = (
        # One default per App, enforced by the database as well as the service.
        sa.Index(
            "uq_environment_default",
            "app_id",
            unique=True,
            sqlite_where=sa.text("is_default AND deleted_at IS NULL"),
            postgresql_where=sa.text("is_default AND deleted_at IS NULL"),
        ),
    )
    id: str = _id()
    app_id: str = Field(foreign_key="app.id", index=True, ondelete="CASCADE", max_length=26)
    name: str = Field(max_length=80)
    is_default: bool = Field(default=False)
    current_revision: int = 1
    deleted_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    created_at: datetime = _now()
    updated_at: datetime = _now()


class EnvironmentRevision(SQLModel, table=True):
    __tablename__ = "environment_revision"
    __table_args__ = (
        sa.UniqueConstraint("environment_id", "number", name="uq_environment_revision_number"),
    )
    id: str = _id()
    environment_id: str = Field(
        foreign_key="environment.id", index=True, ondelete="CASCADE", max_length=26
    )
    app_id: str = Field(foreign_key="app.id", index=True, ondelete="CASCADE", max_length=26)
    number: int
    summary: str = Field(default="", max_length=500)
    # {"pip": ["name==1.0"], "npm": ["name@1.0.0"]}
    packages: dict[str, Any] = Field(default_factory=dict, sa_type=sa.JSON)
    setup_script: str = Field(default="", sa_type=sa.Text)
    # [{"name", "secret", "setup_only", "value" (exposed only) | "secret_id" (vault)}]
    variables: list[dict[str, Any]] = Field(default_factory=list, sa_type=sa.JSON)
    network_policy: str = Field(default="none", max_length=16)
    allowed_hosts: list[str] = Field(default_factory=list, sa_type=sa.JSON)
    allow_package_indexes: bool = Field(default=False)
    # sha256 over the packages and the index URLs they were built from; "" without packages.
    packages_hash: str = Field(default="", max_length=64, index=True)
    created_at: datetime = _now()


class EnvironmentBuild(SQLModel, table=True):
    """The installed packages of one packages hash: a read-only layer directory that every
    sandbox of a revision with these packages mounts at /opt/mosoo/env."""

    __tablename__ = "environment_build"
    id: str = _id()
    packages_hash: str = Field(max_length=64, unique=True)
    packages: dict[str, Any] = Field(default_factory=dict, sa_type=sa.JSON)
    status: str = Field(default="queued", max_length=16, index=True)
    # The ready layer, relative to the layers' root ("<hash>/<attempt>"); "" until ready.
    # Each attempt installs into a directory of its own, so a rebuild never changes the files
    # under a sandbox that still mounts the previous one.
    layer: str = Field(default="", max_length=200)
    # sha256 of the egress grant of the build in progress ("" otherwise): the build sandbox's
    # only way out is the egress proxy, limited to the package indexes.
    grant_hash: str = Field(default="", max_length=64, index=True)
    log: str = Field(default="", sa_type=sa.Text)
    error: str = Field(default="", max_length=500)
    attempts: int = 0
    created_at: datetime = _now()
    started_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    # Renewed by the builder while it works: a build whose builder went silent is claimed
    # again (a worker that died mid-build leaves it `building`).
    heartbeat_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    last_used_at: datetime = _now()
