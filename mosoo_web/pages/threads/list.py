"""`/apps/[app_id]/threads`: the App's threads in sections Working / Completed / Archived,
with filters (agent, failed only), kept current while the page is open."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import reflex as rx
from reflex.vars import ObjectVar

from mosoo_core import agents, sessions
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.errors import NotFound
from mosoo_core.sessions.threads import MAX_LIST_LIMIT
from mosoo_web.components.layout import (
    app_page,
    console_shell,
    empty_note,
    empty_state,
    page_header,
)
from mosoo_web.formatting import relative_time
from mosoo_web.pages.threads.labels import PURPOSE_LABELS, status_badge
from mosoo_web.reflex_typing import event, match_value
from mosoo_web.state.session import SessionState, current_account_id, tab_signed_out
from mosoo_web.state.thread_chat import DISCONNECTED_GRACE_SECONDS, client_connected

ALL = "all"
SECTION_LABELS = {"working": "Working", "completed": "Completed", "archived": "Archived"}
EMPTY_TEXT = {
    "working": "No agent is working right now. Threads show here while a run is active.",
    "completed": "No threads yet. Start one from an agent's Preview, the API or the CLI.",
    "archived": "Nothing archived. Archive a finished thread to tidy this list; it stays readable.",
}
LIST_REFRESH_SECONDS = 3.0  # how often an open list re-reads the threads
LIST_PAGE = 100


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


def _list_row(row: sessions.ThreadRow, now: Any) -> ThreadListRow:
    error = ""
    if row.last_run_status == "failed":
        error = row.last_run_error_message or row.last_run_error_code or "The last run failed."
    return ThreadListRow(
        id=row.id,
        title=row.display_title,
        agent_name=row.agent_name,
        status=row.status,
        purpose=PURPOSE_LABELS.get(row.purpose, row.purpose),
        last_run_status=row.last_run_status or "",
        error_text=error,
        updated_text=relative_time(row.updated_at, now),
        end_user_id=row.end_user_id or "",
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
                db,
                account_id,
                app_id,
                section=section,
                agent_id=agent_filter,
                failed=failed,
                limit=min(MAX_LIST_LIMIT, shown - len(rows)),
                before=rows[-1].id if rows else None,
            )
            rows += page
            if not page:
                break
        counts = sessions.count_threads(
            db, account_id, app_id, agent_id=agent_filter, failed=failed
        )
        options = [
            AgentOption(id=a.id, name=a.name) for a in agents.list_agents(db, account_id, app_id)
        ]
    now = utcnow()
    return [_list_row(row, now) for row in rows], counts, options


class ThreadsState(rx.State):
    """The list page."""

    section: rx.Field[str] = rx.field("working")
    agent_filter: rx.Field[str] = rx.field(ALL)
    failed_only: rx.Field[bool] = rx.field(False)
    rows: rx.Field[list[ThreadListRow]] = rx.field(default_factory=list)
    counts: rx.Field[dict[str, int]] = rx.field(
        default_factory=lambda: {"working": 0, "completed": 0, "archived": 0}
    )
    agent_options: rx.Field[list[AgentOption]] = rx.field(default_factory=list)
    loaded: rx.Field[bool] = rx.field(False)
    # How many rows of the section the list holds ("Show more" adds a page).
    shown: rx.Field[int] = rx.field(LIST_PAGE)
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
                _load_list,
                account_id,
                session.current_app_id,
                self.section,
                self.agent_filter,
                self.failed_only,
                self.shown,
            )
        except NotFound:
            session.app_missing = True
            self.rows = []
        self.loaded = True

    @event
    async def load(self) -> None:
        """After the App guard. Opens on Working when something is running, else Completed."""
        self.loaded = False
        self.shown = LIST_PAGE
        if self.agent_filter != ALL and not any(
            o.id == self.agent_filter for o in self.agent_options
        ):
            self.agent_filter = ALL
        self.section = "working"
        await self._refresh()
        if not self.rows and self.counts.get("working", 0) == 0:
            self.section = "completed"
            await self._refresh()

    @event
    async def choose_section(self, section: str | list[str]) -> None:
        if isinstance(section, str) and section in SECTION_LABELS:
            self.section = section
            self.shown = LIST_PAGE
            await self._refresh()

    @event
    async def choose_agent(self, agent_id: str) -> None:
        self.agent_filter = agent_id or ALL
        await self._refresh()

    @event
    async def set_failed_only(self, value: bool) -> None:
        self.failed_only = bool(value)
        await self._refresh()

    @event
    async def show_more(self) -> None:
        self.shown += LIST_PAGE
        await self._refresh()

    @event
    async def clear_filters(self) -> None:
        self.agent_filter, self.failed_only = ALL, False
        await self._refresh()

    @event(background=True)
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


# --- the page -----------------------------------------------------------------------------


def _thread_row(row: ObjectVar[ThreadListRow]) -> rx.Component:
    return rx.link(
        rx.card(
            rx.hstack(
                rx.vstack(
                    rx.text(
                        row.title,
                        size="3",
                        weight="medium",
                        truncate=True,
                        data_testid="thread-row-title",
                    ),
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
                            rx.icon("triangle-alert", size=12),
                            " Last run failed: ",
                            row.error_text,
                            size="1",
                            color_scheme="red",
                            truncate=True,
                            data_testid="thread-row-error",
                        ),
                        rx.fragment(),
                    ),
                    spacing="1",
                    min_width="0",
                    flex="1",
                ),
                status_badge(row.status),
                align="center",
                width="100%",
                spacing="3",
            ),
            width="100%",
            _hover={"background": rx.color("gray", 3)},
        ),
        href="/apps/" + SessionState.current_app_id + "/threads/" + row.id.to(str),
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
                    rx.badge(
                        ThreadsState.counts.to(dict[str, int])[key],
                        variant="soft",
                        radius="full",
                        size="1",
                    ),
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
                rx.foreach(
                    ThreadsState.agent_options, lambda o: rx.select.item(o.name, value=o.id)
                ),
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
    return empty_state(
        "messages-square",
        rx.cond(
            filtered,
            rx.vstack(
                rx.text("No threads match these filters", size="3", weight="bold"),
                rx.button(
                    "Clear filters",
                    variant="soft",
                    size="2",
                    on_click=ThreadsState.clear_filters,
                    data_testid="threads-clear-filters",
                ),
                align="center",
                spacing="2",
            ),
            rx.vstack(
                empty_note(
                    match_value(
                        ThreadsState.section,
                        *[(key, EMPTY_TEXT[key]) for key in SECTION_LABELS],
                        EMPTY_TEXT["completed"],
                    ),
                ),
                rx.link(
                    "Open Agents", href="/apps/" + SessionState.current_app_id + "/agents", size="2"
                ),
                align="center",
                spacing="2",
            ),
        ),
        test_id="threads-empty",
    )


def _list_content() -> rx.Component:
    return app_page(
        page_header("Threads", SessionState.current_app_name),
        rx.flex(
            _section_tabs(),
            rx.spacer(),
            _filters(),
            wrap="wrap",
            gap="12px",
            width="100%",
            align="center",
        ),
        rx.cond(
            ThreadsState.rows.length() > 0,
            rx.vstack(
                rx.foreach(ThreadsState.rows, _thread_row),
                rx.cond(
                    ThreadsState.hidden_count > 0,
                    rx.button(
                        "Show more (",
                        ThreadsState.hidden_count,
                        " more)",
                        variant="soft",
                        color_scheme="gray",
                        on_click=ThreadsState.show_more,
                        data_testid="threads-show-more",
                        align_self="center",
                    ),
                    rx.fragment(),
                ),
                width="100%",
                spacing="2",
            ),
            rx.cond(ThreadsState.loaded, _list_empty(), rx.fragment()),
        ),
    )


def threads_page() -> rx.Component:
    return console_shell(_list_content, max_width="1040px")
