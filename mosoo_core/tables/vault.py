"""Vault tables: sealed secrets and provider credentials."""

from __future__ import annotations

from datetime import datetime
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
