"""The Usage page's chart series: an App's rollup per day split by model or by agent."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from sqlmodel import Session

from mosoo_core import identity, usage
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_core.tables.agents import Agent
from mosoo_core.usage import UsageNumbers, record_usage

D1 = date(2026, 11, 1)


def _owner(db: Session, email: str) -> tuple[str, str]:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    return account.id, identity.list_apps(db, account.id)[0].id


def _call(db: Session, app_id: str, day: int, provider: str, model: str, agent: str | None) -> None:
    record_usage(
        db,
        app_id=app_id,
        provider=provider,
        model=model,
        numbers=UsageNumbers(input_tokens=100, output_tokens=10),
        agent_id=agent,
        at=datetime(2026, 11, day, 12, tzinfo=UTC),
    )


def test_days_split_by_model_and_by_agent_sum_to_the_summary(db: Session) -> None:
    account_id, app_id = _owner(db, "daily@example.com")
    agent = Agent(app_id=app_id, name="Writer", model="m")
    db.add(agent)
    db.flush()
    _call(db, app_id, 1, "openai", "gpt-4o-mini", agent.id)
    _call(db, app_id, 1, "openai", "gpt-4o-mini", None)
    _call(db, app_id, 2, "openai", "llama", agent.id)
    _call(db, app_id, 2, "ollama", "llama", agent.id)
    usage.rebuild(db, now=datetime(2026, 11, 10, tzinfo=UTC))
    end = date(2026, 11, 3)

    by_model = usage.daily_breakdown(db, account_id, app_id, start=D1, end=end, split_by="model")
    assert [(p.day.day, p.key, p.label, p.totals.calls) for p in by_model] == [
        (1, "openai/gpt-4o-mini", "gpt-4o-mini", 2),
        (2, "ollama/llama", "llama (ollama)", 1),
        (2, "openai/llama", "llama (openai)", 1),
    ]
    by_agent = usage.daily_breakdown(db, account_id, app_id, start=D1, end=end, split_by="agent")
    assert sorted((p.day.day, p.label, p.totals.calls) for p in by_agent) == [
        (1, "No agent", 1),
        (1, "Writer", 1),
        (2, "Writer", 2),
    ]
    total = usage.summary(db, account_id, app_id, start=D1, end=end, group_by="day").total
    assert sum(p.totals.input_tokens for p in by_agent) == total.input_tokens == 400


def test_another_owners_app_and_a_bad_split_are_refused(db: Session) -> None:
    account_id, app_id = _owner(db, "mine@example.com")
    _, theirs = _owner(db, "theirs@example.com")
    with pytest.raises(NotFound):
        usage.daily_breakdown(db, account_id, theirs, start=D1, end=D1, split_by="model")
    with pytest.raises(InvalidInput):
        usage.daily_breakdown(db, account_id, app_id, start=D1, end=D1, split_by="purpose")
