"""The chat composer every thread view shares: the message box, attachments as removable
chips (uploaded as soon as they are chosen, sent as `file_ids` with the message), Stop and
Send. The page's state mixes in `ThreadChat`, which holds the attachment handlers."""

from __future__ import annotations

from typing import Any

import reflex as rx
from reflex.event import EventType
from reflex.vars import ArrayVar, ObjectVar

from mosoo_core.files import MAX_FILE_BYTES
from mosoo_web.components.forms import error_text
from mosoo_web.state.thread_chat import AttachmentChip, ThreadChat

MAX_FILES_PER_PICK = 20


def _chip(state: type[ThreadChat], chip: ObjectVar[AttachmentChip]) -> rx.Component:
    return rx.badge(
        rx.icon("paperclip", size=12),
        rx.text(chip.name, max_width="220px", truncate=True, as_="span"),
        rx.text(chip.size_text, color=rx.color("gray", 10), as_="span"),
        rx.icon_button(
            rx.icon("x", size=12),
            size="1",
            variant="ghost",
            color_scheme="gray",
            type="button",
            aria_label="Remove " + chip.name.to(str),
            on_click=state.remove_attachment(chip.id),
            data_testid="attachment-remove",
        ),
        variant="surface",
        color_scheme="gray",
        radius="full",
        size="2",
        data_testid="attachment-chip",
        data_name=chip.name,
    )


def _rejected_names(rejected: Any) -> Any:
    """The refused files' names, picked out in the browser: the rejections hold File objects,
    which do not travel to the server."""
    records = rejected.to(ArrayVar, list[dict[str, Any]])
    return records.map(
        lambda record: record.to(ObjectVar, dict[str, dict[str, Any]])["file"].to(
            ObjectVar, dict[str, Any]
        )["path"]
    )


def _attach_button(
    state: type[ThreadChat], upload_id: str, disabled: rx.Var[bool] | bool
) -> rx.Component:
    return rx.upload.root(
        rx.button(
            rx.icon("paperclip", size=14),
            "Attach",
            type="button",
            size="2",
            variant="soft",
            color_scheme="gray",
            disabled=disabled,
            data_testid="chat-attach",
        ),
        id=upload_id,
        multiple=True,
        max_files=MAX_FILES_PER_PICK,
        max_size=MAX_FILE_BYTES,
        no_drag=True,
        disabled=disabled,
        on_drop=state.attach_files,
        on_drop_rejected=lambda rejected: state.reject_files(_rejected_names(rejected)),
        border="none",
        padding="0",
        data_testid="chat-attach-upload",
    )


def chat_composer(
    state: type[ThreadChat],
    *,
    upload_id: str,
    placeholder: rx.Var[str] | str,
    can_send: rx.Var[bool],
    enabled: rx.Var[bool] | bool = True,
    on_submit: EventType[dict[str, Any]],
    footer_note: rx.Component | None = None,
    can_stop: rx.Var[bool] | bool = True,
) -> rx.Component:
    """`state` is the page's ThreadChat state class; `on_submit` receives the form with
    `message` and sends `state.attachments` with it. `can_stop`: whether the runtime serving
    the chat can cancel a run (Stop is not offered when it cannot)."""
    disabled = ~enabled if isinstance(enabled, rx.Var) else not enabled
    return rx.vstack(
        error_text(state.composer_error, "chat-error", size="1"),
        rx.form(
            rx.box(
                rx.cond(
                    state.attachments.length() > 0,
                    rx.flex(
                        rx.foreach(state.attachments, lambda chip: _chip(state, chip)),
                        wrap="wrap",
                        gap="6px",
                        padding_bottom="8px",
                        data_testid="attachment-chips",
                    ),
                    rx.fragment(),
                ),
                rx.text_area(
                    name="message",
                    placeholder=placeholder,
                    enter_key_submit=True,
                    # Kept on a refused send; cleared (re-mounted) once the message is stored.
                    key=state.composer_version,
                    rows="3",
                    resize="none",
                    variant="soft",
                    width="100%",
                    disabled=disabled,
                    data_testid="chat-input",
                ),
                error_text(state.attach_error, "attach-error", size="1"),
                rx.hstack(
                    _attach_button(state, upload_id, disabled),
                    footer_note or rx.fragment(),
                    rx.spacer(),
                    rx.cond(
                        state.run_active & can_stop,
                        rx.button(
                            rx.icon("square", size=13),
                            "Stop",
                            type="button",
                            size="2",
                            variant="soft",
                            color_scheme="red",
                            on_click=state.stop,
                            data_testid="chat-stop",
                        ),
                        rx.fragment(),
                    ),
                    rx.button(
                        rx.icon("arrow-up", size=15),
                        "Send",
                        type="submit",
                        size="2",
                        disabled=~can_send,
                        loading=state.sending,
                        data_testid="chat-send",
                    ),
                    align="center",
                    spacing="2",
                    width="100%",
                    padding_top="8px",
                ),
                width="100%",
            ),
            on_submit=on_submit,
            reset_on_submit=False,
            width="100%",
        ),
        width="100%",
        spacing="2",
        padding="12px 16px 16px 16px",
        border_top=f"1px solid {rx.color('gray', 4)}",
    )
