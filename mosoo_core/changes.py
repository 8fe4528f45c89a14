"""UNSET: the value of a change field left out, for the typed change objects services take
(`AgentChanges`, `EnvironmentChanges`): "keep what is stored", where None may mean "clear"."""

from __future__ import annotations

import enum
from dataclasses import fields
from typing import Any, Final


class Unset(enum.Enum):
    UNSET = "unset"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset.UNSET


def set_fields(changes: Any) -> dict[str, Any]:
    """The fields of a change dataclass that were given (not UNSET), by name."""
    return {
        f.name: getattr(changes, f.name)
        for f in fields(changes)
        if getattr(changes, f.name) is not UNSET
    }
