"""`/apps/[app_id]/threads/[thread_id]`: one thread. Its title (rename), agent, version and
status over the live transcript with the composer, the thread's files beside it, and
archive / unarchive / delete."""

from __future__ import annotations

import reflex as rx

from mosoo_web.components.chat import chat_card, thread_transcript
from mosoo_web.components.composer import chat_composer
from mosoo_web.components.dialogs import confirm_dialog, trash_button
from mosoo_web.components.downloads import download_link
from mosoo_web.components.forms import error_text
from mosoo_web.components.layout import (
    app_page,
    back_link,
    console_shell,
    missing_card,
    side_by_side,
)
from mosoo_web.pages.threads.detail_state import ThreadDetailState
from mosoo_web.pages.threads.labels import status_badge
from mosoo_web.reflex_typing import cond_value
from mosoo_web.state.session import SessionState


def _title_block() -> rx.Component:
    return rx.cond(
        ThreadDetailState.renaming,
        rx.form(
            rx.vstack(
                rx.hstack(
                    rx.input(
                        name="title",
                        default_value=ThreadDetailState.title,
                        placeholder="A short title",
                        max_length=120,
                        size="3",
                        width="420px",
                        auto_focus=True,
                        data_testid="thread-title-input",
                    ),
                    rx.button("Save", type="submit", size="3", data_testid="thread-title-save"),
                    rx.button(
                        "Cancel",
                        type="button",
                        size="3",
                        variant="soft",
                        color_scheme="gray",
                        on_click=ThreadDetailState.cancel_rename,
                    ),
                    spacing="2",
                ),
                error_text(ThreadDetailState.title_error, "thread-title-error"),
                spacing="1",
            ),
            on_submit=ThreadDetailState.rename,
            reset_on_submit=False,
        ),
        rx.hstack(
            rx.heading(
                ThreadDetailState.display_title, size="6", weight="bold", data_testid="page-title"
            ),
            rx.cond(
                ThreadDetailState.archived,
                rx.fragment(),
                rx.icon_button(
                    rx.icon("pencil", size=14),
                    size="1",
                    variant="ghost",
                    color_scheme="gray",
                    aria_label="Rename",
                    on_click=ThreadDetailState.start_rename,
                    data_testid="thread-rename",
                ),
            ),
            align="center",
            spacing="2",
        ),
    )


def _actions() -> rx.Component:
    return rx.hstack(
        rx.cond(
            ThreadDetailState.archived,
            rx.button(
                rx.icon("archive-restore", size=14),
                "Unarchive",
                variant="soft",
                size="2",
                loading=ThreadDetailState.changing,
                on_click=ThreadDetailState.unarchive,
                data_testid="thread-unarchive",
            ),
            rx.button(
                rx.icon("archive", size=14),
                "Archive",
                variant="soft",
                color_scheme="gray",
                size="2",
                loading=ThreadDetailState.changing,
                disabled=ThreadDetailState.run_active,
                on_click=ThreadDetailState.archive,
                data_testid="thread-archive",
            ),
        ),
        trash_button(
            "Delete", "thread-delete", size="2", on_click=ThreadDetailState.open_delete(True)
        ),
        spacing="2",
    )


def _detail_header() -> rx.Component:
    return rx.vstack(
        rx.hstack(
            back_link(
                "Threads", "/apps/" + SessionState.current_app_id + "/threads", "thread-back"
            ),
            width="100%",
        ),
        rx.hstack(_title_block(), rx.spacer(), _actions(), align="center", width="100%"),
        rx.hstack(
            rx.link(
                rx.hstack(
                    rx.icon("bot", size=13),
                    rx.text(ThreadDetailState.agent_name, size="2"),
                    spacing="1",
                    align="center",
                ),
                href="/apps/"
                + SessionState.current_app_id
                + "/agents/"
                + ThreadDetailState.agent_id,
                underline="none",
                data_testid="thread-agent",
            ),
            rx.badge(
                ThreadDetailState.version_text,
                variant="soft",
                color_scheme="iris",
                data_testid="thread-version",
            ),
            status_badge(ThreadDetailState.session_status),
            rx.cond(
                ThreadDetailState.archived,
                rx.badge(
                    "Archived",
                    variant="outline",
                    color_scheme="gray",
                    data_testid="thread-archived",
                ),
                rx.fragment(),
            ),
            rx.text(ThreadDetailState.purpose, size="1", color_scheme="gray"),
            rx.cond(
                ThreadDetailState.end_user_id != "",
                rx.text("end user ", ThreadDetailState.end_user_id, size="1", color_scheme="gray"),
                rx.fragment(),
            ),
            rx.cond(
                ThreadDetailState.usage_total != "",
                rx.text(
                    ThreadDetailState.usage_total,
                    size="1",
                    color_scheme="gray",
                    data_testid="thread-usage",
                ),
                rx.fragment(),
            ),
            rx.cond(
                ThreadDetailState.usage != "",
                rx.tooltip(
                    rx.text(
                        "Billed ",
                        ThreadDetailState.usage,
                        size="1",
                        color_scheme="gray",
                        data_testid="thread-cost",
                    ),
                    content="From the gateway's record of every model call (when the page opened).",
                ),
                rx.fragment(),
            ),
            align="center",
            spacing="3",
            wrap="wrap",
        ),
        width="100%",
        spacing="2",
        margin_bottom="16px",
    )


