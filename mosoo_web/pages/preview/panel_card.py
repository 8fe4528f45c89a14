"""The card an Agent's Sandbox or Warm pool panel sits in: its title, a status badge, Refresh,
then what it shows; read again each time it mounts (the form re-mounts on each load)."""

from __future__ import annotations

import reflex as rx
from reflex.event import EventCallback
from reflex_components_radix.themes.base import LiteralAccentColor

from mosoo_web.reflex_typing import match_component


def status_badge(
    status: rx.Var[str], labels: dict[str, tuple[str, LiteralAccentColor]], test_id: str
) -> rx.Component:
    """The label and colour of `status`; "…" until it is known."""
    return match_component(
        status,
        *[
            (key, rx.badge(label, color_scheme=color, variant="soft", data_testid=test_id))
            for key, (label, color) in labels.items()
        ],
        rx.badge("…", color_scheme="gray", variant="soft", data_testid=test_id),
    )


def panel_card(
    title: str,
    badge: rx.Component,
    *body: rx.Component,
    refresh: EventCallback[()],
    loading: rx.Var[bool],
    refresh_label: str,
    test_id: str,
) -> rx.Component:
    """`test_id` names the card; its Refresh button is `<test_id without -panel>-refresh`."""
    return rx.card(
        rx.vstack(
            rx.hstack(
                rx.text(title, size="2", weight="bold"),
                badge,
                rx.spacer(),
                rx.icon_button(
                    rx.icon("refresh-ccw", size=13),
                    size="1",
                    variant="ghost",
                    type="button",
                    loading=loading,
                    on_click=refresh,
                    aria_label=refresh_label,
                    data_testid=test_id.removesuffix("-panel") + "-refresh",
                ),
                align="center",
                spacing="2",
                width="100%",
            ),
            *body,
            spacing="2",
            width="100%",
        ),
        on_mount=refresh,
        width="100%",
        data_testid=test_id,
    )


def error_text(error: rx.Var[str]) -> rx.Component:
    return rx.cond(error != "", rx.text(error, size="1", color_scheme="red"), rx.fragment())
