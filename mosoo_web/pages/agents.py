"""`/apps/[app_id]/agents`: the App's Agents, a dialog to create one, import a `.agent`
package, and per Agent: fork, export, delete (with confirmation)."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

import reflex as rx
from reflex.event import EventSpec
from reflex.vars import ObjectVar

from mosoo_core import agents
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_core.runtime.runs import delete_agent_everywhere
from mosoo_web.components.dialogs import confirm_dialog, dialog, dialog_buttons, form_dialog
from mosoo_web.components.forms import choice_cards, error_text, labelled
from mosoo_web.components.icons import icon_tile
from mosoo_web.components.layout import (
    app_page,
    console_shell,
    empty_note,
    empty_state,
    page_header,
)
from mosoo_web.formatting import relative_time
from mosoo_web.reflex_typing import cond_value, event
from mosoo_web.state.session import SessionState, current_account_id, current_app_ids

KIND_LABELS = {"pet": "Assistant", "cattle": "Task"}
KINDS = (
    ("pet", "Assistant", "One long-lived sandbox shared by its threads; keeps its memory."),
    ("cattle", "Task", "A fresh sandbox for every run; the workspace carries over per thread."),
)


@dataclass
class AgentRow:
    id: str = ""
    name: str = ""
    runtime_label: str = ""
    kind_label: str = ""
    model: str = ""
    ready: bool = False
    blocker_count: int = 0
    status_label: str = "Draft"
    published: bool = False
    last_activity: str = ""


def _status_label(view: agents.AgentView) -> str:
    if view.status == "published" and view.published_version is not None:
        return f"Published v{view.published_version}"
    return "Published" if view.status == "published" else "Draft"


def _rows(account_id: str, app_id: str) -> list[AgentRow]:
    with session_scope() as db:
        views = agents.list_agents(db, account_id, app_id)
        activity = agents.last_activity_by_agent(db, account_id, app_id)
        now = utcnow()
        rows = []
        for view in views:
            readiness = agents.readiness(db, view)
            runtime = agents.RUNTIMES.get(view.runtime)
            rows.append(
                AgentRow(
                    id=view.id,
                    name=view.name,
                    runtime_label=runtime.label if runtime else view.runtime,
                    kind_label=KIND_LABELS.get(view.kind, view.kind),
                    model=view.model,
                    ready=readiness.ready,
                    blocker_count=len(readiness.blockers),
                    status_label=_status_label(view),
                    published=view.status == "published",
                    last_activity=relative_time(activity.get(view.id, view.updated_at), now),
                )
            )
    return rows


def _create(account_id: str, app_id: str, name: str, runtime: str, kind: str) -> str:
    with session_scope() as db:
        return agents.create_agent(db, account_id, app_id, name=name, runtime=runtime, kind=kind).id


def _fork(account_id: str, app_id: str, agent_id: str) -> str:
    with session_scope() as db:
        return agents.fork_agent(db, account_id, app_id, agent_id).name


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:60] or "agent"


def _export(account_id: str, app_id: str, agent_id: str) -> tuple[str, bytes]:
    with session_scope() as db:
        name = agents.get_agent(db, account_id, app_id, agent_id).name
        return f"{_slug(name)}.agent", agents.export_agent(db, account_id, app_id, agent_id)


def _thread_count(account_id: str, app_id: str, agent_id: str) -> int:
    with session_scope() as db:
        return agents.count_threads(db, account_id, app_id, agent_id)


def _import(account_id: str, app_id: str, data: bytes) -> tuple[agents.ImportReport, str]:
    with session_scope() as db:
        report = agents.import_agent(db, account_id, app_id, data)
        return report, agents.get_agent(db, account_id, app_id, report.agent_id).name


MAX_PACKAGE_BYTES = 64 * 1024 * 1024
UPLOAD_ID = "agent-package"


class AgentsState(rx.State):
    agents: rx.Field[list[AgentRow]] = rx.field(default_factory=list)
    loaded: rx.Field[bool] = rx.field(False)
    dialog_open: rx.Field[bool] = rx.field(False)
    runtime: rx.Field[str] = rx.field("openai")
    kind: rx.Field[str] = rx.field("cattle")
    name_error: rx.Field[str] = rx.field("")
    form_error: rx.Field[str] = rx.field("")
    # Delete confirmation
    delete_open: rx.Field[bool] = rx.field(False)
    delete_id: rx.Field[str] = rx.field("")
    delete_name: rx.Field[str] = rx.field("")
    delete_threads: rx.Field[int] = rx.field(0)
    deleting: rx.Field[bool] = rx.field(False)
    # Import dialog and its report
    import_open: rx.Field[bool] = rx.field(False)
    importing: rx.Field[bool] = rx.field(False)
    import_error: rx.Field[str] = rx.field("")
    imported_id: rx.Field[str] = rx.field("")
    imported_name: rx.Field[str] = rx.field("")
    import_reconnect: rx.Field[list[str]] = rx.field(default_factory=list)
    import_notes: rx.Field[list[str]] = rx.field(default_factory=list)

    @event
    async def load(self) -> None:
        """After the App guard: the App's Agents."""
        session = await self.get_state(SessionState)
        self.loaded = False
        if session.app_missing or not session.current_app_id:
            self.agents = []
            return
        account_id = await current_account_id(self)
        try:
            self.agents = await asyncio.to_thread(_rows, account_id, session.current_app_id)
        except NotFound:
            session.app_missing = True
            self.agents = []
        self.loaded = True

    @event
    def open_dialog(self, is_open: bool = True) -> None:
        self.dialog_open = is_open
        if is_open:
            self.runtime, self.kind = "openai", "cattle"
            self.name_error = self.form_error = ""

    @event
    def choose_runtime(self, value: str) -> None:
        runtime = agents.RUNTIMES.get(value)
        if runtime is not None and runtime.implemented:
            self.runtime = value

    @event
    def choose_kind(self, value: str) -> None:
        if value in KIND_LABELS:
            self.kind = value

    @event
    async def create(self, form: dict[str, str]) -> EventSpec | None:
        account_id = await current_account_id(self)  # first: a signed-out tab changes nothing
        self.name_error = self.form_error = ""
        session = await self.get_state(SessionState)
        app_id = session.current_app_id
        try:
            agent_id = await asyncio.to_thread(
                _create, account_id, app_id, form.get("name", ""), self.runtime, self.kind
            )
        except InvalidInput as error:
            if error.field == "name":
                self.name_error = error.message
            else:
                self.form_error = error.message
            return None
        except NotFound:
            session.app_missing = True
            return None
        self.dialog_open = False
        return rx.redirect(f"/apps/{app_id}/agents/{agent_id}")

    async def _ids(self) -> tuple[str, str]:
        return await current_app_ids(self)

    async def _reload(self) -> None:
        account_id, app_id = await self._ids()
        self.agents = await asyncio.to_thread(_rows, account_id, app_id)

    @event
    async def fork(self, agent_id: str) -> EventSpec:
        account_id, app_id = await self._ids()
        try:
            name = await asyncio.to_thread(_fork, account_id, app_id, agent_id)
        except NotFound as error:
            return rx.toast.error(error.message)
        await self._reload()
        return rx.toast.success(f"Created {name}.")

    @event
    async def export(self, agent_id: str) -> EventSpec:
        account_id, app_id = await self._ids()
        try:
            filename, data = await asyncio.to_thread(_export, account_id, app_id, agent_id)
        except NotFound as error:
            return rx.toast.error(error.message)
        return rx.download(data=data, filename=filename)

    @event
    async def ask_delete(self, agent_id: str) -> EventSpec | None:
        account_id, app_id = await self._ids()
        try:
            self.delete_threads = await asyncio.to_thread(
                _thread_count, account_id, app_id, agent_id
            )
        except NotFound as error:
            return rx.toast.error(error.message)
        self.delete_id = agent_id
        self.delete_name = next(
            (row.name for row in self.agents if row.id == agent_id), "this agent"
        )
        self.delete_open = True
        return None

    @event
    def close_delete(self, is_open: bool = False) -> None:
        if not is_open and not self.deleting:
            self.delete_open = False

    @event(background=True)
    async def confirm_delete(self) -> EventSpec | None:
        # Background: removing sandboxes can take a while; the page stays responsive.
        async with self:
            account_id, app_id = await self._ids()
            if self.deleting or not self.delete_id:
                return None
            self.deleting = True
            agent_id, name = self.delete_id, self.delete_name
        try:
            await asyncio.to_thread(delete_agent_everywhere, account_id, app_id, agent_id)
        except NotFound as error:
            async with self:
                self.deleting, self.delete_open = False, False
            return rx.toast.error(error.message)
        rows = await asyncio.to_thread(_rows, account_id, app_id)
        async with self:
            self.agents = rows
            self.deleting, self.delete_open, self.delete_id = False, False, ""
        return rx.toast.success(f"Deleted {name}.")

    @event
    def open_import(self, is_open: bool = True) -> None:
        if self.importing:
            return
        self.import_open = is_open
        if is_open:
            self.import_error = self.imported_id = self.imported_name = ""
            self.import_reconnect, self.import_notes = [], []

    @event
    def reject_package(self, _rejected: list[dict[str, Any]]) -> None:
        self.import_error = "Choose one .agent file of at most 64 MiB."

    @event
    async def import_package(self, files: list[rx.UploadFile]) -> None:
        if not files:  # refused by the browser: reject_package says why (see skills/list.py)
            return
        account_id, app_id = await self._ids()
        self.import_error = ""
        if len(files) != 1:
            self.import_error = "Choose one .agent file."
            return
        data = await files[0].read(MAX_PACKAGE_BYTES + 1)
        if len(data) > MAX_PACKAGE_BYTES:
            self.import_error = "This package cannot be imported: it is larger than 64 MiB."
            return
        self.importing = True
        try:
            report, name = await asyncio.to_thread(_import, account_id, app_id, data)
        except (InvalidInput, NotFound) as error:
            self.import_error = error.message
            return
        finally:
            self.importing = False
        self.imported_id, self.imported_name = report.agent_id, name
        self.import_reconnect, self.import_notes = list(report.reconnect), list(report.notes)
        await self._reload()


