"""What an App's usage cost, answered from the daily rollup (days are UTC), and what one run
cost, from its raw records."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import UTC, date, timedelta
from typing import Any, Literal, get_args

import sqlalchemy as sa
from sqlmodel import Session, col, func, select

from mosoo_core.errors import InvalidInput
from mosoo_core.ownership import owned_app
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import SessionRun
from mosoo_core.tables.usage import UsageDaily, UsageEvent, UsageRollupDay

GroupBy = Literal["day", "agent", "model", "purpose"]
GROUPS: tuple[str, ...] = get_args(GroupBy)
MAX_RANGE_DAYS = 400


@dataclass(frozen=True)
class UsageTotals:
    calls: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd_micros: int = 0
    unpriced_calls: int = 0

    def plus(self, other: UsageTotals) -> UsageTotals:
        return UsageTotals(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )


@dataclass(frozen=True)
class UsageGroup:
    """One group's totals; only the fields of the grouping are set (`model` sets provider
    and model: one model name through two providers is two prices)."""

    totals: UsageTotals
    day: date | None = None
    agent_id: str | None = None
    agent_name: str | None = None  # None: a call no Agent made, or an Agent since deleted
    provider: str | None = None
    model: str | None = None
    purpose: str | None = None


@dataclass(frozen=True)
class UnpricedModel:
    provider: str
    model: str
    calls: int


@dataclass(frozen=True)
class UsageSummary:
    app_id: str
    start: date
    end: date  # inclusive
    group_by: str
    groups: list[UsageGroup]
    total: UsageTotals
    # Models counted at zero because no price matched them: the totals understate their cost.
    unpriced_models: list[UnpricedModel]


_SUMS = (
    func.sum(UsageDaily.calls),
    func.sum(UsageDaily.input_tokens),
    func.sum(UsageDaily.cached_input_tokens),
    func.sum(UsageDaily.cache_creation_input_tokens),
    func.sum(UsageDaily.output_tokens),
    func.sum(UsageDaily.reasoning_tokens),
    func.sum(UsageDaily.cost_usd_micros),
    func.sum(UsageDaily.unpriced_calls),
)


def _totals(numbers: Any) -> UsageTotals:
    return UsageTotals(*(int(n or 0) for n in numbers))


def check_range(start: date, end: date) -> None:
    if start > end:
        raise InvalidInput("`from` is after `to`.", field="from")
    if (end - start).days + 1 > MAX_RANGE_DAYS:
        raise InvalidInput(f"The range is longer than {MAX_RANGE_DAYS} days.", field="to")


def summary(
    db: Session, account_id: str, app_id: str, *, start: date, end: date, group_by: str
) -> UsageSummary:
    """The App's usage from `start` to `end` (inclusive UTC days, at most 400), grouped by
    day (every day of the range, zeros included), agent, model or purpose (costliest first),
    with the range's totals and the models that had no price. Another owner's App: NotFound.
    Today's numbers are as of the beat's last rollup (every few minutes)."""
    owned_app(db, account_id, app_id)
    if group_by not in GROUPS:
        raise InvalidInput(
            f"group_by must be one of {', '.join(GROUPS)}; not {group_by!r}.", field="group_by"
        )
    check_range(start, end)
    keys: dict[str, tuple[Any, ...]] = {
        "day": (UsageDaily.day,),
        "agent": (UsageDaily.agent_id,),
        "model": (UsageDaily.provider, UsageDaily.model),
        "purpose": (UsageDaily.purpose,),
    }
    in_range = (
        UsageDaily.app_id == app_id,
        col(UsageDaily.day) >= start,
        col(UsageDaily.day) <= end,
    )
    chosen = keys[group_by]
    rows = db.exec(
        select(*chosen, *_SUMS).where(*in_range).group_by(*chosen)  # type: ignore[call-overload]
    ).all()
    width = len(chosen)
    groups: list[UsageGroup]
    if group_by == "day":
        by_day = {row[0]: _totals(row[width:]) for row in rows}
        groups = [
            UsageGroup(totals=by_day.get(day, UsageTotals()), day=day)
            for day in (start + timedelta(days=n) for n in range((end - start).days + 1))
        ]
    elif group_by == "agent":
        ids = [row[0] for row in rows if row[0]]
        names = dict(
            db.exec(select(Agent.id, Agent.name).where(col(Agent.id).in_(ids))).all() if ids else []
        )
        groups = [
            UsageGroup(
                totals=_totals(row[width:]),
                agent_id=row[0] or None,
                agent_name=names.get(row[0]),
            )
            for row in rows
        ]
    elif group_by == "model":
        groups = [
            UsageGroup(totals=_totals(row[width:]), provider=row[0], model=row[1]) for row in rows
        ]
    else:
        groups = [UsageGroup(totals=_totals(row[width:]), purpose=row[0]) for row in rows]
    if group_by != "day":
        groups.sort(
            key=lambda g: (
                -g.totals.cost_usd_micros,
                -g.totals.calls,
                str(g.agent_id or g.model or g.purpose or ""),
            )
        )
    total = UsageTotals()
    for group in groups:
        total = total.plus(group.totals)
    unpriced = db.exec(
        select(UsageDaily.provider, UsageDaily.model, func.sum(UsageDaily.unpriced_calls))
        .where(*in_range, col(UsageDaily.unpriced_calls) > 0)
        .group_by(UsageDaily.provider, UsageDaily.model)
        .order_by(UsageDaily.provider, UsageDaily.model)
    ).all()
    return UsageSummary(
        app_id=app_id,
        start=start,
        end=end,
        group_by=group_by,
        groups=groups,
        total=total,
        unpriced_models=[
            UnpricedModel(provider=provider, model=model, calls=int(calls or 0))
            for provider, model, calls in unpriced
        ],
    )


_EVENT_SUMS = (
    func.count(),
    func.sum(UsageEvent.input_tokens),
    func.sum(UsageEvent.cached_input_tokens),
    func.sum(UsageEvent.cache_creation_input_tokens),
    func.sum(UsageEvent.output_tokens),
    func.sum(UsageEvent.reasoning_tokens),
    func.sum(UsageEvent.cost_usd_micros),
    func.sum(sa.case((col(UsageEvent.unpriced), 1), else_=0)),
)


def run_usage(db: Session, run_id: str) -> UsageTotals | None:
    """The sum of a run's usage records. None when they are no longer kept (the day the run
    started is past raw retention): the run's own cost is then unknown, not zero. The caller
    has already checked the run is the account's."""
    run = db.get(SessionRun, run_id)
    if run is None:
        return None
    marker = db.get(UsageRollupDay, run.created_at.astimezone(UTC).date())
    if marker is not None and marker.raw_pruned:
        return None
    row = db.exec(
        select(*_EVENT_SUMS).where(UsageEvent.run_id == run_id)  # type: ignore[call-overload]
    ).one()
    return _totals(row)


def usage_by_run(db: Session, run_ids: list[str]) -> dict[str, UsageTotals]:
    """Each run's summed records, in one query (a list of runs shows each one's cost). A run
    without records kept is absent. The caller has already checked the runs are the
    account's."""
    if not run_ids:
        return {}
    rows = db.exec(
        select(UsageEvent.run_id, *_EVENT_SUMS)  # type: ignore[call-overload]
        .where(col(UsageEvent.run_id).in_(run_ids))
        .group_by(UsageEvent.run_id)
    ).all()
    return {str(row[0]): _totals(row[1:]) for row in rows}


def thread_usage(db: Session, session_id: str) -> UsageTotals:
    """A thread's summed records, as far as they are kept (raw records of older days are
    pruned after their rollup). The caller has already checked the thread is the account's."""
    row = db.exec(
        select(*_EVENT_SUMS).where(UsageEvent.session_id == session_id)  # type: ignore[call-overload]
    ).one()
    return _totals(row)
