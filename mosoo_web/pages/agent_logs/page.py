"""`/apps/[app_id]/agents/[agent_id]/logs`: an Agent's runs, filtered by status, purpose and
time; the run picked replayed as its chat showed it, beside its Diagnostics (the phases and
their timing, the sandbox and driver, the frozen snapshot, and for a failure its error and
the events before it)."""

from __future__ import annotations

import reflex as rx
from reflex.vars import ObjectVar
from reflex_components_radix.themes.base import LiteralAccentColor

from mosoo_web.components.chat import transcript_item
from mosoo_web.components.layout import (
    app_page,
    back_link,
    console_shell,
    empty_note,
    empty_state,
    missing_card,
    side_by_side,
)
from mosoo_web.pages.agent_logs.state import (
    PURPOSE_FILTER_LABELS,
    RANGE_LABELS,
    STATUS_LABELS,
    AgentLogsState,
    Fact,
    OperationRow,
    PhaseRow,
    RunLogRow,
)
from mosoo_web.reflex_typing import cond_value, match_component
from mosoo_web.state.session import SessionState

State = AgentLogsState
OUTCOME_COLORS: dict[str, LiteralAccentColor] = {
    "done": "green",
    "refused": "amber",
    "failed": "red",
}
RUN_STATUS_COLORS: dict[str, LiteralAccentColor] = {
    "completed": "green",
    "failed": "red",
    "cancelled": "gray",
    "expired": "amber",
}


def _agent_href(suffix: str = "") -> rx.Var[str]:
    return "/apps/" + SessionState.current_app_id + "/agents/" + State.agent_id + suffix


def _filter(
    value: rx.Var[str], labels: dict[str, str], on_change: object, test_id: str
) -> rx.Component:
    return rx.select.root(
        rx.select.trigger(width="170px", data_testid=test_id),
        rx.select.content(*[rx.select.item(label, value=key) for key, label in labels.items()]),
        value=value,
        on_change=on_change,
    )


def _run_status(status: rx.Var[str]) -> rx.Component:
    return match_component(
        status,
        *[
            (name, rx.badge(name, color_scheme=color, variant="soft", data_testid="log-run-status"))
            for name, color in RUN_STATUS_COLORS.items()
        ],
        rx.badge(status, color_scheme="blue", variant="soft", data_testid="log-run-status"),
    )


def _run_row(row: ObjectVar[RunLogRow]) -> rx.Component:
    chosen = State.selected == row.id
    return rx.box(
        rx.vstack(
            rx.hstack(
                rx.text(row.title, size="2", weight="medium", trim="both", flex="1", min_width="0"),
                _run_status(row.status),
                width="100%",
                align="center",
            ),
            rx.text(
                row.when,
                " · ",
                row.purpose,
                " · ",
                row.model,
                rx.cond(
                    row.duration != "", rx.text(" · ", row.duration, as_="span"), rx.fragment()
                ),
                rx.cond(
                    row.error_code != "",
                    rx.text(" · ", row.error_code, as_="span", color_scheme="red"),
                    rx.fragment(),
                ),
                rx.cond(
                    row.usage != "",
                    rx.text(" · ", row.usage, as_="span", data_testid="log-run-usage"),
                    rx.fragment(),
                ),
                size="1",
                color_scheme="gray",
            ),
            spacing="1",
            width="100%",
        ),
        padding="10px 12px",
        border_radius="8px",
        cursor="pointer",
        background=cond_value(chosen, rx.color("iris", 3), "transparent"),
        _hover={"background": rx.color("gray", 3)},
        on_click=State.select(row.id),
        width="100%",
        data_testid="log-run",
    )


def _runs() -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.hstack(
                _filter(
                    State.status_filter, STATUS_LABELS, State.set_status_filter, "log-status-filter"
                ),
                _filter(
                    State.purpose_filter,
                    PURPOSE_FILTER_LABELS,
                    State.set_purpose_filter,
                    "log-purpose-filter",
                ),
                _filter(
                    State.range_filter, RANGE_LABELS, State.set_range_filter, "log-range-filter"
                ),
                wrap="wrap",
                spacing="2",
            ),
            rx.cond(
                State.rows.length() > 0,
                rx.vstack(rx.foreach(State.rows, _run_row), spacing="1", width="100%"),
                empty_state(
                    "scroll-text",
                    empty_note("No runs match. Chat in Preview or call the Agent from the API."),
                    test_id="logs-empty",
                ),
            ),
            spacing="3",
            width="100%",
        ),
        width="100%",
    )


def _operation(row: ObjectVar[OperationRow]) -> rx.Component:
    return rx.vstack(
        rx.hstack(
            rx.text(row.operation, size="2", weight="medium", data_testid="sandbox-operation-name"),
            match_component(
                row.outcome,
                *[
                    (
                        name,
                        rx.badge(
                            name,
                            color_scheme=color,
                            variant="soft",
                            data_testid="sandbox-operation-outcome",
                        ),
                    )
                    for name, color in OUTCOME_COLORS.items()
                ],
                rx.badge(row.outcome, variant="soft", data_testid="sandbox-operation-outcome"),
            ),
            rx.spacer(),
            rx.text(row.duration, size="1", font_family="monospace", color_scheme="gray"),
            rx.text(row.when, size="1", color_scheme="gray", title=row.at),
            align="center",
            spacing="2",
            width="100%",
        ),
        rx.cond(
            row.error != "",
            rx.text(
                row.error,
                size="1",
                color_scheme="red",
                overflow_wrap="anywhere",
                data_testid="sandbox-operation-error",
            ),
            rx.fragment(),
        ),
        spacing="1",
        width="100%",
        data_testid="sandbox-operation",
    )