def _runtime_choices() -> rx.Component:
    items = []
    for runtime in agents.RUNTIMES.values():
        items.append(
            rx.radio_cards.item(
                rx.vstack(
                    rx.hstack(
                        rx.text(runtime.label, size="2", weight="bold"),
                        rx.cond(
                            runtime.implemented,
                            rx.fragment(),
                            rx.badge("Coming soon", color_scheme="gray", variant="soft", size="1"),
                        ),
                        align="center",
                        spacing="2",
                    ),
                    rx.text(runtime.name, size="1", color_scheme="gray", font_family="monospace"),
                    spacing="1",
                    align="start",
                ),
                value=runtime.name,
                disabled=not runtime.implemented,
                justify_content="flex-start",
                data_testid=f"runtime-{runtime.name}",
            )
        )
    return rx.radio_cards.root(
        *items,
        value=AgentsState.runtime,
        on_value_change=AgentsState.choose_runtime,
        columns="1",
        size="1",
        width="100%",
    )


def _kind_choices() -> rx.Component:
    return choice_cards(KINDS, AgentsState.kind, AgentsState.choose_kind, "kind")


def _create_dialog() -> rx.Component:
    return form_dialog(
        rx.button(rx.icon("plus", size=16), "New agent", size="3", data_testid="new-agent"),
        "New agent",
        "Name it and pick how it runs. You configure the model and instructions next, beside a live test chat.",
        labelled(
            "Name",
            rx.input(
                name="name",
                placeholder="e.g. Support triage",
                max_length=80,
                size="3",
                width="100%",
                auto_focus=True,
                data_testid="new-agent-name",
            ),
            error=AgentsState.name_error,
            test_id="new-agent-name",
        ),
        labelled("Runtime", _runtime_choices()),
        labelled("Kind", _kind_choices()),
        error_text(AgentsState.form_error, "new-agent-error"),
        submit=rx.button("Create agent", type="submit", data_testid="new-agent-submit"),
        on_submit=AgentsState.create,
        open=AgentsState.dialog_open,
        on_open_change=AgentsState.open_dialog,
    )


