"""Browser sessions and login tickets through `/api/auth/me`, `/logout` and `/finish` of a
real `mosoo web`; `auth_session` and `login_ticket` are read afterwards."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import timedelta

import httpx
import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import identity
from mosoo_core.clock import utcnow
from mosoo_core.tables.identity import AuthSession, LoginTicket
from tests.security.conftest import count, error_code, latest_code, rows, sign_in, update, verify

pytestmark = pytest.mark.integration

Web = Callable[..., httpx.Client]
COOKIE = "mosoo_session"


def _as(token: str) -> dict[str, str]:
    return {"Cookie": f"{COOKIE}={token}"}


def _me(client: httpx.Client, token: str) -> httpx.Response:
    client.cookies.clear()
    return client.get("/api/auth/me", headers=_as(token))


def _ticket(engine: Engine, email: str) -> tuple[str, str]:
    """A ticket as the console's sign-in issues it (the front door under test is /finish)."""
    with Session(engine) as db:
        account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
        ticket = identity.issue_login_ticket(db, account.id)
        db.commit()
        return account.id, ticket


def test_a_revoked_session_cookie_is_refused(web: Web, engine: Engine) -> None:
    """ARCHITECTURE §6: sessions are "stored hashed, revocable" (sign-out revokes)."""
    client = web()
    token = sign_in(client, engine, "revoke@example.com")
    assert _me(client, token).status_code == 200
    client.cookies.clear()
    assert client.post("/api/auth/logout", headers=_as(token)).status_code == 200
    refused = _me(client, token)
    assert refused.status_code == 401 and error_code(refused) == "unauthenticated"
    [row] = rows(engine, AuthSession)
    assert row.revoked_at is not None


def test_a_forged_session_cookie_is_refused(web: Web, engine: Engine) -> None:
    """ARCHITECTURE §6: "Sessions: random 256-bit token in an HttpOnly, SameSite=Lax cookie
    ..., stored hashed": neither a made-up token nor the stored digest opens a session."""
    client = web()
    sign_in(client, engine, "forged@example.com")
    [row] = rows(engine, AuthSession)
    for forged in (secrets.token_urlsafe(32), row.token_hash, "x" * 300):
        refused = _me(client, forged)
        assert refused.status_code == 401, forged[:20]


def test_the_session_cookie_is_httponly_and_lax(web: Web, engine: Engine) -> None:
    """ARCHITECTURE §6: "random 256-bit token in an HttpOnly, SameSite=Lax cookie"."""
    client, email = web(), "cookie@example.com"
    client.post("/api/auth/email/start", json={"email": email})
    response = verify(client, email, latest_code(engine, email))
    header = response.headers["set-cookie"].lower()
    assert header.startswith(f"{COOKIE}=") and "httponly" in header and "samesite=lax" in header
    assert len(response.cookies[COOKIE]) >= 43  # 32 random bytes, URL-safe base64


def test_an_expired_session_is_refused(web: Web, engine: Engine) -> None:
    """README: "`MOSOO_SESSION_TTL_DAYS` | `30` | browser session lifetime"."""
    client = web()
    token = sign_in(client, engine, "ttl@example.com")
    [row] = rows(engine, AuthSession)
    assert timedelta(days=29, hours=23) < row.expires_at - row.created_at <= timedelta(days=30)
    update(
        engine, AuthSession, AuthSession.id == row.id, expires_at=utcnow() - timedelta(seconds=1)
    )
    assert _me(client, token).status_code == 401


def test_signing_in_revokes_the_session_token_the_browser_already_had(
    web: Web, engine: Engine
) -> None:
    """ARCHITECTURE §6: sessions are "revocable"; a token planted in the browser before
    sign-in (session fixation) never becomes the signed-in one."""
    client = web()
    planted = sign_in(client, engine, "planted@example.com")  # e.g. the attacker's own session
    email = "victim@example.com"
    client.post("/api/auth/email/start", json={"email": email})
    client.cookies.clear()
    response = client.post(
        "/api/auth/email/verify",
        json={"email": email, "code": latest_code(engine, email)},
        headers=_as(planted),
    )
    assert response.status_code == 200
    fresh = response.cookies[COOKIE]
    assert fresh != planted
    assert _me(client, planted).status_code == 401
    assert _me(client, fresh).json()["email"] == email


def test_a_login_ticket_works_once(web: Web, engine: Engine) -> None:
    """`/api/auth/finish`: "a single-use ticket becomes the HttpOnly session cookie"; a used
    one redirects to `/login?error=expired`."""
    client = web()
    account_id, ticket = _ticket(engine, "ticket@example.com")
    first = client.get("/api/auth/finish", params={"ticket": ticket, "next": "/apps"})
    assert first.status_code == 303 and first.headers["location"] == "/apps"
    token = first.cookies[COOKIE]
    assert _me(client, token).status_code == 200
    client.cookies.clear()
    second = client.get("/api/auth/finish", params={"ticket": ticket, "next": "/apps"})
    assert second.status_code == 303 and second.headers["location"] == "/login?error=expired"
    assert COOKIE not in second.cookies
    assert count(engine, AuthSession, AuthSession.account_id == account_id) == 1
    [row] = rows(engine, LoginTicket)
    assert row.used_at is not None


def test_an_expired_login_ticket_is_refused(web: Web, engine: Engine) -> None:
    """`MOSOO_LOGIN_TICKET_TTL_SECONDS` (60): a ticket past its expiry redirects to
    `/login?error=expired` and starts no session."""
    client = web()
    account_id, ticket = _ticket(engine, "late-ticket@example.com")
    [row] = rows(engine, LoginTicket)
    assert row.expires_at - row.created_at == timedelta(seconds=60)
    update(
        engine, LoginTicket, LoginTicket.id == row.id, expires_at=utcnow() - timedelta(seconds=1)
    )
    refused = client.get("/api/auth/finish", params={"ticket": ticket})
    assert refused.status_code == 303 and refused.headers["location"] == "/login?error=expired"
    assert COOKIE not in refused.cookies
    assert count(engine, AuthSession, AuthSession.account_id == account_id) == 0
    [after] = rows(engine, LoginTicket)
    assert after.used_at is None


def test_the_login_ticket_hand_off_follows_only_local_paths(web: Web, engine: Engine) -> None:
    """`safe_next`: "Only same-site paths are followed after sign-in (no open redirects)"."""
    client = web()
    for target in ("https://evil.example/", "//evil.example/", "/\\evil.example"):
        _, ticket = _ticket(engine, "next@example.com")
        answer = client.get("/api/auth/finish", params={"ticket": ticket, "next": target})
        assert answer.status_code == 303 and answer.headers["location"] == "/", target
