"""`/apps/[app_id]/mcp`: the App's MCP servers by name with their URL's host, authentication,
enabled switch, last Test connection (and how many tools it found) and the Agents using
them; Add, Open and Delete (refused while in use, naming the users)."""

from __future__ import annotations

import asyncio
import dataclasses

import reflex as rx
from reflex.event import EventSpec
from reflex.vars import ObjectVar, StringVar

from mosoo_core.errors import Conflict, NotFound
from mosoo_web.components.dialogs import confirm_dialog, trash_button
from mosoo_web.components.forms import error_text
from mosoo_web.components.layout import (
    console_shell,
    empty_note,
    empty_state,
    item_card,
    list_page,
)
from mosoo_web.pages.mcp_servers.services import McpServerRow, delete, list_rows, set_enabled
from mosoo_web.reflex_typing import cond_value, event, match_component
from mosoo_web.state.session import SessionState, current_app_ids


def mcp_href(suffix: str | StringVar[str] = "") -> rx.Var[str]:
    """The MCP servers page of the current App, or (`suffix`) one server on it."""
    return "/apps/" + SessionState.current_app_id + "/mcp" + suffix


class McpServersState(rx.State):
    rows: rx.Field[list[McpServerRow]] = rx.field(default_factory=list)
    loaded: rx.Field[bool] = rx.field(False)

    async def _reload(self, account_id: str, app_id: str) -> None:
        self.rows = await asyncio.to_thread(list_rows, account_id, app_id)

    @event
    async def load(self) -> None:
        """After the App guard: the App's MCP servers."""
        self.loaded = False
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

    async def _gone(self, account_id: str, app_id: str, error: NotFound) -> EventSpec:
        await self._reload(account_id, app_id)
        return rx.toast.error(error.message)

    @event
    async def set_enabled(self, server_id: str, enabled: bool) -> EventSpec:
        """Saved at once: an Agent bound to a disabled server is not ready."""
        account_id, app_id = await current_app_ids(self)
        try:
            name = await asyncio.to_thread(set_enabled, account_id, app_id, server_id, enabled)
        except NotFound as error:
            return await self._gone(account_id, app_id, error)
        await self._reload(account_id, app_id)
        return rx.toast.success(f"{name} {'enabled' if enabled else 'disabled'}.")

    @event
    async def delete(self, server_id: str) -> EventSpec | None:
        """Refused while an Agent, a published version or a running thread uses it: the
        service's message (naming them) shows on the row, which stays."""
        account_id, app_id = await current_app_ids(self)
        try:
            await asyncio.to_thread(delete, account_id, app_id, server_id)
        except Conflict as error:
            self.rows = [
                dataclasses.replace(row, delete_error=error.message if row.id == server_id else "")
                for row in self.rows
            ]
            return None
        except NotFound as error:
            return await self._gone(account_id, app_id, error)
        await self._reload(account_id, app_id)
        return rx.toast.success("MCP server deleted.")


def _test_summary(row: ObjectVar[McpServerRow]) -> rx.Component:
    """The last Test connection: its tools, why it failed, or that there was none."""
    return match_component(
        row.test_state,
        (
            "ok",
            rx.badge(
                rx.icon("check", size=12),
                row.tool_count.to_string(),
                cond_value(row.tool_count == 1, " tool", " tools"),
                variant="soft",
                color_scheme="green",
                data_testid="mcp-server-test",
            ),
        ),
        (
            "failed",
            rx.badge(
                rx.icon("circle-x", size=12),
                "Test failed",
                variant="soft",
                color_scheme="red",
                title=row.test_error,
                data_testid="mcp-server-test",
            ),
        ),
        rx.badge("Not tested", variant="soft", color_scheme="gray", data_testid="mcp-server-test"),
    )


def _delete_button(row: ObjectVar[McpServerRow]) -> rx.Component:
    return confirm_dialog(
        "Delete " + row.name.to(str) + "?",
        "Its credentials go with it. Deleting is refused while an Agent or a published "
        "version uses it.",
        confirm="Delete",
        on_confirm=McpServersState.delete(row.id),
        confirm_test_id="mcp-server-delete-confirm",
        trigger=trash_button("Delete", "mcp-server-delete"),
    )


def _server_card(row: ObjectVar[McpServerRow]) -> rx.Component:
    return item_card(
        "plug",
        mcp_href("/" + row.id.to(str)),
        title=(
            rx.text(
                row.name,
                size="3",
                weight="bold",
                font_family="monospace",
                data_testid="mcp-server-name",
            ),
            _test_summary(row),
            rx.cond(
                row.enabled,
                rx.fragment(),
                rx.badge("Disabled", color_scheme="amber", data_testid="mcp-server-disabled"),
            ),
        ),
        lines=(
            rx.text(
                rx.text(row.host, as_="span", data_testid="mcp-server-host"),
                " · ",
                rx.text(row.auth_label, as_="span", data_testid="mcp-server-auth"),
                rx.cond(
                    row.tested != "",
                    rx.text(" · Tested ", row.tested, as_="span"),
                    rx.fragment(),
                ),
                size="1",
                color_scheme="gray",
            ),
            rx.cond(
                row.used_by != "",
                rx.text(
                    "Used by " + row.used_by.to(str),
                    size="1",
                    color_scheme="gray",
                    data_testid="mcp-server-used-by",
                ),
                rx.fragment(),
            ),
        ),
        actions=rx.hstack(
            rx.tooltip(
                rx.switch(
                    checked=row.enabled,
                    on_change=lambda value: McpServersState.set_enabled(row.id, value),
                    data_testid="mcp-server-enabled",
                ),
                content=cond_value(row.enabled, "Enabled", "Disabled"),
            ),
            _delete_button(row),
            spacing="3",
            align="center",
        ),
        error=error_text(row.delete_error, "mcp-server-delete-error"),
        test_id="mcp-server",
    )


def _content() -> rx.Component:
    return list_page(
        "MCP servers",
        rx.link(
            rx.button(rx.icon("plus", size=16), "Add MCP server", size="3"),
            href=mcp_href("/new"),
            data_testid="new-mcp-server",
        ),
        "Remote tools your Agents can use, over MCP's Streamable HTTP. Credentials stay "
        "with Mosoo: the sandbox reaches a server only through Mosoo, which adds them.",
        loaded=McpServersState.loaded,
        rows=McpServersState.rows,
        row=_server_card,
        empty=empty_state(
            "plug",
            empty_note(
                "No MCP servers yet. Add one, test its connection to see its tools, "
                "then bind it to an Agent in Preview."
            ),
            test_id="mcp-servers-empty",
        ),
    )


def mcp_servers_page() -> rx.Component:
    return console_shell(_content)
