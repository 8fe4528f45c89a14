"""Browser sessions and login tickets."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlmodel import Session, select

from mosoo_core import identity
from mosoo_core.clock import utcnow
from mosoo_core.errors import Unauthenticated
from mosoo_core.tables.identity import AuthSession


def _account(db: Session, email: str = "s@example.com") -> str:
    return identity.sign_in_identity(db, provider="email", subject=email, email=email).id


def test_session_token_resolves_to_its_account_and_is_stored_hashed(db: Session) -> None:
    account_id = _account(db)
    new = identity.start_session(db, account_id, method="email")
    assert identity.resolve_session(db, new.token) == account_id
    row = db.exec(select(AuthSession)).one()
    assert row.token_hash != new.token and new.token not in row.token_hash
    assert len(new.token) >= 43  # 256 bits, URL-safe base64


def test_revoked_session_no_longer_resolves(db: Session) -> None:
    new = identity.start_session(db, _account(db), method="email")
    assert identity.revoke_session(db, new.token) is True
    assert identity.resolve_session(db, new.token) is None
    assert identity.revoke_session(db, new.token) is False


def test_expired_session_no_longer_resolves(db: Session) -> None:
    now = utcnow()
    new = identity.start_session(db, _account(db), method="email", now=now)
    assert identity.resolve_session(db, new.token, now=now + timedelta(days=29)) is not None
    assert identity.resolve_session(db, new.token, now=now + timedelta(days=30, seconds=1)) is None


@pytest.mark.parametrize("token", [None, "", "forged", "x" * 500])
def test_unknown_or_forged_tokens_resolve_to_nobody(db: Session, token: str | None) -> None:
    _account(db)
    assert identity.resolve_session(db, token) is None


def test_login_ticket_is_single_use(db: Session) -> None:
    account_id = _account(db)
    ticket = identity.issue_login_ticket(db, account_id)
    new = identity.redeem_login_ticket(db, ticket)
    assert identity.resolve_session(db, new.token) == account_id
    with pytest.raises(Unauthenticated):
        identity.redeem_login_ticket(db, ticket)


def test_login_ticket_expires_after_a_minute(db: Session) -> None:
    now = utcnow()
    ticket = identity.issue_login_ticket(db, _account(db), now=now)
    with pytest.raises(Unauthenticated):
        identity.redeem_login_ticket(db, ticket, now=now + timedelta(seconds=61))


def test_forged_login_ticket_is_refused(db: Session) -> None:
    _account(db)
    with pytest.raises(Unauthenticated):
        identity.redeem_login_ticket(db, "not-a-ticket")


def test_purge_removes_only_long_dead_records(db: Session) -> None:
    now = utcnow()
    account_id = _account(db)
    old = identity.start_session(db, account_id, method="email", now=now - timedelta(days=40))
    live = identity.start_session(db, account_id, method="email", now=now)
    assert identity.purge_expired_sign_in_records(db, now=now) >= 1
    db.flush()
    assert identity.resolve_session(db, live.token, now=now) == account_id
    assert db.exec(select(AuthSession).where(AuthSession.id == old.session_id)).first() is None
