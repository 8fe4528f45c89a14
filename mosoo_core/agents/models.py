"""Agent tables (the editable draft profile and its immutable published versions) and the
change shapes the service takes (`AgentChanges`, `ProviderOptionChanges`)."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Final

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


class Unset(enum.Enum):
    """The value of a change field left out: "keep what is stored" (None may mean "clear")."""

    UNSET = "unset"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset.UNSET


def _set_fields(changes: Any) -> dict[str, Any]:
    return {
        f.name: getattr(changes, f.name)
        for f in fields(changes)
        if getattr(changes, f.name) is not UNSET
    }


@dataclass(frozen=True)
class AgentChanges:
    """The profile fields to change in `update_agent`; a field left UNSET keeps its stored
    value. None clears where the field allows it: the provider key and the environment
    (none bound), provider options (all removed), skills and MCP servers (none bound)."""

    name: str | Unset = UNSET
    description: str | Unset = UNSET
    runtime: str | Unset = UNSET
    kind: str | Unset = UNSET
    provider_credential_id: str | Unset | None = UNSET
    model: str | Unset = UNSET
    system_prompt: str | Unset = UNSET
    tools: Mapping[str, str] | Unset = UNSET
    provider_options: Mapping[str, Any] | Unset | None = UNSET
    environment_id: str | Unset | None = UNSET
    skills: Sequence[str] | Unset | None = UNSET
    mcp_servers: Sequence[str] | Unset | None = UNSET

    def set_fields(self) -> dict[str, Any]:
        """The fields given (not UNSET), by name."""
        return _set_fields(self)


@dataclass(frozen=True)
class ProviderOptionChanges:
    """The provider options the console edits, for `update_provider_options`: UNSET keeps
    the stored value, None removes the key (the provider's default applies)."""

    temperature: float | Unset | None = UNSET
    max_tokens: int | Unset | None = UNSET
    reasoning_effort: str | Unset | None = UNSET

    def set_fields(self) -> dict[str, Any]:
        """The options given (not UNSET), by key."""
        return _set_fields(self)
