"""The Preview page: the Agent's name with the publishing controls, then the form on the
left and the chat on the right (stacked on narrow screens)."""

from __future__ import annotations

import reflex as rx

from mosoo_web.components.layout import (
    app_page,
    back_link,
    console_shell,
    missing_card,
    side_by_side,
)
from mosoo_web.components.versions import publish_controls
from mosoo_web.pages.preview.chat import chat_panel
from mosoo_web.pages.preview.form import agent_form
from mosoo_web.pages.preview.state import PreviewState
from mosoo_web.state.session import SessionState


def _header() -> rx.Component:
    return rx.hstack(
        back_link("Agents", "/apps/" + SessionState.current_app_id + "/agents"),
        rx.text("/", color_scheme="gray", size="2"),
        rx.heading(PreviewState.agent_name, size="5", weight="bold", data_testid="page-title"),
        rx.badge(PreviewState.runtime_label, variant="soft", color_scheme="gray"),
        rx.link(
            rx.button(rx.icon("scroll-text", size=14), "Logs", size="1", variant="soft"),
            href="/apps/"
            + SessionState.current_app_id
            + "/agents/"
            + PreviewState.current_agent_id
            + "/logs",
            data_testid="agent-logs-link",
        ),
        publish_controls(blocked=~PreviewState.ready),
        align="center",
        spacing="2",
        width="100%",
        margin_bottom="16px",
    )


def _content() -> rx.Component:
    return app_page(
        _header(),
        side_by_side(
            rx.box(
                agent_form(),
                width=["100%", "100%", "400px"],
                min_width=["0", "0", "360px"],
                flex_shrink="0",
                height=["auto", "auto", "calc(100vh - 140px)"],
                min_height=["0", "0", "520px"],
                overflow_y="auto",
                padding="16px",
                border=f"1px solid {rx.color('gray', 5)}",
                border_radius="12px",
                background=rx.color("gray", 1),
                data_testid="agent-form",
            ),
            chat_panel(),
        ),
        spacing="0",
        item_missing=PreviewState.agent_missing,
        item_missing_card=missing_card(
            "Agent not found",
            "Back to Agents",
            "/apps/" + SessionState.current_app_id + "/agents",
            "agent-not-found",
        ),
    )


def preview_page() -> rx.Component:
    return console_shell(_content, max_width="1440px")
