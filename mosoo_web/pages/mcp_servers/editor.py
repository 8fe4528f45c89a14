"""`/apps/[app_id]/mcp/[server_id]`: one MCP server's form (name, URL, authentication with
write-only credentials, enabled) with one Save, OAuth's Connect, and Test connection with
the tool browser (each tool's name, description and input schema); `new` adds one."""

from __future__ import annotations

from typing import Any

import reflex as rx
from reflex.vars import ObjectVar

from mosoo_core.environments import MASK
from mosoo_web.components.chat import MONO
from mosoo_web.components.forms import choice_cards, error_text, labelled, save_bar
from mosoo_web.components.layout import (
    app_page,
    back_link,
    card_section,
    console_shell,
    missing_card,
)
from mosoo_web.pages.mcp_servers.editor_state import McpServerEditorState as State
from mosoo_web.pages.mcp_servers.list import mcp_href
from mosoo_web.pages.mcp_servers.services import AUTH_CHOICES, ToolRow
from mosoo_web.reflex_typing import cond_value, match_component


def _error(field: str) -> rx.Var[str]:
    return State.field_errors.to(dict[str, str]).get(field, "")


def _hint(text: str | rx.Var[str], test_id: str = "") -> rx.Component:
    props: dict[str, Any] = {"data_testid": test_id} if test_id else {}
    return rx.text(text, size="1", color_scheme="gray", **props)


def _input(name: str, value: rx.Var[str] | str, test_id: str, **props: Any) -> rx.Component:
    return rx.input(name=name, default_value=value, width="100%", data_testid=test_id, **props)


def _secret_input(name: str, stored: rx.Var[bool], test_id: str, empty: str) -> rx.Component:
    """A write-only field: never filled in, masked when a value is stored (empty keeps it)."""
    return rx.input(
        name=name,
        type="password",
        auto_complete="new-password",
        placeholder=cond_value(stored, MASK, empty),
        width="100%",
        data_testid=test_id,
    )


def _kept_hint(stored: rx.Var[bool], test_id: str) -> rx.Component:
    return rx.cond(
        stored, _hint("Stored. Leave empty to keep the stored value.", test_id), rx.fragment()
    )


def _header() -> rx.Component:
    return rx.hstack(
        back_link("MCP servers", mcp_href(), "mcp-servers-back"),
        rx.text("/", color_scheme="gray", size="2"),
        rx.heading(
            cond_value(State.is_new, "Add MCP server", State.name),
            size="5",
            weight="bold",
            font_family=cond_value(State.is_new, "inherit", "monospace"),
            data_testid="page-title",
        ),
        rx.cond(
            State.stored_enabled | State.is_new,
            rx.fragment(),
            rx.badge("Disabled", color_scheme="amber", data_testid="mcp-server-disabled"),
        ),
        align="center",
        spacing="2",
        width="100%",
        margin_bottom="16px",
    )


def _oauth_notice() -> rx.Component:
    return rx.cond(
        State.oauth_message != "",
        rx.callout(
            State.oauth_message,
            icon=cond_value(State.oauth_ok, "circle-check", "triangle-alert"),
            color_scheme=cond_value(State.oauth_ok, "green", "red"),
            width="100%",
            data_testid="mcp-oauth-notice",
        ),
        rx.fragment(),
    )