def _operations() -> rx.Component:
    """An Assistant's sandbox operations (restart, hibernate, ...), newest first."""
    return rx.cond(
        State.is_pet,
        rx.card(
            rx.vstack(
                rx.heading("Sandbox operations", size="3"),
                rx.cond(
                    State.operations.length() > 0,
                    rx.vstack(rx.foreach(State.operations, _operation), spacing="2", width="100%"),
                    rx.text(
                        "None yet. Restart, hibernate or reset the sandbox from Preview.",
                        size="2",
                        color_scheme="gray",
                    ),
                ),
                spacing="3",
                width="100%",
            ),
            width="100%",
            data_testid="sandbox-operations",
        ),
        rx.fragment(),
    )


def _left() -> rx.Component:
    return rx.vstack(
        _runs(),
        _operations(),
        spacing="3",
        width=["100%", "100%", "380px"],
        flex_shrink="0",
    )


def _phase(row: ObjectVar[PhaseRow]) -> rx.Component:
    return rx.vstack(
        rx.hstack(
            rx.text(row.label, size="2", flex="1", data_testid="diagnostics-phase-label"),
            rx.text(
                row.duration,
                size="2",
                font_family="monospace",
                data_testid="diagnostics-phase-time",
            ),
            width="100%",
        ),
        rx.box(
            rx.box(
                height="4px", width=row.share, background=rx.color("iris", 9), border_radius="2px"
            ),
            width="100%",
            background=rx.color("gray", 4),
            border_radius="2px",
        ),
        rx.cond(
            row.detail != "", rx.text(row.detail, size="1", color_scheme="gray"), rx.fragment()
        ),
        spacing="1",
        width="100%",
        data_testid="diagnostics-phase",
    )


def _fact(fact: ObjectVar[Fact]) -> rx.Component:
    return rx.hstack(
        rx.text(fact.label, size="1", color_scheme="gray", width="96px", flex_shrink="0"),
        rx.text(fact.value, size="1", font_family="monospace", word_break="break-all"),
        width="100%",
        data_testid="diagnostics-fact",
    )


def _pre(text: rx.Var[str], test_id: str) -> rx.Component:
    return rx.code_block(text, language="json", wrap_long_lines=True, data_testid=test_id)


def _diagnostics() -> rx.Component:
    found = State
    return rx.card(
        rx.vstack(
            rx.hstack(
                rx.heading("Diagnostics", size="3"),
                rx.spacer(),
                rx.text(
                    found.total, size="2", font_family="monospace", data_testid="diagnostics-total"
                ),
                width="100%",
            ),
            rx.cond(
                found.error != "",
                rx.callout(
                    found.error,
                    icon="triangle-alert",
                    color_scheme="red",
                    size="1",
                    data_testid="diagnostics-error",
                ),
                rx.fragment(),
            ),
            rx.vstack(rx.foreach(found.phases, _phase), spacing="2", width="100%"),
            rx.vstack(rx.foreach(found.facts, _fact), spacing="1", width="100%"),
            rx.cond(
                found.events_before != "",
                rx.vstack(
                    rx.text("Events before the failure", size="2", weight="medium"),
                    _pre(found.events_before, "diagnostics-events-before"),
                    width="100%",
                ),
                rx.fragment(),
            ),
            rx.cond(
                found.setup_log != "",
                rx.vstack(
                    rx.text("Setup script output", size="2", weight="medium"),
                    rx.code_block(
                        found.setup_log,
                        language="log",
                        wrap_long_lines=True,
                        data_testid="diagnostics-setup-log",
                    ),
                    width="100%",
                ),
                rx.fragment(),
            ),
            rx.accordion.root(
                rx.accordion.item(
                    header="Snapshot (agent, environment, skills, MCP servers, tools)",
                    content=_pre(found.snapshot, "diagnostics-snapshot"),
                    value="snapshot",
                ),
                collapsible=True,
                type="single",
                variant="ghost",
                width="100%",
            ),
            spacing="3",
            width="100%",
        ),
        width="100%",
        data_testid="diagnostics",
    )


def _replay() -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.heading("Replay", size="3"),
            rx.vstack(
                rx.foreach(
                    State.replay,
                    lambda item: transcript_item(
                        item, State.answered_requests, State.allow_once, State.reject
                    ),
                ),
                spacing="4",
                width="100%",
            ),
            spacing="3",
            width="100%",
        ),
        width="100%",
        data_testid="log-replay",
    )


def _detail() -> rx.Component:
    return rx.cond(
        State.selected != "",
        rx.vstack(_replay(), _diagnostics(), spacing="3", width="100%", min_width="0", flex="1"),
        rx.fragment(),
    )


def _content() -> rx.Component:
    return app_page(
        rx.hstack(
            back_link("Agents", "/apps/" + SessionState.current_app_id + "/agents"),
            rx.text("/", color_scheme="gray", size="2"),
            rx.link(State.agent_name, href=_agent_href(), size="5", weight="bold"),
            rx.text("/", color_scheme="gray", size="2"),
            rx.heading("Logs", size="5", weight="bold", data_testid="page-title"),
            align="center",
            spacing="2",
            width="100%",
            margin_bottom="16px",
        ),
        rx.cond(State.loaded, side_by_side(_left(), _detail()), rx.fragment()),
        spacing="0",
        item_missing=State.missing,
        item_missing_card=missing_card(
            "Agent not found",
            "Back to Agents",
            "/apps/" + SessionState.current_app_id + "/agents",
            "agent-not-found",
        ),
    )


def agent_logs_page() -> rx.Component:
    return console_shell(_content, max_width="1440px")
