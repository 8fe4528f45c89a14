"""What an App's usage cost (days are UTC): the days rolled up completely from the daily
rollup, the others (today, and any day the beat has not finished) live from the raw records,
so a call counts as soon as it is made; and what one run cost, from its raw records."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import UTC, date, datetime
from typing import Any, Literal, get_args

import sqlalchemy as sa
from sqlalchemy import bindparam
from sqlmodel import Session, col, func, select

from mosoo_core.db import Connectable
from mosoo_core.errors import InvalidInput
from mosoo_core.ownership import owned_app
from mosoo_core.prepared import PreparedRead
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import SessionRun
from mosoo_core.tables.usage import UsageDaily, UsageEvent, UsageRollupDay
from mosoo_core.usage._rollups import EVENT_SUMS, EVENTS, day_bounds, days_between

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


# Built once: the API answers a thread with its latest run's usage, and clients poll it. The
# last column says whether the rollup has pruned the records of the run's day.
_ROLLUP_DAYS: sa.Table = UsageRollupDay.__table__  # type: ignore[attr-defined]
_RUN_SUMS = PreparedRead(
    sa.select(
        *EVENT_SUMS,
        sa.select(_ROLLUP_DAYS.c.raw_pruned)
        .where(_ROLLUP_DAYS.c.day == bindparam("day"))
        .scalar_subquery(),
    ).where(EVENTS.c.run_id == bindparam("run_id"))
)


def _totals(numbers: Any) -> UsageTotals:
    return UsageTotals(*(int(n or 0) for n in numbers))


def check_range(start: date, end: date) -> None:
    if start > end:
        raise InvalidInput("`from` is after `to`.", field="from")
    if (end - start).days + 1 > MAX_RANGE_DAYS:
        raise InvalidInput(f"The range is longer than {MAX_RANGE_DAYS} days.", field="to")


KeyName = Literal["day", "agent_id", "provider", "model", "purpose"]


def _live_days(db: Session, app_id: str, start: date, end: date) -> list[date]:
    """The range's days with raw records that are not rolled up completely: their rollup
    (if any) is older than their last calls, so they are summed from the raw records."""
    first = db.exec(
        select(UsageEvent.created_at)
        .where(
            UsageEvent.app_id == app_id,
            col(UsageEvent.created_at) >= day_bounds(start)[0],
            col(UsageEvent.created_at) < day_bounds(end)[1],
        )
        .order_by(col(UsageEvent.created_at))
        .limit(1)
    ).first()
    if first is None:
        return []
    complete = set(
        db.exec(
            select(col(UsageRollupDay.day)).where(
                col(UsageRollupDay.complete),
                col(UsageRollupDay.day) >= start,
                col(UsageRollupDay.day) <= end,
            )
        ).all()
    )
    begin = max(start, first.astimezone(UTC).date())
    return [day for day in days_between(begin, end) if day not in complete]


def grouped_totals(
    db: Session, app_id: str, *, start: date, end: date, keys: tuple[KeyName, ...]
) -> dict[tuple[Any, ...], UsageTotals]:
    """The App's totals from `start` to `end` per value of `keys` (a call no Agent made has
    agent_id ""): complete days from the rollup, the rest from the raw records. The caller
    has checked the App is the account's and the range."""
    live = _live_days(db, app_id, start, end)
    found: dict[tuple[Any, ...], UsageTotals] = {}

    def add(key: tuple[Any, ...], totals: UsageTotals) -> None:
        if totals.calls:
            found[key] = found.get(key, UsageTotals()).plus(totals)

    rolled_keys = tuple(getattr(UsageDaily, name) for name in keys)
    rows = db.exec(
        select(*rolled_keys, *_SUMS)  # type: ignore[call-overload]
        .where(
            UsageDaily.app_id == app_id,
            col(UsageDaily.day) >= start,
            col(UsageDaily.day) <= end,
            col(UsageDaily.day).not_in(live),
        )
        .group_by(*rolled_keys)
    ).all()
    width = len(keys)
    for row in rows:
        add(tuple(row[:width]), _totals(row[width:]))
    raw_names = [name for name in keys if name != "day"]
    raw_keys = tuple(getattr(UsageEvent, name) for name in raw_names)
    for day in live:
        begin, stop = day_bounds(day)
        rows = db.exec(
            select(*raw_keys, *EVENT_SUMS)  # type: ignore[call-overload]
            .where(
                UsageEvent.app_id == app_id,
                col(UsageEvent.created_at) >= begin,
                col(UsageEvent.created_at) < stop,
            )
            .group_by(*raw_keys)
        ).all()
        for row in rows:
            values = dict(zip(raw_names, row, strict=False))
            if "agent_id" in values:
                values["agent_id"] = values["agent_id"] or ""  # as the rollup keeps it
            add(
                tuple(day if name == "day" else values[name] for name in keys),
                _totals(row[len(raw_names) :]),
            )
    return found


