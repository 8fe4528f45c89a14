"""The change shapes the Agent service takes (`AgentChanges`, `ProviderOptionChanges`):
typed, frozen, with UNSET (mosoo_core.changes) for "keep what is stored"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mosoo_core.changes import UNSET, Unset, set_fields

__all__ = ["UNSET", "AgentChanges", "ProviderOptionChanges", "Unset"]


@dataclass(frozen=True)
class AgentChanges:
    """The profile fields to change in `update_agent`; a field left UNSET keeps its stored
    value. None clears where the field allows it: the provider key and the environment
    (none bound), provider options (all removed), skills and MCP servers (none bound), MCP policies
    (every bound server back to its defaults)."""

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
    # Per bound server id: {"default": off|allow|ask, "tools": {name: policy}, "required"}.
    mcp_policies: Mapping[str, Any] | Unset | None = UNSET

    def set_fields(self) -> dict[str, Any]:
        """The fields given (not UNSET), by name."""
        return set_fields(self)


@dataclass(frozen=True)
class ProviderOptionChanges:
    """The provider options the console edits, for `update_provider_options`: UNSET keeps
    the stored value, None removes the key (the provider's default applies)."""

    temperature: float | Unset | None = UNSET
    max_tokens: int | Unset | None = UNSET
    reasoning_effort: str | Unset | None = UNSET

    def set_fields(self) -> dict[str, Any]:
        """The options given (not UNSET), by key."""
        return set_fields(self)