def _agent_menu(row: ObjectVar[AgentRow]) -> rx.Component:
    return rx.dropdown_menu.root(
        rx.dropdown_menu.trigger(
            rx.icon_button(
                rx.icon("ellipsis", size=16),
                variant="ghost",
                color_scheme="gray",
                size="2",
                aria_label="Agent actions",
                data_testid="agent-menu",
            ),
        ),
        rx.dropdown_menu.content(
            rx.dropdown_menu.item(
                rx.icon("copy", size=14),
                "Fork",
                on_select=AgentsState.fork(row.id),
                data_testid="agent-fork",
            ),
            rx.dropdown_menu.item(
                rx.icon("download", size=14),
                "Export",
                on_select=AgentsState.export(row.id),
                data_testid="agent-export",
            ),
            rx.dropdown_menu.separator(),
            rx.dropdown_menu.item(
                rx.icon("trash-2", size=14),
                "Delete",
                color_scheme="red",
                on_select=AgentsState.ask_delete(row.id),
                data_testid="agent-delete",
            ),
            align="end",
        ),
    )


def _agent_card(row: ObjectVar[AgentRow]) -> rx.Component:
    return rx.card(
        rx.hstack(
            rx.link(
                rx.hstack(
                    icon_tile("bot", 20, "8px", radius="10px"),
                    rx.vstack(
                        rx.hstack(
                            rx.text(row.name, size="3", weight="bold", data_testid="agent-name"),
                            rx.badge(row.kind_label, variant="soft", color_scheme="gray"),
                            rx.badge(
                                row.status_label,
                                variant="soft",
                                color_scheme=cond_value(row.published, "green", "gray"),
                                data_testid="agent-status",
                            ),
                            align="center",
                            spacing="2",
                        ),
                        rx.text(
                            row.runtime_label,
                            " · ",
                            cond_value(row.model != "", row.model, "model not set"),
                            " · ",
                            rx.text(
                                "Active ",
                                row.last_activity,
                                as_="span",
                                data_testid="agent-last-activity",
                            ),
                            size="1",
                            color_scheme="gray",
                        ),
                        spacing="1",
                        min_width="0",
                    ),
                    rx.spacer(),
                    rx.cond(
                        row.ready,
                        rx.badge(
                            rx.icon("circle-check", size=12),
                            "Ready",
                            color_scheme="green",
                            variant="soft",
                        ),
                        rx.badge(
                            rx.icon("circle-alert", size=12),
                            "Setup required",
                            color_scheme="amber",
                            variant="soft",
                        ),
                    ),
                    rx.icon("chevron-right", size=16, color=rx.color("gray", 9)),
                    align="center",
                    spacing="3",
                    width="100%",
                ),
                href="/apps/" + SessionState.current_app_id + "/agents/" + row.id.to(str),
                underline="none",
                color="inherit",
                flex="1",
                min_width="0",
                data_testid="agent-link",
            ),
            _agent_menu(row),
            align="center",
            spacing="2",
            width="100%",
        ),
        width="100%",
        _hover={"background": rx.color("gray", 3)},
        data_testid="agent-card",
    )


