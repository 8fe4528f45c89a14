"""The Preview's MCP servers picker: the bound servers, each with its default tool policy
(Off / Allow / Ask), Required, and per-tool overrides from its last tested tool list; and the
App's other servers to bind. Every change saves at once (`PreviewState._save_mcp`)."""

from __future__ import annotations

import reflex as rx
from reflex.vars import ObjectVar

from mosoo_web.pages.preview.mcp_rows import SERVER_DEFAULT, McpRow, McpToolRow
from mosoo_web.pages.preview.state import PreviewState
from mosoo_web.reflex_typing import cond_value
from mosoo_web.state.session import SessionState


def _server_href(row: ObjectVar[McpRow]) -> rx.Var[str]:
    """The server's page on the MCP servers page (its Test connection, its Enabled switch)."""
    return "/apps/" + SessionState.current_app_id + "/mcp/" + row.server_id.to(str)


def _default_control(row: ObjectVar[McpRow], with_ask: bool) -> rx.Component:
    items = [
        rx.segmented_control.item("Off", value="off"),
        rx.segmented_control.item("Allow", value="allow"),
    ]
    if with_ask:
        items.append(rx.segmented_control.item("Ask", value="ask"))
    return rx.segmented_control.root(
        *items,
        value=row.default,
        on_change=lambda value: PreviewState.set_mcp_default(row.server_id, value),
        size="1",
        data_testid="agent-mcp-default",
    )


def _tool_row(row: ObjectVar[McpRow], tool: ObjectVar[McpToolRow]) -> rx.Component:
    return rx.hstack(
        rx.text(
            tool.name,
            size="1",
            font_family="monospace",
            flex="1",
            min_width="0",
            truncate=True,
            data_testid="agent-mcp-tool-name",
        ),
        rx.select.root(
            rx.select.trigger(size="1", data_testid="agent-mcp-tool-policy"),
            rx.select.content(
                rx.select.item("Server default", value=SERVER_DEFAULT),
                rx.select.item("Off", value="off"),
                rx.select.item("Allow", value="allow"),
                rx.cond(
                    PreviewState.can_ask | (tool.policy == "ask"),
                    rx.select.item("Ask", value="ask"),
                    rx.fragment(),
                ),
            ),
            value=tool.policy,
            on_change=lambda value: PreviewState.set_mcp_tool(row.server_id, tool.name, value),
            size="1",
        ),
        align="center",
        width="100%",
        data_testid="agent-mcp-tool",
    )


def _tools(row: ObjectVar[McpRow]) -> rx.Component:
    return rx.cond(
        row.tools.length() > 0,
        rx.el.details(
            rx.el.summary(
                rx.text(
                    "Tool overrides (",
                    row.overrides.to_string(),
                    " of ",
                    row.tools.length().to_string(),
                    ")",
                    size="1",
                    color_scheme="gray",
                    as_="span",
                ),
                cursor="pointer",
                data_testid="agent-mcp-tools-toggle",
            ),
            rx.vstack(
                rx.foreach(row.tools, lambda tool: _tool_row(row, tool)),
                spacing="1",
                width="100%",
                padding_top="4px",
            ),
            width="100%",
        ),
        rx.cond(
            row.missing,
            rx.fragment(),
            rx.text(
                "No tools known yet: ",
                rx.link("test its connection", href=_server_href(row)),
                " to set a policy per tool.",
                size="1",
                color_scheme="gray",
                data_testid="agent-mcp-no-tools",
            ),
        ),
    )


def _bound_server(row: ObjectVar[McpRow]) -> rx.Component:
    return rx.box(
        rx.vstack(
            rx.hstack(
                rx.cond(
                    row.missing,
                    rx.badge("Missing", color_scheme="amber", variant="soft"),
                    rx.fragment(),
                ),
                rx.cond(
                    row.disabled,
                    rx.badge(
                        "Disabled",
                        color_scheme="amber",
                        variant="soft",
                        data_testid="agent-mcp-disabled",
                    ),
                    rx.fragment(),
                ),
                rx.text(
                    row.label,
                    size="2",
                    weight="bold",
                    font_family="monospace",
                    flex="1",
                    min_width="0",
                    truncate=True,
                    data_testid="agent-mcp-server-name",
                ),
                rx.cond(
                    row.missing,
                    rx.fragment(),
                    rx.cond(
                        PreviewState.can_ask | (row.default == "ask"),
                        _default_control(row, True),
                        _default_control(row, False),
                    ),
                ),
                rx.icon_button(
                    rx.icon("x", size=12),
                    size="1",
                    variant="ghost",
                    color_scheme="gray",
                    type="button",
                    on_click=PreviewState.remove_mcp_server(row.server_id),
                    aria_label="Remove",
                    data_testid="agent-mcp-servers-remove",
                ),
                align="center",
                spacing="2",
                width="100%",
            ),
            rx.cond(
                row.disabled,
                rx.text(
                    "Disabled: the Agent cannot run until you ",
                    rx.link(
                        "enable it",
                        href=_server_href(row),
                        data_testid="agent-mcp-enable",
                    ),
                    " or remove it here.",
                    size="1",
                    color_scheme="amber",
                ),
                rx.fragment(),
            ),
            rx.cond(
                row.missing,
                rx.fragment(),
                rx.vstack(
                    rx.hstack(
                        rx.switch(
                            checked=row.required,
                            on_change=lambda value: PreviewState.set_mcp_required(
                                row.server_id, value
                            ),
                            size="1",
                            data_testid="agent-mcp-required",
                        ),
                        rx.text(
                            cond_value(
                                row.required,
                                "Required: a run fails when the server cannot be reached",
                                "Required (off: a run goes on without it when unreachable)",
                            ),
                            size="1",
                            as_="label",
                        ),
                        align="center",
                        spacing="2",
                    ),
                    _tools(row),
                    spacing="2",
                    width="100%",
                ),
            ),
            spacing="2",
            width="100%",
        ),
        padding="8px 10px",
        border=f"1px solid {rx.color('gray', 5)}",
        border_radius="8px",
        width="100%",
        data_testid="agent-mcp-servers-bound",
    )


def mcp_picker() -> rx.Component:
    """The bound servers and the App's others to add."""
    return rx.vstack(
        rx.foreach(PreviewState.mcp_rows, _bound_server),
        rx.cond(
            PreviewState.unbound_mcp_servers.length() > 0,
            rx.select.root(
                rx.select.trigger(
                    placeholder="Add an MCP server", data_testid="agent-mcp-servers-add"
                ),
                rx.select.content(
                    rx.foreach(
                        PreviewState.unbound_mcp_servers,
                        lambda option: rx.select.item(
                            cond_value(option.enabled, option.name, option.name + " (disabled)"),
                            value=option.id,
                        ),
                    )
                ),
                value="",
                on_change=PreviewState.add_mcp_server,
            ),
            rx.text(
                cond_value(
                    PreviewState.mcp_options.length() > 0,
                    "Every MCP server of this App is bound. ",
                    "No MCP servers in this App yet. ",
                ),
                rx.link(
                    "Manage MCP servers",
                    href="/apps/" + SessionState.current_app_id + "/mcp",
                    data_testid="agent-mcp-servers-manage",
                ),
                size="1",
                color_scheme="gray",
                data_testid="agent-mcp-servers-empty",
            ),
        ),
        spacing="2",
        width="100%",
    )
