"""The Usage page's numbers count a call as soon as its record is written: days the beat has
not rolled up completely (today, or a day it last rolled up before its end) are summed from
the raw records, complete days from the rollup, and no call is counted twice."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from sqlmodel import Session

from mosoo_core import agents, identity, usage
from mosoo_core.usage import PriceInput, UsageNumbers, record_usage, set_app_price

D1 = date(2026, 11, 1)
D2 = D1 + timedelta(days=1)
CALL = UsageNumbers(input_tokens=1_000, output_tokens=100)  # $1 / $2: 1_200 micros


def at(day: date, hour: int) -> datetime:
    return datetime(day.year, day.month, day.day, hour, tzinfo=UTC)


def _priced_app(db: Session, email: str) -> tuple[str, str]:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    app_id = identity.list_apps(db, account.id)[0].id
    since = at(D1, 0)
    price = PriceInput("ollama", "my-llama", "1", "2", effective_from=since)
    set_app_price(db, account.id, app_id, price, now=since)
    return account.id, app_id


def _call(db: Session, app_id: str, when: datetime, agent_id: str | None = None) -> None:
    record_usage(
        db,
        app_id=app_id,
        provider="ollama",
        model="my-llama",
        numbers=CALL,
        agent_id=agent_id,
        at=when,
    )


def _calls_by_day(db: Session, account_id: str, app_id: str) -> list[int]:
    report = usage.summary(db, account_id, app_id, start=D1, end=D2, group_by="day")
    return [group.totals.calls for group in report.groups]


def test_calls_not_rolled_up_yet_count_at_once_in_every_grouping(db: Session) -> None:
    account_id, app_id = _priced_app(db, "live@example.com")
    agent = agents.create_agent(db, account_id, app_id, name="Writer")
    _call(db, app_id, at(D2, 9), agent.id)
    _call(db, app_id, at(D2, 10))  # no rollup at all yet: the beat has not ticked

    assert _calls_by_day(db, account_id, app_id) == [0, 2]
    by_model = usage.summary(db, account_id, app_id, start=D1, end=D2, group_by="model")
    assert [
        (g.provider, g.model, g.totals.calls, g.totals.cost_usd_micros) for g in by_model.groups
    ] == [("ollama", "my-llama", 2, 2_400)]
    assert by_model.total.cost_usd_micros == 2_400
    by_agent = usage.summary(db, account_id, app_id, start=D1, end=D2, group_by="agent")
    assert {(g.agent_id, g.agent_name, g.totals.calls) for g in by_agent.groups} == {
        (agent.id, "Writer", 1),
        (None, None, 1),
    }
    parts = usage.daily_breakdown(db, account_id, app_id, start=D1, end=D2, split_by="agent")
    assert sorted((p.day, p.label, p.totals.calls) for p in parts) == [
        (D2, "No agent", 1),
        (D2, "Writer", 1),
    ]


def test_a_day_rolled_up_before_its_end_counts_its_later_calls_too(db: Session) -> None:
    account_id, app_id = _priced_app(db, "partial@example.com")
    _call(db, app_id, at(D1, 9))
    usage.catch_up(db, now=at(D1, 10))  # the beat's tick mid-day: D1 is not complete
    _call(db, app_id, at(D1, 11))
    assert _calls_by_day(db, account_id, app_id) == [2, 0]


def test_complete_days_come_from_the_rollup_once_even_after_their_raw_records_go(
    db: Session,
) -> None:
    account_id, app_id = _priced_app(db, "complete@example.com")
    _call(db, app_id, at(D1, 9))
    _call(db, app_id, at(D2, 9))
    usage.catch_up(db, now=at(D2, 12))  # D1 complete, D2 still going
    _call(db, app_id, at(D2, 13))
    assert _calls_by_day(db, account_id, app_id) == [1, 2]

    later = at(D1 + timedelta(days=10), 12)
    usage.maintain(db, now=later, raw_retention_days=7, rollup_retention_days=180)
    report = usage.summary(db, account_id, app_id, start=D1, end=D2, group_by="model")
    assert report.total.calls == 3 and report.total.cost_usd_micros == 3_600
    parts = usage.daily_breakdown(db, account_id, app_id, start=D1, end=D2, split_by="model")
    assert [(p.day, p.key, p.totals.calls) for p in parts] == [
        (D1, "ollama/my-llama", 1),
        (D2, "ollama/my-llama", 2),
    ]
