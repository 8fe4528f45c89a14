"""`/apps/[app_id]/usage`: what the App's model calls cost over the last 7 / 30 / 90 days or
the month to date (UTC days; today's calls count at once, see `usage.summary`): cost and
tokens per day stacked by model or by agent, tables by model and by agent with totals, the
models without a price called out, and CSV downloads of the range's raw records and rollup
(`/api/usage/export.csv`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any
from urllib.parse import urlencode

import reflex as rx
from reflex.vars import ArrayVar, ObjectVar

from mosoo_core import usage
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.errors import NotFound
from mosoo_web.components.layout import app_page, console_shell, page_header, stat_card
from mosoo_web.formatting import usd_text
from mosoo_web.reflex_typing import event
from mosoo_web.state.session import SessionState, current_app_ids

RANGES = {
    "7d": "Last 7 days",
    "30d": "Last 30 days",
    "90d": "Last 90 days",
    "mtd": "Month to date",
}
SPLIT_LABELS = {"model": "By model", "agent": "By agent"}
# Stacks beyond these many share one "Other" series (and its grey).
MAX_SERIES = 8
PALETTE = (
    "#3e63dd",
    "#e5484d",
    "#30a46c",
    "#f76b15",
    "#8e4ec6",
    "#12a594",
    "#d6409f",
    "#ffc53d",
)
OTHER_COLOR = "#8d8d8d"
EXPORT_PATH = "/api/usage/export.csv"


def range_days(key: str, today: date) -> tuple[date, date]:
    """The inclusive UTC days of a range ending today."""
    if key == "mtd":
        return today.replace(day=1), today
    days = {"7d": 7, "30d": 30, "90d": 90}[key]
    return today - timedelta(days=days - 1), today


def export_href(app_id: str, start: date, end: date, kind: str) -> str:
    query = urlencode({"app_id": app_id, "from": start, "to": end, "kind": kind})
    return f"{EXPORT_PATH}?{query}"


@dataclass
class ChartSeries:
    key: str = ""  # the data key of its bars ("s0" ...)
    label: str = ""
    color: str = ""


@dataclass
class UsageRow:
    key: str = ""
    label: str = ""
    detail: str = ""
    calls: str = "0"
    input_tokens: str = "0"
    output_tokens: str = "0"
    cost: str = "$0.00"
    cost_micros: int = 0


@dataclass
class UsageView:
    start: date
    end: date
    series: list[ChartSeries] = field(default_factory=list)
    cost_points: list[dict[str, Any]] = field(default_factory=list)
    token_points: list[dict[str, Any]] = field(default_factory=list)
    models: list[UsageRow] = field(default_factory=list)
    agents: list[UsageRow] = field(default_factory=list)
    total: UsageRow = field(default_factory=UsageRow)
    calls: int = 0
    unpriced: list[str] = field(default_factory=list)
    unpriced_calls: int = 0


def _row(key: str, label: str, detail: str, totals: usage.UsageTotals) -> UsageRow:
    return UsageRow(
        key=key,
        label=label,
        detail=detail,
        calls=f"{totals.calls:,}",
        input_tokens=f"{totals.input_tokens:,}",
        output_tokens=f"{totals.output_tokens:,}",
        cost=usd_text(totals.cost_usd_micros),
        cost_micros=totals.cost_usd_micros,
    )


def _chart(
    parts: list[usage.DailyPart], days: list[date]
) -> tuple[list[ChartSeries], list[dict[str, Any]], list[dict[str, Any]]]:
    """Series costliest first (the rest as one "Other"), and a point per day of the range."""
    ranked: dict[str, tuple[int, int, str]] = {}
    for part in parts:
        so_far_cost, so_far_tokens, _ = ranked.get(part.key, (0, 0, part.label))
        ranked[part.key] = (
            so_far_cost + part.totals.cost_usd_micros,
            so_far_tokens + part.totals.input_tokens + part.totals.output_tokens,
            part.label,
        )
    order = sorted(ranked, key=lambda k: (-ranked[k][0], -ranked[k][1], ranked[k][2]))
    data_key: dict[str, str] = {}
    series: list[ChartSeries] = []
    for n, key in enumerate(order):
        if n < MAX_SERIES - 1 or len(order) == MAX_SERIES:
            data_key[key] = f"s{n}"
            series.append(ChartSeries(f"s{n}", ranked[key][2], PALETTE[n % len(PALETTE)]))
        else:
            data_key[key] = "other"
    if "other" in data_key.values():
        series.append(ChartSeries("other", "Other", OTHER_COLOR))
    cost: dict[date, dict[str, int]] = {day: {} for day in days}
    tokens: dict[date, dict[str, int]] = {day: {} for day in days}
    for part in parts:
        name = data_key[part.key]
        day_cost, day_tokens = cost.setdefault(part.day, {}), tokens.setdefault(part.day, {})
        day_cost[name] = day_cost.get(name, 0) + part.totals.cost_usd_micros
        day_tokens[name] = (
            day_tokens.get(name, 0) + part.totals.input_tokens + part.totals.output_tokens
        )
    cost_points = [
        {"day": day.strftime("%b %d")}
        | {s.key: round(cost[day].get(s.key, 0) / 1_000_000, 6) for s in series}
        for day in days
    ]
    token_points = [
        {"day": day.strftime("%b %d")} | {s.key: tokens[day].get(s.key, 0) for s in series}
        for day in days
    ]
    return series, cost_points, token_points


def _load(account_id: str, app_id: str, range_key: str, split_by: str) -> UsageView:
    start, end = range_days(range_key, utcnow().date())
    with session_scope() as db:
        by_day = usage.summary(db, account_id, app_id, start=start, end=end, group_by="day")
        by_model = usage.summary(db, account_id, app_id, start=start, end=end, group_by="model")
        by_agent = usage.summary(db, account_id, app_id, start=start, end=end, group_by="agent")
        parts = usage.daily_breakdown(
            db, account_id, app_id, start=start, end=end, split_by=split_by
        )
    series, cost_points, token_points = _chart(parts, [g.day for g in by_day.groups if g.day])
    names: dict[str, set[str]] = {}
    for group in by_model.groups:
        names.setdefault(group.model or "", set()).add(group.provider or "")
    return UsageView(
        start=start,
        end=end,
        series=series,
        cost_points=cost_points,
        token_points=token_points,
        models=[
            _row(f"{g.provider}/{g.model}", g.model or "", g.provider or "", g.totals)
            for g in by_model.groups
        ],
        agents=[
            _row(
                g.agent_id or "",
                g.agent_name or ("Deleted agent" if g.agent_id else "No agent"),
                "",
                g.totals,
            )
            for g in by_agent.groups
        ],
        total=_row("total", "Total", "", by_day.total),
        calls=by_day.total.calls,
        unpriced=[f"{m.model} ({m.provider})" for m in by_day.unpriced_models],
        unpriced_calls=by_day.total.unpriced_calls,
    )


class UsageState(rx.State):
    range_key: rx.Field[str] = rx.field("30d")
    split_by: rx.Field[str] = rx.field("model")
    loaded: rx.Field[bool] = rx.field(False)
    range_text: rx.Field[str] = rx.field("")
    series: rx.Field[list[ChartSeries]] = rx.field(default_factory=list)
    cost_points: rx.Field[list[dict[str, Any]]] = rx.field(default_factory=list)
    token_points: rx.Field[list[dict[str, Any]]] = rx.field(default_factory=list)
    models: rx.Field[list[UsageRow]] = rx.field(default_factory=list)
    agents: rx.Field[list[UsageRow]] = rx.field(default_factory=list)
    total_cost: rx.Field[str] = rx.field("$0.00")
    total_calls: rx.Field[str] = rx.field("0")
    total_input: rx.Field[str] = rx.field("0")
    total_output: rx.Field[str] = rx.field("0")
    calls: rx.Field[int] = rx.field(0)
    unpriced_text: rx.Field[str] = rx.field("")
    unpriced_calls: rx.Field[int] = rx.field(0)
    raw_href: rx.Field[str] = rx.field("")
    rollup_href: rx.Field[str] = rx.field("")

    async def _refresh(self) -> None:
        account_id, app_id = await current_app_ids(self)
        session = await self.get_state(SessionState)
        if session.app_missing or not app_id:
            self.loaded = False
            return
        try:
            view = await asyncio.to_thread(_load, account_id, app_id, self.range_key, self.split_by)
        except NotFound:
            session.app_missing = True
            self.loaded = False
            return
        self.range_text = (
            f"{view.start:%b} {view.start.day}, {view.start.year} to "
            f"{view.end:%b} {view.end.day}, {view.end.year} (UTC)"
        )
        self.series, self.cost_points = view.series, view.cost_points
        self.token_points = view.token_points
        self.models, self.agents = view.models, view.agents
        self.total_cost, self.total_calls = view.total.cost, view.total.calls
        self.total_input, self.total_output = view.total.input_tokens, view.total.output_tokens
        self.calls = view.calls
        self.unpriced_text = ", ".join(view.unpriced)
        self.unpriced_calls = view.unpriced_calls
        self.raw_href = export_href(app_id, view.start, view.end, "raw")
        self.rollup_href = export_href(app_id, view.start, view.end, "rollup")
        self.loaded = True

    @event
    async def load(self) -> None:
        """After the App guard: the chosen range's usage."""
        self.loaded = False
        await self._refresh()

    @event
    async def choose_range(self, key: str | list[str]) -> None:
        if isinstance(key, str) and key in RANGES:
            self.range_key = key
            await self._refresh()

    @event
    async def choose_split(self, key: str | list[str]) -> None:
        if isinstance(key, str) and key in SPLIT_LABELS:
            self.split_by = key
            await self._refresh()


