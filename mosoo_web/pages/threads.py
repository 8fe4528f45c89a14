"""`/apps/[app_id]/threads`: the App's threads in sections Working / Completed / Archived
with filters; `/apps/[app_id]/threads/[thread_id]`: one thread, its full event history
streamed live (the shared `ThreadChat` watcher), follow-up messages with attachments, Stop,
rename, archive / unarchive, delete, and the thread's files."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import reflex as rx

from mosoo_core import agents, files, sessions
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.errors import MosooError, NotFound
from mosoo_core.runtime.threads import delete_thread_everywhere
from mosoo_core.sessions import actions
from mosoo_core.sessions.threads import MAX_LIST_LIMIT
from mosoo_web.components.chat import transcript_view
from mosoo_web.components.composer import chat_composer
from mosoo_web.components.downloads import download_link
from mosoo_web.components.layout import console_shell, missing_card, page_header
from mosoo_web.pages.agents import relative_time
from mosoo_web.pages.app_settings import not_found_card
from mosoo_web.state.session import SessionState, current_account_id, tab_signed_out
from mosoo_web.state.thread_chat import (
    DISCONNECTED_GRACE_SECONDS,
    ThreadChat,
    client_connected,
    size_text,
)

ALL = "all"
SECTION_LABELS = {"working": "Working", "completed": "Completed", "archived": "Archived"}
EMPTY_TEXT = {
    "working": "No agent is working right now. Threads show here while a run is active.",
    "completed": "No threads yet. Start one from an agent's Preview, the API or the CLI.",
    "archived": "Nothing archived. Archive a finished thread to tidy this list; it stays readable.",
}
LIST_REFRESH_SECONDS = 3.0  # how often an open list re-reads the threads
LIST_PAGE = 100
PURPOSE_LABELS = {"preview": "Preview", "console": "Console", "api": "API", "channel": "Channel"}
STATUS_COLORS = {"idle": "gray", "running": "blue", "rescheduling": "amber", "terminated": "red"}


@dataclass
class ThreadListRow:
    id: str = ""
    title: str = ""
    agent_name: str = ""
    status: str = ""
    purpose: str = ""
    last_run_status: str = ""
    error_text: str = ""
    updated_text: str = ""
    end_user_id: str = ""


@dataclass
class AgentOption:
    id: str = ""
    name: str = ""


@dataclass
class ThreadFileRow:
    id: str = ""
    name: str = ""
    kind: str = ""
    size_text: str = ""
    time_text: str = ""


def _list_row(row: sessions.ThreadRow, now: Any) -> ThreadListRow:
    error = ""
    if row.last_run_status == "failed":
        error = row.last_run_error_message or row.last_run_error_code or "The last run failed."
    return ThreadListRow(
        id=row.id, title=row.display_title, agent_name=row.agent_name, status=row.status,
        purpose=PURPOSE_LABELS.get(row.purpose, row.purpose), last_run_status=row.last_run_status or "",
        error_text=error, updated_text=relative_time(row.updated_at, now), end_user_id=row.end_user_id or "",
    )


def _load_list(
    account_id: str, app_id: str, section: str, agent_id: str, failed_only: bool, shown: int
) -> tuple[list[ThreadListRow], dict[str, int], list[AgentOption]]:
    """The first `shown` threads of the section (read page by page), the section counts and
    the agent filter's options."""
    agent_filter = None if agent_id == ALL else agent_id
    failed = True if failed_only else None
    with session_scope() as db:
        rows: list[sessions.ThreadRow] = []
        while len(rows) < shown:
            page = sessions.list_threads(
                db, account_id, app_id, section=section, agent_id=agent_filter, failed=failed,
                limit=min(MAX_LIST_LIMIT, shown - len(rows)), before=rows[-1].id if rows else None,
            )
            rows += page
            if not page:
                break
        counts = sessions.count_threads(db, account_id, app_id, agent_id=agent_filter, failed=failed)
        options = [AgentOption(id=a.id, name=a.name) for a in agents.list_agents(db, account_id, app_id)]
    now = utcnow()
    return [_list_row(row, now) for row in rows], counts, options


