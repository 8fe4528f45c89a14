"""Model grants: what a run's driver presents to the model gateway instead of a key."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlmodel import Session, select

from mosoo_core.clock import utcnow
from mosoo_core.tables.sessions import ACTIVE_RUN_STATUSES, AgentSession, ModelGrant, SessionRun

GRANT_PREFIX = "mgr_"
DEFAULT_GRANT_TTL = timedelta(hours=6)


@dataclass(frozen=True)
class GrantContext:
    run_id: str
    session_id: str
    app_id: str
    agent_id: str
    purpose: str
    credential_id: str
    allowed_models: tuple[str, ...]


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue_model_grant(
    db: Session,
    run: SessionRun,
    *,
    credential_id: str,
    allowed_models: list[str],
    ttl: timedelta = DEFAULT_GRANT_TTL,
    now: datetime | None = None,
) -> str:
    """A new opaque grant for the run (only its digest is stored)."""
    token = GRANT_PREFIX + secrets.token_urlsafe(32)
    db.add(
        ModelGrant(
            token_hash=_digest(token),
            run_id=run.id,
            app_id=run.app_id,
            credential_id=credential_id,
            allowed_models=list(allowed_models),
            expires_at=(now or utcnow()) + ttl,
        )
    )
    db.flush()
    return token


def resolve_model_grant(
    db: Session, token: str | None, *, now: datetime | None = None
) -> GrantContext | None:
    """The run behind a grant, or None when unknown, expired or the run is over."""
    if not token or not token.startswith(GRANT_PREFIX) or len(token) > 200:
        return None
    grant = db.exec(select(ModelGrant).where(ModelGrant.token_hash == _digest(token))).first()
    if grant is None or grant.expires_at <= (now or utcnow()):
        return None
    run = db.get(SessionRun, grant.run_id)
    if run is None or run.status not in ACTIVE_RUN_STATUSES:
        return None
    session = db.get(AgentSession, run.session_id)
    if session is None:
        return None
    return GrantContext(
        run_id=run.id,
        session_id=session.id,
        app_id=run.app_id,
        agent_id=session.agent_id,
        purpose=session.purpose,
        credential_id=grant.credential_id,
        allowed_models=tuple(grant.allowed_models),
    )