def _controls() -> rx.Component:
    return rx.flex(
        rx.segmented_control.root(
            *(rx.segmented_control.item(label, value=key) for key, label in RANGES.items()),
            value=UsageState.range_key,
            on_change=UsageState.choose_range,
            data_testid="usage-range",
        ),
        rx.spacer(),
        rx.segmented_control.root(
            *(rx.segmented_control.item(label, value=key) for key, label in SPLIT_LABELS.items()),
            value=UsageState.split_by,
            on_change=UsageState.choose_split,
            data_testid="usage-split",
        ),
        wrap="wrap",
        gap="12px",
        align="center",
        width="100%",
    )


def _stats() -> rx.Component:
    return rx.flex(
        stat_card("Cost", UsageState.total_cost, "usage-total-cost"),
        stat_card("Model calls", UsageState.total_calls, "usage-total-calls"),
        stat_card("Input tokens", UsageState.total_input, "usage-total-input"),
        stat_card("Output tokens", UsageState.total_output, "usage-total-output"),
        gap="12px",
        wrap="wrap",
        width="100%",
    )


def _unpriced_callout() -> rx.Component:
    return rx.cond(
        UsageState.unpriced_text != "",
        rx.callout.root(
            rx.callout.icon(rx.icon("triangle-alert", size=16)),
            rx.callout.text(
                "No price for ",
                rx.text.strong(UsageState.unpriced_text),
                ". Their calls count as $0 (",
                UsageState.unpriced_calls.to_string(),
                " in this range), so the costs here leave them out.",
            ),
            color_scheme="amber",
            width="100%",
            data_testid="usage-unpriced",
        ),
        rx.fragment(),
    )


