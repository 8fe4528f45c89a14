"""Form pieces every page uses: an error under a field, a labelled field, a one-field form,
a choice between a few described options (`choice_cards`) and an editor's save bar."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import reflex as rx
from reflex.event import EventType
from reflex_base.breakpoints import Breakpoints
from reflex_components_radix.themes.base import LiteralSpacing
from reflex_components_radix.themes.typography.base import LiteralTextSize

from mosoo_web.reflex_typing import cond_value


def error_text(
    message: rx.Var[str], test_id: str | None = None, size: LiteralTextSize = "2"
) -> rx.Component:
    """`message` in red, or nothing while it is empty."""
    test_props: dict[str, Any] = {"data_testid": test_id} if test_id else {}
    return rx.cond(
        message != "", rx.text(message, color_scheme="red", size=size, **test_props), rx.fragment()
    )


def save_bar(
    error: rx.Var[str],
    *,
    is_new: rx.Var[bool],
    create_label: str,
    saving: rx.Var[bool],
    test_id: str,
) -> rx.Component:
    """An editor's last row: the form's own error (`<test_id>-error`) on the left, and its
    submit button on the right, `create_label` for a new item and Save for an existing one."""
    return rx.hstack(
        error_text(error, f"{test_id}-error"),
        rx.spacer(),
        rx.button(
            rx.icon("save", size=16),
            cond_value(is_new, create_label, "Save"),
            type="submit",
            size="3",
            loading=saving,
            data_testid=test_id,
        ),
        align="center",
        width="100%",
    )


def field_error(message: rx.Var[str]) -> rx.Component:
    return error_text(message, "field-error")


def labelled(
    label: str,
    control: rx.Component,
    *,
    error: rx.Var[str] | None = None,
    test_id: str = "",
    hint: rx.Component | None = None,
    error_size: LiteralTextSize = "2",
    **props: Any,
) -> rx.Component:
    """A label over its control, an optional hint, and the field's error (`<test_id>-error`)."""
    return rx.vstack(
        rx.text(label, size="2", weight="medium", as_="label"),
        control,
        hint or rx.fragment(),
        error_text(error, f"{test_id}-error", error_size) if error is not None else rx.fragment(),
        spacing="1",
        width="100%",
        **props,
    )


def inline_form(
    label: str,
    control: rx.Component,
    button: rx.Component,
    error: rx.Var[str],
    *,
    on_submit: EventType[()] | EventType[dict[str, Any]],
    spacing: LiteralSpacing = "2",
    reset_on_submit: bool = False,
    **props: Any,
) -> rx.Component:
    """One field and its button on a line, the label above and a clear error below."""
    return rx.form(
        rx.vstack(
            rx.text(label, size="2", weight="medium", as_="label"),
            rx.hstack(control, button, width="100%"),
            field_error(error),
            width="100%",
            spacing=spacing,
        ),
        on_submit=on_submit,
        reset_on_submit=reset_on_submit,
        width="100%",
        **props,
    )


def name_form(label: str, value: rx.Var[str], state: Any, test_id: str) -> rx.Component:
    """The form that renames something: `state` has the `rename` handler, `error` and `saving`."""
    return inline_form(
        label,
        rx.input(
            name="name",
            default_value=value,
            key=value,
            max_length=200,
            width="100%",
            size="3",
            data_testid=f"{test_id}-input",
        ),
        rx.button(
            "Save", type="submit", size="3", loading=state.saving, data_testid=f"{test_id}-submit"
        ),
        state.error,
        on_submit=state.rename,
    )


def choice_cards(
    choices: Sequence[tuple[str, str, str]],
    value: rx.Var[str],
    on_change: EventType[str],
    test_prefix: str,
    columns: Literal["1", "2", "3"] | Breakpoints[str, str] = "2",
) -> rx.Component:
    """One radio card per `(value, label, description)`, the label in bold over its
    description; a card's test id is `<test_prefix>-<value>`."""
    return rx.radio_cards.root(
        *[
            rx.radio_cards.item(
                rx.vstack(
                    rx.text(label, size="2", weight="bold"),
                    rx.text(description, size="1", color_scheme="gray"),
                    spacing="1",
                    align="start",
                ),
                value=choice,
                justify_content="flex-start",
                align_items="start",
                data_testid=f"{test_prefix}-{choice}",
            )
            for choice, label, description in choices
        ],
        value=value,
        on_value_change=on_change,
        columns=columns,
        size="1",
        width="100%",
    )
