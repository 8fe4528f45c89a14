"""`/apps/[app_id]`: the App home. A getting-started checklist until every step is done (each
ticked from the App's real state, with the `curl` and CLI commands that call it), and once
the App has an Agent: its Agents, recent threads, runs that failed in the last day and what
today and this month cost."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import reflex as rx
from reflex.event import EventCallback, EventSpec
from reflex.vars import ObjectVar, StringVar

from mosoo_core import app_home
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.errors import NotFound
from mosoo_core.settings import get_settings
from mosoo_web.components.layout import app_page, console_shell, page_header, stat_card
from mosoo_web.formatting import relative_time, usd_text
from mosoo_web.pages.threads.labels import PURPOSE_LABELS, status_badge
from mosoo_web.reflex_typing import cond_value, event
from mosoo_web.state.session import SessionState, current_account_id


@dataclass
class HomeAgent:
    id: str = ""
    name: str = ""
    status_label: str = "Draft"
    published: bool = False
    ready: bool = False
    last_activity: str = ""


@dataclass
class HomeThread:
    id: str = ""
    title: str = ""
    agent_name: str = ""
    purpose: str = ""
    status: str = ""
    last_run_failed: bool = False
    updated: str = ""


@dataclass
class HomeFailedRun:
    thread_id: str = ""
    title: str = ""
    agent_name: str = ""
    error: str = ""
    when: str = ""


def _status_label(agent: app_home.AgentSummary) -> str:
    if agent.status == "published" and agent.published_version is not None:
        return f"Published v{agent.published_version}"
    return "Published" if agent.status == "published" else "Draft"


def _home(account_id: str, app_id: str) -> app_home.AppHome:
    with session_scope() as db:
        return app_home.app_home(db, account_id, app_id, public_url=get_settings().public_url)


class AppHomeState(rx.State):
    loaded: rx.Field[bool] = rx.field(False)
    getting_started: rx.Field[bool] = rx.field(False)
    working: rx.Field[bool] = rx.field(False)
    provider_done: rx.Field[bool] = rx.field(False)
    agent_done: rx.Field[bool] = rx.field(False)
    preview_done: rx.Field[bool] = rx.field(False)
    publish_done: rx.Field[bool] = rx.field(False)
    api_done: rx.Field[bool] = rx.field(False)
    done_count: rx.Field[int] = rx.field(0)
    first_agent_id: rx.Field[str] = rx.field("")
    example_agent_id: rx.Field[str] = rx.field("")
    example_agent_name: rx.Field[str] = rx.field("")
    example_agent_published: rx.Field[bool] = rx.field(False)
    example_curl: rx.Field[str] = rx.field("")
    example_cli: rx.Field[str] = rx.field("")
    agents: rx.Field[list[HomeAgent]] = rx.field(default_factory=list)
    threads: rx.Field[list[HomeThread]] = rx.field(default_factory=list)
    failed_runs: rx.Field[list[HomeFailedRun]] = rx.field(default_factory=list)
    failed_total: rx.Field[int] = rx.field(0)
    cost_today: rx.Field[str] = rx.field("$0.00")
    cost_month: rx.Field[str] = rx.field("$0.00")
    unpriced_calls: rx.Field[int] = rx.field(0)

    @event
    async def load(self) -> None:
        """After the App guard: the App's checklist and activity."""
        session = await self.get_state(SessionState)
        self.loaded = False
        if session.app_missing or not session.current_app_id:
            return
        account_id = await current_account_id(self)
        try:
            home = await asyncio.to_thread(_home, account_id, session.current_app_id)
        except NotFound:
            session.app_missing = True
            return
        self._show(home)
        self.loaded = True

    def _show(self, home: app_home.AppHome) -> None:
        done = {step.key: step.done for step in home.steps}
        self.provider_done, self.agent_done = done["provider"], done["agent"]
        self.preview_done, self.publish_done = done["preview"], done["publish"]
        self.api_done = done["api"]
        self.done_count = sum(done.values())
        self.getting_started, self.working = home.getting_started, home.working
        self.first_agent_id = home.agents[0].id if home.agents else ""
        self.example_agent_id = home.example.agent_id or ""
        self.example_agent_name = home.example.agent_name or ""
        self.example_agent_published = home.example.agent_published
        self.example_curl, self.example_cli = home.example.curl, home.example.cli
        now = utcnow()
        self.agents = [
            HomeAgent(
                id=agent.id,
                name=agent.name,
                status_label=_status_label(agent),
                published=agent.status == "published",
                ready=agent.ready,
                last_activity=relative_time(agent.last_activity, now),
            )
            for agent in home.agents
        ]
        self.threads = [
            HomeThread(
                id=row.id,
                title=row.display_title or "Untitled thread",
                agent_name=row.agent_name,
                purpose=PURPOSE_LABELS.get(row.purpose, row.purpose),
                status=row.status,
                last_run_failed=row.last_run_status == "failed",
                updated=relative_time(row.updated_at, now),
            )
            for row in home.recent_threads
        ]
        self.failed_runs = [
            HomeFailedRun(
                thread_id=run.thread_id,
                title=run.thread_title or "Untitled thread",
                agent_name=run.agent_name,
                error=": ".join(p for p in (run.error_code, run.error_message) if p),
                when=relative_time(run.failed_at, now),
            )
            for run in home.failed_runs
        ]
        self.failed_total = home.failed_runs_total
        self.cost_today = usd_text(home.cost_today.cost_usd_micros)
        self.cost_month = usd_text(home.cost_month.cost_usd_micros)
        self.unpriced_calls = home.cost_month.unpriced_calls

    @event
    def copy_curl(self) -> list[EventSpec]:
        return [rx.set_clipboard(self.example_curl), rx.toast.success("curl command copied.")]

    @event
    def copy_cli(self) -> list[EventSpec]:
        return [rx.set_clipboard(self.example_cli), rx.toast.success("CLI commands copied.")]


