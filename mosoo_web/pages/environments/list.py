"""`/apps/[app_id]/environments`: the App's environments (the default first) with their
current revision, network policy and packages; New, Open, Rename, Fork and Delete."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import reflex as rx
from reflex.event import EventSpec
from reflex.vars import ObjectVar, StringVar

from mosoo_core.errors import Conflict, InvalidInput, NotFound
from mosoo_web.components.dialogs import confirm_dialog, form_dialog, trash_button
from mosoo_web.components.forms import error_text, labelled
from mosoo_web.components.layout import console_shell, item_card, list_page
from mosoo_web.pages.environments.labels import POLICY_COLORS
from mosoo_web.pages.environments.services import EnvironmentRow, delete, fork, list_rows, rename
from mosoo_web.reflex_typing import event, match_value
from mosoo_web.state.session import SessionState, current_app_ids


def environments_href(suffix: str | StringVar[str] = "") -> rx.Var[str]:
    """The Environments page of the current App, or (`suffix`) one environment on it."""
    return "/apps/" + SessionState.current_app_id + "/environments" + suffix


class EnvironmentsState(rx.State):
    rows: rx.Field[list[EnvironmentRow]] = rx.field(default_factory=list)
    loaded: rx.Field[bool] = rx.field(False)
    # The row whose rename dialog is open ("" for none) and why its new name was refused.
    rename_id: rx.Field[str] = rx.field("")
    rename_error: rx.Field[str] = rx.field("")

    async def _reload(self, account_id: str, app_id: str) -> None:
        self.rows = await asyncio.to_thread(list_rows, account_id, app_id)

    @event
    async def load(self) -> None:
        """After the App guard: the App's environments (its default is made if missing)."""
        self.loaded, self.rename_id, self.rename_error = False, "", ""
        session = await self.get_state(SessionState)
        if session.app_missing or not session.current_app_id:
            self.rows = []  # not found, or the guard has just sent the tab to /login
            return
        account_id, app_id = await current_app_ids(self)
        try:
            await self._reload(account_id, app_id)
        except NotFound:
            session.app_missing = True
            self.rows = []
        self.loaded = True

    def _show_delete_error(self, environment_id: str, message: str) -> None:
        self.rows = [
            dataclasses.replace(row, delete_error=message if row.id == environment_id else "")
            for row in self.rows
        ]

    async def _gone(self, account_id: str, app_id: str, error: NotFound) -> EventSpec:
        await self._reload(account_id, app_id)
        return rx.toast.error(error.message)

    @event
    def open_rename(self, environment_id: str, is_open: bool) -> None:
        self.rename_id = environment_id if is_open else ""
        self.rename_error = ""

    @event
    async def rename(self, form: dict[str, Any]) -> EventSpec | None:
        account_id, app_id = await current_app_ids(self)
        self.rename_error = ""
        try:
            name = await asyncio.to_thread(
                rename, account_id, app_id, self.rename_id, str(form.get("name", ""))
            )
        except InvalidInput as error:
            self.rename_error = error.message
            return None
        except NotFound as error:
            self.rename_id = ""
            return await self._gone(account_id, app_id, error)
        self.rename_id = ""
        await self._reload(account_id, app_id)
        return rx.toast.success(f"Renamed to {name}.")

    @event
    async def fork(self, environment_id: str) -> EventSpec:
        account_id, app_id = await current_app_ids(self)
        try:
            name = await asyncio.to_thread(fork, account_id, app_id, environment_id)
        except InvalidInput as error:  # the copy's name is taken (or too long)
            return rx.toast.error(error.message)
        except NotFound as error:
            return await self._gone(account_id, app_id, error)
        await self._reload(account_id, app_id)
        return rx.toast.success(f"Created {name}.")

    @event
    async def delete(self, environment_id: str) -> EventSpec | None:
        """Refused while an Agent, a published version or a running thread uses it: the
        service's message (naming them) shows on the row, which stays."""
        account_id, app_id = await current_app_ids(self)
        try:
            await asyncio.to_thread(delete, account_id, app_id, environment_id)
        except Conflict as error:
            self._show_delete_error(environment_id, error.message)
            return None
        except NotFound as error:
            return await self._gone(account_id, app_id, error)
        await self._reload(account_id, app_id)
        return rx.toast.success("Environment deleted.")


