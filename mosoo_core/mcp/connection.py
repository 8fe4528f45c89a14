"""Reaching an MCP server with its credential: the headers that carry it (an OAuth token
refreshed when it has expired), Test connection, and what control's proxy forwards to."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sqlmodel import Session

from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.logs import get_logger
from mosoo_core.mcp import _probe
from mosoo_core.mcp.oauth import OAuthUnavailable, access_token
from mosoo_core.mcp.service import (
    McpServerView,
    McpToolView,
    get_server,
    owned_server,
    reveal,
    tool_views,
)
from mosoo_core.tables.mcp import McpServer

log = get_logger("mosoo.mcp")


@dataclass(frozen=True)
class McpTestResult:
    ok: bool
    error: str
    tools: list[McpToolView]
    server: McpServerView


@dataclass(frozen=True)
class Upstream:
    """Where the proxy forwards one request, and the credential headers it adds (in memory
    for that one call)."""

    server_id: str
    name: str
    url: str
    headers: dict[str, str] = field(repr=False, default_factory=dict)


def credential_headers(
    db: Session, row: McpServer, *, force_refresh: bool = False
) -> dict[str, str]:
    """The headers that carry the server's credential. OAuthUnavailable when an OAuth server
    has no usable token."""
    if row.auth_kind == "bearer":
        token = reveal(db, row, "credential_secret_id", "credential")
        return {"Authorization": f"Bearer {token}"} if token else {}
    if row.auth_kind == "headers":
        stored = reveal(db, row, "credential_secret_id", "credential")
        return {str(k): str(v) for k, v in json.loads(stored).items()} if stored else {}
    if row.auth_kind == "oauth":
        return {"Authorization": f"Bearer {access_token(db, row, force_refresh=force_refresh)}"}
    return {}


def upstream(db: Session, app_id: str, server_id: str, *, force_refresh: bool = False) -> Upstream:
    """The enabled server of the App behind a grant; LookupError when it is gone or
    disabled, OAuthUnavailable when its OAuth token cannot be had."""
    row = db.get(McpServer, server_id)
    if row is None or row.app_id != app_id or not row.enabled:
        raise LookupError("the MCP server is gone or disabled")
    headers = credential_headers(db, row, force_refresh=force_refresh)
    return Upstream(server_id=row.id, name=row.name, url=row.url, headers=headers)


def record_test(db: Session, row: McpServer, result: _probe.ProbeResult) -> None:
    row.tested_at = utcnow()
    row.test_ok = result.ok
    row.test_error = result.error[:1000]
    if result.ok:
        row.tools = result.tools
        row.server_info = result.server_info
    db.add(row)
    db.flush()


def test_server(account_id: str, app_id: str, server_id: str) -> McpTestResult:
    """Test connection: initialize a session with the server and list its tools, storing the
    list (the tool browser) or when and why it failed. Opens its own units of work: none is
    held while the server is contacted (up to 20 seconds)."""
    failed: _probe.ProbeResult | None = None
    headers: dict[str, str] = {}
    with session_scope() as db:
        row = owned_server(db, account_id, app_id, server_id)
        url = row.url
        try:
            headers = credential_headers(db, row)
        except OAuthUnavailable as error:
            failed = _probe.ProbeResult(ok=False, error=error.message)
    result = failed or _probe.probe(url, headers)
    with session_scope() as db:
        row = owned_server(db, account_id, app_id, server_id)
        if row.url == url:  # an edit meanwhile makes this answer stale
            record_test(db, row, result)
        log.info(
            "mcp.server_tested",
            app_id=app_id,
            server_id=server_id,
            ok=result.ok,
            tools=len(result.tools),
            status=result.status,
        )
        view = get_server(db, account_id, app_id, server_id)
    return McpTestResult(
        ok=result.ok, error=result.error, tools=tool_views(result.tools), server=view
    )
