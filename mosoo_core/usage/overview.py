"""What an App's usage cost over a few whole UTC days, for the App home: live from the raw
records (today's calls count at once, not at the beat's next rollup), and from the daily
rollup only for the days whose raw records have been pruned."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

import sqlalchemy as sa
from sqlmodel import Session, col, func, select

from mosoo_core.errors import InvalidInput
from mosoo_core.tables.usage import UsageDaily, UsageEvent, UsageRollupDay
from mosoo_core.usage.reports import MAX_RANGE_DAYS


@dataclass(frozen=True)
class CostTotal:
    cost_usd_micros: int = 0
    calls: int = 0
    # Calls counted at zero because no price matched their model: the cost understates.
    unpriced_calls: int = 0

    def plus(self, other: CostTotal) -> CostTotal:
        return CostTotal(
            self.cost_usd_micros + other.cost_usd_micros,
            self.calls + other.calls,
            self.unpriced_calls + other.unpriced_calls,
        )


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def _on_day(day: date) -> sa.ColumnElement[bool]:
    return sa.and_(
        col(UsageEvent.created_at) >= _midnight(day),
        col(UsageEvent.created_at) < _midnight(day + timedelta(days=1)),
    )


def app_cost(db: Session, app_id: str, *, start: date, end: date) -> CostTotal:
    """The App's usage cost from `start` to `end` (inclusive UTC days, at most 400). The
    caller has checked the App is the account's (`mosoo_core.ownership.owned_app`)."""
    if start > end or (end - start).days + 1 > MAX_RANGE_DAYS:
        raise InvalidInput(f"The range must be 1 to {MAX_RANGE_DAYS} days.", field="start")
    pruned = sorted(
        db.exec(
            select(col(UsageRollupDay.day)).where(
                col(UsageRollupDay.raw_pruned),
                col(UsageRollupDay.day) >= start,
                col(UsageRollupDay.day) <= end,
            )
        ).all()
    )
    total = CostTotal()
    if pruned:
        cost, calls, unpriced = db.exec(
            select(
                func.sum(UsageDaily.cost_usd_micros),
                func.sum(UsageDaily.calls),
                func.sum(UsageDaily.unpriced_calls),
            ).where(UsageDaily.app_id == app_id, col(UsageDaily.day).in_(pruned))
        ).one()
        total = CostTotal(int(cost or 0), int(calls or 0), int(unpriced or 0))
    # Raw records of the other days (a pruned day's stragglers are not counted twice).
    cost, calls, unpriced = db.exec(
        select(
            func.sum(UsageEvent.cost_usd_micros),
            func.count(),
            func.sum(sa.case((col(UsageEvent.unpriced), 1), else_=0)),
        ).where(
            UsageEvent.app_id == app_id,
            col(UsageEvent.created_at) >= _midnight(start),
            col(UsageEvent.created_at) < _midnight(end + timedelta(days=1)),
            *(sa.not_(_on_day(day)) for day in pruned),
        )
    ).one()
    return total.plus(CostTotal(int(cost or 0), int(calls or 0), int(unpriced or 0)))
