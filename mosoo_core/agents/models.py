"""Agent tables (the minimal profile of the runtime issue; versions come with issue 4)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from mosoo_core.clock import utcnow
from mosoo_core.db import UTCDateTime
from mosoo_core.ids import new_id


class Agent(SQLModel, table=True):
    __tablename__ = "agent"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=26)
    app_id: str = Field(foreign_key="app.id", index=True, ondelete="CASCADE", max_length=26)
    name: str = Field(max_length=80)
    description: str = Field(default="", max_length=500)
    runtime: str = Field(default="openai", max_length=32)
    kind: str = Field(default="cattle", max_length=16)  # pet | cattle
    provider_credential_id: str | None = Field(default=None, max_length=26, index=True)
    model: str = Field(default="", max_length=200)
    system_prompt: str = Field(default="", sa_type=sa.Text)
    # {"bash": "ask", "read": "allow", ...}: enabled built-in tools and their policy.
    tools: dict[str, Any] = Field(default_factory=dict, sa_type=sa.JSON)
    provider_options: dict[str, Any] = Field(default_factory=dict, sa_type=sa.JSON)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