def _policy_badge(row: ObjectVar[EnvironmentRow]) -> rx.Component:
    return rx.badge(
        rx.cond(
            row.network_policy == "full",
            rx.icon("triangle-alert", size=12),
            rx.icon("globe", size=12),
        ),
        row.policy_label,
        variant="soft",
        color_scheme=match_value(row.network_policy, *POLICY_COLORS.items(), "gray"),
        data_testid="environment-policy",
    )


def _rename_dialog(row: ObjectVar[EnvironmentRow]) -> rx.Component:
    return form_dialog(
        rx.button(
            rx.icon("pencil", size=14),
            "Rename",
            size="1",
            variant="soft",
            color_scheme="gray",
            data_testid="environment-rename",
        ),
        "Rename environment",
        "Agents bound to it keep it: they refer to it by id, not by name.",
        labelled(
            "Name",
            rx.input(
                name="name",
                default_value=row.name,
                max_length=80,
                width="100%",
                auto_focus=True,
                data_testid="environment-rename-input",
            ),
            error=EnvironmentsState.rename_error,
            test_id="environment-rename",
        ),
        submit=rx.button("Rename", type="submit", data_testid="environment-rename-submit"),
        on_submit=EnvironmentsState.rename,
        open=EnvironmentsState.rename_id == row.id,
        on_open_change=lambda is_open: EnvironmentsState.open_rename(row.id, is_open),
        max_width="440px",
    )


def _delete_button(row: ObjectVar[EnvironmentRow]) -> rx.Component:
    return confirm_dialog(
        "Delete " + row.name.to(str) + "?",
        "Threads that already started with it keep their revision. Deleting is refused while "
        "an Agent is bound to it.",
        confirm="Delete",
        on_confirm=EnvironmentsState.delete(row.id),
        confirm_test_id="environment-delete-confirm",
        trigger=trash_button("Delete", "environment-delete"),
    )


def _environment_card(row: ObjectVar[EnvironmentRow]) -> rx.Component:
    return item_card(
        "package",
        environments_href("/" + row.id.to(str)),
        title=(
            rx.text(row.name, size="3", weight="bold", data_testid="environment-name"),
            rx.cond(
                row.is_default,
                rx.badge("Default", color_scheme="green", data_testid="environment-default-badge"),
                rx.fragment(),
            ),
            _policy_badge(row),
        ),
        lines=(
            rx.text(
                rx.text(
                    "Revision ",
                    row.revision.to_string(),
                    as_="span",
                    data_testid="environment-revision",
                ),
                " · ",
                rx.text(row.packages_label, as_="span", data_testid="environment-packages"),
                " · Updated ",
                row.updated,
                size="1",
                color_scheme="gray",
            ),
        ),
        actions=rx.hstack(
            _rename_dialog(row),
            rx.button(
                rx.icon("copy", size=14),
                "Fork",
                size="1",
                variant="soft",
                color_scheme="gray",
                on_click=EnvironmentsState.fork(row.id),
                data_testid="environment-fork",
            ),
            # The default cannot be deleted: every Agent without one runs on it.
            rx.cond(row.is_default, rx.fragment(), _delete_button(row)),
            spacing="2",
            align="center",
        ),
        error=error_text(row.delete_error, "environment-delete-error"),
        test_id="environment",
    )


def _content() -> rx.Component:
    return list_page(
        "Environments",
        rx.link(
            rx.button(rx.icon("plus", size=16), "New environment", size="3"),
            href=environments_href("/new"),
            data_testid="new-environment",
        ),
        "What an Agent's sandbox starts from: a setup script, variables and secrets, and "
        "what it may reach on the network. Every save is a new revision; a thread keeps the "
        "revision it started with.",
        loaded=EnvironmentsState.loaded,
        rows=EnvironmentsState.rows,
        row=_environment_card,
    )


def environments_page() -> rx.Component:
    return console_shell(_content)