def _app_path(suffix: str | StringVar[str] = "") -> rx.Var[str]:
    """A page of the current App, e.g. `_app_path("/agents")`."""
    return "/apps/" + SessionState.current_app_id + suffix


def _agent_path(agent_id: StringVar[str]) -> rx.Var[str]:
    """The Agent's Preview, or the Agents page while the App has none."""
    return cond_value(agent_id != "", _app_path("/agents/" + agent_id), _app_path("/agents"))


def _tick(done: rx.Var[bool]) -> rx.Component:
    return rx.cond(
        done,
        rx.icon("circle-check", size=20, color=rx.color("green", 10), data_testid="step-done"),
        rx.icon("circle", size=20, color=rx.color("gray", 8), data_testid="step-todo"),
    )


def _step(
    key: str,
    title: str,
    description: rx.Component,
    done: rx.Var[bool],
    link_label: str,
    href: rx.Var[str] | str,
    *extra: rx.Component,
) -> rx.Component:
    return rx.hstack(
        _tick(done),
        rx.vstack(
            rx.text(
                title,
                size="3",
                weight="medium",
                color=cond_value(done, rx.color("gray", 10), rx.color("gray", 12)),
            ),
            description,
            *extra,
            spacing="1",
            width="100%",
            min_width="0",
        ),
        rx.link(
            rx.button(
                link_label,
                size="1",
                variant=cond_value(done, "ghost", "soft"),
                white_space="nowrap",
            ),
            href=href,
            flex_shrink="0",
            data_testid=f"step-{key}-link",
        ),
        align="start",
        spacing="3",
        width="100%",
        padding_y="8px",
        data_testid=f"step-{key}",
    )


def _note(*text: rx.Var[str] | str | rx.Component) -> rx.Component:
    return rx.text(*text, size="2", color_scheme="gray")


def _code_block(
    label: str, text: rx.Var[str], on_copy: EventCallback[()], test_id: str
) -> rx.Component:
    return rx.vstack(
        rx.hstack(
            rx.text(label, size="1", weight="medium", color_scheme="gray"),
            rx.spacer(),
            rx.button(
                rx.icon("copy", size=14),
                "Copy",
                size="1",
                variant="soft",
                on_click=on_copy,
                data_testid=f"{test_id}-copy",
            ),
            align="center",
            width="100%",
        ),
        rx.code_block(
            text, language="bash", wrap_long_lines=True, width="100%", data_testid=test_id
        ),
        spacing="1",
        width="100%",
    )


