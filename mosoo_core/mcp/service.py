"""MCP servers of an App: create, read, change, enable or disable, delete, test connection.

Credentials are write-only vault secrets: a bearer token, custom headers (their names are
shown, their values never), an OAuth client secret and the OAuth tokens. A view never holds
one, so no page, answer, log or event can show it. Test connection stores the last tool list
(the tool browser) and when and why the last test failed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlmodel import Session, col, func, select

from mosoo_core.changes import UNSET, Unset, set_fields
from mosoo_core.clock import utcnow
from mosoo_core.errors import Conflict, FieldConflict, InvalidInput, NotFound
from mosoo_core.logs import get_logger
from mosoo_core.mcp.validation import (
    clean_client_id,
    clean_description,
    clean_headers,
    clean_name,
    clean_scopes,
    clean_token,
    clean_url,
    server_policy,
)
from mosoo_core.ownership import owned_app
from mosoo_core.tables.agents import Agent, AgentVersion
from mosoo_core.tables.mcp import AUTH_KINDS, McpGrant, McpServer
from mosoo_core.tables.sessions import ACTIVE_RUN_STATUSES, SessionRun
from mosoo_core.vault import delete_secret, replace_secret, reveal_secret, store_secret

log = get_logger("mosoo.mcp")
MAX_SERVERS_PER_APP = 100


@dataclass(frozen=True)
class McpServerChanges:
    """What a create or a save sets; a field left UNSET keeps the stored value (a create
    needs `name` and `url`). Credentials are write-only: UNSET keeps the stored one, so a
    form that never shows them leaves them out."""

    name: str | Unset = UNSET
    url: str | Unset = UNSET
    description: str | Unset = UNSET
    enabled: bool | Unset = UNSET
    auth_kind: str | Unset = UNSET
    bearer_token: str | Unset = UNSET
    headers: Mapping[str, str] | Unset = UNSET
    oauth_client_id: str | Unset = UNSET
    oauth_client_secret: str | Unset | None = UNSET  # None removes it (a public client)
    oauth_scopes: str | Unset = UNSET
    # Both empty: discovered from the server's metadata when the owner connects.
    oauth_authorization_endpoint: str | Unset = UNSET
    oauth_token_endpoint: str | Unset = UNSET

    def set_fields(self) -> dict[str, Any]:
        return set_fields(self)


@dataclass(frozen=True)
class McpToolView:
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class OAuthView:
    client_id: str
    has_client_secret: bool
    scopes: str
    authorization_endpoint: str  # "" until discovered (or configured)
    token_endpoint: str
    connected: bool  # tokens are stored
    connected_at: datetime | None
    # Where the console sends the browser to connect (or reconnect) the server.
    authorize_path: str


@dataclass(frozen=True)
class McpServerView:
    id: str
    app_id: str
    name: str
    description: str
    url: str
    auth_kind: str
    enabled: bool
    has_credential: bool  # bearer and headers: a value is stored (never shown)
    header_names: list[str]
    oauth: OAuthView | None
    tools: list[McpToolView]
    server_info: dict[str, Any]
    tested_at: datetime | None
    test_ok: bool | None
    test_error: str
    created_at: datetime
    updated_at: datetime
    used_by: list[str] = field(default_factory=list)  # agents and versions that bind it


# --- views -------------------------------------------------------------------------------


def authorize_path(server_id: str) -> str:
    return f"/api/mcp-servers/{server_id}/oauth/authorize"


def tool_views(tools: list[dict[str, Any]]) -> list[McpToolView]:
    return [
        McpToolView(
            name=str(t.get("name", "")),
            title=str(t.get("title", "")),
            description=str(t.get("description", "")),
            input_schema=dict(t.get("input_schema") or {}),
        )
        for t in tools or []
    ]


def server_view(row: McpServer, used_by: list[str] | None = None) -> McpServerView:
    oauth: OAuthView | None = None
    if row.auth_kind == "oauth":
        config = row.oauth or {}
        oauth = OAuthView(
            client_id=str(config.get("client_id", "")),
            has_client_secret=row.oauth_client_secret_id is not None,
            scopes=str(config.get("scopes", "")),
            authorization_endpoint=str(config.get("authorization_endpoint", "")),
            token_endpoint=str(config.get("token_endpoint", "")),
            connected=row.oauth_token_secret_id is not None,
            connected_at=row.oauth_connected_at,
            authorize_path=authorize_path(row.id),
        )
    return McpServerView(
        id=row.id,
        app_id=row.app_id,
        name=row.name,
        description=row.description,
        url=row.url,
        auth_kind=row.auth_kind,
        enabled=row.enabled,
        has_credential=row.credential_secret_id is not None,
        header_names=list(row.header_names or []),
        oauth=oauth,
        tools=tool_views(row.tools),
        server_info=dict(row.server_info or {}),
        tested_at=row.tested_at,
        test_ok=row.test_ok,
        test_error=row.test_error,
        created_at=row.created_at,
        updated_at=row.updated_at,
        used_by=list(used_by or []),
    )


# --- lookups -----------------------------------------------------------------------------


def owned_server(db: Session, account_id: str, app_id: str, server_id: str) -> McpServer:
    owned_app(db, account_id, app_id)
    row = db.get(McpServer, server_id) if server_id else None
    if row is None or row.app_id != app_id:
        raise NotFound("MCP server not found.")
    return row


def mcp_server_app_id(db: Session, account_id: str, server_id: str) -> str:
    """The App of one of the account's MCP servers (for callers holding only its id, like
    the public API); NotFound for another owner's or an unknown one."""
    row = db.get(McpServer, server_id) if server_id else None
    if row is None:
        raise NotFound("MCP server not found.")
    try:
        owned_app(db, account_id, row.app_id)
    except NotFound:
        raise NotFound("MCP server not found.") from None
    return row.app_id