def _server_fields() -> rx.Component:
    return card_section(
        "Server",
        "The model sees each of its tools as <name>__<tool>.",
        labelled(
            "Name",
            _input(
                "name",
                State.form_name,
                "mcp-name-input",
                placeholder="e.g. github",
                max_length=32,
                font_family="monospace",
            ),
            error=_error("name"),
            test_id="mcp-name",
            hint=_hint("Lower-case letters and digits, with single - or _ between them."),
        ),
        labelled(
            "URL",
            _input(
                "url",
                State.form_url,
                "mcp-url-input",
                placeholder="https://mcp.example.com/mcp",
                max_length=2000,
                font_family="monospace",
            ),
            error=_error("url"),
            test_id="mcp-url",
            hint=_hint("Its Streamable HTTP endpoint. Credentials go below, not in the URL."),
        ),
        labelled(
            "Description",
            _input(
                "description",
                State.form_description,
                "mcp-description-input",
                placeholder="What its tools are for (optional)",
                max_length=500,
            ),
            error=_error("description"),
            test_id="mcp-description",
        ),
        rx.hstack(
            rx.switch(
                checked=State.enabled, on_change=State.set_enabled, data_testid="mcp-enabled"
            ),
            rx.text("Enabled", size="2", as_="label"),
            align="center",
            spacing="2",
        ),
        _hint("An Agent bound to a disabled server cannot run until it is enabled or removed."),
        error_text(_error("enabled"), "mcp-enabled-error", "1"),
    )


def _bearer_fields() -> rx.Component:
    return labelled(
        "Bearer token",
        _secret_input("bearer_token", State.credential_stored, "mcp-bearer-token", "Token"),
        error=_error("bearer_token"),
        test_id="mcp-bearer-token",
        hint=_kept_hint(State.credential_stored, "mcp-bearer-token-hint"),
    )


def _headers_fields() -> rx.Component:
    return labelled(
        "Headers",
        rx.text_area(
            name="headers",
            placeholder="X-Api-Key: …\nX-Org: …",
            rows="3",
            resize="vertical",
            font_family="monospace",
            width="100%",
            data_testid="mcp-headers",
        ),
        error=_error("headers"),
        test_id="mcp-headers",
        hint=rx.cond(
            State.credential_stored,
            _hint(
                "Stored: " + State.header_names.join(", ") + ". Leave empty to keep them, or "
                "enter every header (Name: value, one a line) to replace them.",
                "mcp-headers-hint",
            ),
            _hint("Name: value, one a line. The values are stored encrypted, never shown."),
        ),
    )


def _oauth_connection() -> rx.Component:
    """Connected or not, and Connect (once the OAuth settings are saved)."""
    return rx.cond(
        State.stored_auth_kind == "oauth",
        rx.hstack(
            rx.cond(
                State.oauth_connected,
                rx.badge(
                    rx.icon("check", size=12),
                    "Connected " + State.oauth_connected_at,
                    color_scheme="green",
                    variant="soft",
                    data_testid="mcp-oauth-status",
                ),
                rx.badge(
                    "Not connected",
                    color_scheme="amber",
                    variant="soft",
                    data_testid="mcp-oauth-status",
                ),
            ),
            rx.spacer(),
            rx.button(
                rx.icon("log-in", size=14),
                cond_value(State.oauth_connected, "Reconnect", "Connect"),
                type="button",
                size="2",
                on_click=State.connect,
                data_testid="mcp-oauth-connect",
            ),
            rx.cond(
                State.oauth_connected,
                rx.button(
                    "Disconnect",
                    type="button",
                    size="2",
                    variant="soft",
                    color_scheme="gray",
                    on_click=State.disconnect,
                    data_testid="mcp-oauth-disconnect",
                ),
                rx.fragment(),
            ),
            align="center",
            spacing="2",
            width="100%",
        ),
        _hint("Save the OAuth settings, then Connect signs you in at the authorization server."),
    )


