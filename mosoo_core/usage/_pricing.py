"""What a model call costs: the price in effect when it was made, in integer USD micros.

Which price: among the prices of the record's provider whose pattern matches its model and
whose `effective_from` is not after the call, the App's own prices win over the global ones
(seeded from prices.toml); within a scope an exact name beats a pattern and a pattern with
more literal characters beats a shorter one; of that pattern's rows the latest
`effective_from` applies. No match: cost 0 and the record is flagged `unpriced`.

How the tokens are billed (the ledger counts them the OpenAI way, see UsageNumbers):
- `input_tokens` is the whole prompt; the cache reads (`cached_input_tokens`) are billed at the
  cached-input price and the cache writes (`cache_creation_input_tokens`) at the cache-write
  price, and neither again at the input price: only the rest is billed as input.
- `output_tokens` includes the reasoning tokens (OpenAI's `completion_tokens` does; Anthropic's
  thinking is counted in output and not reported apart). With a reasoning price, reasoning
  tokens are billed at it and only the rest of output at the output price; without one, all
  output is billed at the output price. Reasoning is never billed twice.
- A bucket without its own price falls back: cached input and cache write to input, reasoning
  to output. Counts that exceed their whole (a provider's odd numbers) are capped to it.
- Prices are micros per million tokens, so the cost is sum(tokens * price) / 1,000,000 in exact
  integer arithmetic, rounded half up to a whole micro once per call. No float anywhere.

The cost is stored on the record when it is written: changing or adding a price never
rewrites history.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlmodel import Session, col, or_, select

from mosoo_core.tables.usage import ModelPrice

SEED_FILE = Path(__file__).with_name("prices.toml")
MICROS_PER_USD = 1_000_000
TOKENS_PER_PRICE_UNIT = 1_000_000


@dataclass(frozen=True)
class BucketPrices:
    """Micros per million tokens of each bucket, fallbacks already applied."""

    input: int
    cached_input: int
    cache_write: int
    output: int
    reasoning: int | None  # None: reasoning billed as output


def bucket_prices(row: ModelPrice) -> BucketPrices:
    input_price = row.input_micros_per_million
    return BucketPrices(
        input=input_price,
        cached_input=_or(row.cached_input_micros_per_million, input_price),
        cache_write=_or(row.cache_write_micros_per_million, input_price),
        output=row.output_micros_per_million,
        reasoning=row.reasoning_micros_per_million,
    )


def _or(value: int | None, fallback: int) -> int:
    return fallback if value is None else value


def cost_micros(
    prices: BucketPrices,
    *,
    input_tokens: int,
    cached_input_tokens: int = 0,
    cache_creation_input_tokens: int = 0,
    output_tokens: int = 0,
    reasoning_tokens: int = 0,
) -> int:
    """One call's cost in USD micros (see the module docstring for the rule)."""
    cached = min(cached_input_tokens, input_tokens)
    written = min(cache_creation_input_tokens, input_tokens - cached)
    uncached = input_tokens - cached - written
    if prices.reasoning is None:
        reasoning, reasoning_price = 0, 0
    else:
        reasoning, reasoning_price = min(reasoning_tokens, output_tokens), prices.reasoning
    plain_output = output_tokens - reasoning
    scaled = (
        uncached * prices.input
        + cached * prices.cached_input
        + written * prices.cache_write
        + plain_output * prices.output
        + reasoning * reasoning_price
    )
    return (scaled + TOKENS_PER_PRICE_UNIT // 2) // TOKENS_PER_PRICE_UNIT


# --- patterns ------------------------------------------------------------------------------


@lru_cache(maxsize=1024)
def _pattern_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


def pattern_matches(pattern: str, model: str) -> bool:
    return _pattern_regex(pattern).fullmatch(model) is not None


def _specificity(pattern: str) -> tuple[int, int]:
    """Higher is more specific: an exact name first, then more literal characters."""
    return (0 if "*" in pattern else 1, len(pattern.replace("*", "")))


def price_in_effect(
    db: Session, *, app_id: str, provider: str, model: str, at: datetime
) -> ModelPrice | None:
    """The price that applies to a call of `model` through `provider` for `app_id` at `at`."""
    rows = db.exec(
        select(ModelPrice).where(
            ModelPrice.provider == provider,
            or_(col(ModelPrice.app_id).is_(None), ModelPrice.app_id == app_id),
            ModelPrice.effective_from <= at,
        )
    ).all()
    best: ModelPrice | None = None
    best_rank: tuple[int, tuple[int, int], str, datetime] | None = None
    for row in rows:
        if not pattern_matches(row.model_pattern, model):
            continue
        # Scope, then specificity, then the pattern itself (ties are broken the same way
        # every time), then the latest effective date of that pattern.
        rank = (
            1 if row.app_id is not None else 0,
            _specificity(row.model_pattern),
            row.model_pattern,
            row.effective_from,
        )
        if best_rank is None or rank > best_rank:
            best, best_rank = row, rank
    return best


# --- the seed file -------------------------------------------------------------------------


def usd_to_micros(value: Any, field: str) -> int:
    """A price written in USD (a string or an int, never a float) as whole micros; raises
    ValueError naming the field when it is not a non-negative amount of whole micros."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f'{field}: write the price as a string of USD, e.g. "2.50".')
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError(f"{field}: {value!r} is not an amount of USD.") from None
    micros = amount * MICROS_PER_USD
    if not amount.is_finite() or amount < 0 or micros != micros.to_integral_value():
        raise ValueError(f"{field}: {value!r} must be >= 0 with at most 6 decimals.")
    return int(micros)


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def seed_rows(path: Path = SEED_FILE) -> list[ModelPrice]:
    """The global price rows the seed file describes (not stored)."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    rows: list[ModelPrice] = []
    for index, entry in enumerate(data.get("price", [])):
        where = f"price[{index}]"

        def micros(name: str, entry: dict[str, Any] = entry, where: str = where) -> int | None:
            value = entry.get(name)
            return None if value is None else usd_to_micros(value, f"{where}.{name}")

        input_price, output_price = micros("input"), micros("output")
        if input_price is None or output_price is None:
            raise ValueError(f"{where}: input and output prices are required.")
        effective_from = entry["effective_from"]
        read_on = entry["read_on"]
        if not isinstance(effective_from, date) or not isinstance(read_on, date):
            raise ValueError(f"{where}: effective_from and read_on must be dates.")
        for pattern in entry["models"]:
            rows.append(
                ModelPrice(
                    app_id=None,
                    provider=entry["provider"],
                    model_pattern=pattern,
                    input_micros_per_million=input_price,
                    cached_input_micros_per_million=micros("cached_input"),
                    cache_write_micros_per_million=micros("cache_write"),
                    output_micros_per_million=output_price,
                    reasoning_micros_per_million=micros("reasoning"),
                    effective_from=_midnight(effective_from),
                    read_on=read_on,
                )
            )
    return rows


def seed_prices(db: Session, path: Path = SEED_FILE) -> int:
    """Store the seed file's global prices that are not stored yet (same provider, pattern and
    effective date); a stored row is never changed. Returns how many were added."""
    stored = {
        (row.provider, row.model_pattern, row.effective_from)
        for row in db.exec(select(ModelPrice).where(col(ModelPrice.app_id).is_(None))).all()
    }
    added = 0
    for row in seed_rows(path):
        key = (row.provider, row.model_pattern, row.effective_from)
        if key not in stored:
            db.add(row)
            stored.add(key)
            added += 1
    db.flush()
    return added