_GROUP_KEYS: dict[str, tuple[KeyName, ...]] = {
    "day": ("day",),
    "agent": ("agent_id",),
    "model": ("provider", "model"),
    "purpose": ("purpose",),
}


def summary(
    db: Session, account_id: str, app_id: str, *, start: date, end: date, group_by: str
) -> UsageSummary:
    """The App's usage from `start` to `end` (inclusive UTC days, at most 400), grouped by
    day (every day of the range, zeros included), agent, model or purpose (costliest first),
    with the range's totals and the models that had no price. Another owner's App: NotFound.
    Today's calls count as soon as their records are written (see `grouped_totals`)."""
    owned_app(db, account_id, app_id)
    if group_by not in GROUPS:
        raise InvalidInput(
            f"group_by must be one of {', '.join(GROUPS)}; not {group_by!r}.", field="group_by"
        )
    check_range(start, end)
    found = grouped_totals(db, app_id, start=start, end=end, keys=_GROUP_KEYS[group_by])
    groups: list[UsageGroup]
    if group_by == "day":
        groups = [
            UsageGroup(totals=found.get((day,), UsageTotals()), day=day)
            for day in days_between(start, end)
        ]
    elif group_by == "agent":
        ids = [key[0] for key in found if key[0]]
        names = dict(
            db.exec(select(Agent.id, Agent.name).where(col(Agent.id).in_(ids))).all() if ids else []
        )
        groups = [
            UsageGroup(totals=totals, agent_id=key[0] or None, agent_name=names.get(key[0]))
            for key, totals in found.items()
        ]
    elif group_by == "model":
        groups = [
            UsageGroup(totals=totals, provider=key[0], model=key[1])
            for key, totals in found.items()
        ]
    else:
        groups = [UsageGroup(totals=totals, purpose=key[0]) for key, totals in found.items()]
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
    by_model = (
        found
        if group_by == "model"
        else grouped_totals(db, app_id, start=start, end=end, keys=_GROUP_KEYS["model"])
    )
    unpriced = sorted(
        (key[0], key[1], totals.unpriced_calls)
        for key, totals in by_model.items()
        if totals.unpriced_calls
    )
    return UsageSummary(
        app_id=app_id,
        start=start,
        end=end,
        group_by=group_by,
        groups=groups,
        total=total,
        unpriced_models=[
            UnpricedModel(provider=provider, model=model, calls=calls)
            for provider, model, calls in unpriced
        ],
    )


def run_usage(db: Session, run_id: str) -> UsageTotals | None:
    """The sum of a run's usage records. None when they are no longer kept (the day the run
    started is past raw retention): the run's own cost is then unknown, not zero. The caller
    has already checked the run is the account's."""
    run = db.get(SessionRun, run_id)
    return usage_of_run(db, run_id, run.created_at) if run is not None else None


def usage_of_run(db: Connectable, run_id: str, created_at: datetime) -> UsageTotals | None:
    """`run_usage` for a caller that has read the run (`created_at` names the day whose
    rollup may have pruned its records): one query."""
    day = created_at.astimezone(UTC).date()
    *numbers, pruned = _RUN_SUMS.one(db, {"run_id": run_id, "day": day})
    return None if pruned else _totals(numbers)


def usage_by_run(db: Session, run_ids: list[str]) -> dict[str, UsageTotals]:
    """Each run's summed records, in one query (a list of runs shows each one's cost). A run
    without records kept is absent. The caller has already checked the runs are the
    account's."""
    if not run_ids:
        return {}
    rows = db.exec(
        select(UsageEvent.run_id, *EVENT_SUMS)  # type: ignore[call-overload]
        .where(col(UsageEvent.run_id).in_(run_ids))
        .group_by(UsageEvent.run_id)
    ).all()
    return {str(row[0]): _totals(row[1:]) for row in rows}


def thread_usage(db: Session, session_id: str) -> UsageTotals:
    """A thread's summed records, as far as they are kept (raw records of older days are
    pruned after their rollup). The caller has already checked the thread is the account's."""
    row = db.exec(
        select(*EVENT_SUMS).where(UsageEvent.session_id == session_id)  # type: ignore[call-overload]
    ).one()
    return _totals(row)
