"""The daily usage rollup: recomputed whole from the raw records (idempotent), caught up after
downtime, rebuilt to the same rows, pruned without ever losing a day; and the summary the
API answers from it, scoped to the owner's App."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, func, select
from typer.testing import CliRunner

from mosoo_core import agents, identity, usage
from mosoo_core.cli import app as cli_app
from mosoo_core.clock import utcnow
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_core.tables.sessions import AgentSession, SessionRun
from mosoo_core.tables.usage import UsageDaily, UsageEvent, UsageRollupDay
from mosoo_core.usage import PriceInput, UsageNumbers, record_usage, set_app_price

D1 = date(2026, 11, 1)
CALL = UsageNumbers(input_tokens=1_000, cached_input_tokens=400, output_tokens=100)


def at(day: date, hour: int = 12, minute: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


def _owner(db: Session, email: str) -> tuple[str, str]:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    return account.id, identity.list_apps(db, account.id)[0].id


def _record(
    db: Session,
    app_id: str,
    when: datetime,
    *,
    model: str = "my-llama",
    provider: str = "ollama",
    agent_id: str | None = None,
    purpose: str = "preview",
    numbers: UsageNumbers = CALL,
    run_id: str | None = None,
) -> UsageEvent:
    return record_usage(
        db,
        app_id=app_id,
        provider=provider,
        model=model,
        numbers=numbers,
        agent_id=agent_id,
        purpose=purpose,
        run_id=run_id,
        at=when,
    )


def _rollup(db: Session) -> list[tuple[object, ...]]:
    """The rollup's content, ids aside."""
    return sorted(
        (
            r.day,
            r.app_id,
            r.agent_id,
            r.provider,
            r.model,
            r.purpose,
            r.calls,
            r.input_tokens,
            r.cached_input_tokens,
            r.cache_creation_input_tokens,
            r.output_tokens,
            r.reasoning_tokens,
            r.cost_usd_micros,
            r.unpriced_calls,
        )
        for r in db.exec(select(UsageDaily)).all()
    )


def _raw_totals(db: Session, day: date | None = None) -> tuple[int, int, int]:
    query = select(
        func.count(), func.sum(UsageEvent.input_tokens), func.sum(UsageEvent.cost_usd_micros)
    )
    if day is not None:
        start = at(day, 0)
        query = query.where(
            col(UsageEvent.created_at) >= start,
            col(UsageEvent.created_at) < start + timedelta(days=1),
        )
    calls, tokens, cost = db.exec(query).one()
    return int(calls), int(tokens or 0), int(cost or 0)


def _rollup_totals(db: Session, day: date | None = None) -> tuple[int, int, int]:
    query = select(
        func.sum(UsageDaily.calls),
        func.sum(UsageDaily.input_tokens),
        func.sum(UsageDaily.cost_usd_micros),
    )
    if day is not None:
        query = query.where(UsageDaily.day == day)
    calls, tokens, cost = db.exec(query).one()
    return int(calls or 0), int(tokens or 0), int(cost or 0)


def _priced_app(db: Session, email: str) -> tuple[str, str]:
    account_id, app_id = _owner(db, email)
    set_app_price(db, account_id, app_id, PriceInput("ollama", "my-llama", "1", "2"), now=at(D1, 0))
    return account_id, app_id


# --- rolling up ---------------------------------------------------------------------------


def test_rolling_up_a_day_again_replaces_it_and_never_counts_a_call_twice(db: Session) -> None:
    _, app_id = _priced_app(db, "twice@example.com")
    for hour in (1, 5, 9):
        _record(db, app_id, at(D1, hour))
    _record(db, app_id, at(D1, 10), model="other", purpose="api")
    now = at(D1 + timedelta(days=1), 1)
    usage.roll_up_day(db, D1, now=now)
    first = _rollup(db)
    usage.roll_up_day(db, D1, now=now)
    usage.catch_up(db, now=now)
    usage.catch_up(db, now=now)
    assert _rollup(db) == first
    assert len(first) == 2
    assert _rollup_totals(db, D1) == _raw_totals(db, D1) == (4, 4_000, 3 * 1_200)
    marker = db.get(UsageRollupDay, D1)
    assert marker is not None and marker.complete