def list_servers(db: Session, account_id: str, app_id: str) -> list[McpServerView]:
    """The App's MCP servers by name, each with the agents and versions that bind it."""
    owned_app(db, account_id, app_id)
    rows = db.exec(
        select(McpServer).where(McpServer.app_id == app_id).order_by(col(McpServer.name))
    ).all()
    users = _users_by_server(db, app_id)
    return [server_view(row, users.get(row.id, [])) for row in rows]


def get_server(db: Session, account_id: str, app_id: str, server_id: str) -> McpServerView:
    row = owned_server(db, account_id, app_id, server_id)
    return server_view(row, _users_by_server(db, app_id).get(row.id, []))


@dataclass(frozen=True)
class BoundServer:
    """What readiness and a run need to know about a bound server."""

    id: str
    name: str
    enabled: bool


def bound_servers(db: Session, app_id: str, server_ids: list[str]) -> dict[str, BoundServer]:
    """The bound servers that exist in the App, by id (missing ones are absent)."""
    if not server_ids:
        return {}
    rows = db.exec(
        select(McpServer).where(McpServer.app_id == app_id, col(McpServer.id).in_(server_ids))
    ).all()
    return {row.id: BoundServer(row.id, row.name, row.enabled) for row in rows}


def usable_servers(db: Session, app_id: str, server_ids: list[str]) -> list[str]:
    """The bound servers that exist in the App and are enabled, in binding order."""
    found = bound_servers(db, app_id, server_ids)
    return [sid for sid in server_ids if sid in found and found[sid].enabled]


# --- saving ------------------------------------------------------------------------------


def _owner_ref(server_id: str, what: str) -> str:
    return f"mcp_server:{server_id}:{what}"


