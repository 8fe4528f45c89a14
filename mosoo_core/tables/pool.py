"""The warm pool of Task (Cattle) sandboxes (mosoo_core.runtime.pool): the kinds of sandbox
kept warm on each host, and the members standing by."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from mosoo_core.clock import utcnow
from mosoo_core.db import UTCDateTime
from mosoo_core.ids import new_id


class PoolKey(SQLModel, table=True):
    """One kind of Task sandbox kept warm on one host: what a sandbox must have from its
    creation for a run to use it (image, runtime, the environment revision with its network
    policy, the skill versions it mounts). A run's miss makes it; it goes once no run wanted
    it for MOSOO_POOL_KEY_IDLE_MINUTES and its members are gone."""

    __tablename__ = "pool_key"
    __table_args__ = (sa.UniqueConstraint("host", "digest", name="uq_pool_key_host_digest"),)
    id: str = Field(default_factory=new_id, primary_key=True, max_length=26)
    host: str = Field(max_length=128, index=True)
    digest: str = Field(max_length=64)  # of everything below: what two runs compare
    app_id: str = Field(foreign_key="app.id", index=True, ondelete="CASCADE", max_length=26)
    runtime: str = Field(max_length=32)
    image: str = Field(max_length=200)
    revision_id: str = Field(max_length=26)
    network_policy: str = Field(max_length=16)
    layer: str = Field(default="", max_length=100)  # the built layer mounted, "" for none
    skill_versions: list[str] = Field(default_factory=list, sa_type=sa.JSON)
    hits: int = 0
    misses: int = 0
    last_wanted_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class PoolMember(SQLModel, table=True):
    """A sandbox with its driver started and standing by (its driver instance's
    `standby_at`), until one run claims it: `waiting` -> `claimed`, never back. The row goes
    with the sandbox."""

    __tablename__ = "pool_member"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=26)
    key_id: str = Field(foreign_key="pool_key.id", index=True, ondelete="CASCADE", max_length=26)
    host: str = Field(max_length=128, index=True)
    driver_instance_id: str = Field(max_length=26, unique=True)
    sandbox_id: str = Field(default="", max_length=128)
    sandbox_name: str = Field(default="", max_length=128)
    status: str = Field(default="waiting", max_length=16, index=True)  # waiting | claimed
    run_id: str | None = Field(default=None, max_length=26, index=True)
    image: str = Field(max_length=200)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    claimed_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
