"""Usage tables."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Field, SQLModel

from mosoo_core.clock import utcnow
from mosoo_core.db import UTCDateTime
from mosoo_core.ids import new_id


class UsageEvent(SQLModel, table=True):
    __tablename__ = "usage_event"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=26)
    app_id: str = Field(max_length=26, index=True)
    agent_id: str | None = Field(default=None, max_length=26, index=True)
    session_id: str | None = Field(default=None, max_length=26, index=True)
    run_id: str | None = Field(default=None, max_length=26, index=True)
    purpose: str = Field(default="preview", max_length=16)
    provider: str = Field(max_length=32)
    model: str = Field(max_length=200)
    # The whole prompt, cache reads and writes included (Anthropic's own `input_tokens`
    # is the remainder: input - cached - cache creation).
    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    # Pricing arrives with the Usage issue; until then calls are recorded with cost unknown.
    cost_usd_micros: int = 0
    cost_known: bool = False
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, index=True)