class ThreadsState(rx.State):
    """The list page."""

    section: str = "working"
    agent_filter: str = ALL
    failed_only: bool = False
    rows: list[ThreadListRow] = []
    counts: dict[str, int] = {"working": 0, "completed": 0, "archived": 0}
    agent_options: list[AgentOption] = []
    loaded: bool = False
    shown: int = LIST_PAGE  # how many rows of the section the list holds ("Show more" adds a page)
    _follow_generation: int = 0

    @rx.var
    def hidden_count(self) -> int:
        return max(0, self.counts.get(self.section, 0) - len(self.rows))

    async def _refresh(self) -> None:
        session = await self.get_state(SessionState)
        if session.app_missing or not session.current_app_id:
            self.rows = []
            return
        account_id = await current_account_id(self)
        try:
            self.rows, self.counts, self.agent_options = await asyncio.to_thread(
                _load_list, account_id, session.current_app_id, self.section, self.agent_filter, self.failed_only,
                self.shown,
            )
        except NotFound:
            session.app_missing = True
            self.rows = []
        self.loaded = True

    @rx.event
    async def load(self) -> None:
        """After the App guard. Opens on Working when something is running, else Completed."""
        self.loaded = False
        self.shown = LIST_PAGE
        if self.agent_filter != ALL and not any(o.id == self.agent_filter for o in self.agent_options):
            self.agent_filter = ALL
        self.section = "working"
        await self._refresh()
        if not self.rows and self.counts.get("working", 0) == 0:
            self.section = "completed"
            await self._refresh()

    @rx.event
    async def choose_section(self, section: str | list[str]) -> None:
        if isinstance(section, str) and section in SECTION_LABELS:
            self.section = section
            self.shown = LIST_PAGE
            await self._refresh()

    @rx.event
    async def choose_agent(self, agent_id: str) -> None:
        self.agent_filter = agent_id or ALL
        await self._refresh()

    @rx.event
    async def set_failed_only(self, value: bool) -> None:
        self.failed_only = bool(value)
        await self._refresh()

    @rx.event
    async def show_more(self) -> None:
        self.shown += LIST_PAGE
        await self._refresh()

    @rx.event
    async def clear_filters(self) -> None:
        self.agent_filter, self.failed_only = ALL, False
        await self._refresh()

    @rx.event(background=True)
    async def follow(self) -> None:
        """Keep the open list current: a run starting or ending moves its thread between
        Working and Completed without a reload. Ends when the tab leaves the page, opens it
        again (a newer follower), or has been gone for a while."""
        async with self:
            self._follow_generation += 1
            generation = self._follow_generation
            path = self.router.url.path
            token = self.router.session.client_token
        gone_since: float | None = None
        while True:
            await asyncio.sleep(LIST_REFRESH_SECONDS)
            async with self:
                if self._follow_generation != generation or self.router.url.path != path:
                    return
                # Stops with the session: quietly when the tab was already signed out,
                # by raising SignedOut (the tab goes to /login) when it ended unnoticed.
                if await tab_signed_out(self):
                    return
            if await client_connected(token):
                gone_since = None
            elif gone_since is None:
                gone_since = time.monotonic()
            elif time.monotonic() - gone_since >= DISCONNECTED_GRACE_SECONDS:
                return
            async with self:
                if self._follow_generation == generation:
                    await self._refresh()


# --- the detail page ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Header:
    title: str
    display_title: str
    agent_id: str
    agent_name: str
    version_text: str
    archived: bool
    purpose: str
    end_user_id: str


def _header(row: sessions.ThreadRow) -> _Header:
    version = f"v{row.agent_version}" if row.agent_version is not None else "Draft"
    return _Header(
        title=row.title, display_title=row.display_title, agent_id=row.agent_id, agent_name=row.agent_name,
        version_text=version, archived=row.archived, purpose=PURPOSE_LABELS.get(row.purpose, row.purpose),
        end_user_id=row.end_user_id or "",
    )


