"""Vault tables (sealed secrets, provider credentials) and the plain shapes services return."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from mosoo_core.clock import utcnow
from mosoo_core.db import UTCDateTime
from mosoo_core.ids import new_id


def _id_field() -> Any:  # a Field, typed Any so it can stand for the column's value type
    return Field(default_factory=new_id, primary_key=True, max_length=26)


def _timestamp() -> Any:
    return Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)


class VaultSecret(SQLModel, table=True):
    """One envelope-encrypted value. Every secret of the product lives here, so
    `mosoo vault rotate` re-wraps them all without knowing who owns them."""

    __tablename__ = "vault_secret"
    id: str = _id_field()
    app_id: str = Field(foreign_key="app.id", index=True, ondelete="CASCADE", max_length=26)
    # Who holds the secret, e.g. "provider_credential:<id>:api_key"; authenticated with the
    # ciphertext, so a secret pointed at from another record does not decrypt.
    owner_ref: str = Field(max_length=200)
    key_id: str = Field(max_length=32, index=True)  # which master key wraps the data key
    wrapped_key: bytes = Field(sa_type=sa.LargeBinary, nullable=False)
    ciphertext: bytes = Field(sa_type=sa.LargeBinary, nullable=False)
    created_at: datetime = _timestamp()
    updated_at: datetime = _timestamp()


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


PROVIDER_PRESETS: dict[ProviderKind, ProviderPreset] = {
    preset.provider: preset
    for preset in (
        ProviderPreset(ProviderKind.OPENAI, "OpenAI", "https://api.openai.com/v1", True),
        ProviderPreset(ProviderKind.ANTHROPIC, "Anthropic", "https://api.anthropic.com/v1", True),
        ProviderPreset(ProviderKind.DEEPSEEK, "DeepSeek", "https://api.deepseek.com/v1", True),
        ProviderPreset(ProviderKind.OPENROUTER, "OpenRouter", "https://openrouter.ai/api/v1", True),
        ProviderPreset(ProviderKind.OLLAMA, "Ollama", "http://127.0.0.1:11434/v1", False),
        ProviderPreset(ProviderKind.OPENAI_COMPATIBLE, "OpenAI-compatible", "", True),
    )
}


class ProviderCredential(SQLModel, table=True):
    """A model provider an App's Agents can use. The key itself is a VaultSecret."""

    __tablename__ = "provider_credential"
    __table_args__ = (
        sa.UniqueConstraint("app_id", "name", name="uq_provider_credential_name"),
        # At most one default per App, enforced by the database as well as the service.
        sa.Index(
            "uq_provider_credential_default",
            "app_id",
            unique=True,
            sqlite_where=sa.text("is_default"),
            postgresql_where=sa.text("is_default"),
        ),
    )
    id: str = _id_field()
    app_id: str = Field(foreign_key="app.id", index=True, ondelete="CASCADE", max_length=26)
    name: str = Field(max_length=80)
    provider: str = Field(max_length=32)
    base_url: str = Field(max_length=500)
    models: list[str] = Field(default_factory=list, sa_type=sa.JSON, nullable=False)
    default_model: str = Field(default="", max_length=200)
    is_default: bool = Field(default=False)
    # Empty for a provider that needs no key (Ollama).
    api_key_secret_id: str | None = Field(
        default=None, foreign_key="vault_secret.id", ondelete="SET NULL", max_length=26
    )
    key_last4: str = Field(default="", max_length=4)
    created_at: datetime = _timestamp()
    updated_at: datetime = _timestamp()


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
