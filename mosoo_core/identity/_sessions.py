"""Browser sessions (cookie tokens) and the single-use tickets that start them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlmodel import Session, select

from mosoo_core.clock import utcnow
from mosoo_core.errors import Unauthenticated
from mosoo_core.identity._secrets import random_token, token_digest
from mosoo_core.settings import get_settings
from mosoo_core.tables.identity import Account, AuthSession, EmailCode, LoginTicket, SignInFailure


@dataclass(frozen=True)
class NewSession:
    token: str  # given to the browser once; only its digest is stored
    session_id: str
    account_id: str
    expires_at: datetime


def start_session(
    db: Session,
    account_id: str,
    *,
    method: str,
    user_agent: str = "",
    replaces: str | None = None,
    now: datetime | None = None,
) -> NewSession:
    """Open a browser session for an account that has just proven who it is. `replaces` is
    the session token the browser already held, if any: it is revoked, so a token planted in
    the browser before sign-in (session fixation) or left from an earlier sign-in is never
    the one that becomes signed in."""
    now = now or utcnow()
    if replaces:
        revoke_session(db, replaces, now=now)
    token = random_token()
    expires_at = now + timedelta(days=get_settings().session_ttl_days)
    row = AuthSession(
        account_id=account_id,
        token_hash=token_digest(token),
        method=method,
        user_agent=user_agent[:400],
        created_at=now,
        expires_at=expires_at,
    )
    db.add(row)
    db.flush()
    return NewSession(token=token, session_id=row.id, account_id=account_id, expires_at=expires_at)


def resolve_session(db: Session, token: str | None, *, now: datetime | None = None) -> str | None:
    """The account id behind a session token, or None when missing, unknown, expired or revoked."""
    if not token or len(token) > 200:
        return None
    now = now or utcnow()
    row = db.exec(select(AuthSession).where(AuthSession.token_hash == token_digest(token))).first()
    if row is None or row.revoked_at is not None or row.expires_at <= now:
        return None
    return row.account_id


def revoke_session(db: Session, token: str | None, *, now: datetime | None = None) -> bool:
    """Sign out: the token stops working at once. Returns whether a live session was revoked."""
    if not token:
        return False
    row = db.exec(select(AuthSession).where(AuthSession.token_hash == token_digest(token))).first()
    if row is None or row.revoked_at is not None:
        return False
    row.revoked_at = now or utcnow()
    db.add(row)
    db.flush()
    return True


def issue_login_ticket(db: Session, account_id: str, *, now: datetime | None = None) -> str:
    """A single-use, short-lived ticket the browser trades for its HttpOnly session cookie."""
    now = now or utcnow()
    ticket = random_token()
    db.add(
        LoginTicket(
            account_id=account_id,
            ticket_hash=token_digest(ticket),
            created_at=now,
            expires_at=now + timedelta(seconds=get_settings().login_ticket_ttl_seconds),
        )
    )
    db.flush()
    return ticket


def redeem_login_ticket(
    db: Session,
    ticket: str,
    *,
    user_agent: str = "",
    replaces: str | None = None,
    now: datetime | None = None,
) -> NewSession:
    """Trade a ticket for a session; a used, expired or unknown ticket is refused."""
    now = now or utcnow()
    row = db.exec(
        select(LoginTicket).where(LoginTicket.ticket_hash == token_digest(ticket or ""))
    ).first()
    if row is None or row.used_at is not None or row.expires_at <= now:
        raise Unauthenticated("This sign-in link is no longer valid. Sign in again.")
    if db.get(Account, row.account_id) is None:
        raise Unauthenticated("This sign-in link is no longer valid. Sign in again.")
    row.used_at = now
    db.add(row)
    return start_session(
        db, row.account_id, method="email", user_agent=user_agent, replaces=replaces, now=now
    )


def purge_expired_sign_in_records(db: Session, *, now: datetime | None = None) -> int:
    """Delete codes, tickets, sessions and failed verifications that can never be used or
    counted again (kept a day for audits)."""
    cutoff = (now or utcnow()) - timedelta(days=1)
    removed = 0
    for model, column in (
        (EmailCode, EmailCode.expires_at),
        (LoginTicket, LoginTicket.expires_at),
        (AuthSession, AuthSession.expires_at),
        (SignInFailure, SignInFailure.created_at),
    ):
        for row in db.exec(select(model).where(column < cutoff)).all():
            db.delete(row)
            removed += 1
    return removed
