"""What stands in the Agent's way, at the top of the Preview form: the readiness blockers
and warnings (each with a "Fix" button that goes to its field), and the changes a running
Assistant (Pet) sandbox does not have yet, with Apply."""

from __future__ import annotations

from collections.abc import Sequence

import reflex as rx
from reflex.vars import ArrayVar, ObjectVar
from reflex_components_radix.themes.base import LiteralAccentColor

from mosoo_web.components.forms import error_text
from mosoo_web.pages.preview.services import BlockerRow
from mosoo_web.pages.preview.state import PreviewState


def _readiness_row(row: ObjectVar[BlockerRow], test_id: str) -> rx.Component:
    return rx.hstack(
        rx.text(row.label, size="2", weight="medium", min_width="96px", flex_shrink="0"),
        rx.text(row.message, size="2", flex="1", min_width="0", overflow_wrap="anywhere"),
        rx.cond(
            row.target != "",
            rx.button(
                "Fix",
                size="1",
                variant="soft",
                type="button",
                on_click=PreviewState.focus_field(row.target),
                data_testid="readiness-fix",
            ),
            rx.fragment(),
        ),
        spacing="2",
        align="center",
        width="100%",
        data_testid=test_id,
        data_code=row.code,
    )


def _readiness_callout(
    rows: ArrayVar[Sequence[BlockerRow]],
    title: str,
    icon: str,
    color: LiteralAccentColor,
    row_test_id: str,
    test_id: str,
) -> rx.Component:
    return rx.cond(
        rows.length() > 0,
        rx.callout.root(
            rx.callout.icon(rx.icon(icon, size=16)),
            rx.vstack(
                rx.text(title, size="2", weight="bold"),
                rx.foreach(rows, lambda row: _readiness_row(row, row_test_id)),
                spacing="1",
                width="100%",
            ),
            color_scheme=color,
            variant="surface",
            width="100%",
            data_testid=test_id,
        ),
        rx.fragment(),
    )


def readiness_callouts() -> rx.Component:
    """What stops the agent (blockers), then what a run goes without (warnings)."""
    return rx.fragment(
        _readiness_callout(
            PreviewState.blockers,
            "Before this agent can run",
            "circle-alert",
            "amber",
            "readiness-blocker",
            "readiness-blockers",
        ),
        _readiness_callout(
            PreviewState.warnings,
            "Runs go without",
            "info",
            "gray",
            "readiness-warning",
            "readiness-warnings",
        ),
    )


def pending_changes() -> rx.Component:
    """Changes the running Pet sandbox does not have yet, and Apply."""
    return rx.cond(
        PreviewState.has_pet_sandbox & (PreviewState.pending_changes.length() > 0),
        rx.callout.root(
            rx.callout.icon(rx.icon("refresh-cw", size=16)),
            rx.vstack(
                rx.text(
                    "Pending: ",
                    rx.text(PreviewState.pending_changes.join(", "), as_="span", weight="bold"),
                    size="2",
                    data_testid="pending-fields",
                ),
                rx.text(
                    "The Assistant's sandbox was built before these changes. Apply saves /workspace, "
                    "then the next message starts a fresh sandbox with it.",
                    size="1",
                ),
                error_text(PreviewState.apply_error, "apply-error", size="1"),
                rx.button(
                    rx.icon("refresh-cw", size=13),
                    "Apply",
                    size="1",
                    type="button",
                    loading=PreviewState.applying,
                    disabled=PreviewState.run_active,
                    on_click=PreviewState.apply_pending,
                    data_testid="agent-apply",
                ),
                spacing="1",
                align="start",
            ),
            color_scheme="blue",
            variant="surface",
            width="100%",
            data_testid="pending-changes",
        ),
        rx.fragment(),
    )
