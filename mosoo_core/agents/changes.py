"""The change shapes the Agent service takes (`AgentChanges`, `ProviderOptionChanges`):
typed, frozen, with UNSET for "keep what is stored"."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final


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
