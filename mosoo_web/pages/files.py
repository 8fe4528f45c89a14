"""`/apps/[app_id]/files`: the App's files (attachments and artifacts): search by name,
filter by thread and kind, preview text (the first 256 KiB) and images, download. The bytes
come from `/api/files/{id}/content` (session cookie)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import reflex as rx
from reflex.vars import ObjectVar

from mosoo_core import files, sessions
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_web.components.downloads import download_link
from mosoo_web.components.layout import (
    app_page,
    console_shell,
    empty_note,
    empty_state,
    page_header,
)
from mosoo_web.formatting import relative_time, size_text
from mosoo_web.reflex_typing import cond_value, event
from mosoo_web.state.session import SessionState, current_account_id

ALL = "all"
PREVIEW_BYTES = 256 * 1024
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/bmp")
TEXT_TYPES = (
    "application/json",
    "application/xml",
    "application/x-yaml",
    "application/yaml",
    "application/javascript",
    "application/x-sh",
    "application/toml",
    "application/sql",
    "application/x-python",
)
TEXT_SUFFIXES = (
    ".md",
    ".txt",
    ".csv",
    ".json",
    ".yaml",
    ".yml",
    ".toml",
    ".log",
    ".py",
    ".js",
    ".ts",
    ".sh",
    ".sql",
)


@dataclass
class FileRow:
    id: str = ""
    name: str = ""
    kind: str = ""
    thread_id: str = ""
    thread_title: str = ""
    size_text: str = ""
    time_text: str = ""
    media_type: str = ""
    preview: str = ""  # text | image | "" (download only)


@dataclass
class ThreadOption:
    id: str = ""
    title: str = ""


def preview_kind(name: str, media_type: str) -> str:
    if media_type in IMAGE_TYPES:
        return "image"
    if (
        media_type.startswith("text/")
        or media_type in TEXT_TYPES
        or name.lower().endswith(TEXT_SUFFIXES)
    ):
        return "text"
    return ""


def _load(
    account_id: str, app_id: str, query: str, thread_id: str, kind: str
) -> tuple[list[FileRow], list[ThreadOption]]:
    with session_scope() as db:
        views = files.list_files(
            db,
            account_id,
            app_id,
            session_id=None if thread_id == ALL else thread_id,
            kind=None if kind == ALL else kind,
            query=query or None,
            limit=500,
        )
        # The thread filter offers every thread that has files (not only those shown now).
        all_views = (
            views
            if thread_id == ALL and kind == ALL and not query
            else files.list_files(db, account_id, app_id, limit=1000)
        )
        thread_ids = sorted({v.session_id for v in all_views if v.session_id})
        titles = (
            {
                row.id: row.display_title
                for row in sessions.list_threads(db, account_id, app_id, ids=thread_ids, limit=200)
            }
            if thread_ids
            else {}
        )
    now = utcnow()
    rows = [
        FileRow(
            id=v.id,
            name=v.path or v.name,
            kind=v.kind,
            thread_id=v.session_id or "",
            thread_title=titles.get(v.session_id or "", "") if v.session_id else "Not sent yet",
            size_text=size_text(v.size),
            time_text=relative_time(v.created_at, now),
            media_type=v.media_type,
            preview=preview_kind(v.name, v.media_type),
        )
        for v in views
    ]
    options = [ThreadOption(id=tid, title=titles.get(tid, tid)) for tid in thread_ids]
    return rows, options


def _read_text(account_id: str, file_id: str) -> tuple[str, bool]:
    """The first 256 KiB as text, and whether the file is longer."""
    with session_scope() as db:
        view, handle = files.open_file(db, account_id, file_id)
    with handle:
        data = handle.read(PREVIEW_BYTES)
    if b"\x00" in data:
        raise InvalidInput("This file is binary; download it to open it.")
    return data.decode("utf-8", errors="replace"), view.size > PREVIEW_BYTES


class FilesState(rx.State):
    rows: rx.Field[list[FileRow]] = rx.field(default_factory=list)
    thread_options: rx.Field[list[ThreadOption]] = rx.field(default_factory=list)
    query: rx.Field[str] = rx.field("")
    thread_filter: rx.Field[str] = rx.field(ALL)
    kind_filter: rx.Field[str] = rx.field(ALL)
    loaded: rx.Field[bool] = rx.field(False)
    # The preview panel
    selected_id: rx.Field[str] = rx.field("")
    selected_name: rx.Field[str] = rx.field("")
    selected_kind: rx.Field[str] = rx.field("")  # text | image | ""
    preview_text: rx.Field[str] = rx.field("")
    preview_note: rx.Field[str] = rx.field("")

    async def _refresh(self) -> None:
        session = await self.get_state(SessionState)
        if session.app_missing or not session.current_app_id:
            self.rows = []
            return
        account_id = await current_account_id(self)
        try:
            self.rows, self.thread_options = await asyncio.to_thread(
                _load,
                account_id,
                session.current_app_id,
                self.query.strip(),
                self.thread_filter,
                self.kind_filter,
            )
        except NotFound:
            # The filtered thread was deleted meanwhile: show everything again.
            if self.thread_filter != ALL:
                self.thread_filter = ALL
                await self._refresh()
                return
            session.app_missing = True
            self.rows = []
        self.loaded = True

    @event
    async def load(self) -> None:
        """After the App guard. `?thread=` opens the list filtered to one thread."""
        self.loaded = False
        self.selected_id = ""
        self.query, self.kind_filter = "", ALL
        self.thread_filter = str(self.router.url.query_parameters.get("thread", "") or "") or ALL
        await self._refresh()

    @event
    async def search(self, form: dict[str, str]) -> None:
        self.query = str(form.get("query", ""))[:200]
        await self._refresh()

    @event
    async def choose_thread(self, thread_id: str) -> None:
        self.thread_filter = thread_id or ALL
        await self._refresh()

    @event
    async def choose_kind(self, kind: str | list[str]) -> None:
        if isinstance(kind, str) and kind in (ALL, "attachment", "artifact"):
            self.kind_filter = kind
            await self._refresh()

    @event
    async def select(self, file_id: str) -> None:
        account_id = await current_account_id(self)
        row = next((r for r in self.rows if r.id == file_id), None)
        if row is None:
            return
        self.selected_id, self.selected_name, self.selected_kind = row.id, row.name, row.preview
        self.preview_text, self.preview_note = "", ""
        if row.preview != "text":
            if not row.preview:
                self.preview_note = "No preview for this type of file. Download it to open it."
            return
        try:
            text, clipped = await asyncio.to_thread(_read_text, account_id, file_id)
        except (InvalidInput, NotFound) as error:
            self.selected_kind = ""
            self.preview_note = error.message
            return
        self.preview_text = text
        self.preview_note = (
            "Showing the first 256 KiB. Download the file for all of it." if clipped else ""
        )

    @event
    def close_preview(self) -> None:
        self.selected_id = ""


def _file_row(row: ObjectVar[FileRow]) -> rx.Component:
    return rx.table.row(
        rx.table.cell(
            rx.hstack(
                rx.icon(cond_value(row.kind == "artifact", "file-output", "paperclip"), size=14),
                rx.button(
                    row.name,
                    on_click=FilesState.select(row.id),
                    variant="ghost",
                    size="2",
                    type="button",
                    data_testid="file-name",
                ),
                align="center",
                spacing="2",
            ),
        ),
        rx.table.cell(
            rx.badge(
                cond_value(row.kind == "artifact", "Artifact", "Attachment"),
                color_scheme=cond_value(row.kind == "artifact", "green", "gray"),
                variant="soft",
                data_testid="file-kind",
            )
        ),
        rx.table.cell(
            rx.cond(
                row.thread_id != "",
                rx.link(
                    row.thread_title,
                    href="/apps/"
                    + SessionState.current_app_id
                    + "/threads/"
                    + row.thread_id.to(str),
                    size="2",
                    data_testid="file-thread",
                ),
                rx.text(row.thread_title, size="2", color_scheme="gray"),
            ),
            max_width="260px",
        ),
        rx.table.cell(rx.text(row.size_text, size="2")),
        rx.table.cell(rx.text(row.time_text, size="2", color_scheme="gray")),
        rx.table.cell(
            download_link(
                rx.icon("download", size=15),
                row.id,
                "Download " + row.name.to(str),
                "file-download",
            )
        ),
        data_testid="file-row",
        data_name=row.name,
        background=cond_value(
            FilesState.selected_id == row.id, rx.color("accent", 3), "transparent"
        ),
    )


def _toolbar() -> rx.Component:
    return rx.flex(
        rx.form(
            rx.hstack(
                rx.input(
                    rx.input.slot(rx.icon("search", size=14)),
                    name="query",
                    placeholder="Search by name",
                    default_value=FilesState.query,
                    max_length=200,
                    width="240px",
                    data_testid="files-search",
                ),
                rx.button(
                    "Search", type="submit", variant="soft", data_testid="files-search-submit"
                ),
                spacing="2",
            ),
            on_submit=FilesState.search,
            reset_on_submit=False,
        ),
        rx.select.root(
            rx.select.trigger(width="220px", data_testid="files-thread-filter"),
            rx.select.content(
                rx.select.item("All threads", value=ALL),
                rx.foreach(
                    FilesState.thread_options, lambda o: rx.select.item(o.title, value=o.id)
                ),
            ),
            value=FilesState.thread_filter,
            on_change=FilesState.choose_thread,
        ),
        rx.segmented_control.root(
            rx.segmented_control.item("All", value=ALL),
            rx.segmented_control.item("Attachments", value="attachment"),
            rx.segmented_control.item("Artifacts", value="artifact"),
            value=FilesState.kind_filter,
            on_change=FilesState.choose_kind,
            data_testid="files-kind-filter",
        ),
        wrap="wrap",
        gap="12px",
        align="center",
        width="100%",
    )


def _preview_panel() -> rx.Component:
    return rx.cond(
        FilesState.selected_id != "",
        rx.card(
            rx.vstack(
                rx.hstack(
                    rx.text(
                        FilesState.selected_name,
                        size="3",
                        weight="bold",
                        truncate=True,
                        data_testid="preview-name",
                    ),
                    rx.spacer(),
                    download_link(
                        rx.badge(
                            rx.icon("download", size=14),
                            "Download",
                            size="2",
                            variant="soft",
                            cursor="pointer",
                        ),
                        FilesState.selected_id,
                        "Download " + FilesState.selected_name,
                        "preview-download",
                    ),
                    rx.icon_button(
                        rx.icon("x", size=14),
                        size="1",
                        variant="ghost",
                        color_scheme="gray",
                        on_click=FilesState.close_preview,
                        aria_label="Close preview",
                    ),
                    align="center",
                    width="100%",
                ),
                rx.match(
                    FilesState.selected_kind,
                    (
                        "text",
                        rx.el.pre(
                            FilesState.preview_text,
                            style={
                                "font_family": "var(--code-font-family, ui-monospace, monospace)",
                                "font_size": "12px",
                                "white_space": "pre-wrap",
                                "word_break": "break-word",
                                "max_height": "60vh",
                                "overflow": "auto",
                                "margin": "0",
                                "padding": "10px 12px",
                                "border_radius": "8px",
                                "background": rx.color("gray", 3),
                                "width": "100%",
                            },
                            data_testid="preview-text",
                        ),
                    ),
                    (
                        "image",
                        rx.image(
                            src="/api/files/" + FilesState.selected_id + "/content",
                            alt=FilesState.selected_name,
                            max_width="100%",
                            max_height="60vh",
                            data_testid="preview-image",
                        ),
                    ),
                    rx.fragment(),
                ),
                rx.cond(
                    FilesState.preview_note != "",
                    rx.text(
                        FilesState.preview_note,
                        size="1",
                        color_scheme="gray",
                        data_testid="preview-note",
                    ),
                    rx.fragment(),
                ),
                spacing="3",
                width="100%",
            ),
            width="100%",
            data_testid="file-preview",
        ),
        rx.fragment(),
    )


def _empty() -> rx.Component:
    filtered = (
        (FilesState.query != "")
        | (FilesState.thread_filter != ALL)
        | (FilesState.kind_filter != ALL)
    )
    return empty_state(
        "folder-open",
        rx.cond(
            filtered,
            rx.text(
                "No files match. Change the search or the filters.", size="2", color_scheme="gray"
            ),
            empty_note(
                "No files yet. Attach files to a message in Preview or a thread; "
                "files an agent writes under outputs/ appear here too.",
                max_width="440px",
            ),
        ),
        test_id="files-empty",
    )


def _content() -> rx.Component:
    return app_page(
        page_header("Files", SessionState.current_app_name),
        _toolbar(),
        _preview_panel(),
        rx.cond(
            FilesState.rows.length() > 0,
            rx.table.root(
                rx.table.header(
                    rx.table.row(
                        rx.table.column_header_cell("Name"),
                        rx.table.column_header_cell("Kind"),
                        rx.table.column_header_cell("Thread"),
                        rx.table.column_header_cell("Size"),
                        rx.table.column_header_cell("Added"),
                        rx.table.column_header_cell(""),
                    )
                ),
                rx.table.body(rx.foreach(FilesState.rows, _file_row)),
                width="100%",
                variant="surface",
                data_testid="files-table",
            ),
            rx.cond(FilesState.loaded, _empty(), rx.fragment()),
        ),
    )


def files_page() -> rx.Component:
    return console_shell(_content, max_width="1100px")
