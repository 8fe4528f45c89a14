"""How a thread's purpose and session status read, on the list and on the thread itself."""

from __future__ import annotations

import reflex as rx

PURPOSE_LABELS = {"preview": "Preview", "console": "Console", "api": "API", "channel": "Channel"}
STATUS_COLORS = {"idle": "gray", "running": "blue", "rescheduling": "amber", "terminated": "red"}


def status_badge(status: rx.Var, test_id: str = "thread-status") -> rx.Component:
    return rx.match(
        status,
        *[
            (name, rx.badge(name, color_scheme=color, variant="soft", data_testid=test_id))  # type: ignore[arg-type]
            for name, color in STATUS_COLORS.items()
        ],
        rx.badge(status, variant="soft", data_testid=test_id),
    )
