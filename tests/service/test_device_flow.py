"""CLI sign-in device flow (RFC 8628 style): every state and every poll answer."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import identity
from mosoo_core.clock import utcnow
from mosoo_core.errors import Conflict, NotFound, RateLimited
from mosoo_core.identity import DeviceGrant, DeviceRefusal
from mosoo_core.identity._device import STARTS_PER_IP, USER_CODE_ALPHABET
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.identity import AccessToken, DeviceAuthorization
from mosoo_web.api import build_api
from tests.support.redis_db import db_number

REDIS_DB = db_number(4)


@pytest.fixture(autouse=True)
def _redis(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("MOSOO_REDIS_URL", f"redis://127.0.0.1:6379/{REDIS_DB}")
    reset_settings_cache()
    redis.Redis(db=REDIS_DB).flushdb()
    yield
    redis.Redis(db=REDIS_DB).flushdb()


def _account(db: Session, email: str = "ada@example.com") -> str:
    return identity.sign_in_identity(db, provider="email", subject=email, email=email).id


def _refused(result: DeviceGrant | DeviceRefusal, code: str) -> DeviceRefusal:
    assert isinstance(result, DeviceRefusal), f"expected {code}, got a token"
    assert result.code == code, result.message
    return result


def _poll_in(
    db: Session, device_code: str, start: datetime, seconds: float
) -> DeviceGrant | DeviceRefusal:
    return identity.poll_device_authorization(
        db, device_code, now=start + timedelta(seconds=seconds)
    )


def test_start_gives_secret_device_code_and_readable_user_code(db: Session) -> None:
    now = utcnow()
    started = identity.start_device_authorization(db, client_name="mosoo CLI on laptop", now=now)
    assert len(started.device_code) >= 43
    assert re.fullmatch(
        rf"[{USER_CODE_ALPHABET}]{{4}}-[{USER_CODE_ALPHABET}]{{4}}", started.user_code
    )
    assert started.expires_in == 600 and started.interval == 5
    row = db.exec(select(DeviceAuthorization)).one()
    assert row.status == "pending"
    assert started.device_code not in row.device_code_hash
    assert row.expires_at == now + timedelta(minutes=10)
    view = identity.describe_device_authorization(db, started.user_code.lower().replace("-", " "))
    assert view.client_name == "mosoo CLI on laptop" and view.status == "pending"


def test_pending_then_approved_gives_a_cli_token_once(db: Session) -> None:
    account_id = _account(db)
    now = utcnow()
    started = identity.start_device_authorization(db, client_name="ci-box", now=now)
    _refused(_poll_in(db, started.device_code, now, 0), "authorization_pending")
    approved = identity.approve_device_authorization(
        db, account_id, started.user_code, now=now + timedelta(seconds=6)
    )
    assert approved.status == "authorized"

    grant = _poll_in(db, started.device_code, now, 12)
    assert isinstance(grant, DeviceGrant)
    assert grant.account_email == "ada@example.com" and grant.account_id == account_id
    token = identity.authenticate_access_token(db, grant.access_token)
    assert token.source == "cli" and "ci-box" in token.label
    row = db.exec(select(DeviceAuthorization)).one()
    assert row.status == "consumed" and row.access_token_id == token.id
    stored = db.exec(select(AccessToken)).one()
    assert grant.access_token not in (stored.token_hash, row.device_code_hash)

    # Single use: the same device code never yields a second token.
    _refused(_poll_in(db, started.device_code, now, 30), "invalid_grant")
    assert len(db.exec(select(AccessToken)).all()) == 1
    with pytest.raises(Conflict, match="already been used"):
        identity.approve_device_authorization(db, account_id, started.user_code)


def test_denied_request_answers_access_denied(db: Session) -> None:
    account_id = _account(db)
    now = utcnow()
    started = identity.start_device_authorization(db, now=now)
    assert (
        identity.deny_device_authorization(db, account_id, started.user_code, now=now).status
        == "denied"
    )
    _refused(_poll_in(db, started.device_code, now, 6), "access_denied")
    _refused(_poll_in(db, started.device_code, now, 12), "access_denied")
    with pytest.raises(Conflict, match="denied"):
        identity.approve_device_authorization(db, account_id, started.user_code)
    assert db.exec(select(AccessToken)).all() == []


def test_code_expires_after_ten_minutes(db: Session) -> None:
    account_id = _account(db)
    now = utcnow()
    started = identity.start_device_authorization(db, now=now)
    _refused(_poll_in(db, started.device_code, now, 599), "authorization_pending")
    _refused(_poll_in(db, started.device_code, now, 600), "expired_token")
    assert db.exec(select(DeviceAuthorization)).one().status == "expired"
    view = identity.describe_device_authorization(
        db, started.user_code, now=now + timedelta(minutes=11)
    )
    assert view.status == "expired"
    with pytest.raises(Conflict, match="expired"):
        identity.approve_device_authorization(
            db, account_id, started.user_code, now=now + timedelta(minutes=11)
        )


def test_approval_that_is_not_collected_in_time_expires(db: Session) -> None:
    account_id = _account(db)
    now = utcnow()
    started = identity.start_device_authorization(db, now=now)
    identity.approve_device_authorization(
        db, account_id, started.user_code, now=now + timedelta(minutes=9)
    )
    _refused(_poll_in(db, started.device_code, now, 601), "expired_token")
    assert db.exec(select(AccessToken)).all() == []


def test_approving_after_expiry_is_refused_even_before_any_poll(db: Session) -> None:
    account_id = _account(db)
    now = utcnow()
    started = identity.start_device_authorization(db, now=now)
    with pytest.raises(Conflict, match="expired"):
        identity.approve_device_authorization(
            db, account_id, started.user_code, now=now + timedelta(minutes=10)
        )


def test_polling_faster_than_the_interval_slows_the_client_down(db: Session) -> None:
    now = utcnow()
    started = identity.start_device_authorization(db, now=now)
    _refused(_poll_in(db, started.device_code, now, 0), "authorization_pending")
    slowed = _refused(_poll_in(db, started.device_code, now, 2), "slow_down")
    assert slowed.interval == 10
    # The new interval counts from the last poll, and it stays raised.
    _refused(_poll_in(db, started.device_code, now, 8), "slow_down")
    assert db.exec(select(DeviceAuthorization)).one().interval_seconds == 15
    _refused(_poll_in(db, started.device_code, now, 23), "authorization_pending")


def test_unknown_device_code_is_invalid_grant(db: Session) -> None:
    identity.start_device_authorization(db)
    for code in ("", "nope", "x" * 500):
        _refused(identity.poll_device_authorization(db, code), "invalid_grant")


def test_unknown_user_code_is_not_found(db: Session) -> None:
    account_id = _account(db)
    identity.start_device_authorization(db)
    for code in ("", "ABCD", "BBBB-BBBB", "not a code at all"):
        with pytest.raises(NotFound):
            identity.describe_device_authorization(db, code)
        with pytest.raises(NotFound):
            identity.approve_device_authorization(db, account_id, code)


def test_a_code_is_decided_once(db: Session) -> None:
    first = _account(db, "first@example.com")
    second = _account(db, "second@example.com")
    started = identity.start_device_authorization(db)
    identity.approve_device_authorization(db, first, started.user_code)
    with pytest.raises(Conflict, match="already been approved"):
        identity.deny_device_authorization(db, second, started.user_code)
    grant = identity.poll_device_authorization(db, started.device_code)
    assert isinstance(grant, DeviceGrant) and grant.account_id == first


def test_client_name_is_cleaned_and_defaulted(db: Session) -> None:
    started = identity.start_device_authorization(
        db, client_name="  evil\x1b[31m\n name " + "x" * 100
    )
    name = identity.describe_device_authorization(db, started.user_code).client_name
    assert "\x1b" not in name and "\n" not in name and len(name) <= 60
    assert (
        identity.describe_device_authorization(
            db, identity.start_device_authorization(db).user_code
        ).client_name
        == "Mosoo CLI"
    )


def test_starts_are_rate_limited_per_address(db: Session) -> None:
    for _ in range(STARTS_PER_IP):
        identity.start_device_authorization(db, ip="10.0.0.7")
    with pytest.raises(RateLimited) as error:
        identity.start_device_authorization(db, ip="10.0.0.7")
    assert error.value.retry_after_seconds > 0
    identity.start_device_authorization(db, ip="10.0.0.8")


def test_rows_long_past_expiry_are_purged_on_start(db: Session) -> None:
    long_ago = utcnow() - timedelta(days=2)
    identity.start_device_authorization(db, now=long_ago)
    identity.start_device_authorization(db)
    assert len(db.exec(select(DeviceAuthorization)).all()) == 1


# --- over HTTP: POST /api/auth/cli/start and /api/auth/cli/token ---------------------------


@pytest.fixture
def client(engine: Engine) -> Iterator[TestClient]:
    with TestClient(build_api(), base_url="http://127.0.0.1:4321") as client:
        yield client


def test_http_start_answers_the_rfc_fields_with_urls_from_the_request(client: TestClient) -> None:
    response = client.post("/api/auth/cli/start", json={"client_name": "mosoo CLI on box"})
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {
        "device_code",
        "user_code",
        "verification_uri",
        "verification_uri_complete",
        "expires_in",
        "interval",
    }
    assert body["verification_uri"] == "http://127.0.0.1:4321/cli-auth"
    assert (
        body["verification_uri_complete"]
        == f"http://127.0.0.1:4321/cli-auth?code={body['user_code']}"
    )
    assert body["expires_in"] == 600 and body["interval"] == 5
    assert response.headers["cache-control"] == "no-store"
    # An empty body is fine too: the client name is optional.
    assert client.post("/api/auth/cli/start").status_code == 200


def test_http_poll_pending_then_token_then_invalid_grant(
    client: TestClient, engine: Engine
) -> None:
    started = client.post("/api/auth/cli/start", json={}).json()
    pending = client.post("/api/auth/cli/token", json={"device_code": started["device_code"]})
    assert pending.status_code == 400
    assert pending.json()["error"]["code"] == "authorization_pending"
    with Session(engine) as db:
        account_id = _account(db, "http@example.com")
        identity.approve_device_authorization(db, account_id, started["user_code"])
        db.commit()
    # Back-to-back polls would be slow_down while pending; an approved code answers at once.
    granted = client.post("/api/auth/cli/token", json={"device_code": started["device_code"]})
    assert granted.status_code == 200, granted.text
    body = granted.json()
    assert body["token_type"] == "Bearer" and body["account_email"] == "http@example.com"
    assert body["access_token"].startswith("mst_")
    again = client.post("/api/auth/cli/token", json={"device_code": started["device_code"]})
    assert again.status_code == 400 and again.json()["error"]["code"] == "invalid_grant"


def test_http_poll_reports_slow_down_and_denial(client: TestClient, engine: Engine) -> None:
    started = client.post("/api/auth/cli/start", json={}).json()
    client.post("/api/auth/cli/token", json={"device_code": started["device_code"]})
    fast = client.post("/api/auth/cli/token", json={"device_code": started["device_code"]}).json()[
        "error"
    ]
    assert fast["code"] == "slow_down" and fast["interval"] == 10
    with Session(engine) as db:
        identity.deny_device_authorization(db, _account(db, "no@example.com"), started["user_code"])
        db.commit()
    denied = client.post("/api/auth/cli/token", json={"device_code": started["device_code"]})
    assert denied.status_code == 400 and denied.json()["error"]["code"] == "access_denied"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"", "device_code"),
        (b"{}", "device_code"),
        (b'{"device_code": 5}', "device_code"),
        (b"[1]", None),
        (b"{nope", None),
    ],
)
def test_http_poll_with_bad_input_is_invalid_request(
    client: TestClient, body: bytes, field: str | None
) -> None:
    response = client.post(
        "/api/auth/cli/token", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and error.get("field") == field


def test_http_start_is_rate_limited_with_retry_after(client: TestClient) -> None:
    for _ in range(STARTS_PER_IP):
        assert client.post("/api/auth/cli/start").status_code == 200
    limited = client.post("/api/auth/cli/start")
    assert limited.status_code == 429 and limited.json()["error"]["code"] == "rate_limited"
    assert int(limited.headers["retry-after"]) > 0
