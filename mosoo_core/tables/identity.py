"""Identity tables: accounts, sign-in, organizations, Apps, tokens, idempotency records."""

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


class Account(SQLModel, table=True):
    __tablename__ = "account"
    id: str = _id_field()
    email: str = Field(max_length=320, unique=True, index=True)
    name: str = Field(default="", max_length=120)
    created_at: datetime = _timestamp()
    updated_at: datetime = _timestamp()


class AuthIdentity(SQLModel, table=True):
    __tablename__ = "auth_identity"
    __table_args__ = (sa.UniqueConstraint("provider", "subject", name="uq_auth_identity_subject"),)
    id: str = _id_field()
    account_id: str = Field(foreign_key="account.id", index=True, ondelete="CASCADE")
    provider: str = Field(max_length=32)  # "email" | "google"
    subject: str = Field(max_length=255)
    email: str = Field(max_length=320)
    created_at: datetime = _timestamp()


class EmailCode(SQLModel, table=True):
    __tablename__ = "email_code"
    id: str = _id_field()
    email: str = Field(max_length=320, index=True)
    code_hash: str = Field(max_length=64)
    requested_ip: str = Field(default="", max_length=64, index=True)
    attempts: int = 0
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, index=True)
    expires_at: datetime = Field(sa_type=UTCDateTime)
    # Set when the code signs someone in or a newer code replaces it.
    consumed_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class SignInFailure(SQLModel, table=True):
    """One failed code verification, counted per address and per client IP to throttle
    guessing on top of each code's own tries. Purged with the other sign-in records."""

    __tablename__ = "sign_in_failure"
    id: str = _id_field()
    email: str = Field(max_length=320, index=True)
    ip: str = Field(default="", max_length=64, index=True)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, index=True)


class LoginTicket(SQLModel, table=True):
    """Single-use hand-off from a verified sign-in to the endpoint that sets the cookie."""

    __tablename__ = "login_ticket"
    id: str = _id_field()
    account_id: str = Field(foreign_key="account.id", index=True, ondelete="CASCADE")
    ticket_hash: str = Field(max_length=64, unique=True)
    expires_at: datetime = Field(sa_type=UTCDateTime)
    used_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    created_at: datetime = _timestamp()


class AuthSession(SQLModel, table=True):
    __tablename__ = "auth_session"
    id: str = _id_field()
    account_id: str = Field(foreign_key="account.id", index=True, ondelete="CASCADE")
    token_hash: str = Field(max_length=64, unique=True)
    method: str = Field(max_length=32)
    user_agent: str = Field(default="", max_length=400)
    created_at: datetime = _timestamp()
    expires_at: datetime = Field(sa_type=UTCDateTime)
    revoked_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class Organization(SQLModel, table=True):
    __tablename__ = "organization"
    id: str = _id_field()
    owner_account_id: str = Field(foreign_key="account.id", unique=True, ondelete="CASCADE")
    name: str = Field(max_length=120)
    created_at: datetime = _timestamp()
    updated_at: datetime = _timestamp()


class App(SQLModel, table=True):
    __tablename__ = "app"
    id: str = _id_field()
    organization_id: str = Field(foreign_key="organization.id", index=True, ondelete="CASCADE")
    name: str = Field(max_length=120)
    created_at: datetime = _timestamp()
    updated_at: datetime = _timestamp()


class AccessToken(SQLModel, table=True):
    """A personal access token (`mst_…`) for the public API and the CLI; only its digest is kept."""

    __tablename__ = "access_token"
    id: str = _id_field()
    account_id: str = Field(foreign_key="account.id", index=True, ondelete="CASCADE")
    label: str = Field(max_length=80)
    token_hash: str = Field(max_length=64, unique=True)
    display_suffix: str = Field(max_length=8)  # the last characters, to recognise it in the list
    source: str = Field(default="console", max_length=16)  # console | cli
    created_at: datetime = _timestamp()
    last_used_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    revoked_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class DeviceAuthorization(SQLModel, table=True):
    """A CLI sign-in (device flow): the CLI holds the device code, the user confirms the user
    code in the console. The token is minted on the first poll after approval, never stored."""

    __tablename__ = "device_authorization"
    id: str = _id_field()
    device_code_hash: str = Field(max_length=64, unique=True)
    user_code: str = Field(max_length=16, unique=True, index=True)
    status: str = Field(
        default="pending", max_length=16
    )  # pending|authorized|denied|expired|consumed
    client_name: str = Field(default="", max_length=80)
    account_id: str | None = Field(default=None, foreign_key="account.id", ondelete="CASCADE")
    access_token_id: str | None = Field(default=None, max_length=26)
    interval_seconds: int = 5
    last_polled_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    created_at: datetime = _timestamp()
    expires_at: datetime = Field(sa_type=UTCDateTime)
    decided_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class IdempotencyRecord(SQLModel, table=True):
    """The stored answer of an API call made with an `Idempotency-Key` (kept 24 h)."""

    __tablename__ = "idempotency_record"
    __table_args__ = (sa.UniqueConstraint("account_id", "scope", "key", name="uq_idempotency_key"),)
    id: str = _id_field()
    account_id: str = Field(foreign_key="account.id", index=True, ondelete="CASCADE")
    scope: str = Field(
        max_length=300
    )  # method and route of the call, e.g. "POST /threads/{id}/events"
    key: str = Field(max_length=255)
    request_hash: str = Field(max_length=64)
    status_code: int = 0  # 0 while the first call is still being answered
    response_body: dict[str, Any] = Field(default_factory=dict, sa_type=sa.JSON)
    created_at: datetime = _timestamp()
    expires_at: datetime = Field(sa_type=UTCDateTime, index=True)