def _bar_chart(title: str, points: ArrayVar[Any], test_id: str) -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.heading(title, size="3"),
            rx.recharts.bar_chart(
                rx.recharts.cartesian_grid(stroke_dasharray="3 3", vertical=False),
                rx.recharts.x_axis(data_key="day"),
                rx.recharts.y_axis(width=72),
                rx.recharts.graphing_tooltip(),
                rx.recharts.legend(),
                rx.foreach(
                    UsageState.series,
                    lambda s: rx.recharts.bar(
                        data_key=s.key,
                        name=s.label,
                        stack_id="usage",
                        fill=s.color,
                        is_animation_active=False,
                    ),
                ),
                data=points,
                width="100%",
                height=260,
            ),
            spacing="2",
            width="100%",
        ),
        width="100%",
        data_testid=test_id,
    )


def _table(
    title: str, first: str, rows: ArrayVar[Any], with_detail: bool, test_id: str
) -> rx.Component:
    def row(item: ObjectVar[UsageRow]) -> rx.Component:
        cells: list[rx.Component] = [
            rx.table.row_header_cell(item.label, data_testid=f"{test_id}-name")
        ]
        if with_detail:
            cells.append(rx.table.cell(rx.text(item.detail, color_scheme="gray")))
        return rx.table.row(
            *cells,
            rx.table.cell(item.calls, justify="end"),
            rx.table.cell(item.input_tokens, justify="end"),
            rx.table.cell(item.output_tokens, justify="end"),
            rx.table.cell(item.cost, justify="end", data_testid=f"{test_id}-cost"),
            data_testid=f"{test_id}-row",
        )

    headers = [first, *(["Provider"] if with_detail else [])]
    return rx.card(
        rx.vstack(
            rx.heading(title, size="3"),
            rx.table.root(
                rx.table.header(
                    rx.table.row(
                        *(rx.table.column_header_cell(h) for h in headers),
                        *(
                            rx.table.column_header_cell(h, justify="end")
                            for h in ("Calls", "Input tokens", "Output tokens", "Cost")
                        ),
                    )
                ),
                rx.table.body(
                    rx.foreach(rows, row),
                    rx.table.row(
                        rx.table.row_header_cell(rx.text.strong("Total")),
                        *([rx.table.cell("")] if with_detail else []),
                        rx.table.cell(rx.text.strong(UsageState.total_calls), justify="end"),
                        rx.table.cell(rx.text.strong(UsageState.total_input), justify="end"),
                        rx.table.cell(rx.text.strong(UsageState.total_output), justify="end"),
                        rx.table.cell(
                            rx.text.strong(UsageState.total_cost),
                            justify="end",
                            data_testid=f"{test_id}-total-cost",
                        ),
                        data_testid=f"{test_id}-total",
                    ),
                ),
                width="100%",
                variant="ghost",
                size="1",
            ),
            spacing="2",
            width="100%",
        ),
        width="100%",
        data_testid=test_id,
    )