def _delete_dialog() -> rx.Component:
    return confirm_dialog(
        "Delete " + AgentsState.delete_name + "?",
        "This deletes the agent with its ",
        cond_value(
            AgentsState.delete_threads == 1,
            "1 thread",
            AgentsState.delete_threads.to_string() + " threads",
        ),
        ", files and sandboxes, and its published versions. This cannot be undone.",
        description_test_id="agent-delete-summary",
        confirm="Delete agent",
        on_confirm=AgentsState.confirm_delete,
        confirm_test_id="agent-delete-confirm",
        open=AgentsState.delete_open,
        on_open_change=AgentsState.close_delete,
        busy=AgentsState.deleting,
        max_width="480px",
    )


def _import_report() -> rx.Component:
    return rx.vstack(
        rx.callout(
            rx.text("Imported ", rx.text.strong(AgentsState.imported_name), " as a draft."),
            icon="circle-check",
            color_scheme="green",
            width="100%",
            data_testid="import-report",
        ),
        rx.cond(
            AgentsState.import_reconnect.length() > 0,
            rx.vstack(
                rx.text("Needs reconnecting", size="2", weight="medium"),
                rx.foreach(
                    AgentsState.import_reconnect,
                    lambda item: rx.text("• ", item, size="2", data_testid="import-reconnect"),
                ),
                spacing="1",
                width="100%",
            ),
            rx.fragment(),
        ),
        rx.cond(
            AgentsState.import_notes.length() > 0,
            rx.vstack(
                rx.text("Notes", size="2", weight="medium"),
                rx.foreach(
                    AgentsState.import_notes,
                    lambda item: rx.text(
                        "• ", item, size="2", color_scheme="gray", data_testid="import-note"
                    ),
                ),
                spacing="1",
                width="100%",
            ),
            rx.fragment(),
        ),
        dialog_buttons(
            rx.link(
                rx.button(rx.icon("play", size=14), "Open in Preview"),
                href="/apps/" + SessionState.current_app_id + "/agents/" + AgentsState.imported_id,
                data_testid="import-open-preview",
            ),
            cancel="Close",
        ),
        spacing="3",
        width="100%",
    )


