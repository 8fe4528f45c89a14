"""`/apps/[app_id]/agents`: the App's Agents and a dialog to create one."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import reflex as rx

from mosoo_core import agents
from mosoo_core.db import session_scope
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_web.components.layout import console_shell, page_header
from mosoo_web.pages.app_settings import not_found_card
from mosoo_web.state.session import SessionState, current_account_id

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


def _rows(account_id: str, app_id: str) -> list[AgentRow]:
    with session_scope() as db:
        views = agents.list_agents(db, account_id, app_id)
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
                )
            )
    return rows


def _create(account_id: str, app_id: str, name: str, runtime: str, kind: str) -> str:
    with session_scope() as db:
        return agents.create_agent(db, account_id, app_id, name=name, runtime=runtime, kind=kind).id


class AgentsState(rx.State):
    agents: list[AgentRow] = []
    loaded: bool = False
    dialog_open: bool = False
    runtime: str = "openai"
    kind: str = "cattle"
    name_error: str = ""
    form_error: str = ""

    @rx.event
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

    @rx.event
    def open_dialog(self, is_open: bool = True) -> None:
        self.dialog_open = is_open
        if is_open:
            self.runtime, self.kind = "openai", "cattle"
            self.name_error = self.form_error = ""

    @rx.event
    def choose_runtime(self, value: str) -> None:
        runtime = agents.RUNTIMES.get(value)
        if runtime is not None and runtime.implemented:
            self.runtime = value

    @rx.event
    def choose_kind(self, value: str) -> None:
        if value in KIND_LABELS:
            self.kind = value

    @rx.event
    async def create(self, form: dict[str, str]) -> rx.event.EventSpec | None:
        self.name_error = self.form_error = ""
        session = await self.get_state(SessionState)
        account_id = await current_account_id(self)
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


def _error(message: rx.Var, test_id: str) -> rx.Component:
    return rx.cond(message != "", rx.text(message, color_scheme="red", size="2", data_testid=test_id), rx.fragment())


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
    return rx.radio_cards.root(
        *[
            rx.radio_cards.item(
                rx.vstack(
                    rx.text(label, size="2", weight="bold"),
                    rx.text(description, size="1", color_scheme="gray"),
                    spacing="1",
                    align="start",
                ),
                value=value,
                justify_content="flex-start",
                align_items="start",
                data_testid=f"kind-{value}",
            )
            for value, label, description in KINDS
        ],
        value=AgentsState.kind,
        on_value_change=AgentsState.choose_kind,
        columns="2",
        size="1",
        width="100%",
    )


def _create_dialog() -> rx.Component:
    return rx.dialog.root(
        rx.dialog.trigger(
            rx.button(rx.icon("plus", size=16), "New agent", size="3", data_testid="new-agent"),
        ),
        rx.dialog.content(
            rx.dialog.title("New agent"),
            rx.dialog.description(
                "Name it and pick how it runs. You configure the model and instructions next, beside a live test chat.",
                size="2",
                color_scheme="gray",
                margin_bottom="16px",
            ),
            rx.form(
                rx.vstack(
                    rx.vstack(
                        rx.text("Name", size="2", weight="medium", as_="label"),
                        rx.input(
                            name="name",
                            placeholder="e.g. Support triage",
                            max_length=80,
                            size="3",
                            width="100%",
                            auto_focus=True,
                            data_testid="new-agent-name",
                        ),
                        _error(AgentsState.name_error, "new-agent-name-error"),
                        spacing="1",
                        width="100%",
                    ),
                    rx.vstack(
                        rx.text("Runtime", size="2", weight="medium"),
                        _runtime_choices(),
                        spacing="1",
                        width="100%",
                    ),
                    rx.vstack(
                        rx.text("Kind", size="2", weight="medium"),
                        _kind_choices(),
                        spacing="1",
                        width="100%",
                    ),
                    _error(AgentsState.form_error, "new-agent-error"),
                    rx.hstack(
                        rx.dialog.close(rx.button("Cancel", variant="soft", color_scheme="gray", type="button")),
                        rx.button("Create agent", type="submit", data_testid="new-agent-submit"),
                        justify="end",
                        spacing="3",
                        width="100%",
                    ),
                    spacing="4",
                    width="100%",
                ),
                on_submit=AgentsState.create,
                reset_on_submit=False,
                width="100%",
            ),
            max_width="520px",
        ),
        open=AgentsState.dialog_open,
        on_open_change=AgentsState.open_dialog,
    )


def _agent_card(row: rx.Var[AgentRow]) -> rx.Component:
    return rx.link(
        rx.card(
            rx.hstack(
                rx.box(
                    rx.icon("bot", size=20, color=rx.color("accent", 11)),
                    background=rx.color("accent", 3),
                    border_radius="10px",
                    padding="8px",
                    display="flex",
                ),
                rx.vstack(
                    rx.hstack(
                        rx.text(row.name, size="3", weight="bold", data_testid="agent-name"),
                        rx.badge(row.kind_label, variant="soft", color_scheme="gray"),
                        align="center",
                        spacing="2",
                    ),
                    rx.text(
                        row.runtime_label,
                        " · ",
                        rx.cond(row.model != "", row.model, "model not set"),
                        size="1",
                        color_scheme="gray",
                    ),
                    spacing="1",
                    min_width="0",
                ),
                rx.spacer(),
                rx.cond(
                    row.ready,
                    rx.badge(rx.icon("circle-check", size=12), "Ready", color_scheme="green", variant="soft"),
                    rx.badge(rx.icon("circle-alert", size=12), "Setup required", color_scheme="amber", variant="soft"),
                ),
                rx.icon("chevron-right", size=16, color=rx.color("gray", 9)),
                align="center",
                spacing="3",
                width="100%",
            ),
            width="100%",
            _hover={"background": rx.color("gray", 3)},
        ),
        href="/apps/" + SessionState.current_app_id + "/agents/" + row.id,
        underline="none",
        color="inherit",
        width="100%",
        data_testid="agent-card",
    )


def _empty() -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.icon("bot", size=28, color=rx.color("gray", 9)),
            rx.text("No agents yet", size="3", weight="bold"),
            rx.text(
                "An agent is a model with instructions and tools, running in its own sandbox. Create one and try it in Preview.",
                size="2",
                color_scheme="gray",
                text_align="center",
                max_width="420px",
            ),
            align="center",
            spacing="2",
            padding_y="24px",
        ),
        width="100%",
        data_testid="agents-empty",
    )


def _content() -> rx.Component:
    return rx.cond(
        SessionState.app_missing,
        not_found_card(),
        rx.vstack(
            rx.hstack(
                page_header("Agents", SessionState.current_app_name),
                rx.spacer(),
                _create_dialog(),
                align="start",
                width="100%",
            ),
            rx.cond(
                AgentsState.agents.length() > 0,
                rx.vstack(rx.foreach(AgentsState.agents, _agent_card), width="100%", spacing="2"),
                rx.cond(AgentsState.loaded, _empty(), rx.fragment()),
            ),
            width="100%",
            spacing="2",
        ),
    )


def agents_page() -> rx.Component:
    return console_shell(_content)
