"""The outbox: every email is a row first, then the worker delivers it."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Field, SQLModel

from mosoo_core.clock import utcnow
from mosoo_core.db import UTCDateTime
from mosoo_core.ids import new_id


class OutboundEmail(SQLModel, table=True):
    __tablename__ = "outbound_email"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=26)
    to_address: str = Field(max_length=320, index=True)
    subject: str = Field(max_length=200)
    # Cleared once delivered: a sign-in code must not outlive its delivery in the database.
    body: str = ""
    # pending -> sent | failed; "dev_mailbox" when no SMTP is configured (development).
    status: str = Field(default="pending", max_length=16, index=True)
    attempts: int = 0
    last_error: str = Field(default="", max_length=500)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, index=True)
    sent_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