def _api_examples() -> rx.Component:
    return rx.vstack(
        _code_block("curl", AppHomeState.example_curl, AppHomeState.copy_curl, "example-curl"),
        _code_block("CLI", AppHomeState.example_cli, AppHomeState.copy_cli, "example-cli"),
        _note(
            "Set ",
            rx.code("MOSOO_TOKEN", size="1"),
            " to an access token (",
            rx.link("create one", href="/tokens", data_testid="example-tokens-link"),
            "; it is shown once) or sign the CLI in with ",
            rx.code("mosoo login", size="1"),
            ".",
            rx.cond(
                AppHomeState.example_agent_id == "",
                rx.text.span(" Create an Agent first: its id goes where $AGENT_ID is."),
                rx.cond(
                    AppHomeState.example_agent_published,
                    rx.text.span(
                        " The commands start a thread on ", AppHomeState.example_agent_name, "."
                    ),
                    rx.text.span(
                        " Publish ",
                        AppHomeState.example_agent_name,
                        " first: the API runs published Agents.",
                    ),
                ),
            ),
        ),
        spacing="2",
        width="100%",
    )


def _checklist() -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.hstack(
                rx.heading("Get started", size="4"),
                rx.spacer(),
                rx.badge(
                    AppHomeState.done_count.to_string() + " of 5 done",
                    variant="soft",
                    data_testid="checklist-progress",
                ),
                width="100%",
                align="center",
            ),
            _note("From nothing to your first API call. Each step ticks itself once it is done."),
            _step(
                "provider",
                "Add a provider key",
                _note(
                    "OpenAI, Anthropic, DeepSeek, OpenRouter, Ollama or any OpenAI-compatible URL."
                ),
                AppHomeState.provider_done,
                "Providers",
                _app_path("/providers"),
            ),
            _step(
                "agent",
                "Create an Agent",
                _note("Choose a runtime, a model and what it may do."),
                AppHomeState.agent_done,
                "Agents",
                _app_path("/agents"),
            ),
            _step(
                "preview",
                "Chat with it in Preview",
                _note("Send a message and watch it work, tools and all."),
                AppHomeState.preview_done,
                "Open Preview",
                _agent_path(AppHomeState.first_agent_id),
            ),
            _step(
                "publish",
                "Publish a version",
                _note("Publishing freezes a numbered version for the API to run."),
                AppHomeState.publish_done,
                "Publish",
                _agent_path(AppHomeState.example_agent_id),
            ),
            _step(
                "api",
                "Call it from the API",
                _note("Start a thread from your own code, or from the CLI:"),
                AppHomeState.api_done,
                "Access tokens",
                "/tokens",
                _api_examples(),
            ),
            spacing="2",
            width="100%",
        ),
        width="100%",
        size="3",
        data_testid="checklist",
    )


def _stats() -> rx.Component:
    return rx.vstack(
        rx.flex(
            stat_card("Cost today", AppHomeState.cost_today, "cost-today"),
            stat_card("Cost this month", AppHomeState.cost_month, "cost-month"),
            stat_card(
                "Failed runs, last 24 h", AppHomeState.failed_total.to_string(), "failed-total"
            ),
            gap="12px",
            wrap="wrap",
            width="100%",
        ),
        rx.cond(
            AppHomeState.unpriced_calls > 0,
            rx.text(
                AppHomeState.unpriced_calls.to_string(),
                " calls this month used a model without a price and count as $0.",
                size="1",
                color_scheme="amber",
                data_testid="cost-unpriced",
            ),
            rx.fragment(),
        ),
        rx.text("Days are UTC.", size="1", color_scheme="gray"),
        spacing="2",
        width="100%",
    )


def _section(
    title: str, action: rx.Component, *children: rx.Component, test_id: str
) -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.hstack(
                rx.heading(title, size="4"), rx.spacer(), action, width="100%", align="center"
            ),
            *children,
            spacing="2",
            width="100%",
        ),
        width="100%",
        size="3",
        data_testid=test_id,
    )