def test_a_day_rolled_up_before_it_is_over_is_not_complete_and_is_recomputed(
    db: Session,
) -> None:
    _, app_id = _priced_app(db, "today@example.com")
    _record(db, app_id, at(D1, 9))
    usage.catch_up(db, now=at(D1, 10))
    marker = db.get(UsageRollupDay, D1)
    assert marker is not None and not marker.complete
    _record(db, app_id, at(D1, 11))
    usage.catch_up(db, now=at(D1, 12))
    assert _rollup_totals(db, D1) == (2, 2_000, 2_400)


def test_catching_up_after_downtime_fills_every_day_since_the_last_complete_one(
    db: Session,
) -> None:
    _, app_id = _priced_app(db, "gap@example.com")
    _record(db, app_id, at(D1, 8))
    usage.catch_up(db, now=at(D1 + timedelta(days=1), 0, 10))  # D1 is complete
    # The beat is down for four days while calls go on (D3 has none).
    for offset in (1, 3, 4):
        _record(db, app_id, at(D1 + timedelta(days=offset), 14))
    result = usage.catch_up(db, now=at(D1 + timedelta(days=4), 15))
    assert result.days == tuple(D1 + timedelta(days=n) for n in range(1, 5))
    for offset in (1, 2, 3, 4):
        day = D1 + timedelta(days=offset)
        assert _rollup_totals(db, day) == _raw_totals(db, day)
    # The last complete day is not recomputed: its rollup stays as it was written.
    assert _rollup_totals(db, D1) == (1, 1_000, 1_200)


def test_rebuild_gives_exactly_what_the_beat_wrote(db: Session) -> None:
    account_id, app_id = _priced_app(db, "rebuild@example.com")
    agent = agents.create_agent(db, account_id, app_id, name="Helper")
    for offset in range(5):
        day = D1 + timedelta(days=offset)
        for hour in (2, 13, 22):
            _record(db, app_id, at(day, hour), agent_id=agent.id, purpose="api")
            _record(db, app_id, at(day, hour, 30), model="gpt-4o", provider="openai")
        # The beat runs a few times a day, the last one after the day is over.
        usage.catch_up(db, now=at(day, 14))
        usage.catch_up(db, now=at(day + timedelta(days=1), 0, 20))
    incremental = _rollup(db)
    db.exec(UsageDaily.__table__.delete())  # type: ignore[attr-defined]
    result = usage.rebuild(db, now=at(D1 + timedelta(days=5), 1))
    assert result.days[0] == D1
    assert _rollup(db) == incremental
    assert _rollup_totals(db) == _raw_totals(db)


def test_rollups_carry_the_cost_as_recorded_not_as_priced_now(db: Session) -> None:
    account_id, app_id = _priced_app(db, "prices@example.com")
    _record(db, app_id, at(D1, 9))  # $1 / $2: 1_000 + 200 micros
    set_app_price(
        db,
        account_id,
        app_id,
        PriceInput("ollama", "my-llama", "10", "20", effective_from=at(D1, 12)),
        now=at(D1, 10),
    )
    _record(db, app_id, at(D1, 13))  # $10 / $20: 12_000 micros
    _record(db, app_id, at(D1, 14), model="mystery")  # no price: 0, unpriced
    usage.rebuild(db, now=at(D1 + timedelta(days=1), 1))
    report = usage.summary(db, account_id, app_id, start=D1, end=D1, group_by="model")
    by_model = {group.model: group.totals for group in report.groups}
    assert by_model["my-llama"].cost_usd_micros == 1_200 + 12_000
    assert by_model["mystery"].cost_usd_micros == 0
    assert by_model["mystery"].unpriced_calls == 1
    assert report.total.cost_usd_micros == 13_200
    assert [(m.provider, m.model, m.calls) for m in report.unpriced_models] == [
        ("ollama", "mystery", 1)
    ]


# --- retention ----------------------------------------------------------------------------


def test_pruning_never_drops_the_raw_records_of_a_day_not_rolled_up(db: Session) -> None:
    _, app_id = _priced_app(db, "keep@example.com")
    _record(db, app_id, at(D1, 9))
    usage.catch_up(db, now=at(D1, 10))  # rolled up, but the day was not over yet
    _record(db, app_id, at(D1, 20))
    later = at(D1 + timedelta(days=30), 12)  # the beat was down a month
    pruned = usage.prune(db, now=later, raw_retention_days=7, rollup_retention_days=180)
    assert pruned.raw_records == 0
    assert _raw_totals(db, D1)[0] == 2
    # The beat's own order: catch up first (completing D1), then prune.
    rolled, pruned = usage.maintain(db, now=later, raw_retention_days=7, rollup_retention_days=180)
    assert D1 in rolled.days and D1 in pruned.raw_days
    assert pruned.raw_records == 2
    assert _raw_totals(db, D1)[0] == 0
    assert _rollup_totals(db, D1) == (2, 2_000, 2_400)  # the rollup is intact


