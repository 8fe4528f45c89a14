"""The Preview chat: the status pill, the live transcript of the Preview thread (or what to
do before the first message), and the composer with attachments, Stop and Send."""

from __future__ import annotations

import reflex as rx
from reflex_components_radix.themes.base import LiteralAccentColor

from mosoo_web.components.chat import chat_card, thread_transcript
from mosoo_web.components.composer import chat_composer
from mosoo_web.components.icons import icon_tile
from mosoo_web.pages.preview.state import PreviewState
from mosoo_web.reflex_typing import cond_value, match_component

STATUS_COLORS: dict[str, LiteralAccentColor] = {
    "Setup required": "amber",
    "Ready": "green",
    "Working": "blue",
    "Needs approval": "orange",
    "Stopped": "gray",
}


def _status_pill() -> rx.Component:
    return match_component(
        PreviewState.status,
        *[
            (
                label,
                rx.badge(
                    rx.cond(
                        PreviewState.status == "Working",
                        rx.spinner(size="1"),
                        rx.box(
                            width="7px",
                            height="7px",
                            border_radius="999px",
                            background=rx.color(color, 9),
                        ),
                    ),
                    label,
                    color_scheme=color,
                    variant="soft",
                    radius="full",
                    size="2",
                    data_testid="preview-status",
                ),
            )
            for label, color in STATUS_COLORS.items()
        ],
        rx.fragment(),
    )


def _empty_chat() -> rx.Component:
    return rx.center(
        rx.cond(
            PreviewState.ready,
            rx.vstack(
                icon_tile("message-circle", 26, "12px"),
                rx.text("Try " + PreviewState.agent_name, size="4", weight="bold"),
                rx.text(
                    "Send a message to test your changes. Tool calls, approvals and usage show up here as they happen.",
                    size="2",
                    color_scheme="gray",
                    text_align="center",
                    max_width="360px",
                ),
                align="center",
                spacing="2",
            ),
            rx.vstack(
                icon_tile("settings-2", 26, "12px", color="amber"),
                rx.text("Finish the setup to start chatting", size="4", weight="bold"),
                rx.vstack(
                    rx.foreach(
                        PreviewState.blockers,
                        lambda blocker: rx.text(
                            rx.text(blocker.label, weight="bold", as_="span"),
                            " · ",
                            blocker.message,
                            size="2",
                            color_scheme="gray",
                        ),
                    ),
                    align="center",
                    spacing="1",
                ),
                align="center",
                spacing="2",
            ),
        ),
        height="100%",
        min_height="320px",
        data_testid="chat-empty",
    )


def _composer() -> rx.Component:
    return chat_composer(
        PreviewState,
        upload_id="preview-attachments",
        placeholder=cond_value(
            PreviewState.ready,
            "Message " + PreviewState.agent_name + "…  (Enter to send, Shift+Enter for a new line)",
            "Finish the setup on the left to send messages.",
        ),
        can_send=PreviewState.can_send,
        can_stop=PreviewState.chat_can_stop,
        enabled=PreviewState.ready,
        on_submit=PreviewState.send,
        footer_note=rx.cond(
            PreviewState.usage_total != "",
            rx.text("This chat: ", PreviewState.usage_total, size="1", color_scheme="gray"),
            rx.fragment(),
        ),
    )


def chat_panel() -> rx.Component:
    return chat_card(
        rx.hstack(
            rx.text("Preview", size="3", weight="bold"),
            _status_pill(),
            rx.spacer(),
            rx.button(
                rx.icon("message-square-plus", size=14),
                "New chat",
                size="1",
                variant="soft",
                color_scheme="gray",
                on_click=PreviewState.new_chat,
                data_testid="chat-new",
            ),
            align="center",
            width="100%",
            padding="12px 16px",
            border_bottom=f"1px solid {rx.color('gray', 4)}",
        ),
        rx.cond(
            PreviewState.thread_missing,
            rx.callout(
                "That thread was not found; this is a new chat.",
                icon="info",
                size="1",
                margin="12px 16px 0 16px",
            ),
            rx.fragment(),
        ),
        thread_transcript(PreviewState, _empty_chat()),
        _composer(),
        height="calc(100vh - 140px)",
        min_height="520px",
    )