def _load_header(account_id: str, app_id: str, thread_id: str) -> _Header:
    with session_scope() as db:
        row = sessions.get_thread(db, account_id, thread_id)
    if row.app_id != app_id:
        raise NotFound("Thread not found.")
    return _header(row)


def _thread_files(account_id: str, thread_id: str) -> list[ThreadFileRow]:
    with session_scope() as db:
        views = files.list_thread_files(db, account_id, thread_id)
    now = utcnow()
    return [
        ThreadFileRow(
            id=v.id, name=v.path or v.name, kind=v.kind, size_text=size_text(v.size),
            time_text=relative_time(v.created_at, now),
        )
        for v in views
    ]


def _change(account_id: str, thread_id: str, action: str, title: str = "") -> _Header:
    with session_scope() as db:
        if action == "rename":
            row = sessions.rename_thread(db, account_id, thread_id, title)
        elif action == "archive":
            row = sessions.archive_thread(db, account_id, thread_id)
        else:
            row = sessions.unarchive_thread(db, account_id, thread_id)
    return _header(row)


class ThreadDetailState(ThreadChat, rx.State):
    """One thread: header, live transcript, composer, files."""

    title: str = ""
    display_title: str = ""
    agent_id: str = ""
    agent_name: str = ""
    version_text: str = ""
    archived: bool = False
    purpose: str = ""
    end_user_id: str = ""
    renaming: bool = False
    title_error: str = ""
    thread_files: list[ThreadFileRow] = []
    delete_open: bool = False
    deleting: bool = False
    changing: bool = False

    @rx.var
    def can_send(self) -> bool:
        return bool(self.thread_id) and not self.run_active and not self.sending and not self.thread_missing

    def _apply(self, header: _Header) -> None:
        self.title, self.display_title = header.title, header.display_title
        self.agent_id, self.agent_name = header.agent_id, header.agent_name
        self._chat_agent_id = header.agent_id
        self.version_text, self.archived = header.version_text, header.archived
        self.purpose, self.end_user_id = header.purpose, header.end_user_id

    async def _ids(self) -> tuple[str, str]:
        session = await self.get_state(SessionState)
        return await current_account_id(self), session.current_app_id

    @rx.event
    async def load(self) -> Any:
        """After the App guard: the thread named in the URL, then its live history."""
        self._reset_chat()
        self.thread_id = ""
        self.renaming, self.title_error, self.delete_open, self.deleting = False, "", False, False
        self.thread_files = []
        thread_id = str(self.router.page.params.get("thread_id", "") or "")
        session = await self.get_state(SessionState)
        if session.app_missing or not session.current_app_id:
            return None  # not found, or the guard has just sent the tab to /login
        account_id, app_id = await self._ids()
        try:
            header = await asyncio.to_thread(_load_header, account_id, app_id, thread_id)
        except NotFound:
            self.thread_missing = True
            return None
        self._apply(header)
        self.thread_id = thread_id
        return ThreadDetailState.watch

    @rx.event
    async def load_files(self) -> None:
        """Re-read the thread's files (the page re-mounts a marker when they may have changed)."""
        if not self.thread_id:
            return
        account_id, _app_id = await self._ids()
        try:
            self.thread_files = await asyncio.to_thread(_thread_files, account_id, self.thread_id)
        except NotFound:
            self.thread_files = []

    @rx.event
    def start_rename(self) -> None:
        self.renaming, self.title_error = True, ""

    @rx.event
    def cancel_rename(self) -> None:
        self.renaming, self.title_error = False, ""

    @rx.event
    async def rename(self, form: dict[str, Any]) -> Any:
        account_id, _app_id = await self._ids()
        self.title_error = ""
        try:
            header = await asyncio.to_thread(_change, account_id, self.thread_id, "rename", str(form.get("title", "")))
        except MosooError as error:  # the title's problem, or an archived thread: next to the field
            self.title_error = error.message
            return None
        self._apply(header)
        self.renaming = False
        return None

    async def _set_archived(self, action: str) -> Any:
        account_id, _app_id = await self._ids()
        self.changing = True
        try:
            header = await asyncio.to_thread(_change, account_id, self.thread_id, action)
        except MosooError as error:
            return rx.toast.error(error.message)
        finally:
            self.changing = False
        # No toast: the badge shows the change, and top-right toasts would cover these buttons.
        self._apply(header)
        return None

    @rx.event
    async def archive(self) -> Any:
        return await self._set_archived("archive")

    @rx.event
    async def unarchive(self) -> Any:
        return await self._set_archived("unarchive")

    @rx.event
    def open_delete(self, is_open: bool = True) -> None:
        if not self.deleting:
            self.delete_open = is_open

    @rx.event(background=True)
    async def confirm_delete(self) -> Any:
        # Background: stopping a run and removing a sandbox can take a while.
        async with self:
            account_id, app_id = await self._ids()
            if self.deleting or not self.thread_id:
                return None
            self.deleting = True
            thread_id, name = self.thread_id, self.display_title
        try:
            await asyncio.to_thread(delete_thread_everywhere, account_id, thread_id)
        except NotFound as error:
            async with self:
                self.deleting, self.delete_open = False, False
            return rx.toast.error(error.message)
        async with self:
            self._reset_chat()
            self.thread_id = ""
            self.deleting, self.delete_open = False, False
        return [rx.redirect(f"/apps/{app_id}/threads"), rx.toast.success(f"Deleted “{name}”.")]

    @rx.event(background=True)
    async def send(self, form: dict[str, Any]) -> Any:
        """A follow-up message (with its attachments). An archived thread is unarchived."""
        text = str(form.get("message", ""))
        async with self:
            account_id, app_id = await self._ids()
            if not self.can_send:
                return None
            self.sending = True
            self.composer_error = ""
            thread_id = self.thread_id
            file_ids = self._take_attachment_ids()
        try:
            await asyncio.to_thread(actions.send_and_dispatch, account_id, thread_id, text, file_ids=file_ids)
        except MosooError as error:
            async with self:
                self.sending = False
                self.composer_error = error.message
            return None
        header = await asyncio.to_thread(_load_header, account_id, app_id, thread_id)
        async with self:
            self.sending = False
            self.composer_version += 1
            self.attachments, self.attach_error = [], ""
            self._apply(header)
            self.run_active = True  # until the watcher has the events
        return None


