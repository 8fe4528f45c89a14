"""Agent tables: the editable draft profile and its immutable published versions."""

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
    # Bindings to App resources (their own issues bring the resources): an environment id,
    # skill ids, MCP server ids. Stored with the draft and frozen into versions and runs.
    environment_id: str | None = Field(default=None, max_length=26)
    skills: list[str] = Field(default_factory=list, sa_type=sa.JSON)
    mcp_servers: list[str] = Field(default_factory=list, sa_type=sa.JSON)
    # Per bound MCP server id: {"default": "off"|"allow"|"ask", "tools": {tool: policy},
    # "required": bool}; a bound server without an entry asks for every tool.
    mcp_policies: dict[str, Any] = Field(default_factory=dict, sa_type=sa.JSON)
    status: str = Field(
        default="draft", max_length=16, sa_column_kwargs={"server_default": "draft"}
    )  # draft | published
    published_version: int | None = (
        None  # the version new non-Preview threads pin; None while a draft
    )
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class AgentVersion(SQLModel, table=True):
    """A published, numbered snapshot of an Agent's profile. Never updated once written."""

    __tablename__ = "agent_version"
    __table_args__ = (sa.UniqueConstraint("agent_id", "number", name="uq_agent_version_number"),)
    id: str = Field(default_factory=new_id, primary_key=True, max_length=26)
    agent_id: str = Field(foreign_key="agent.id", index=True, ondelete="CASCADE", max_length=26)
    number: int  # 1, 2, ... per Agent
    summary: str = Field(default="", max_length=200)
    # The frozen profile: name, description, runtime, kind, provider_credential_id, model,
    # system_prompt, tools, provider_options.
    profile: dict[str, Any] = Field(default_factory=dict, sa_type=sa.JSON)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
