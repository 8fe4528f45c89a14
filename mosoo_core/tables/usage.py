"""Usage tables."""

from __future__ import annotations

from datetime import date, datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from mosoo_core.clock import utcnow
from mosoo_core.db import UTCDateTime
from mosoo_core.ids import new_id


class UsageEvent(SQLModel, table=True):
    __tablename__ = "usage_event"
    # The CSV export reads an App's records in pages by keyset (`app_id = ? AND id > ?
    # ORDER BY id`): without this each page sorted every record the App has.
    __table_args__ = (sa.Index("ix_usage_event_app_id_id", "app_id", "id"),)
    id: str = Field(default_factory=new_id, primary_key=True, max_length=26)
    app_id: str = Field(max_length=26, index=True)
    agent_id: str | None = Field(default=None, max_length=26, index=True)
    session_id: str | None = Field(default=None, max_length=26, index=True)
    run_id: str | None = Field(default=None, max_length=26, index=True)
    # The thread's purpose (preview | console | api | channel): a run has none of its own.
    purpose: str = Field(default="preview", max_length=16)
    provider: str = Field(max_length=32)
    model: str = Field(max_length=200)
    # The runtime that made the call (openai | claude | acp), from the run's frozen snapshot.
    runtime: str | None = Field(default=None, max_length=32)
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


class UsageDaily(SQLModel, table=True):
    """The daily rollup of usage_event: one row per UTC day, App, Agent, provider, model and
    purpose. A day's rows are only ever replaced whole (mosoo_core.usage._rollups), so the
    unique key makes a concurrent second writer fail instead of double counting."""

    __tablename__ = "usage_daily"
    __table_args__ = (
        sa.UniqueConstraint(
            "day", "app_id", "agent_id", "provider", "model", "purpose", name="uq_usage_daily_key"
        ),
    )
    id: str = Field(default_factory=new_id, primary_key=True, max_length=26)
    day: date = Field(index=True)
    app_id: str = Field(max_length=26, index=True)
    # "" for calls no Agent made (a unique key cannot hold NULL as one value everywhere).
    agent_id: str = Field(default="", max_length=26)
    provider: str = Field(max_length=32)
    model: str = Field(max_length=200)
    purpose: str = Field(max_length=16)
    calls: int = Field(default=0, sa_type=sa.BigInteger)
    input_tokens: int = Field(default=0, sa_type=sa.BigInteger)
    cached_input_tokens: int = Field(default=0, sa_type=sa.BigInteger)
    cache_creation_input_tokens: int = Field(default=0, sa_type=sa.BigInteger)
    output_tokens: int = Field(default=0, sa_type=sa.BigInteger)
    reasoning_tokens: int = Field(default=0, sa_type=sa.BigInteger)
    cost_usd_micros: int = Field(default=0, sa_type=sa.BigInteger)
    unpriced_calls: int = Field(default=0, sa_type=sa.BigInteger)


class UsageRollupDay(SQLModel, table=True):
    """Which days are rolled up: `computed_at` is when the day's rows were last written;
    `complete` once that was after the day was over (its raw records may then be pruned);
    `raw_pruned` once they were (a rebuild must not recompute the day from nothing)."""

    __tablename__ = "usage_rollup_day"
    day: date = Field(primary_key=True)
    computed_at: datetime = Field(sa_type=UTCDateTime)
    complete: bool = False
    raw_pruned: bool = False


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