def test_raw_records_are_kept_for_the_retention_days_and_rebuild_leaves_pruned_days_alone(
    db: Session,
) -> None:
    _, app_id = _priced_app(db, "window@example.com")
    for offset in range(10):
        _record(db, app_id, at(D1 + timedelta(days=offset), 12))
    now = at(D1 + timedelta(days=10), 12)
    usage.maintain(db, now=now, raw_retention_days=7, rollup_retention_days=180)
    kept_days = {row.astimezone(UTC).date() for row in db.exec(select(UsageEvent.created_at)).all()}
    assert kept_days == {D1 + timedelta(days=n) for n in range(3, 10)}
    before = _rollup(db)
    result = usage.rebuild(db, start=D1, now=now)
    assert result.skipped == (D1, D1 + timedelta(days=1), D1 + timedelta(days=2))
    assert _rollup(db) == before  # nothing recomputed from nothing
    assert _rollup_totals(db) == (10, 10_000, 12_000)


def test_rollups_past_their_retention_are_pruned(db: Session) -> None:
    _, app_id = _priced_app(db, "old@example.com")
    _record(db, app_id, at(D1, 12))
    _record(db, app_id, at(D1 + timedelta(days=20), 12))
    now = at(D1 + timedelta(days=21), 12)
    usage.maintain(db, now=now, raw_retention_days=7, rollup_retention_days=10)
    assert {row[0] for row in _rollup(db)} == {D1 + timedelta(days=20)}
    assert db.get(UsageRollupDay, D1) is None


