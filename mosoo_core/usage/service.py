"""Model prices an App sees and sets: the global prices (seeded from prices.toml) and the
App's own, for custom or self-hosted models or its negotiated rates. An App's price wins over
the global one for the models its pattern names. Setting a price adds a row from its
effective time on; the cost of records already written never changes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlmodel import Session, col, or_, select

from mosoo_core.clock import utcnow
from mosoo_core.errors import InvalidInput
from mosoo_core.ownership import owned_app
from mosoo_core.tables.usage import ModelPrice
from mosoo_core.usage._pricing import usd_to_micros
from mosoo_core.vault import ProviderKind

MAX_PATTERN_LENGTH = 200
# $100,000 per million tokens: far above any real price, well inside a 32-bit-safe product.
MAX_PRICE_MICROS = 100_000 * 1_000_000
_PATTERN = re.compile(r"[A-Za-z0-9._:/@+*-]+")


@dataclass(frozen=True)
class PriceInput:
    """An App's price, in USD per million tokens as the owner writes it ("2.50"). A bucket
    left None falls back (cached input and cache write to input, reasoning to output).
    `effective_from` None: from now on; a later time schedules a change; never the past."""

    provider: str
    model_pattern: str
    input_price: str
    output_price: str
    cached_input_price: str | None = None
    cache_write_price: str | None = None
    reasoning_price: str | None = None
    effective_from: datetime | None = None


@dataclass(frozen=True)
class PriceView:
    id: str
    scope: str  # "app" or "global"
    provider: str
    model_pattern: str
    input_micros_per_million: int
    cached_input_micros_per_million: int | None
    cache_write_micros_per_million: int | None
    output_micros_per_million: int
    reasoning_micros_per_million: int | None
    effective_from: datetime
    read_on: date | None
    # In effect now (the latest row of its scope, provider and pattern that has started).
    current: bool


def _view(row: ModelPrice, current: bool) -> PriceView:
    return PriceView(
        id=row.id,
        scope="global" if row.app_id is None else "app",
        provider=row.provider,
        model_pattern=row.model_pattern,
        input_micros_per_million=row.input_micros_per_million,
        cached_input_micros_per_million=row.cached_input_micros_per_million,
        cache_write_micros_per_million=row.cache_write_micros_per_million,
        output_micros_per_million=row.output_micros_per_million,
        reasoning_micros_per_million=row.reasoning_micros_per_million,
        effective_from=row.effective_from,
        read_on=row.read_on,
        current=current,
    )


def list_prices(
    db: Session, account_id: str, app_id: str, now: datetime | None = None
) -> list[PriceView]:
    """The App's own prices first, then the global ones; by provider, pattern and newest
    effective date first."""
    owned_app(db, account_id, app_id)
    now = now or utcnow()
    rows = db.exec(
        select(ModelPrice).where(or_(col(ModelPrice.app_id).is_(None), ModelPrice.app_id == app_id))
    ).all()
    current: dict[tuple[str | None, str, str], ModelPrice] = {}
    for row in rows:
        key = (row.app_id, row.provider, row.model_pattern)
        if row.effective_from <= now and (
            key not in current or row.effective_from > current[key].effective_from
        ):
            current[key] = row
    chosen = {row.id for row in current.values()}
    ordered = sorted(
        rows,
        key=lambda r: (
            r.app_id is None,
            r.provider,
            r.model_pattern,
            -r.effective_from.timestamp(),
        ),
    )
    return [_view(row, row.id in chosen) for row in ordered]


def _price(value: Any, field: str, required: bool) -> int | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise InvalidInput(f"Enter the {field.replace('_', ' ')}.", field=field)
        return None
    try:
        micros = usd_to_micros(value, field)
    except ValueError:
        raise InvalidInput(
            f"The {field.replace('_', ' ')} must be an amount of USD per million tokens, "
            "0 or more, with at most 6 decimals (e.g. 2.50).",
            field=field,
        ) from None
    if micros > MAX_PRICE_MICROS:
        raise InvalidInput(
            f"The {field.replace('_', ' ')} is above $100,000 per million tokens.", field=field
        )
    return micros


def _clean_pattern(value: str) -> str:
    pattern = (value or "").strip()
    if not pattern:
        raise InvalidInput("Enter the model name or pattern.", field="model_pattern")
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise InvalidInput(
            f"The model pattern is longer than {MAX_PATTERN_LENGTH} characters.",
            field="model_pattern",
        )
    if not _PATTERN.fullmatch(pattern) or (len(pattern) > 1 and not pattern.strip("*")):
        raise InvalidInput(
            "The model pattern may hold letters, digits and . _ : / @ + - with * for any "
            "characters (e.g. my-model or llama-3*).",
            field="model_pattern",
        )
    return pattern


def set_app_price(
    db: Session,
    account_id: str,
    app_id: str,
    price: PriceInput,
    now: datetime | None = None,
) -> PriceView:
    """Set the App's own price for the models `model_pattern` names, from `effective_from`
    (default now) on. Records already written keep their cost. A change scheduled for the
    same future time as an earlier one replaces it (it has priced nothing yet)."""
    owned_app(db, account_id, app_id)
    now = now or utcnow()
    provider = (price.provider or "").strip()
    if provider not in {kind.value for kind in ProviderKind}:
        raise InvalidInput(f"Unknown provider {provider!r}.", field="provider")
    pattern = _clean_pattern(price.model_pattern)
    values = {
        "input_micros_per_million": _price(price.input_price, "input_price", True),
        "cached_input_micros_per_million": _price(
            price.cached_input_price, "cached_input_price", False
        ),
        "cache_write_micros_per_million": _price(
            price.cache_write_price, "cache_write_price", False
        ),
        "output_micros_per_million": _price(price.output_price, "output_price", True),
        "reasoning_micros_per_million": _price(price.reasoning_price, "reasoning_price", False),
    }
    effective_from = price.effective_from or now
    if effective_from.tzinfo is None:
        raise InvalidInput("The effective time needs a time zone.", field="effective_from")
    if effective_from < now:
        raise InvalidInput(
            "A price cannot start in the past: records already made keep their cost.",
            field="effective_from",
        )
    scheduled = (
        db.exec(
            select(ModelPrice).where(
                ModelPrice.app_id == app_id,
                ModelPrice.provider == provider,
                ModelPrice.model_pattern == pattern,
                ModelPrice.effective_from == effective_from,
            )
        ).first()
        if effective_from > now
        else None
    )
    row = scheduled or ModelPrice(
        app_id=app_id,
        provider=provider,
        model_pattern=pattern,
        effective_from=effective_from,
        input_micros_per_million=0,
        output_micros_per_million=0,
    )
    for name, value in values.items():
        setattr(row, name, value)
    db.add(row)
    db.flush()
    return _view(row, effective_from <= now)