def _download(label: str, href: rx.Var[str], test_id: str) -> rx.Component:
    """A link the browser follows itself (`reloadDocument`: not a router link)."""
    return rx.el.a(
        rx.badge(rx.icon("download", size=14), label, size="2", variant="soft", cursor="pointer"),
        href=href,
        download="",
        custom_attrs={"reloadDocument": True},
        style={"color": "inherit", "display": "inline-flex", "align_items": "center"},
        data_testid=test_id,
    )


def _downloads() -> rx.Component:
    return rx.hstack(
        rx.text("Export the range as CSV:", size="2", color_scheme="gray"),
        _download("Raw records", UsageState.raw_href, "usage-download-raw"),
        _download("Daily rollup", UsageState.rollup_href, "usage-download-rollup"),
        align="center",
        spacing="2",
        wrap="wrap",
    )


def _body() -> rx.Component:
    return rx.vstack(
        rx.text(
            UsageState.range_text, size="2", color_scheme="gray", data_testid="usage-range-text"
        ),
        _stats(),
        _unpriced_callout(),
        rx.cond(
            UsageState.calls > 0,
            rx.fragment(),
            rx.text("No model calls in this range.", size="2", color_scheme="gray"),
        ),
        _bar_chart("Cost per day (USD)", UsageState.cost_points, "usage-cost-chart"),
        _bar_chart("Tokens per day (input + output)", UsageState.token_points, "usage-token-chart"),
        _table("By model", "Model", UsageState.models, True, "usage-by-model"),
        _table("By agent", "Agent", UsageState.agents, False, "usage-by-agent"),
        _downloads(),
        rx.text(
            "Costs are at the prices in effect when each call was made; a call counts as soon "
            "as it ends. Raw records are kept at least 7 days, the daily rollup 180.",
            size="1",
            color_scheme="gray",
        ),
        spacing="4",
        width="100%",
    )


def _content() -> rx.Component:
    return app_page(
        page_header("Usage", SessionState.current_app_name),
        _controls(),
        rx.cond(UsageState.loaded, _body(), rx.center(rx.spinner(), width="100%", padding="32px")),
    )


def usage_page() -> rx.Component:
    return console_shell(_content, max_width="1040px")