def test_retention_settings_have_their_floors(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from mosoo_core.settings import Settings

    settings = Settings()
    assert (settings.usage_raw_retention_days, settings.usage_rollup_retention_days) == (7, 180)
    monkeypatch.setenv("MOSOO_USAGE_RAW_RETENTION_DAYS", "3")
    with pytest.raises(ValidationError):
        Settings()


# --- the ledger's dimensions ------------------------------------------------------------


def test_a_record_takes_its_runtime_from_the_run_and_the_run_sums_its_records(
    db: Session,
) -> None:
    account_id, app_id = _priced_app(db, "runtime@example.com")
    agent = agents.create_agent(db, account_id, app_id, name="Claude one", runtime="claude")
    thread = AgentSession(app_id=app_id, agent_id=agent.id, purpose="console")
    db.add(thread)
    db.flush()
    run = SessionRun(session_id=thread.id, app_id=app_id, snapshot={"runtime": "claude"})
    db.add(run)
    db.flush()
    first = _record(db, app_id, utcnow(), agent_id=agent.id, purpose="console", run_id=run.id)
    _record(db, app_id, utcnow(), agent_id=agent.id, purpose="console", run_id=run.id)
    assert (first.runtime, first.purpose, first.agent_id) == ("claude", "console", agent.id)
    totals = usage.run_usage(db, run.id)
    assert totals is not None
    assert (totals.calls, totals.input_tokens, totals.cost_usd_micros) == (2, 2_000, 2_400)


# --- the summary --------------------------------------------------------------------------


def test_the_summary_groups_by_day_agent_model_and_purpose(db: Session) -> None:
    account_id, app_id = _priced_app(db, "groups@example.com")
    agent = agents.create_agent(db, account_id, app_id, name="Writer")
    _record(db, app_id, at(D1, 9), agent_id=agent.id, purpose="api")
    _record(db, app_id, at(D1, 10), agent_id=agent.id, purpose="api")
    _record(db, app_id, at(D1 + timedelta(days=2), 9), purpose="preview", model="gpt-4o")
    usage.rebuild(db, now=at(D1 + timedelta(days=3), 1))

    def summary(group_by: str) -> usage.UsageSummary:
        return usage.summary(
            db, account_id, app_id, start=D1, end=D1 + timedelta(days=2), group_by=group_by
        )

    by_day = summary("day")
    assert [(g.day, g.totals.calls) for g in by_day.groups] == [
        (D1, 2),
        (D1 + timedelta(days=1), 0),
        (D1 + timedelta(days=2), 1),
    ]
    assert by_day.total.calls == 3 and by_day.total.cost_usd_micros == 2_400
    by_agent = summary("agent")
    assert [(g.agent_id, g.agent_name, g.totals.calls) for g in by_agent.groups] == [
        (agent.id, "Writer", 2),
        (None, None, 1),
    ]
    assert [(g.provider, g.model) for g in summary("model").groups] == [
        ("ollama", "my-llama"),
        ("ollama", "gpt-4o"),
    ]
    assert {g.purpose: g.totals.calls for g in summary("purpose").groups} == {
        "api": 2,
        "preview": 1,
    }
    assert all(s.total == by_day.total for s in (by_agent, summary("model"), summary("purpose")))


def test_another_owners_app_is_not_found(db: Session) -> None:
    account_id, _ = _owner(db, "me@example.com")
    _, theirs = _priced_app(db, "them@example.com")
    _record(db, theirs, at(D1, 9))
    usage.rebuild(db, now=at(D1 + timedelta(days=1), 1))
    with pytest.raises(NotFound):
        usage.summary(db, account_id, theirs, start=D1, end=D1, group_by="day")
    with pytest.raises(NotFound):
        usage.summary(
            db, account_id, "01NOSUCHAPP000000000000000", start=D1, end=D1, group_by="day"
        )


@pytest.mark.parametrize(
    ("start", "end", "group_by", "field"),
    [
        (D1, D1, "week", "group_by"),
        (D1 + timedelta(days=1), D1, "day", "from"),
        (D1, D1 + timedelta(days=400), "day", "to"),
    ],
)
def test_the_summary_refuses_bad_ranges_and_groupings(
    db: Session, start: date, end: date, group_by: str, field: str
) -> None:
    account_id, app_id = _owner(db, "bad@example.com")
    with pytest.raises(InvalidInput) as refused:
        usage.summary(db, account_id, app_id, start=start, end=end, group_by=group_by)
    assert refused.value.field == field


def test_a_range_of_exactly_400_days_is_answered(db: Session) -> None:
    account_id, app_id = _owner(db, "long@example.com")
    report = usage.summary(
        db, account_id, app_id, start=D1, end=D1 + timedelta(days=399), group_by="day"
    )
    assert len(report.groups) == 400 and report.total.calls == 0


# --- the command --------------------------------------------------------------------------


def test_the_rebuild_command_recomputes_the_rollup_from_raw_records(engine: Engine) -> None:
    today = utcnow().date()
    with Session(engine) as db:
        _, app_id = _priced_app(db, "cli@example.com")
        for offset in (2, 1, 0):
            _record(db, app_id, at(today - timedelta(days=offset), 0, 1))
        db.commit()
    runner = CliRunner()
    result = runner.invoke(cli_app, ["usage", "rebuild"])
    assert result.exit_code == 0, result.output
    assert f"rebuilt 3 day(s) from {today - timedelta(days=2)} to {today}" in result.output
    with Session(engine) as db:
        first = _rollup(db)
        assert _rollup_totals(db) == _raw_totals(db) == (3, 3_000, 3_600)
    again = runner.invoke(
        cli_app,
        ["usage", "rebuild", "--from", str(today - timedelta(days=1)), "--to", str(today)],
    )
    assert again.exit_code == 0, again.output
    assert "rebuilt 2 day(s)" in again.output
    with Session(engine) as db:
        assert _rollup(db) == first


def test_the_rebuild_command_refuses_a_backwards_range_and_changes_nothing(
    engine: Engine,
) -> None:
    today = utcnow().date()
    with Session(engine) as db:
        _, app_id = _priced_app(db, "cli-bad@example.com")
        _record(db, app_id, at(today, 0, 1))
        usage.rebuild(db, now=utcnow())
        db.commit()
        before = _rollup(db)
    result = CliRunner().invoke(
        cli_app, ["usage", "rebuild", "--from", str(today), "--to", str(today - timedelta(days=3))]
    )
    assert result.exit_code == 1
    assert "after it ends" in result.output
    bad_date = CliRunner().invoke(cli_app, ["usage", "rebuild", "--from", "yesterday"])
    assert bad_date.exit_code != 0
    with Session(engine) as db:
        assert _rollup(db) == before