def _check_name_free(db: Session, app_id: str, name: str, keep_id: str = "") -> None:
    taken = db.exec(
        select(McpServer.id).where(
            McpServer.app_id == app_id,
            func.lower(McpServer.name) == name.lower(),
            McpServer.id != keep_id,
        )
    ).first()
    if taken is not None:
        raise FieldConflict(
            f"An MCP server named {name} already exists.", field="name", code="name_taken"
        )


def seal_secret(db: Session, row: McpServer, slot: str, what: str, value: str) -> None:
    """Store `value` in the row's secret `slot` (a new secret, or the existing one replaced)."""
    current = getattr(row, slot)
    ref = _owner_ref(row.id, what)
    if current:
        replace_secret(db, current, app_id=row.app_id, owner_ref=ref, value=value)
    else:
        setattr(row, slot, store_secret(db, app_id=row.app_id, owner_ref=ref, value=value))


def drop_secret(db: Session, row: McpServer, slot: str) -> None:
    current = getattr(row, slot)
    if current:
        setattr(row, slot, None)
        db.add(row)
        db.flush()
        delete_secret(db, current)


def reveal(db: Session, row: McpServer, slot: str, what: str) -> str | None:
    """The plaintext of one of the row's secrets (for the proxy and the tests of a server)."""
    secret_id = getattr(row, slot)
    if not secret_id:
        return None
    return reveal_secret(db, secret_id, app_id=row.app_id, owner_ref=_owner_ref(row.id, what))


def _apply(db: Session, row: McpServer, values: dict[str, Any], creating: bool) -> None:
    """Check every given value first (a refusal writes nothing), then save."""
    clean: dict[str, Any] = {}
    if "name" in values:
        clean["name"] = clean_name(values["name"])
        _check_name_free(db, row.app_id, clean["name"], keep_id=row.id)
    if "description" in values:
        clean["description"] = clean_description(values["description"])
    if "url" in values:
        clean["url"] = clean_url(values["url"])
    if "enabled" in values:
        if not isinstance(values["enabled"], bool):
            raise InvalidInput("enabled is true or false.", field="enabled")
        clean["enabled"] = values["enabled"]
    kind = values.get("auth_kind", row.auth_kind)
    if kind not in AUTH_KINDS:
        raise InvalidInput("Authentication is none, bearer, headers or oauth.", field="auth_kind")
    kind_changed = kind != row.auth_kind
    url_changed = "url" in clean and clean["url"] != row.url
    for given, needs in (("bearer_token", "bearer"), ("headers", "headers")):
        if given in values and kind != needs:
            raise FieldConflict(
                f"{given} goes with auth_kind {needs}; this server's is {kind}.", field=given
            )
    oauth_fields = sorted(k for k in values if k.startswith("oauth_"))
    if oauth_fields and kind != "oauth":
        raise FieldConflict(
            f"{oauth_fields[0]} goes with auth_kind oauth; this server's is {kind}.",
            field=oauth_fields[0],
        )
    token = clean_token(values["bearer_token"]) if "bearer_token" in values else None
    headers = clean_headers(values["headers"]) if "headers" in values else None
    stored_credential = row.credential_secret_id is not None and not kind_changed and not creating
    if kind == "bearer" and token is None and not (stored_credential and not row.header_names):
        raise FieldConflict("Enter the bearer token.", field="bearer_token")
    if kind == "headers" and headers is None and not (stored_credential and row.header_names):
        raise FieldConflict("Give the headers to send.", field="headers")
    config = dict(row.oauth or {}) if kind == "oauth" and not kind_changed else {}
    client_secret: str | None = None
    if kind == "oauth":
        if "oauth_client_id" in values:
            config["client_id"] = clean_client_id(values["oauth_client_id"])
        elif not config.get("client_id"):
            raise FieldConflict("Enter the OAuth client id.", field="oauth_client_id")
        if "oauth_scopes" in values:
            config["scopes"] = clean_scopes(values["oauth_scopes"])
        for name, key in (
            ("oauth_authorization_endpoint", "authorization_endpoint"),
            ("oauth_token_endpoint", "token_endpoint"),
        ):
            if name in values:
                raw = (values[name] or "").strip()
                config[key] = clean_url(raw, field=name) if raw else ""
                config["configured"] = True
        if config.get("configured"):
            if bool(config.get("authorization_endpoint")) != bool(config.get("token_endpoint")):
                raise FieldConflict(
                    "Give both OAuth endpoints, or neither (they are then discovered).",
                    field="oauth_token_endpoint"
                    if config.get("authorization_endpoint")
                    else "oauth_authorization_endpoint",
                )
            config["configured"] = bool(config.get("authorization_endpoint"))
        elif url_changed:
            # Discovered endpoints belong to the old URL.
            for key in ("authorization_endpoint", "token_endpoint", "resource"):
                config.pop(key, None)
        if values.get("oauth_client_secret"):
            client_secret = clean_token(values["oauth_client_secret"], field="oauth_client_secret")

    # Everything is valid: save.
    for key, value in clean.items():
        setattr(row, key, value)
    row.auth_kind = kind
    db.add(row)
    db.flush()
    if kind_changed or creating:
        # What the previous kind kept goes with it.
        if kind not in ("bearer", "headers"):
            drop_secret(db, row, "credential_secret_id")
            row.header_names = []
        if kind != "oauth":
            drop_secret(db, row, "oauth_client_secret_id")
            drop_secret(db, row, "oauth_token_secret_id")
            row.oauth_connected_at = None
    if token is not None:
        seal_secret(db, row, "credential_secret_id", "credential", token)
        row.header_names = []
    if headers is not None:
        seal_secret(db, row, "credential_secret_id", "credential", json.dumps(headers))
        row.header_names = sorted(headers, key=str.lower)
    if kind == "oauth":
        if client_secret is not None:
            seal_secret(db, row, "oauth_client_secret_id", "oauth_client_secret", client_secret)
        elif "oauth_client_secret" in values:  # None or "": a public client
            drop_secret(db, row, "oauth_client_secret_id")
        changed_grant = url_changed or any(
            k in values
            for k in ("oauth_client_id", "oauth_authorization_endpoint", "oauth_token_endpoint")
        )
        if changed_grant and not creating:
            # Tokens belong to the resource and client they were issued for: connect again.
            drop_secret(db, row, "oauth_token_secret_id")
            row.oauth_connected_at = None
    row.oauth = config
    db.add(row)
    db.flush()