def _oauth_fields() -> rx.Component:
    return rx.vstack(
        _oauth_connection(),
        rx.hstack(
            labelled(
                "Client id",
                _input(
                    "oauth_client_id",
                    State.form_oauth_client_id,
                    "mcp-oauth-client-id",
                    max_length=500,
                    font_family="monospace",
                ),
                error=_error("oauth_client_id"),
                test_id="mcp-oauth-client-id",
            ),
            labelled(
                "Client secret",
                _secret_input(
                    "oauth_client_secret",
                    State.oauth_has_client_secret,
                    "mcp-oauth-client-secret",
                    "None for a public client",
                ),
                error=_error("oauth_client_secret"),
                test_id="mcp-oauth-client-secret",
                hint=_kept_hint(State.oauth_has_client_secret, "mcp-oauth-client-secret-hint"),
            ),
            spacing="3",
            width="100%",
            align="start",
        ),
        labelled(
            "Scopes",
            _input(
                "oauth_scopes",
                State.form_oauth_scopes,
                "mcp-oauth-scopes",
                placeholder="Space separated (optional)",
                max_length=1000,
                font_family="monospace",
            ),
            error=_error("oauth_scopes"),
            test_id="mcp-oauth-scopes",
        ),
        labelled(
            "Authorization endpoint",
            _input(
                "oauth_authorization_endpoint",
                State.form_oauth_authorization_endpoint,
                "mcp-oauth-authorization-endpoint",
                placeholder="Discovered from the server when left empty",
                font_family="monospace",
            ),
            error=_error("oauth_authorization_endpoint"),
            test_id="mcp-oauth-authorization-endpoint",
        ),
        labelled(
            "Token endpoint",
            _input(
                "oauth_token_endpoint",
                State.form_oauth_token_endpoint,
                "mcp-oauth-token-endpoint",
                placeholder="Discovered from the server when left empty",
                font_family="monospace",
            ),
            error=_error("oauth_token_endpoint"),
            test_id="mcp-oauth-token-endpoint",
        ),
        _hint(
            "Register this redirect URI with the provider: " + State.redirect_uri,
            "mcp-oauth-redirect-uri",
        ),
        spacing="3",
        width="100%",
    )


def _authentication() -> rx.Component:
    return card_section(
        "Authentication",
        "Credentials are stored encrypted and never shown again, nor given to a sandbox: "
        "Mosoo adds them to each request it forwards.",
        labelled(
            "Kind",
            choice_cards(
                AUTH_CHOICES,
                State.auth_kind,
                State.set_auth_kind,
                "mcp-auth",
                columns=rx.breakpoints(initial="1", sm="2"),
            ),
            error=_error("auth_kind"),
            test_id="mcp-auth-kind",
        ),
        match_component(
            State.auth_kind,
            ("bearer", _bearer_fields()),
            ("headers", _headers_fields()),
            ("oauth", _oauth_fields()),
            rx.fragment(),
        ),
    )


def _save_bar() -> rx.Component:
    return save_bar(
        _error("form"),
        is_new=State.is_new,
        create_label="Add server",
        saving=State.saving,
        test_id="mcp-save",
    )


def _form() -> rx.Component:
    return rx.form(
        rx.vstack(
            _server_fields(),
            _authentication(),
            _save_bar(),
            spacing="4",
            width="100%",
        ),
        # Re-mounted with the saved server after a save, never after a refusal.
        key=State.form_version,
        on_submit=State.save,
        reset_on_submit=False,
        width="100%",
    )


def _schema(tool: ObjectVar[ToolRow]) -> rx.Component:
    return rx.el.details(
        rx.el.summary(
            rx.text(
                "Input schema",
                rx.cond(
                    tool.properties != "",
                    rx.text(" (", tool.properties, ")", as_="span", font_family=MONO),
                    rx.fragment(),
                ),
                size="1",
                color_scheme="gray",
                as_="span",
            ),
            cursor="pointer",
            data_testid="mcp-tool-schema-toggle",
        ),
        rx.el.pre(
            tool.schema,
            margin="6px 0 0 0",
            width="100%",
            max_height="320px",
            overflow="auto",
            padding="8px 10px",
            border_radius="6px",
            background=rx.color("gray", 2),
            border=f"1px solid {rx.color('gray', 4)}",
            font_family=MONO,
            font_size="12px",
            line_height="1.5",
            white_space="pre-wrap",
            overflow_wrap="anywhere",
            data_testid="mcp-tool-schema",
        ),
    )


