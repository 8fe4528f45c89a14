"""Usage records are priced when written, at the price in effect then: global seed prices,
an App's own prices winning over them, history never rewritten, unpriced models flagged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import Session, select

from mosoo_core import identity
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_core.tables.usage import ModelPrice, UsageEvent
from mosoo_core.usage import (
    PriceInput,
    UsageNumbers,
    list_prices,
    record_usage,
    seed_prices,
    seed_rows,
    set_app_price,
)

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
CALL = UsageNumbers(input_tokens=1_000, cached_input_tokens=400, output_tokens=100)


def _owner(db: Session, email: str) -> tuple[str, str]:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    return account.id, identity.list_apps(db, account.id)[0].id


def _record(db: Session, app_id: str, model: str, at: datetime, provider: str = "openai"):
    return record_usage(db, app_id=app_id, provider=provider, model=model, numbers=CALL, at=at)


def test_a_seeded_model_is_priced_from_the_global_price(db: Session) -> None:
    _, app_id = _owner(db, "seeded@example.com")
    # The migration stored the seed file's prices (mosoo_core.migrations.upgrade).
    assert len(db.exec(select(ModelPrice)).all()) == len(seed_rows())
    assert seed_prices(db) == 0
    row = _record(db, app_id, "gpt-4o-mini-2024-07-18", T0)
    # 600 * $0.15 + 400 * $0.075 + 100 * $0.60 per million = 90 + 30 + 60 micros.
    assert (row.cost_usd_micros, row.unpriced) == (180, False)


def test_seeding_twice_adds_nothing_and_changes_nothing(db: Session) -> None:
    seed_prices(db)
    before = {row.id for row in db.exec(select(ModelPrice)).all()}
    assert seed_prices(db) == 0
    assert {row.id for row in db.exec(select(ModelPrice)).all()} == before


def test_a_model_without_a_price_is_counted_at_zero_and_flagged_unpriced(db: Session) -> None:
    _, app_id = _owner(db, "unpriced@example.com")
    seed_prices(db)
    row = _record(db, app_id, "my-llama", T0, provider="ollama")
    assert (row.cost_usd_micros, row.unpriced) == (0, True)


def test_a_new_price_applies_only_to_records_made_after_it(db: Session) -> None:
    account_id, app_id = _owner(db, "history@example.com")
    set_app_price(db, account_id, app_id, PriceInput("ollama", "my-llama", "1", "2"), now=T0)
    before = _record(db, app_id, "my-llama", T0 + timedelta(minutes=1), provider="ollama")
    later = T0 + timedelta(days=1)
    set_app_price(
        db,
        account_id,
        app_id,
        PriceInput("ollama", "my-llama", "10", "20", effective_from=later),
        now=T0 + timedelta(hours=1),
    )
    still_old = _record(db, app_id, "my-llama", later - timedelta(seconds=1), provider="ollama")
    after = _record(db, app_id, "my-llama", later, provider="ollama")
    assert before.cost_usd_micros == still_old.cost_usd_micros == 1_000 + 200
    assert after.cost_usd_micros == 12_000
    db.expire_all()
    stored = db.get(UsageEvent, before.id)
    assert stored is not None and stored.cost_usd_micros == 1_200  # never rewritten


def test_an_app_price_beats_the_global_one_for_that_app_only(db: Session) -> None:
    account_id, app_id = _owner(db, "override@example.com")
    _, other_app_id = _owner(db, "other@example.com")
    seed_prices(db)
    set_app_price(db, account_id, app_id, PriceInput("openai", "gpt-4o-mini*", "0", "1"), now=T0)
    own = _record(db, app_id, "gpt-4o-mini-2024-07-18", T0 + timedelta(seconds=1))
    other = _record(db, other_app_id, "gpt-4o-mini-2024-07-18", T0 + timedelta(seconds=1))
    assert own.cost_usd_micros == 100  # 100 output tokens at $1 per million
    assert other.cost_usd_micros == 180  # the global price


def test_the_most_specific_pattern_wins(db: Session) -> None:
    account_id, app_id = _owner(db, "specific@example.com")
    for pattern, output in (("*", "0"), ("acme-*", "1"), ("acme-large*", "2"), ("acme-large", "3")):
        set_app_price(
            db, account_id, app_id, PriceInput("openai_compatible", pattern, "0", output), now=T0
        )
    at = T0 + timedelta(seconds=1)
    costs = {
        model: _record(db, app_id, model, at, provider="openai_compatible").cost_usd_micros
        for model in ("zeta", "acme-small", "acme-large-2", "acme-large")
    }
    assert costs == {"zeta": 0, "acme-small": 100, "acme-large-2": 200, "acme-large": 300}


def test_a_price_of_another_provider_does_not_apply(db: Session) -> None:
    account_id, app_id = _owner(db, "provider@example.com")
    set_app_price(db, account_id, app_id, PriceInput("deepseek", "my-model", "1", "1"), now=T0)
    row = _record(db, app_id, "my-model", T0 + timedelta(seconds=1), provider="openai")
    assert row.unpriced


def test_listing_shows_the_app_prices_first_and_which_are_in_effect(db: Session) -> None:
    account_id, app_id = _owner(db, "list@example.com")
    seed_prices(db)
    set_app_price(db, account_id, app_id, PriceInput("ollama", "qwen*", "0", "0"), now=T0)
    set_app_price(
        db,
        account_id,
        app_id,
        PriceInput("ollama", "qwen*", "1", "1", effective_from=T0 + timedelta(days=2)),
        now=T0,
    )
    views = list_prices(db, account_id, app_id, now=T0 + timedelta(days=1))
    assert [(v.scope, v.input_micros_per_million, v.current) for v in views[:2]] == [
        ("app", 1_000_000, False),
        ("app", 0, True),
    ]
    globals_ = [v for v in views if v.scope == "global"]
    assert globals_ and all(v.read_on is not None for v in globals_)


def test_another_owner_cannot_list_or_set_an_apps_prices(db: Session) -> None:
    _, app_id = _owner(db, "mine@example.com")
    stranger_id, _ = _owner(db, "stranger@example.com")
    with pytest.raises(NotFound):
        list_prices(db, stranger_id, app_id)
    with pytest.raises(NotFound):
        set_app_price(db, stranger_id, app_id, PriceInput("openai", "m", "1", "1"))


@pytest.mark.parametrize(
    ("price", "field"),
    [
        (PriceInput("nope", "m", "1", "1"), "provider"),
        (PriceInput("openai", "  ", "1", "1"), "model_pattern"),
        (PriceInput("openai", "bad model", "1", "1"), "model_pattern"),
        (PriceInput("openai", "**", "1", "1"), "model_pattern"),
        (PriceInput("openai", "m" * 201, "1", "1"), "model_pattern"),
        (PriceInput("openai", "m", "", "1"), "input_price"),
        (PriceInput("openai", "m", "-1", "1"), "input_price"),
        (PriceInput("openai", "m", "1", "abc"), "output_price"),
        (PriceInput("openai", "m", "1", "1", cached_input_price="0.0000001"), "cached_input_price"),
        (PriceInput("openai", "m", "1", "1", cache_write_price="NaN"), "cache_write_price"),
        (PriceInput("openai", "m", "1", "1", reasoning_price="100001"), "reasoning_price"),
        (
            PriceInput("openai", "m", "1", "1", effective_from=T0 - timedelta(seconds=1)),
            "effective_from",
        ),
        (
            PriceInput("openai", "m", "1", "1", effective_from=datetime(2027, 1, 1)),
            "effective_from",
        ),
    ],
)
def test_an_invalid_price_is_refused_naming_its_field(
    db: Session, price: PriceInput, field: str
) -> None:
    account_id, app_id = _owner(db, "invalid@example.com")
    with pytest.raises(InvalidInput) as refused:
        set_app_price(db, account_id, app_id, price, now=T0)
    assert refused.value.field == field
    assert db.exec(select(ModelPrice).where(ModelPrice.app_id == app_id)).all() == []