# --- the list page --------------------------------------------------------------------------


def _status_badge(status: rx.Var, test_id: str = "thread-status") -> rx.Component:
    return rx.match(
        status,
        *[
            (name, rx.badge(name, color_scheme=color, variant="soft", data_testid=test_id))  # type: ignore[arg-type]
            for name, color in STATUS_COLORS.items()
        ],
        rx.badge(status, variant="soft", data_testid=test_id),
    )


def _thread_row(row: rx.Var[ThreadListRow]) -> rx.Component:
    return rx.link(
        rx.card(
            rx.hstack(
                rx.vstack(
                    rx.text(row.title, size="3", weight="medium", truncate=True, data_testid="thread-row-title"),
                    rx.hstack(
                        rx.icon("bot", size=13),
                        rx.text(row.agent_name, size="1"),
                        rx.text("·", size="1"),
                        rx.text(row.purpose, size="1"),
                        rx.cond(
                            row.end_user_id != "",
                            rx.text("· user ", row.end_user_id, size="1", truncate=True),
                            rx.fragment(),
                        ),
                        rx.text("·", size="1"),
                        rx.text(row.updated_text, size="1"),
                        align="center",
                        spacing="1",
                        color=rx.color("gray", 10),
                    ),
                    rx.cond(
                        row.error_text != "",
                        rx.text(
                            rx.icon("triangle-alert", size=12), " Last run failed: ", row.error_text,
                            size="1", color_scheme="red", truncate=True, data_testid="thread-row-error",
                        ),
                        rx.fragment(),
                    ),
                    spacing="1",
                    min_width="0",
                    flex="1",
                ),
                _status_badge(row.status),
                align="center",
                width="100%",
                spacing="3",
            ),
            width="100%",
            _hover={"background": rx.color("gray", 3)},
        ),
        href="/apps/" + SessionState.current_app_id + "/threads/" + row.id,
        underline="none",
        color="inherit",
        width="100%",
        data_testid="thread-row",
        data_thread_id=row.id,
    )


