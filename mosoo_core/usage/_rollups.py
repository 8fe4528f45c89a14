"""The daily rollup of the ledger, kept from the raw records (the source of truth).

A day is always recomputed whole: its rollup rows are deleted and written again from that
day's usage_event rows in one transaction, so recomputing a day any number of times gives the
same rows and never counts a call twice. `usage_rollup_day` says which days are rolled up and
when; a day is `complete` once it was rolled up after it was over (plus a grace for the
gateway's last commits), and only a complete day's raw records are ever pruned. Days are UTC.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

import sqlalchemy as sa
from sqlmodel import Session, col, func, select

from mosoo_core.errors import InvalidInput
from mosoo_core.tables.usage import UsageDaily, UsageEvent, UsageRollupDay

# A record is written when its call ends, stamped then; this covers the commit after it.
COMPLETE_AFTER = timedelta(minutes=5)


@dataclass(frozen=True)
class RollupResult:
    days: tuple[date, ...]  # the days recomputed, oldest first
    rows: int  # rollup rows written
    skipped: tuple[date, ...] = ()  # days a rebuild left alone: their raw records are pruned


@dataclass(frozen=True)
class PruneResult:
    raw_days: tuple[date, ...]  # days whose raw records were removed
    raw_records: int
    rollup_rows: int


EVENTS: sa.Table = UsageEvent.__table__  # type: ignore[attr-defined]
# The sums of raw records, in `UsageTotals`' field order: calls, the token buckets, cost and
# unpriced calls (the rollup's columns, and what reports sum live). Of the table's columns,
# so that a statement of these alone is plain SQL, without the ORM's work per execution.
EVENT_SUMS = (
    func.count(),
    func.sum(EVENTS.c.input_tokens),
    func.sum(EVENTS.c.cached_input_tokens),
    func.sum(EVENTS.c.cache_creation_input_tokens),
    func.sum(EVENTS.c.output_tokens),
    func.sum(EVENTS.c.reasoning_tokens),
    func.sum(EVENTS.c.cost_usd_micros),
    func.sum(sa.case((EVENTS.c.unpriced, 1), else_=0)),
)


def day_bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time(), tzinfo=UTC)
    return start, start + timedelta(days=1)


def days_between(start: date, end: date) -> Iterator[date]:
    day = start
    while day <= end:
        yield day
        day += timedelta(days=1)


def roll_up_day(db: Session, day: date, *, now: datetime) -> int:
    """Replace `day`'s rollup with the sums of its raw records; returns the rows written."""
    start, end = day_bounds(day)
    db.exec(sa.delete(UsageDaily).where(col(UsageDaily.day) == day))
    keys = (
        UsageEvent.app_id,
        UsageEvent.agent_id,
        UsageEvent.provider,
        UsageEvent.model,
        UsageEvent.purpose,
    )
    grouped = db.exec(
        select(*keys, *EVENT_SUMS)  # type: ignore[call-overload]
        .where(col(UsageEvent.created_at) >= start, col(UsageEvent.created_at) < end)
        .group_by(*keys)
    ).all()
    for app_id, agent_id, provider, model, purpose, *numbers in grouped:
        calls, input_, cached, created, output, reasoning, cost, unpriced = (
            int(n or 0) for n in numbers
        )
        db.add(
            UsageDaily(
                day=day,
                app_id=app_id,
                agent_id=agent_id or "",
                provider=provider,
                model=model,
                purpose=purpose,
                calls=calls,
                input_tokens=input_,
                cached_input_tokens=cached,
                cache_creation_input_tokens=created,
                output_tokens=output,
                reasoning_tokens=reasoning,
                cost_usd_micros=cost,
                unpriced_calls=unpriced,
            )
        )
    marker = db.get(UsageRollupDay, day) or UsageRollupDay(day=day, computed_at=now)
    marker.computed_at = now
    marker.complete = now >= end + COMPLETE_AFTER
    db.add(marker)
    db.flush()
    return len(grouped)


def _earliest_raw_day(db: Session) -> date | None:
    first = db.exec(
        select(UsageEvent.created_at).order_by(col(UsageEvent.created_at)).limit(1)
    ).first()
    return first.astimezone(UTC).date() if first is not None else None