def create_server(
    db: Session, account_id: str, app_id: str, changes: McpServerChanges
) -> McpServerView:
    """A new MCP server of the App (name unique in it); nothing is contacted yet."""
    owned_app(db, account_id, app_id)
    values = changes.set_fields()
    for required in ("name", "url"):
        if not values.get(required):
            raise InvalidInput(
                "Name the MCP server." if required == "name" else "Enter the server's URL.",
                field=required,
            )
    count = db.exec(
        select(func.count()).select_from(McpServer).where(McpServer.app_id == app_id)
    ).one()
    if count >= MAX_SERVERS_PER_APP:
        raise Conflict(f"An App has at most {MAX_SERVERS_PER_APP} MCP servers.")
    row = McpServer(app_id=app_id, name="", url="")
    _apply(db, row, {"auth_kind": "none", **values}, creating=True)
    db.add(row)
    db.flush()
    log.info("mcp.server_created", app_id=app_id, server_id=row.id, auth_kind=row.auth_kind)
    return server_view(row)


def update_server(
    db: Session, account_id: str, app_id: str, server_id: str, changes: McpServerChanges
) -> McpServerView:
    """Change what `changes` sets; a refusal names its field and saves nothing."""
    row = owned_server(db, account_id, app_id, server_id)
    values = changes.set_fields()
    if values:
        _apply(db, row, values, creating=False)
        row.updated_at = utcnow()
        db.add(row)
        db.flush()
    return get_server(db, account_id, app_id, server_id)


