"""MCP servers of an App (remote, Streamable HTTP), their OAuth round trips in progress, and
the per-run, per-server grants a sandbox presents to control's MCP proxy.

Every credential is a vault secret the row points at (a bearer token, the custom headers as
JSON, an OAuth client secret, the OAuth tokens as JSON); the row itself holds nothing secret.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from mosoo_core.clock import utcnow
from mosoo_core.db import UTCDateTime
from mosoo_core.ids import new_id

AUTH_KINDS = ("none", "bearer", "headers", "oauth")


def _id() -> Any:  # a Field, typed Any so it can stand for the column's value type
    return Field(default_factory=new_id, primary_key=True, max_length=26)


def _now() -> Any:
    return Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)


def _secret() -> Any:
    return Field(default=None, foreign_key="vault_secret.id", ondelete="SET NULL", max_length=26)


class McpServer(SQLModel, table=True):
    __tablename__ = "mcp_server"
    __table_args__ = (sa.UniqueConstraint("app_id", "name", name="uq_mcp_server_name"),)
    id: str = _id()
    app_id: str = Field(foreign_key="app.id", index=True, ondelete="CASCADE", max_length=26)
    # Lower-case: the model sees its tools as `<name>__<tool>`.
    name: str = Field(max_length=32)
    description: str = Field(default="", max_length=500)
    url: str = Field(max_length=2000)
    auth_kind: str = Field(default="none", max_length=16)  # AUTH_KINDS
    enabled: bool = Field(default=True)
    # bearer: the token; headers: {"name": "value", ...} as JSON.
    credential_secret_id: str | None = _secret()
    header_names: list[str] = Field(default_factory=list, sa_type=sa.JSON)  # shown, not secret
    # OAuth: {client_id, scopes, authorization_endpoint, token_endpoint, resource,
    # discovered: bool}; the client secret and the tokens ({access_token, refresh_token,
    # expires_at, token_type, scope}) are vault secrets.
    oauth: dict[str, Any] = Field(default_factory=dict, sa_type=sa.JSON)
    oauth_client_secret_id: str | None = _secret()
    oauth_token_secret_id: str | None = _secret()
    oauth_connected_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    # The tool browser: what the last successful Test connection listed.
    tools: list[dict[str, Any]] = Field(default_factory=list, sa_type=sa.JSON)
    server_info: dict[str, Any] = Field(default_factory=dict, sa_type=sa.JSON)
    tested_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    test_ok: bool | None = None
    test_error: str = Field(default="", max_length=1000)
    created_at: datetime = _now()
    updated_at: datetime = _now()


class McpOAuthState(SQLModel, table=True):
    """One authorization round trip in progress: the `state` sent to the authorization server
    (its digest), who started it, and the PKCE verifier the callback needs. Single use; an
    answer after `expires_at` is refused."""

    __tablename__ = "mcp_oauth_state"
    id: str = _id()
    state_hash: str = Field(max_length=64, unique=True)
    server_id: str = Field(
        foreign_key="mcp_server.id", index=True, ondelete="CASCADE", max_length=26
    )
    account_id: str = Field(max_length=26)
    # Worthless without the authorization code, which only the browser's redirect carries.
    code_verifier: str = Field(max_length=128)
    redirect_uri: str = Field(max_length=2000)
    expires_at: datetime = Field(sa_type=UTCDateTime)
    created_at: datetime = _now()


class McpGrant(SQLModel, table=True):
    """What a run's driver presents to control's MCP proxy for one server instead of its
    credential: bound to the run and the server; dies with the run (only its digest is kept)."""

    __tablename__ = "mcp_grant"
    id: str = _id()
    token_hash: str = Field(max_length=64, unique=True)
    run_id: str = Field(foreign_key="session_run.id", index=True, ondelete="CASCADE", max_length=26)
    server_id: str = Field(
        foreign_key="mcp_server.id", index=True, ondelete="CASCADE", max_length=26
    )
    app_id: str = Field(max_length=26)
    expires_at: datetime = Field(sa_type=UTCDateTime)
    created_at: datetime = _now()