def _section_tabs() -> rx.Component:
    return rx.segmented_control.root(
        *[
            rx.segmented_control.item(
                rx.hstack(
                    rx.text(label),
                    rx.badge(ThreadsState.counts[key].to(int), variant="soft", radius="full", size="1"),
                    align="center",
                    spacing="2",
                    data_testid=f"section-{key}",
                ),
                value=key,
            )
            for key, label in SECTION_LABELS.items()
        ],
        value=ThreadsState.section,
        on_change=ThreadsState.choose_section,
        data_testid="thread-sections",
    )


def _filters() -> rx.Component:
    return rx.hstack(
        rx.select.root(
            rx.select.trigger(width="200px", data_testid="thread-agent-filter"),
            rx.select.content(
                rx.select.item("All agents", value=ALL),
                rx.foreach(ThreadsState.agent_options, lambda o: rx.select.item(o.name, value=o.id)),
            ),
            value=ThreadsState.agent_filter,
            on_change=ThreadsState.choose_agent,
        ),
        rx.text(
            rx.hstack(
                rx.switch(
                    checked=ThreadsState.failed_only,
                    on_change=ThreadsState.set_failed_only,
                    data_testid="thread-failed-filter",
                ),
                "Failed only",
                spacing="2",
                align="center",
            ),
            as_="label",
            size="2",
        ),
        spacing="4",
        align="center",
    )


def _list_empty() -> rx.Component:
    filtered = (ThreadsState.agent_filter != ALL) | ThreadsState.failed_only
    return rx.card(
        rx.vstack(
            rx.icon("messages-square", size=28, color=rx.color("gray", 9)),
            rx.cond(
                filtered,
                rx.vstack(
                    rx.text("No threads match these filters", size="3", weight="bold"),
                    rx.button("Clear filters", variant="soft", size="2", on_click=ThreadsState.clear_filters,
                              data_testid="threads-clear-filters"),
                    align="center",
                    spacing="2",
                ),
                rx.vstack(
                    rx.text(
                        rx.match(
                            ThreadsState.section,
                            *[(key, EMPTY_TEXT[key]) for key in SECTION_LABELS],
                            EMPTY_TEXT["completed"],
                        ),
                        size="2",
                        color_scheme="gray",
                        text_align="center",
                        max_width="420px",
                    ),
                    rx.link("Open Agents", href="/apps/" + SessionState.current_app_id + "/agents", size="2"),
                    align="center",
                    spacing="2",
                ),
            ),
            align="center",
            spacing="2",
            padding_y="24px",
        ),
        width="100%",
        data_testid="threads-empty",
    )


def _list_content() -> rx.Component:
    return rx.cond(
        SessionState.app_missing,
        not_found_card(),
        rx.vstack(
            page_header("Threads", SessionState.current_app_name),
            rx.flex(_section_tabs(), rx.spacer(), _filters(), wrap="wrap", gap="12px", width="100%", align="center"),
            rx.cond(
                ThreadsState.rows.length() > 0,
                rx.vstack(
                    rx.foreach(ThreadsState.rows, _thread_row),
                    rx.cond(
                        ThreadsState.hidden_count > 0,
                        rx.button(
                            "Show more (", ThreadsState.hidden_count, " more)", variant="soft", color_scheme="gray",
                            on_click=ThreadsState.show_more, data_testid="threads-show-more", align_self="center",
                        ),
                        rx.fragment(),
                    ),
                    width="100%",
                    spacing="2",
                ),
                rx.cond(ThreadsState.loaded, _list_empty(), rx.fragment()),
            ),
            width="100%",
            spacing="4",
        ),
    )