def _files_panel() -> rx.Component:
    file_row = lambda f: rx.hstack(  # noqa: E731
        rx.icon(cond_value(f.kind == "artifact", "file-output", "paperclip"), size=14),
        rx.vstack(
            rx.text(f.name, size="2", weight="medium", truncate=True, max_width="220px"),
            rx.text(
                cond_value(f.kind == "artifact", "Artifact", "Attachment"),
                " · ",
                f.size_text,
                " · ",
                f.time_text,
                size="1",
                color_scheme="gray",
            ),
            spacing="0",
            min_width="0",
            flex="1",
        ),
        download_link(
            rx.icon("download", size=14), f.id, "Download " + f.name, "thread-file-download"
        ),
        align="center",
        width="100%",
        spacing="2",
        data_testid="thread-file",
        data_kind=f.kind,
        data_name=f.name,
    )
    return rx.card(
        # Re-mounted whenever the watcher sees file events: reads the list again.
        # (The key sits on a wrapper: Reflex memoizes the component holding on_mount, so the key
        # must remount it from outside.)
        rx.box(
            rx.box(on_mount=ThreadDetailState.load_files, display="none"),
            key=ThreadDetailState.files_version,
            display="none",
        ),
        rx.vstack(
            rx.hstack(
                rx.text("Files", size="3", weight="bold"),
                rx.spacer(),
                rx.link(
                    "Open in Files",
                    href="/apps/"
                    + SessionState.current_app_id
                    + "/files?thread="
                    + ThreadDetailState.thread_id,
                    size="1",
                    data_testid="thread-files-open",
                ),
                width="100%",
                align="center",
            ),
            rx.cond(
                ThreadDetailState.thread_files.length() > 0,
                rx.vstack(
                    rx.foreach(ThreadDetailState.thread_files, file_row), width="100%", spacing="2"
                ),
                rx.text(
                    "No files yet. Attach one to a message; files the agent writes under outputs/ show here.",
                    size="1",
                    color_scheme="gray",
                    data_testid="thread-files-empty",
                ),
            ),
            spacing="3",
            width="100%",
        ),
        width=["100%", "100%", "300px"],
        flex_shrink="0",
        data_testid="thread-files",
    )


def _chat() -> rx.Component:
    return chat_card(
        thread_transcript(
            ThreadDetailState,
            rx.center(
                rx.text(
                    "No messages yet. Write the first one below.", size="2", color_scheme="gray"
                ),
                height="100%",
                min_height="240px",
                data_testid="thread-empty",
            ),
        ),
        rx.cond(
            ThreadDetailState.archived,
            rx.text(
                "This thread is archived. Sending a message unarchives it.",
                size="1",
                color_scheme="gray",
                padding="0 16px",
                data_testid="thread-archived-note",
            ),
            rx.fragment(),
        ),
        chat_composer(
            ThreadDetailState,
            upload_id="thread-attachments",
            placeholder="Message "
            + ThreadDetailState.agent_name
            + "…  (Enter to send, Shift+Enter for a new line)",
            can_send=ThreadDetailState.can_send,
            on_submit=ThreadDetailState.send,
        ),
        height="calc(100vh - 200px)",
        min_height="480px",
    )


def _delete_dialog() -> rx.Component:
    return confirm_dialog(
        "Delete this thread?",
        "“",
        ThreadDetailState.display_title,
        "” goes for good: its messages and events, its runs, "
        "its files and checkpoints, and its sandbox. An active run is stopped first. This cannot be undone.",
        confirm="Delete thread",
        on_confirm=ThreadDetailState.confirm_delete,
        confirm_test_id="thread-delete-confirm",
        open=ThreadDetailState.delete_open,
        on_open_change=ThreadDetailState.open_delete,
        busy=ThreadDetailState.deleting,
        max_width="480px",
    )


def _detail_content() -> rx.Component:
    return app_page(
        _detail_header(),
        side_by_side(_chat(), _files_panel()),
        _delete_dialog(),
        spacing="0",
        item_missing=ThreadDetailState.thread_missing,
        item_missing_card=missing_card(
            "Thread not found",
            "Back to Threads",
            "/apps/" + SessionState.current_app_id + "/threads",
            "thread-not-found",
            detail="It was deleted, or it is not yours.",
        ),
    )


def thread_page() -> rx.Component:
    return console_shell(_detail_content, max_width="1280px")