def catch_up(db: Session, *, now: datetime) -> RollupResult:
    """Recompute every day since the last complete one through today, plus any earlier day
    left incomplete (a rebuild can complete a later day first). With no rollup yet, start
    from the oldest raw record. After downtime this fills the gap; run twice, the same rows."""
    today = now.astimezone(UTC).date()
    last_complete = db.exec(
        select(func.max(UsageRollupDay.day)).where(col(UsageRollupDay.complete))
    ).one()
    if last_complete is not None:
        start = last_complete + timedelta(days=1)
    else:
        start = min(_earliest_raw_day(db) or today, today)
    incomplete = db.exec(
        select(col(UsageRollupDay.day)).where(
            col(UsageRollupDay.complete).is_(False), col(UsageRollupDay.day) < start
        )
    ).all()
    days = sorted({*incomplete, *days_between(start, today)})
    rows = sum([roll_up_day(db, day, now=now) for day in days])
    return RollupResult(days=tuple(days), rows=rows)


def rebuild(
    db: Session, *, start: date | None = None, end: date | None = None, now: datetime
) -> RollupResult:
    """Recompute the days from `start` (default: the oldest raw record's) to `end` (default
    and at most today) from the raw records. Days whose raw records were pruned are skipped:
    recomputing them would replace their rollup with nothing."""
    today = now.astimezone(UTC).date()
    end = min(end or today, today)
    start = start or min(_earliest_raw_day(db) or end, end)
    if start > end:
        raise InvalidInput(
            f"The range starts ({start}) after it ends ({end}; never after today).", field="from"
        )
    pruned = set(
        db.exec(
            select(col(UsageRollupDay.day)).where(
                col(UsageRollupDay.raw_pruned),
                col(UsageRollupDay.day) >= start,
                col(UsageRollupDay.day) <= end,
            )
        ).all()
    )
    done: list[date] = []
    rows = 0
    for day in days_between(start, end):
        if day not in pruned:
            rows += roll_up_day(db, day, now=now)
            done.append(day)
    return RollupResult(days=tuple(done), rows=rows, skipped=tuple(sorted(pruned)))


def prune(
    db: Session, *, now: datetime, raw_retention_days: int, rollup_retention_days: int
) -> PruneResult:
    """Remove the raw records of complete days older than `raw_retention_days` (a day not
    rolled up completely keeps its raw records, however old) and the rollup rows older than
    `rollup_retention_days`."""
    today = now.astimezone(UTC).date()
    raw_horizon = today - timedelta(days=raw_retention_days)
    markers = db.exec(
        select(UsageRollupDay).where(
            col(UsageRollupDay.complete),
            col(UsageRollupDay.raw_pruned).is_(False),
            col(UsageRollupDay.day) < raw_horizon,
        )
    ).all()
    raw_records = 0
    for marker in markers:
        start, end = day_bounds(marker.day)
        result = db.exec(
            sa.delete(UsageEvent).where(
                col(UsageEvent.created_at) >= start, col(UsageEvent.created_at) < end
            )
        )
        raw_records += result.rowcount or 0
        marker.raw_pruned = True
        db.add(marker)
    rollup_horizon = today - timedelta(days=rollup_retention_days)
    removed = db.exec(sa.delete(UsageDaily).where(col(UsageDaily.day) < rollup_horizon))
    # A marker outlives its rows until its raw records are gone too (it guards them).
    db.exec(
        sa.delete(UsageRollupDay).where(
            col(UsageRollupDay.day) < rollup_horizon, col(UsageRollupDay.raw_pruned)
        )
    )
    db.flush()
    return PruneResult(
        raw_days=tuple(marker.day for marker in markers),
        raw_records=raw_records,
        rollup_rows=removed.rowcount or 0,
    )


def maintain(
    db: Session, *, now: datetime, raw_retention_days: int, rollup_retention_days: int
) -> tuple[RollupResult, PruneResult]:
    """The beat's work: catch the rollup up, then prune what retention lets go."""
    rolled = catch_up(db, now=now)
    pruned = prune(
        db,
        now=now,
        raw_retention_days=raw_retention_days,
        rollup_retention_days=rollup_retention_days,
    )
    return rolled, pruned