def threads_page() -> rx.Component:
    return console_shell(_list_content, max_width="1040px")


# --- the detail page (components) -----------------------------------------------------------


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
                    rx.button("Cancel", type="button", size="3", variant="soft", color_scheme="gray",
                              on_click=ThreadDetailState.cancel_rename),
                    spacing="2",
                ),
                rx.cond(
                    ThreadDetailState.title_error != "",
                    rx.text(ThreadDetailState.title_error, color_scheme="red", size="2", data_testid="thread-title-error"),
                    rx.fragment(),
                ),
                spacing="1",
            ),
            on_submit=ThreadDetailState.rename,
            reset_on_submit=False,
        ),
        rx.hstack(
            rx.heading(ThreadDetailState.display_title, size="6", weight="bold", data_testid="page-title"),
            rx.cond(
                ThreadDetailState.archived,
                rx.fragment(),
                rx.icon_button(
                    rx.icon("pencil", size=14), size="1", variant="ghost", color_scheme="gray",
                    aria_label="Rename", on_click=ThreadDetailState.start_rename, data_testid="thread-rename",
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
                rx.icon("archive-restore", size=14), "Unarchive", variant="soft", size="2",
                loading=ThreadDetailState.changing, on_click=ThreadDetailState.unarchive,
                data_testid="thread-unarchive",
            ),
            rx.button(
                rx.icon("archive", size=14), "Archive", variant="soft", color_scheme="gray", size="2",
                loading=ThreadDetailState.changing, disabled=ThreadDetailState.run_active,
                on_click=ThreadDetailState.archive, data_testid="thread-archive",
            ),
        ),
        rx.button(
            rx.icon("trash-2", size=14), "Delete", variant="soft", color_scheme="red", size="2",
            on_click=ThreadDetailState.open_delete(True), data_testid="thread-delete",
        ),
        spacing="2",
    )


