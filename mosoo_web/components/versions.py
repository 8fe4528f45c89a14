"""Publishing controls for the Preview header: the Draft / Published badge, Publish (with an
optional summary), Unpublish, and the read-only list of versions.

The page fills the state with `VersionsState.refresh` when it loads an Agent and passes in
whether readiness blockers stand (Publish is disabled while they do)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import reflex as rx

from mosoo_core import agents
from mosoo_core.db import session_scope
from mosoo_core.errors import Conflict, InvalidInput, NotFound
from mosoo_web.components.dialogs import confirm_dialog, form_dialog
from mosoo_web.components.forms import error_text
from mosoo_web.reflex_typing import cond_value, event
from mosoo_web.state.session import current_app_ids


@dataclass
class VersionRow:
    number: int = 0
    summary: str = ""
    created: str = ""


@dataclass(frozen=True)
class _Published:
    status: str
    published_version: int
    versions: list[VersionRow]


def _rows(versions: list[agents.VersionView]) -> list[VersionRow]:
    return [
        VersionRow(
            number=v.number, summary=v.summary, created=v.created_at.strftime("%Y-%m-%d %H:%M UTC")
        )
        for v in versions
    ]


def _load(account_id: str, app_id: str, agent_id: str) -> _Published:
    with session_scope() as db:
        agent = agents.get_agent(db, account_id, app_id, agent_id)
        versions = agents.list_versions(db, account_id, app_id, agent_id)
    return _Published(agent.status, agent.published_version or 0, _rows(versions))


def _publish(account_id: str, app_id: str, agent_id: str, summary: str) -> _Published:
    with session_scope() as db:
        agents.publish_agent(db, account_id, app_id, agent_id, summary)
    return _load(account_id, app_id, agent_id)


def _unpublish(account_id: str, app_id: str, agent_id: str) -> _Published:
    with session_scope() as db:
        agents.unpublish_agent(db, account_id, app_id, agent_id)
    return _load(account_id, app_id, agent_id)


class VersionsState(rx.State):
    agent_id: rx.Field[str] = rx.field("")
    status: rx.Field[str] = rx.field("draft")
    published_version: rx.Field[int] = rx.field(0)
    versions: rx.Field[list[VersionRow]] = rx.field(default_factory=list)
    dialog_open: rx.Field[bool] = rx.field(False)
    summary_error: rx.Field[str] = rx.field("")
    busy: rx.Field[bool] = rx.field(False)

    @rx.var
    def badge_label(self) -> str:
        if self.status == "published" and self.published_version:
            return f"Published v{self.published_version}"
        return "Draft"

    def _apply(self, published: _Published) -> None:
        self.status = published.status
        self.published_version = published.published_version
        self.versions = published.versions

    async def refresh(self, account_id: str, app_id: str, agent_id: str) -> None:
        """Called by the page (through get_state) once it has resolved the Agent."""
        self.agent_id = agent_id
        self.dialog_open = False
        self._apply(await asyncio.to_thread(_load, account_id, app_id, agent_id))

    async def _context(self) -> tuple[str, str]:
        return await current_app_ids(self)

    @event
    def open_dialog(self, is_open: bool = True) -> None:
        self.dialog_open = is_open
        self.summary_error = ""

    @event
    async def publish(self, form: dict[str, Any]) -> Any:
        account_id, app_id = await self._context()
        self.summary_error = ""
        self.busy = True
        try:
            self._apply(
                await asyncio.to_thread(
                    _publish, account_id, app_id, self.agent_id, str(form.get("summary", ""))
                )
            )
        except InvalidInput as error:
            self.summary_error = error.message
            return None
        except (Conflict, NotFound) as error:
            self.dialog_open = False
            return rx.toast.error(error.message)
        finally:
            self.busy = False
        self.dialog_open = False
        return rx.toast.success(f"Published version {self.published_version}.")

    @event
    async def unpublish(self) -> Any:
        account_id, app_id = await self._context()
        try:
            self._apply(await asyncio.to_thread(_unpublish, account_id, app_id, self.agent_id))
        except NotFound as error:
            return rx.toast.error(error.message)
        return rx.toast.success("Unpublished. The API no longer starts threads with this agent.")


def _publish_dialog(blocked: rx.Var[bool]) -> rx.Component:
    return form_dialog(
        rx.button(
            rx.icon("rocket", size=14),
            "Publish",
            size="2",
            disabled=blocked,
            data_testid="publish-agent",
        ),
        "Publish a new version",
        "Freezes the saved configuration as version "
        + (VersionsState.versions.length() + 1).to_string()
        + ". Threads started outside Preview run it; threads already running keep their version."
        " Kind and runtime are locked after the first publish.",
        rx.text("Summary (optional)", size="2", weight="medium", as_="label"),
        rx.input(
            name="summary",
            placeholder="What changed",
            max_length=200,
            width="100%",
            auto_focus=True,
            data_testid="publish-summary",
        ),
        error_text(VersionsState.summary_error, size="1"),
        submit=rx.button(
            "Publish", type="submit", loading=VersionsState.busy, data_testid="publish-submit"
        ),
        on_submit=VersionsState.publish,
        open=VersionsState.dialog_open,
        on_open_change=VersionsState.open_dialog,
        reset_on_submit=True,
        spacing="2",
        max_width="480px",
    )


def _unpublish_button() -> rx.Component:
    return confirm_dialog(
        "Unpublish this agent?",
        "The API stops starting threads with it. Its versions are kept; Preview keeps working.",
        confirm="Unpublish",
        on_confirm=VersionsState.unpublish,
        trigger=rx.button(
            "Unpublish",
            size="2",
            variant="soft",
            color_scheme="gray",
            data_testid="unpublish-agent",
        ),
        max_width="440px",
    )


def _versions_list() -> rx.Component:
    return rx.popover.root(
        rx.popover.trigger(
            rx.button(
                rx.icon("history", size=14),
                "Versions",
                size="2",
                variant="ghost",
                color_scheme="gray",
                data_testid="agent-versions",
            ),
        ),
        rx.popover.content(
            rx.cond(
                VersionsState.versions.length() > 0,
                rx.vstack(
                    rx.foreach(
                        VersionsState.versions,
                        lambda row: rx.hstack(
                            rx.badge(
                                "v" + row.number.to_string(), variant="soft", color_scheme="gray"
                            ),
                            rx.text(
                                cond_value(row.summary != "", row.summary, "No summary"),
                                size="2",
                                flex="1",
                            ),
                            rx.text(
                                row.created, size="1", color_scheme="gray", white_space="nowrap"
                            ),
                            align="center",
                            spacing="2",
                            width="100%",
                            data_testid="agent-version-row",
                        ),
                    ),
                    spacing="2",
                    width="100%",
                ),
                rx.text("Nothing published yet.", size="2", color_scheme="gray"),
            ),
            width="380px",
            max_height="360px",
            overflow_y="auto",
        ),
    )


def publish_controls(blocked: rx.Var[bool]) -> rx.Component:
    """Badge, Publish (disabled while `blocked`), Unpublish when published, versions list."""
    return rx.hstack(
        rx.badge(
            VersionsState.badge_label,
            variant="soft",
            color_scheme=cond_value(VersionsState.status == "published", "green", "gray"),
            data_testid="agent-publish-status",
        ),
        _versions_list(),
        rx.cond(VersionsState.status == "published", _unpublish_button(), rx.fragment()),
        _publish_dialog(blocked),
        align="center",
        spacing="2",
        margin_left="auto",
    )
