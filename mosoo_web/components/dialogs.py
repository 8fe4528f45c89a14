"""Dialogs: one that asks before something irreversible (`confirm_dialog`), one that holds
a form (`form_dialog`), and the plain one under it (`dialog`).

A dialog opens from its `trigger` and closes itself, unless the page's state holds it
(`open` and `on_open_change`), for work that takes a while: the state closes it when the
work is done (`busy` keeps Cancel disabled meanwhile). A state-held confirm dialog needs no
trigger: the page opens it."""

from __future__ import annotations

from typing import Any

import reflex as rx
from reflex.event import EventType
from reflex_components_radix.themes.base import LiteralSpacing
from reflex_components_radix.themes.components.button import LiteralButtonSize


def _controlled(
    open: rx.Var[bool] | None, on_open_change: EventType[bool] | None
) -> dict[str, Any]:
    if open is None:
        return {}
    return {"open": open, "on_open_change": on_open_change}


def _width(max_width: str | None) -> dict[str, Any]:
    return {"max_width": max_width} if max_width else {}


def confirm_dialog(
    title: rx.Var[str] | str,
    *description: rx.Component | rx.Var[str] | str,
    confirm: str,
    on_confirm: EventType[()],
    confirm_test_id: str = "",
    trigger: rx.Component | None = None,
    open: rx.Var[bool] | None = None,
    on_open_change: EventType[bool] | None = None,
    busy: rx.Var[bool] | None = None,
    max_width: str | None = None,
    description_test_id: str = "",
) -> rx.Component:
    """ "Delete this?" with Cancel and a red `confirm` button. Opened by `trigger`, confirming
    closes it; held open by the state (`open`), the state closes it when the work is done."""
    confirm_props: dict[str, Any] = {"color_scheme": "red", "on_click": on_confirm}
    cancel_props: dict[str, Any] = {"variant": "soft", "color_scheme": "gray"}
    if busy is not None:
        confirm_props["loading"] = busy
        cancel_props["disabled"] = busy
    if confirm_test_id:
        confirm_props["data_testid"] = confirm_test_id
    confirm_button = rx.button(confirm, **confirm_props)
    description_props: dict[str, Any] = (
        {"data_testid": description_test_id} if description_test_id else {}
    )
    opener = [rx.alert_dialog.trigger(trigger)] if trigger is not None else []
    return rx.alert_dialog.root(
        *opener,
        rx.alert_dialog.content(
            rx.alert_dialog.title(title),
            rx.alert_dialog.description(*description, size="2", **description_props),
            rx.hstack(
                rx.alert_dialog.cancel(rx.button("Cancel", **cancel_props)),
                rx.alert_dialog.action(confirm_button) if trigger is not None else confirm_button,
                justify="end",
                spacing="3",
                margin_top="16px",
            ),
            **_width(max_width),
        ),
        **_controlled(open, on_open_change),
    )


def trash_button(
    label: str, test_id: str, size: LiteralButtonSize = "1", **props: Any
) -> rx.Component:
    """The red button that asks for a deletion (a `confirm_dialog` confirms it)."""
    return rx.button(
        rx.icon("trash-2", size=14),
        label,
        size=size,
        variant="soft",
        color_scheme="red",
        data_testid=test_id,
        **props,
    )


def dialog_buttons(*buttons: rx.Component, cancel: str = "Cancel") -> rx.Component:
    """The dialog's closing row: `cancel` (closes it) and then `buttons`, on the right."""
    return rx.hstack(
        rx.dialog.close(rx.button(cancel, variant="soft", color_scheme="gray", type="button")),
        *buttons,
        justify="end",
        spacing="3",
        width="100%",
    )


def dialog(
    trigger: rx.Component,
    title: str,
    description: rx.Var[str] | str,
    *body: rx.Component,
    open: rx.Var[bool] | None = None,
    on_open_change: EventType[bool] | None = None,
    max_width: str = "520px",
) -> rx.Component:
    """A dialog opened by `trigger`: its title, one line on what it does, then `body`."""
    return rx.dialog.root(
        rx.dialog.trigger(trigger),
        rx.dialog.content(
            rx.dialog.title(title),
            rx.dialog.description(description, size="2", color_scheme="gray", margin_bottom="16px"),
            *body,
            max_width=max_width,
        ),
        **_controlled(open, on_open_change),
    )


def form_dialog(
    trigger: rx.Component,
    title: str,
    description: rx.Var[str] | str,
    *fields: rx.Component,
    submit: rx.Component,
    on_submit: EventType[()] | EventType[dict[str, Any]],
    open: rx.Var[bool] | None = None,
    on_open_change: EventType[bool] | None = None,
    reset_on_submit: bool = False,
    spacing: LiteralSpacing = "4",
    max_width: str = "520px",
) -> rx.Component:
    """A dialog holding a form: `fields`, then Cancel and the `submit` button."""
    return dialog(
        trigger,
        title,
        description,
        rx.form(
            rx.vstack(*fields, dialog_buttons(submit), spacing=spacing, width="100%"),
            on_submit=on_submit,
            reset_on_submit=reset_on_submit,
            width="100%",
        ),
        open=open,
        on_open_change=on_open_change,
        max_width=max_width,
    )