def _tool(tool: ObjectVar[ToolRow]) -> rx.Component:
    return rx.box(
        rx.vstack(
            rx.hstack(
                rx.icon("wrench", size=14, color=rx.color("accent", 11)),
                rx.text(
                    tool.name,
                    size="2",
                    weight="bold",
                    font_family=MONO,
                    data_testid="mcp-tool-name",
                ),
                rx.cond(
                    tool.title != "",
                    rx.text(tool.title, size="1", color_scheme="gray"),
                    rx.fragment(),
                ),
                align="center",
                spacing="2",
            ),
            rx.cond(
                tool.description != "",
                rx.text(tool.description, size="2", data_testid="mcp-tool-description"),
                rx.fragment(),
            ),
            _schema(tool),
            spacing="1",
            width="100%",
        ),
        padding="10px 12px",
        border=f"1px solid {rx.color('gray', 5)}",
        border_radius="8px",
        width="100%",
        data_testid="mcp-tool",
    )


def _test_status() -> rx.Component:
    return match_component(
        State.test_state,
        (
            "ok",
            rx.badge(
                rx.icon("check", size=12),
                "Connected " + State.tested,
                color_scheme="green",
                variant="soft",
                data_testid="mcp-test-status",
            ),
        ),
        (
            "failed",
            rx.badge(
                rx.icon("circle-x", size=12),
                "Failed " + State.tested,
                color_scheme="red",
                variant="soft",
                data_testid="mcp-test-status",
            ),
        ),
        rx.badge(
            "Not tested yet", color_scheme="gray", variant="soft", data_testid="mcp-test-status"
        ),
    )


def _tool_browser() -> rx.Component:
    """Test connection and what it found: the server's tools, or why it failed."""
    return rx.card(
        rx.vstack(
            rx.hstack(
                rx.heading("Tools", size="4"),
                _test_status(),
                rx.spacer(),
                rx.button(
                    rx.icon("plug-zap", size=14),
                    "Test connection",
                    type="button",
                    size="2",
                    loading=State.testing,
                    on_click=State.test_connection,
                    data_testid="mcp-test",
                ),
                align="center",
                spacing="2",
                width="100%",
            ),
            _hint(
                "Test connection opens an MCP session with the saved settings and lists the "
                "server's tools. Preview sets a policy for each of them."
            ),
            rx.cond(
                State.test_error != "",
                rx.callout(
                    State.test_error,
                    icon="triangle-alert",
                    color_scheme="red",
                    size="1",
                    width="100%",
                    data_testid="mcp-test-error",
                ),
                rx.fragment(),
            ),
            rx.cond(
                State.tools.length() > 0,
                rx.vstack(
                    rx.cond(
                        State.test_state == "failed",
                        _hint("From the last test that worked:"),
                        rx.fragment(),
                    ),
                    rx.foreach(State.tools, _tool),
                    spacing="2",
                    width="100%",
                    data_testid="mcp-tools",
                ),
                rx.cond(
                    State.test_state == "ok",
                    _hint("The server offers no tools.", "mcp-tools-none"),
                    rx.fragment(),
                ),
            ),
            rx.cond(
                State.used_by.length() > 0,
                _hint("Used by " + State.used_by.join(", "), "mcp-used-by"),
                rx.fragment(),
            ),
            spacing="3",
            width="100%",
        ),
        width="100%",
        size="3",
        data_testid="mcp-tool-browser",
    )


def _content() -> rx.Component:
    return app_page(
        _header(),
        rx.cond(
            State.loaded,
            rx.vstack(
                _oauth_notice(),
                _form(),
                rx.cond(State.is_new, rx.fragment(), _tool_browser()),
                spacing="4",
                width="100%",
            ),
            rx.fragment(),
        ),
        spacing="0",
        item_missing=State.missing,
        item_missing_card=missing_card(
            "MCP server not found", "Back to MCP servers", mcp_href(), "mcp-server-not-found"
        ),
    )


def mcp_server_page() -> rx.Component:
    return console_shell(_content, max_width="960px")
