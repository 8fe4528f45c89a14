"""An App's usage per UTC day split by model or by agent (complete days from the daily
rollup, the others from the raw records, as the summary): the series of the Usage page's
stacked charts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Literal, get_args

from sqlmodel import Session, col, select

from mosoo_core.errors import InvalidInput
from mosoo_core.ownership import owned_app
from mosoo_core.tables.agents import Agent
from mosoo_core.usage.reports import KeyName, UsageTotals, check_range, grouped_totals

SplitBy = Literal["model", "agent"]
SPLITS: tuple[str, ...] = get_args(SplitBy)


@dataclass(frozen=True)
class DailyPart:
    """One day's totals of one model (`key` "provider/model") or agent (`key` its id, ""
    for calls no Agent made); `label` is what a legend shows."""

    day: date
    key: str
    label: str
    totals: UsageTotals


def daily_breakdown(
    db: Session, account_id: str, app_id: str, *, start: date, end: date, split_by: str
) -> list[DailyPart]:
    """The App's usage from `start` to `end` (inclusive UTC days, at most 400) per day and
    model or agent, days with no usage left out, oldest first. Another owner's App:
    NotFound."""
    owned_app(db, account_id, app_id)
    if split_by not in SPLITS:
        raise InvalidInput(f"split_by must be model or agent; not {split_by!r}.", field="split_by")
    check_range(start, end)
    keys: tuple[KeyName, ...] = (
        ("day", "provider", "model") if split_by == "model" else ("day", "agent_id")
    )
    found = grouped_totals(db, app_id, start=start, end=end, keys=keys)
    rows = [(*key, totals) for key, totals in sorted(found.items(), key=lambda item: item[0])]
    if split_by == "model":
        # One model name through two providers is two prices: name the provider then.
        providers: dict[str, set[str]] = {}
        for row in rows:
            providers.setdefault(row[2], set()).add(row[1])
        return [
            DailyPart(
                day=row[0],
                key=f"{row[1]}/{row[2]}",
                label=row[2] if len(providers[row[2]]) == 1 else f"{row[2]} ({row[1]})",
                totals=row[-1],
            )
            for row in rows
        ]
    ids = sorted({row[1] for row in rows if row[1]})
    names = dict(
        db.exec(select(Agent.id, Agent.name).where(col(Agent.id).in_(ids))).all() if ids else []
    )
    return [
        DailyPart(
            day=row[0],
            key=row[1] or "",
            label=names.get(row[1], "Deleted agent") if row[1] else "No agent",
            totals=row[-1],
        )
        for row in rows
    ]