def set_enabled(
    db: Session, account_id: str, app_id: str, server_id: str, enabled: bool
) -> McpServerView:
    """Enable or disable: an Agent bound to a disabled server is not ready (a blocker)."""
    return update_server(db, account_id, app_id, server_id, McpServerChanges(enabled=enabled))


def _users_by_server(db: Session, app_id: str) -> dict[str, list[str]]:
    users: dict[str, list[str]] = {}
    for agent_name, bound in db.exec(
        select(Agent.name, Agent.mcp_servers)
        .where(Agent.app_id == app_id)
        .order_by(func.lower(Agent.name))
    ).all():
        for server_id in bound or []:
            users.setdefault(server_id, []).append(f"agent {agent_name}")
    published = db.exec(
        select(Agent.name, AgentVersion.number, AgentVersion.profile)
        .join(AgentVersion, col(AgentVersion.agent_id) == col(Agent.id))
        .where(
            Agent.app_id == app_id,
            Agent.status == "published",
            col(Agent.published_version) == col(AgentVersion.number),
        )
        .order_by(func.lower(Agent.name))
    ).all()
    for agent_name, number, profile in published:
        for server_id in (profile or {}).get("mcp_servers") or []:
            users.setdefault(server_id, []).append(f"{agent_name} version {number}")
    return users


def server_users(db: Session, row: McpServer) -> list[str]:
    """What still uses the server, for the refusal of a delete: Agents whose draft binds it,
    published versions that do, and runs in progress that hold a grant for it."""
    users = list(_users_by_server(db, row.app_id).get(row.id, []))
    active = db.exec(
        select(func.count(func.distinct(McpGrant.run_id)))
        .select_from(McpGrant)
        .join(SessionRun, col(SessionRun.id) == col(McpGrant.run_id))
        .where(McpGrant.server_id == row.id, col(SessionRun.status).in_(ACTIVE_RUN_STATUSES))
    ).one()
    if active:
        users.append(f"{active} running thread(s)")
    return users


def delete_server(db: Session, account_id: str, app_id: str, server_id: str) -> None:
    """Refused while an Agent draft, a published version or a running thread uses it
    (Conflict naming them). Its secrets go with it."""
    row = owned_server(db, account_id, app_id, server_id)
    users = server_users(db, row)
    if users:
        raise Conflict(f"In use by {', '.join(users)}. Remove it from them first.")
    secrets = [
        s
        for s in (row.credential_secret_id, row.oauth_client_secret_id, row.oauth_token_secret_id)
        if s
    ]
    db.delete(row)
    db.flush()
    for secret_id in secrets:
        delete_secret(db, secret_id)
    log.info("mcp.server_deleted", app_id=app_id, server_id=server_id)


# --- runs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunBinding:
    """A bound, enabled server as a run gets it: its name and the Agent's policies for it,
    never its URL or credential."""

    server_id: str
    name: str
    default_policy: str
    tool_policies: dict[str, str]
    required: bool


def run_bindings(
    db: Session, app_id: str, server_ids: list[str], policies: Mapping[str, Any] | None
) -> list[RunBinding]:
    """The bound servers a run reaches (existing and enabled, in binding order), each with
    its policy; a server whose default is off and has no tool turned on is left out."""
    found = bound_servers(db, app_id, server_ids)
    out: list[RunBinding] = []
    for server_id in server_ids:
        server = found.get(server_id)
        if server is None or not server.enabled:
            continue
        policy = server_policy(policies, server_id)
        tools = dict(policy["tools"])
        if policy["default"] == "off" and not any(p != "off" for p in tools.values()):
            continue
        out.append(
            RunBinding(
                server_id=server_id,
                name=server.name,
                default_policy=policy["default"],
                tool_policies=tools,
                required=policy["required"],
            )
        )
    return out
