"""The `mosoo_core.mcp` calls the MCP servers pages make (each in a worker thread,
`asyncio.to_thread`) and the plain rows they hand back to the states.

Credentials never reach a row: a row says whether one is stored (`has_credential`, the
header names, `oauth_has_client_secret`) and a form can only send a new value or nothing,
which keeps the stored one. A save sends only what the form changed: the service forgets
the OAuth tokens whenever the client id or an endpoint is given, even unchanged."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from mosoo_core import mcp
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.errors import InvalidInput
from mosoo_web.formatting import relative_time

AUTH_KINDS = ("none", "bearer", "headers", "oauth")
AUTH_LABELS = {
    "none": "No authentication",
    "bearer": "Bearer token",
    "headers": "Custom headers",
    "oauth": "OAuth",
}
# What the editor's "Authentication" choice offers: (value, label, description).
AUTH_CHOICES = (
    ("none", "None", "The server needs no credential."),
    ("bearer", "Bearer token", "Sent as Authorization: Bearer <token>."),
    ("headers", "Custom headers", "Headers such as X-Api-Key, with secret values."),
    ("oauth", "OAuth 2.1", "Authorization code with PKCE; you connect it in your browser."),
)


@dataclass
class McpServerRow:
    """One server in the list."""

    id: str = ""
    name: str = ""
    host: str = ""  # the URL's host (and port)
    auth_label: str = ""  # "Bearer token", "OAuth · connected", ...
    enabled: bool = True
    test_state: str = "untested"  # untested, ok, failed
    tested: str = ""  # "5 min ago"
    test_error: str = ""
    tool_count: int = 0
    used_by: str = ""  # "agent Helper, Helper version 2"
    delete_error: str = ""


@dataclass
class ToolRow:
    """One tool of the tool browser."""

    name: str = ""
    title: str = ""
    description: str = ""
    schema: str = ""  # the input schema, pretty JSON
    properties: str = ""  # its argument names, "city, units"


@dataclass(frozen=True)
class TestState:
    """The last Test connection as the editor shows it."""

    state: str  # untested, ok, failed
    tested: str  # "5 min ago", "" when never tested
    error: str
    tools: list[ToolRow]


@dataclass(frozen=True)
class EditorContent:
    """One server as its editor shows it."""

    id: str
    name: str
    description: str
    url: str
    auth_kind: str
    enabled: bool
    has_credential: bool
    header_names: list[str]
    oauth_client_id: str
    oauth_has_client_secret: bool
    oauth_scopes: str
    oauth_authorization_endpoint: str
    oauth_token_endpoint: str
    oauth_connected: bool
    oauth_connected_at: str  # "5 min ago", "" when not connected
    authorize_path: str
    used_by: list[str]
    test: TestState


@dataclass(frozen=True)
class StoredFields:
    """What the form was loaded with: a save sends only the fields that differ."""

    name: str = ""
    description: str = ""
    url: str = ""
    auth_kind: str = "none"
    enabled: bool = True
    oauth_client_id: str = ""
    oauth_scopes: str = ""
    oauth_authorization_endpoint: str = ""
    oauth_token_endpoint: str = ""


def url_host(url: str) -> str:
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return url
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return f"{host}:{port}" if port else host


def auth_label(view: mcp.McpServerView) -> str:
    label = AUTH_LABELS.get(view.auth_kind, view.auth_kind)
    if view.oauth is not None:
        label += " · connected" if view.oauth.connected else " · not connected"
    return label


def _test_state(view: mcp.McpServerView) -> str:
    if view.tested_at is None or view.test_ok is None:
        return "untested"
    return "ok" if view.test_ok else "failed"


def tool_rows(tools: list[mcp.McpToolView]) -> list[ToolRow]:
    rows = []
    for tool in tools:
        properties = tool.input_schema.get("properties")
        rows.append(
            ToolRow(
                name=tool.name,
                title=tool.title,
                description=tool.description,
                schema=json.dumps(tool.input_schema, indent=2, ensure_ascii=False),
                properties=", ".join(properties) if isinstance(properties, Mapping) else "",
            )
        )
    return rows


def _test(view: mcp.McpServerView, now: datetime) -> TestState:
    return TestState(
        state=_test_state(view),
        tested=relative_time(view.tested_at, now) if view.tested_at else "",
        error=view.test_error,
        tools=tool_rows(view.tools),
    )


def list_rows(account_id: str, app_id: str) -> list[McpServerRow]:
    with session_scope() as db:
        views = mcp.list_servers(db, account_id, app_id)
    now = utcnow()
    return [
        McpServerRow(
            id=view.id,
            name=view.name,
            host=url_host(view.url),
            auth_label=auth_label(view),
            enabled=view.enabled,
            test_state=_test_state(view),
            tested=relative_time(view.tested_at, now) if view.tested_at else "",
            test_error=view.test_error,
            tool_count=len(view.tools),
            used_by=", ".join(view.used_by),
        )
        for view in views
    ]


def _content(view: mcp.McpServerView) -> EditorContent:
    now = utcnow()
    oauth = view.oauth
    return EditorContent(
        id=view.id,
        name=view.name,
        description=view.description,
        url=view.url,
        auth_kind=view.auth_kind,
        enabled=view.enabled,
        has_credential=view.has_credential,
        header_names=list(view.header_names),
        oauth_client_id=oauth.client_id if oauth else "",
        oauth_has_client_secret=oauth.has_client_secret if oauth else False,
        oauth_scopes=oauth.scopes if oauth else "",
        oauth_authorization_endpoint=oauth.authorization_endpoint if oauth else "",
        oauth_token_endpoint=oauth.token_endpoint if oauth else "",
        oauth_connected=oauth.connected if oauth else False,
        oauth_connected_at=(
            relative_time(oauth.connected_at, now) if oauth and oauth.connected_at else ""
        ),
        authorize_path=oauth.authorize_path if oauth else "",
        used_by=list(view.used_by),
        test=_test(view, now),
    )


def load_editor(account_id: str, app_id: str, server_id: str) -> EditorContent:
    with session_scope() as db:
        return _content(mcp.get_server(db, account_id, app_id, server_id))


def parse_headers(raw: str) -> dict[str, str]:
    """The headers text area: one `Name: value` a line (blank lines skipped)."""
    headers: dict[str, str] = {}
    for line in raw.splitlines():
        if not line.strip():
            continue
        name, colon, value = line.partition(":")
        if not colon:
            raise InvalidInput("Write each header as Name: value, one a line.", field="headers")
        headers[name.strip()] = value.strip()
    return headers


def _text(form: Mapping[str, Any], name: str) -> str:
    return str(form.get(name, "") or "")


def changes_from_form(
    form: Mapping[str, Any], stored: StoredFields | None, auth_kind: str, enabled: bool
) -> mcp.McpServerChanges:
    """The form's fields as the service takes them (`stored` None: a new server). Text fields
    are sent when they differ from what was loaded; a credential only when one was typed
    (empty keeps the stored one); the OAuth fields only for an OAuth server."""
    base = stored or StoredFields(auth_kind="")
    values: dict[str, Any] = {}

    def changed(name: str, value: Any) -> None:
        if stored is None or getattr(base, name) != value:
            values[name] = value

    changed("name", _text(form, "name").strip())
    changed("description", _text(form, "description"))
    changed("url", _text(form, "url").strip())
    changed("auth_kind", auth_kind)
    changed("enabled", enabled)
    if auth_kind == "bearer" and _text(form, "bearer_token").strip():
        values["bearer_token"] = _text(form, "bearer_token")
    if auth_kind == "headers" and _text(form, "headers").strip():
        values["headers"] = parse_headers(_text(form, "headers"))
    if auth_kind == "oauth":
        # Compared with what was loaded only while the server already was an OAuth one.
        was_oauth = stored is not None and stored.auth_kind == "oauth"
        for name in (
            "oauth_client_id",
            "oauth_scopes",
            "oauth_authorization_endpoint",
            "oauth_token_endpoint",
        ):
            value = _text(form, name).strip()
            if not was_oauth:
                if value:
                    values[name] = value
            elif getattr(base, name) != value:
                values[name] = value
        if _text(form, "oauth_client_secret").strip():
            values["oauth_client_secret"] = _text(form, "oauth_client_secret")
    return mcp.McpServerChanges(**values)


@dataclass(frozen=True)
class Saved:
    content: EditorContent
    created: bool


def save(account_id: str, app_id: str, server_id: str, changes: mcp.McpServerChanges) -> Saved:
    """Create the server (no `server_id`) or save `changes` to it. Refusals are the
    service's `InvalidInput` (or `FieldConflict`), naming the field."""
    with session_scope() as db:
        if server_id:
            view = mcp.update_server(db, account_id, app_id, server_id, changes)
            return Saved(content=_content(view), created=False)
        created = mcp.create_server(db, account_id, app_id, changes)
        return Saved(
            content=_content(mcp.get_server(db, account_id, app_id, created.id)), created=True
        )


