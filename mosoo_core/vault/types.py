"""Provider kinds and presets, and the plain shapes the vault services take and return."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Literal


class ProviderKind(StrEnum):
    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    DEEPSEEK = "deepseek"
    OPENROUTER = "openrouter"
    OLLAMA = "ollama"
    OPENAI_COMPATIBLE = "openai_compatible"


@dataclass(frozen=True)
class ProviderPreset:
    provider: ProviderKind
    label: str
    base_url: str
    needs_key: bool
    # The model gateway's route for this provider's own API: Anthropic's Messages API or the
    # OpenAI-compatible one (which Anthropic offers too, for OpenAI-style clients).
    gateway_api: Literal["openai", "anthropic"] = "openai"


PROVIDER_PRESETS: dict[ProviderKind, ProviderPreset] = {
    preset.provider: preset
    for preset in (
        ProviderPreset(ProviderKind.OPENAI, "OpenAI", "https://api.openai.com/v1", True),
        ProviderPreset(
            ProviderKind.ANTHROPIC, "Anthropic", "https://api.anthropic.com/v1", True, "anthropic"
        ),
        ProviderPreset(ProviderKind.DEEPSEEK, "DeepSeek", "https://api.deepseek.com/v1", True),
        ProviderPreset(ProviderKind.OPENROUTER, "OpenRouter", "https://openrouter.ai/api/v1", True),
        ProviderPreset(ProviderKind.OLLAMA, "Ollama", "http://127.0.0.1:11434/v1", False),
        ProviderPreset(ProviderKind.OPENAI_COMPATIBLE, "OpenAI-compatible", "", True),
    )
}


@dataclass(frozen=True)
class ProviderCredentialInput:
    """What an owner submits to create or update a credential.

    On update an empty `api_key` keeps the stored key and `is_default=None` keeps the flag.
    """

    name: str
    provider: str
    base_url: str
    api_key: str = field(default="", repr=False)
    models: tuple[str, ...] | list[str] = ()
    default_model: str = ""
    is_default: bool | None = None


@dataclass(frozen=True)
class ProviderCredentialView:
    """What pages and APIs may show: the key only as `••••` plus its last four characters."""

    id: str
    app_id: str
    name: str
    provider: str
    base_url: str
    models: tuple[str, ...]
    default_model: str
    is_default: bool
    has_key: bool
    masked_key: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class RotationResult:
    old_key_id: str
    new_key_id: str
    rewrapped: int
    already_current: int


@dataclass(frozen=True)
class ConnectionResult:
    """The outcome of calling a provider with its stored key; `message` never holds the key."""

    ok: bool
    message: str
    models: list[str] = field(default_factory=list)
    latency_ms: int = 0