def _detail_header() -> rx.Component:
    return rx.vstack(
        rx.hstack(
            rx.link(
                rx.hstack(rx.icon("arrow-left", size=14), rx.text("Threads", size="2"), align="center", spacing="1"),
                href="/apps/" + SessionState.current_app_id + "/threads",
                color_scheme="gray",
                underline="none",
                data_testid="thread-back",
            ),
            width="100%",
        ),
        rx.hstack(_title_block(), rx.spacer(), _actions(), align="center", width="100%"),
        rx.hstack(
            rx.link(
                rx.hstack(rx.icon("bot", size=13), rx.text(ThreadDetailState.agent_name, size="2"), spacing="1", align="center"),
                href="/apps/" + SessionState.current_app_id + "/agents/" + ThreadDetailState.agent_id,
                underline="none",
                data_testid="thread-agent",
            ),
            rx.badge(ThreadDetailState.version_text, variant="soft", color_scheme="iris", data_testid="thread-version"),
            _status_badge(ThreadDetailState.session_status),
            rx.cond(
                ThreadDetailState.archived,
                rx.badge("Archived", variant="outline", color_scheme="gray", data_testid="thread-archived"),
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
                rx.text(ThreadDetailState.usage_total, size="1", color_scheme="gray", data_testid="thread-usage"),
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
        rx.icon(rx.cond(f.kind == "artifact", "file-output", "paperclip"), size=14),
        rx.vstack(
            rx.text(f.name, size="2", weight="medium", truncate=True, max_width="220px"),
            rx.text(
                rx.cond(f.kind == "artifact", "Artifact", "Attachment"), " · ", f.size_text, " · ", f.time_text,
                size="1", color_scheme="gray",
            ),
            spacing="0",
            min_width="0",
            flex="1",
        ),
        download_link(rx.icon("download", size=14), f.id, "Download " + f.name, "thread-file-download"),
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
                    "Open in Files", href="/apps/" + SessionState.current_app_id + "/files?thread=" + ThreadDetailState.thread_id,
                    size="1", data_testid="thread-files-open",
                ),
                width="100%",
                align="center",
            ),
            rx.cond(
                ThreadDetailState.thread_files.length() > 0,
                rx.vstack(rx.foreach(ThreadDetailState.thread_files, file_row), width="100%", spacing="2"),
                rx.text(
                    "No files yet. Attach one to a message; files the agent writes under outputs/ show here.",
                    size="1", color_scheme="gray", data_testid="thread-files-empty",
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
    return rx.card(
        rx.vstack(
            rx.auto_scroll(
                rx.cond(
                    (ThreadDetailState.items.length() > 0) | (ThreadDetailState.live_kind != ""),
                    transcript_view(
                        ThreadDetailState.items,
                        ThreadDetailState.live_kind,
                        ThreadDetailState.live_text,
                        ThreadDetailState.run_active & ~ThreadDetailState.needs_approval,
                        ThreadDetailState.answered_requests,
                        ThreadDetailState.allow_once,
                        ThreadDetailState.reject,
                    ),
                    rx.center(
                        rx.text("No messages yet. Write the first one below.", size="2", color_scheme="gray"),
                        height="100%",
                        min_height="240px",
                        data_testid="thread-empty",
                    ),
                ),
                flex="1",
                min_height="0",
                width="100%",
                padding="20px",
            ),
            rx.cond(
                ThreadDetailState.archived,
                rx.text(
                    "This thread is archived. Sending a message unarchives it.",
                    size="1", color_scheme="gray", padding="0 16px", data_testid="thread-archived-note",
                ),
                rx.fragment(),
            ),
            chat_composer(
                ThreadDetailState,
                upload_id="thread-attachments",
                placeholder="Message " + ThreadDetailState.agent_name + "…  (Enter to send, Shift+Enter for a new line)",
                can_send=ThreadDetailState.can_send,
                on_submit=ThreadDetailState.send,
            ),
            spacing="0",
            height="100%",
            width="100%",
        ),
        padding="0",
        height="calc(100vh - 200px)",
        min_height="480px",
        flex="1",
        min_width="0",
        data_testid="chat-panel",
    )


def _delete_dialog() -> rx.Component:
    return rx.alert_dialog.root(
        rx.alert_dialog.content(
            rx.alert_dialog.title("Delete this thread?"),
            rx.alert_dialog.description(
                "“", ThreadDetailState.display_title, "” goes for good: its messages and events, its runs, "
                "its files and checkpoints, and its sandbox. An active run is stopped first. This cannot be undone.",
                size="2",
            ),
            rx.hstack(
                rx.alert_dialog.cancel(
                    rx.button("Cancel", variant="soft", color_scheme="gray", disabled=ThreadDetailState.deleting)
                ),
                rx.button(
                    "Delete thread", color_scheme="red", loading=ThreadDetailState.deleting,
                    on_click=ThreadDetailState.confirm_delete, data_testid="thread-delete-confirm",
                ),
                justify="end",
                spacing="3",
                margin_top="16px",
            ),
            max_width="480px",
        ),
        open=ThreadDetailState.delete_open,
        on_open_change=ThreadDetailState.open_delete,
    )


def _detail_content() -> rx.Component:
    return rx.cond(
        SessionState.app_missing,
        not_found_card(),
        rx.cond(
            ThreadDetailState.thread_missing,
            missing_card(
                "Thread not found", "Back to Threads", "/apps/" + SessionState.current_app_id + "/threads",
                "thread-not-found", detail="It was deleted, or it is not yours.",
            ),
            rx.vstack(
                _detail_header(),
                rx.flex(
                    _chat(),
                    _files_panel(),
                    direction=rx.breakpoints(initial="column", md="row"),
                    gap="16px",
                    width="100%",
                    align="start",
                ),
                _delete_dialog(),
                width="100%",
                spacing="0",
            ),
        ),
    )


def thread_page() -> rx.Component:
    return console_shell(_detail_content, max_width="1280px")