def set_enabled(account_id: str, app_id: str, server_id: str, enabled: bool) -> str:
    """Enable or disable; answers the server's name."""
    with session_scope() as db:
        return mcp.set_enabled(db, account_id, app_id, server_id, enabled).name


def delete(account_id: str, app_id: str, server_id: str) -> None:
    with session_scope() as db:
        mcp.delete_server(db, account_id, app_id, server_id)


def disconnect(account_id: str, app_id: str, server_id: str) -> EditorContent:
    """Forget the server's OAuth tokens."""
    with session_scope() as db:
        mcp.disconnect(db, account_id, app_id, server_id)
        return _content(mcp.get_server(db, account_id, app_id, server_id))


@dataclass(frozen=True)
class Tested:
    ok: bool
    error: str
    content: EditorContent


def test_connection(account_id: str, app_id: str, server_id: str) -> Tested:
    """Test connection with the stored settings (up to 20 s): the server's tools, stored
    with it, or why it failed."""
    result = mcp.test_server(account_id, app_id, server_id)
    return Tested(ok=result.ok, error=result.error, content=_content(result.server))


# The OAuth round trip's answer (`?oauth=...&reason=...`), as the editor says it.
OAUTH_REASONS = {
    "oauth_state_invalid": (
        "The authorization was unknown, already used, expired, or started by another "
        "account. Connect again."
    ),
    "oauth_refused": (
        "The authorization server refused the connection, or its code could not be "
        "exchanged for a token."
    ),
    "oauth_discovery_failed": (
        "The server publishes no OAuth metadata: enter its authorization and token endpoints."
    ),
    "invalid_request": "This server does not use OAuth.",
    "not_found": "That MCP server does not exist.",
}


def oauth_notice(outcome: str, reason: str) -> tuple[str, bool] | None:
    """(message, ok) for the `oauth` and `reason` a callback left in the URL, or None."""
    if outcome == "connected":
        return "Connected. Test connection to see its tools.", True
    if outcome == "failed":
        return OAUTH_REASONS.get(
            reason, f"Connecting failed ({reason or 'unknown reason'})."
        ), False
    return None
