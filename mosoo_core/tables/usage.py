"""Usage tables."""

from __future__ import annotations

from datetime import date, datetime

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
    # Priced when written, at the price in effect then (mosoo_core.usage._pricing): a later
    # price change never rewrites it. No matching price: cost 0 and `unpriced`.
    cost_usd_micros: int = 0
    unpriced: bool = True
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, index=True)


class ModelPrice(SQLModel, table=True):
    """One price of the models a pattern names, from `effective_from` until the next row of
    the same scope, provider and pattern. `app_id` None: a global price from the seed file
    (mosoo_core/usage/prices.toml); otherwise that App's own price, which wins over global.
    Prices are USD micros per million tokens; a None bucket price falls back (cached input
    and cache write to input, reasoning to output)."""

    __tablename__ = "model_price"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=26)
    app_id: str | None = Field(
        default=None, foreign_key="app.id", index=True, ondelete="CASCADE", max_length=26
    )
    provider: str = Field(max_length=32, index=True)
    model_pattern: str = Field(max_length=200)
    input_micros_per_million: int
    cached_input_micros_per_million: int | None = None
    cache_write_micros_per_million: int | None = None
    output_micros_per_million: int
    reasoning_micros_per_million: int | None = None
    effective_from: datetime = Field(sa_type=UTCDateTime)
    # The day the published price was read (seed rows); None for an owner's own price.
    read_on: date | None = None
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