def _row_link(href: rx.Var[str], *children: rx.Component, test_id: str) -> rx.Component:
    return rx.link(
        rx.hstack(*children, align="center", spacing="3", width="100%"),
        href=href,
        underline="none",
        color="inherit",
        width="100%",
        padding_y="6px",
        border_radius="6px",
        _hover={"background": rx.color("gray", 3)},
        data_testid=test_id,
    )


def _agent_row(row: ObjectVar[HomeAgent]) -> rx.Component:
    return _row_link(
        _app_path("/agents/" + row.id.to(str)),
        rx.icon("bot", size=16),
        rx.text(row.name, weight="medium", size="2", truncate=True),
        rx.badge(
            row.status_label,
            color_scheme=cond_value(row.published, "green", "gray"),
            variant="soft",
            data_testid="home-agent-status",
        ),
        rx.cond(
            row.ready,
            rx.fragment(),
            rx.badge("Setup required", color_scheme="amber", variant="soft"),
        ),
        rx.spacer(),
        rx.text(row.last_activity, size="1", color_scheme="gray"),
        test_id="home-agent",
    )


def _thread_row(row: ObjectVar[HomeThread]) -> rx.Component:
    return _row_link(
        _app_path("/threads/" + row.id.to(str)),
        rx.icon("message-square", size=16),
        rx.vstack(
            rx.text(row.title, size="2", weight="medium", truncate=True),
            rx.text(row.agent_name, " · ", row.purpose, size="1", color_scheme="gray"),
            spacing="0",
            min_width="0",
            flex="1",
        ),
        rx.cond(
            row.last_run_failed,
            rx.badge("failed", color_scheme="red", variant="soft"),
            status_badge(row.status.to(str), "home-thread-status"),
        ),
        rx.text(row.updated, size="1", color_scheme="gray"),
        test_id="home-thread",
    )


def _failed_row(row: ObjectVar[HomeFailedRun]) -> rx.Component:
    return _row_link(
        _app_path("/threads/" + row.thread_id.to(str)),
        rx.icon("circle-x", size=16, color=rx.color("red", 10)),
        rx.vstack(
            rx.text(row.title, size="2", weight="medium", truncate=True),
            rx.text(row.agent_name, " · ", row.error, size="1", color_scheme="gray", truncate=True),
            spacing="0",
            min_width="0",
            flex="1",
        ),
        rx.text(row.when, size="1", color_scheme="gray"),
        test_id="home-failed-run",
    )


def _empty_line(text: str) -> rx.Component:
    return rx.text(text, size="2", color_scheme="gray")


def _activity() -> rx.Component:
    return rx.vstack(
        _stats(),
        _section(
            "Agents",
            rx.link("All agents", href=_app_path("/agents"), size="2"),
            rx.foreach(AppHomeState.agents, _agent_row),
            test_id="home-agents",
        ),
        _section(
            "Recent threads",
            rx.link("All threads", href=_app_path("/threads"), size="2"),
            rx.cond(
                AppHomeState.threads.length() > 0,
                rx.foreach(AppHomeState.threads, _thread_row),
                _empty_line("No threads yet: send a message in Preview or call the API."),
            ),
            test_id="home-threads",
        ),
        _section(
            "Failed in the last 24 hours",
            rx.fragment(),
            rx.cond(
                AppHomeState.failed_runs.length() > 0,
                rx.foreach(AppHomeState.failed_runs, _failed_row),
                _empty_line("No run failed in the last 24 hours."),
            ),
            test_id="home-failed",
        ),
        spacing="4",
        width="100%",
    )


def _content() -> rx.Component:
    return app_page(
        page_header(SessionState.current_app_name, "Overview"),
        rx.cond(
            AppHomeState.loaded,
            rx.vstack(
                rx.cond(AppHomeState.getting_started, _checklist(), rx.fragment()),
                rx.cond(AppHomeState.working, _activity(), rx.fragment()),
                spacing="4",
                width="100%",
            ),
            rx.fragment(),
        ),
    )


def app_home_page() -> rx.Component:
    return console_shell(_content)