def _import_form() -> rx.Component:
    return rx.vstack(
        rx.upload.root(
            rx.vstack(
                rx.icon("upload", size=24, color=rx.color("gray", 9)),
                rx.text("Drop a .agent file here or click to choose one", size="2"),
                rx.text(
                    "At most 64 MiB. Packages never carry keys; you reconnect them after.",
                    size="1",
                    color_scheme="gray",
                ),
                align="center",
                spacing="1",
            ),
            id=UPLOAD_ID,
            accept={"application/zip": [".agent"], "application/octet-stream": [".agent"]},
            max_files=1,
            max_size=MAX_PACKAGE_BYTES,
            multiple=False,
            disabled=AgentsState.importing,
            on_drop=AgentsState.import_package,
            on_drop_rejected=AgentsState.reject_package,
            border=f"1px dashed {rx.color('gray', 7)}",
            border_radius="8px",
            padding="24px",
            width="100%",
            cursor="pointer",
            data_testid="import-upload",
        ),
        rx.cond(
            AgentsState.importing,
            rx.hstack(rx.spinner(size="2"), rx.text("Importing…", size="2")),
            rx.fragment(),
        ),
        error_text(AgentsState.import_error, "import-error"),
        dialog_buttons(),
        spacing="3",
        width="100%",
    )


def _import_dialog() -> rx.Component:
    return dialog(
        rx.button(
            rx.icon("file-up", size=16),
            "Import",
            size="3",
            variant="soft",
            data_testid="import-agent",
        ),
        "Import an agent",
        "A .agent package exported from Mosoo becomes a new draft agent in this App.",
        rx.cond(AgentsState.imported_id != "", _import_report(), _import_form()),
        open=AgentsState.import_open,
        on_open_change=AgentsState.open_import,
    )


def _empty() -> rx.Component:
    return empty_state(
        "bot",
        rx.text("No agents yet", size="3", weight="bold"),
        empty_note(
            "An agent is a model with instructions and tools, running in its own sandbox. Create one and try it in Preview."
        ),
        test_id="agents-empty",
    )


def _content() -> rx.Component:
    return app_page(
        rx.hstack(
            page_header("Agents", SessionState.current_app_name),
            rx.spacer(),
            rx.hstack(_import_dialog(), _create_dialog(), spacing="2"),
            align="start",
            width="100%",
        ),
        rx.cond(
            AgentsState.agents.length() > 0,
            rx.vstack(rx.foreach(AgentsState.agents, _agent_card), width="100%", spacing="2"),
            rx.cond(AgentsState.loaded, _empty(), rx.fragment()),
        ),
        _delete_dialog(),
        spacing="2",
    )


def agents_page() -> rx.Component:
    return console_shell(_content)
