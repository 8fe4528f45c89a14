"""MCP grants: what a run's driver presents to control's MCP proxy for one bound server,
instead of the server's credential or URL. One per run and server; only the digest is kept."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlmodel import Session, select

from mosoo_core.clock import utcnow
from mosoo_core.tables.mcp import McpGrant
from mosoo_core.tables.sessions import ACTIVE_RUN_STATUSES, AgentSession, SessionRun

GRANT_PREFIX = "mcg_"
DEFAULT_GRANT_TTL = timedelta(hours=6)
MAX_TOKEN_CHARS = 200


@dataclass(frozen=True)
class McpGrantContext:
    run_id: str
    session_id: str
    app_id: str
    server_id: str


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue_grant(
    db: Session,
    run: SessionRun,
    server_id: str,
    *,
    ttl: timedelta = DEFAULT_GRANT_TTL,
    now: datetime | None = None,
) -> str:
    """A new opaque grant for the run and one server."""
    token = GRANT_PREFIX + secrets.token_urlsafe(32)
    db.add(
        McpGrant(
            token_hash=_digest(token),
            run_id=run.id,
            server_id=server_id,
            app_id=run.app_id,
            expires_at=(now or utcnow()) + ttl,
        )
    )
    db.flush()
    return token


def resolve_grant(
    db: Session, token: str | None, server_id: str, *, now: datetime | None = None
) -> McpGrantContext | None:
    """The run behind a grant for `server_id`; None when the grant is unknown, expired, for
    another server, or its run is over."""
    if not token or not token.startswith(GRANT_PREFIX) or len(token) > MAX_TOKEN_CHARS:
        return None
    grant = db.exec(select(McpGrant).where(McpGrant.token_hash == _digest(token))).first()
    if grant is None or grant.server_id != server_id or grant.expires_at <= (now or utcnow()):
        return None
    run = db.get(SessionRun, grant.run_id)
    if run is None or run.status not in ACTIVE_RUN_STATUSES:
        return None
    session = db.get(AgentSession, run.session_id)
    if session is None:
        return None
    return McpGrantContext(
        run_id=run.id, session_id=session.id, app_id=grant.app_id, server_id=grant.server_id
    )
