"""The Sandbox panel on an Assistant's Preview: its one sandbox's status (Running, Stopped,
Hibernated, No sandbox), uptime, image, CPU and memory, and Restart, Recreate, Hibernate,
Wake and Reset (confirmed by typing the Agent's name); while it runs, the owner's Terminal."""

from __future__ import annotations

from typing import Any

import reflex as rx
from reflex_components_radix.themes.base import LiteralAccentColor

from mosoo_web.components.dialogs import dialog, dialog_buttons
from mosoo_web.components.terminal import terminal
from mosoo_web.pages.preview.panel_card import error_text, panel_card, status_badge
from mosoo_web.pages.preview.sandbox_state import SandboxPanelState
from mosoo_web.pages.preview.state import PreviewState

State = SandboxPanelState
STATES: dict[str, tuple[str, LiteralAccentColor]] = {
    "running": ("Running", "green"),
    "stopped": ("Stopped", "amber"),
    "hibernated": ("Hibernated", "blue"),
    "none": ("No sandbox", "gray"),
}
# (operation, label, icon, what it does: the button's tooltip)
ACTIONS = (
    ("restart", "Restart", "rotate-cw", "Restart the driver; the sandbox and its files stay."),
    (
        "recreate",
        "Recreate",
        "refresh-cw",
        "Save /workspace, then build a new sandbox from the current profile with it.",
    ),
    ("hibernate", "Hibernate", "moon", "Save /workspace and remove the sandbox."),
    ("wake", "Wake", "sun", "Build a hibernated sandbox again, its workspace restored."),
)


def _figure(label: str, value: rx.Var[str], test_id: str, **props: Any) -> rx.Component:
    return rx.cond(
        value != "",
        rx.hstack(
            rx.text(label, size="1", color_scheme="gray", width="64px", flex_shrink="0"),
            rx.text(value, size="1", font_family="monospace", data_testid=test_id, **props),
            spacing="2",
            width="100%",
        ),
        rx.fragment(),
    )


def _action(operation: str, label: str, icon: str, hint: str) -> rx.Component:
    return rx.tooltip(
        rx.button(
            rx.icon(icon, size=13),
            label,
            size="1",
            variant="soft",
            type="button",
            loading=State.busy == operation,
            disabled=(State.busy != "") | PreviewState.run_active,
            on_click=State.operate(operation),
            data_testid=f"sandbox-{operation}",
        ),
        content=hint,
    )


def _reset_dialog() -> rx.Component:
    return dialog(
        rx.button(
            rx.icon("eraser", size=13),
            "Reset",
            size="1",
            variant="soft",
            color_scheme="red",
            type="button",
            disabled=(State.busy != "") | PreviewState.run_active,
            data_testid="sandbox-reset",
        ),
        "Reset the sandbox",
        "Wipes the sandbox and its saved workspace (memory, every thread's files). The "
        "configuration, threads, usage and logs stay. This cannot be undone.",
        rx.vstack(
            rx.text(
                "Type the Agent's name, ",
                rx.code(PreviewState.agent_name),
                ", to confirm.",
                size="2",
            ),
            rx.input(
                value=State.confirm_text,
                on_change=State.set_confirm_text,
                placeholder=PreviewState.agent_name,
                width="100%",
                data_testid="sandbox-reset-confirm-input",
            ),
            dialog_buttons(
                rx.button(
                    "Reset",
                    color_scheme="red",
                    type="button",
                    loading=State.busy == "reset",
                    disabled=State.confirm_text != PreviewState.agent_name,
                    on_click=State.operate("reset"),
                    data_testid="sandbox-reset-confirm",
                )
            ),
            spacing="3",
            width="100%",
        ),
        open=State.reset_open,
        on_open_change=State.set_reset_open,
    )


def _terminal_dialog() -> rx.Component:
    """A shell in the running sandbox; closing the dialog (or the page) ends it."""
    return rx.cond(
        State.terminal_enabled & (State.sandbox_state == "running"),
        dialog(
            rx.button(
                rx.icon("square-terminal", size=13),
                "Terminal",
                size="1",
                variant="soft",
                type="button",
                data_testid="sandbox-terminal",
            ),
            "Terminal",
            "A shell in the sandbox as the agent's user, in /workspace, with its limits and "
            "network. Closing this ends the shell and everything it started.",
            terminal(
                f"/api/terminal/{PreviewState.current_agent_id}",
                width="100%",
                height="60vh",
                background="#000",
                padding="4px",
                border_radius="6px",
                data_testid="terminal",
            ),
            rx.box(dialog_buttons(cancel="Close"), margin_top="12px"),
            open=State.terminal_open,
            on_open_change=State.set_terminal_open,
            max_width="min(1100px, 95vw)",
        ),
        rx.fragment(),
    )


def sandbox_panel() -> rx.Component:
    """Shown for an Assistant only; sampled when it mounts (the form re-mounts on each load)."""
    return rx.cond(
        PreviewState.kind == "pet",
        panel_card(
            "Sandbox",
            status_badge(State.sandbox_state, STATES, "sandbox-status"),
            _figure("Uptime", State.uptime, "sandbox-uptime"),
            _figure("Image", State.image, "sandbox-image", title=State.image_full),
            _figure("CPU", State.cpu, "sandbox-cpu"),
            _figure("Memory", State.memory, "sandbox-memory"),
            error_text(State.status_error),
            rx.hstack(
                *[_action(*action) for action in ACTIONS],
                _reset_dialog(),
                _terminal_dialog(),
                spacing="2",
                wrap="wrap",
            ),
            refresh=State.refresh,
            loading=State.loading,
            refresh_label="Refresh the sandbox status",
            test_id="sandbox-panel",
        ),
        rx.fragment(),
    )
