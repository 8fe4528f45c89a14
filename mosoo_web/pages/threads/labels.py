"""How a thread's purpose and session status read, on the list and on the thread itself."""

from __future__ import annotations

import reflex as rx
from reflex_components_radix.themes.base import LiteralAccentColor

from mosoo_web.reflex_typing import match_component

PURPOSE_LABELS = {"preview": "Preview", "console": "Console", "api": "API", "channel": "Channel"}
STATUS_COLORS: dict[str, LiteralAccentColor] = {
    "idle": "gray",
    "running": "blue",
    "rescheduling": "amber",
    "terminated": "red",
}


def status_badge(status: rx.Var[str], test_id: str = "thread-status") -> rx.Component:
    return match_component(
        status,
        *[
            (name, rx.badge(name, color_scheme=color, variant="soft", data_testid=test_id))
            for name, color in STATUS_COLORS.items()
        ],
        rx.badge(status, variant="soft", data_testid=test_id),
    )
