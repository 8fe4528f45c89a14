"""The Usage page's chart data: a point per day of the range, series costliest first, the
rest folded into one "Other"."""

from __future__ import annotations

from datetime import date, timedelta

from mosoo_core.usage import DailyPart, UsageTotals
from mosoo_web.pages.usage import MAX_SERIES, _chart, export_href, range_days

D1 = date(2026, 11, 1)


def _part(day: int, key: str, cost: int, tokens: int = 10) -> DailyPart:
    return DailyPart(
        day=D1 + timedelta(days=day),
        key=key,
        label=key.upper(),
        totals=UsageTotals(calls=1, input_tokens=tokens, cost_usd_micros=cost),
    )


def test_every_day_gets_a_point_and_series_are_costliest_first() -> None:
    days = [D1 + timedelta(days=n) for n in range(3)]
    series, cost, tokens = _chart([_part(0, "a", 500_000), _part(2, "b", 2_500_000, 7)], days)
    assert [(s.key, s.label) for s in series] == [("s0", "B"), ("s1", "A")]
    assert cost == [
        {"day": "Nov 01", "s0": 0.0, "s1": 0.5},
        {"day": "Nov 02", "s0": 0.0, "s1": 0.0},
        {"day": "Nov 03", "s0": 2.5, "s1": 0.0},
    ]
    assert [p["s0"] for p in tokens] == [0, 0, 7]


def test_series_beyond_the_limit_share_other() -> None:
    parts = [_part(0, f"m{n}", 1_000 * (n + 1)) for n in range(MAX_SERIES + 2)]
    series, cost, _ = _chart(parts, [D1])
    assert len(series) == MAX_SERIES and series[-1].label == "Other"
    assert cost[0]["other"] == round((1_000 + 2_000 + 3_000) / 1_000_000, 6)
    assert sum(v for k, v in cost[0].items() if k != "day") == round(
        sum(p.totals.cost_usd_micros for p in parts) / 1_000_000, 6
    )


def test_ranges_end_today_and_month_to_date_starts_on_the_first() -> None:
    today = date(2026, 12, 15)
    assert range_days("7d", today) == (date(2026, 12, 9), today)
    assert range_days("90d", today) == (today - timedelta(days=89), today)
    assert range_days("mtd", today) == (date(2026, 12, 1), today)
    assert export_href("APP", date(2026, 12, 1), today, "raw") == (
        "/api/usage/export.csv?app_id=APP&from=2026-12-01&to=2026-12-15&kind=raw"
    )
