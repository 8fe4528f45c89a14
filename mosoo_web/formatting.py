"""How the console writes times, sizes and money: "5 min ago", "1.2 MiB", "$0.42"."""

from __future__ import annotations

from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from mosoo_core.usage import UsageTotals


def relative_time(when: datetime, now: datetime) -> str:
    """ "just now", "5 min ago", "3 h ago", "2 days ago", then the date."""
    seconds = max(0, int((now - when).total_seconds()))
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 86_400:
        return f"{seconds // 3600} h ago"
    days = seconds // 86_400
    if days < 30:
        return "1 day ago" if days == 1 else f"{days} days ago"
    return when.strftime("%Y-%m-%d")


def size_text(size: int) -> str:
    """A file size in B, KiB or MiB."""
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size / (1024 * 1024):.1f} MiB"


def usd_text(micros: int) -> str:
    """USD micros as dollars: cents, or four decimals below a cent ("$0.0042")."""
    if 0 < micros < 100:
        return "<$0.0001"
    places = Decimal("0.0001") if 0 < abs(micros) < 10_000 else Decimal("0.01")
    dollars = (Decimal(micros) / Decimal(1_000_000)).quantize(places, rounding=ROUND_HALF_UP)
    return f"${dollars:,}"


def usage_text(totals: UsageTotals | None) -> str:
    """A run's or thread's tokens and cost ("unpriced" when a call had no price)."""
    if totals is None or totals.calls == 0:
        return ""
    tokens = totals.input_tokens + totals.output_tokens
    cost = usd_text(totals.cost_usd_micros)
    unpriced = " (some calls unpriced)" if totals.unpriced_calls else ""
    return f"{tokens:,} tokens · {cost}{unpriced}"
