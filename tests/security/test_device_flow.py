"""The CLI's device flow through `POST /api/auth/cli/start` and `/token` of a real `mosoo web`.
The console's Approve is played by the service it calls; every refusal comes over HTTP and
is checked in `device_authorization` afterwards."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import httpx
import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import identity
from mosoo_core.clock import utcnow
from mosoo_core.tables.identity import AccessToken, DeviceAuthorization
from tests.security.conftest import count, error_code, next_loopback_address, rows, update

pytestmark = pytest.mark.integration

Web = Callable[..., httpx.Client]


def _start(client: httpx.Client) -> httpx.Response:
    return client.post("/api/auth/cli/start", json={"client_name": "security test"})


def _poll(client: httpx.Client, device_code: str) -> httpx.Response:
    return client.post("/api/auth/cli/token", json={"device_code": device_code})


def _only_row(engine: Engine, user_code: str) -> DeviceAuthorization:
    [row] = rows(
        engine, DeviceAuthorization, DeviceAuthorization.user_code == user_code.replace("-", "")
    )
    return row


def _approve(engine: Engine, user_code: str, email: str) -> str:
    """What the console's Approve button does for the signed-in account."""
    with Session(engine) as db:
        account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
        identity.approve_device_authorization(db, account.id, user_code)
        db.commit()
        return account.id


def test_polling_faster_than_the_interval_is_slow_down_and_the_interval_grows_by_5_seconds(
    web: Web, engine: Engine
) -> None:
    """README: `POST /api/auth/cli/token` answers ... "`slow_down` — wait 5 s longer —"."""
    client = web()
    started = _start(client).json()
    assert started["interval"] == 5
    first = _poll(client, started["device_code"])
    assert first.status_code == 400 and error_code(first) == "authorization_pending"
    too_soon = _poll(client, started["device_code"])
    assert too_soon.status_code == 400 and error_code(too_soon) == "slow_down"
    assert too_soon.json()["error"]["interval"] == 10
    assert _only_row(engine, started["user_code"]).interval_seconds == 10  # committed
    again = _poll(client, started["device_code"])
    assert error_code(again) == "slow_down" and again.json()["error"]["interval"] == 15
    row = _only_row(engine, started["user_code"])
    assert row.interval_seconds == 15 and row.status == "pending"


def test_a_code_expires_after_10_minutes_then_polling_is_expired_token(
    web: Web, engine: Engine
) -> None:
    """README: "codes expire after 10 minutes and work once"; PRODUCT: "Codes expire after
    10 minutes; states pending, authorized, denied, expired, consumed"."""
    client = web()
    started = _start(client).json()
    assert started["expires_in"] == 600
    row = _only_row(engine, started["user_code"])
    assert row.expires_at - row.created_at == timedelta(minutes=10)
    update(
        engine,
        DeviceAuthorization,
        DeviceAuthorization.id == row.id,
        expires_at=utcnow() - timedelta(seconds=1),
    )
    expired = _poll(client, started["device_code"])
    assert expired.status_code == 400 and error_code(expired) == "expired_token"
    assert _only_row(engine, started["user_code"]).status == "expired"
    # An approval that is not collected in time is just as dead: no token is ever minted.
    approved = _start(client).json()
    _approve(engine, approved["user_code"], "late@example.com")
    update(
        engine,
        DeviceAuthorization,
        DeviceAuthorization.user_code == approved["user_code"].replace("-", ""),
        expires_at=utcnow() - timedelta(seconds=1),
    )
    late = _poll(client, approved["device_code"])
    assert late.status_code == 400 and error_code(late) == "expired_token"
    assert _only_row(engine, approved["user_code"]).status == "expired"
    assert count(engine, AccessToken) == 0


def test_a_device_code_works_once_then_is_invalid_grant(web: Web, engine: Engine) -> None:
    """README: "codes expire after 10 minutes and work once"; the token poll answers the
    token "once, else 400 ... (`invalid_grant`)"."""
    client = web()
    started = _start(client).json()
    account_id = _approve(engine, started["user_code"], "cli-once@example.com")
    granted = _poll(client, started["device_code"])
    assert granted.status_code == 200, granted.text
    token = granted.json()["access_token"]
    assert granted.json()["token_type"] == "Bearer" and token.startswith("mst_")
    assert (
        client.get("/api/v1/agents", headers={"Authorization": f"Bearer {token}"}).status_code
        == 200
    )
    replayed = _poll(client, started["device_code"])
    assert replayed.status_code == 400 and error_code(replayed) == "invalid_grant"
    assert "access_token" not in replayed.text
    assert _only_row(engine, started["user_code"]).status == "consumed"
    assert (
        count(
            engine, AccessToken, AccessToken.account_id == account_id, AccessToken.source == "cli"
        )
        == 1
    )


def test_unknown_device_codes_are_invalid_grant(web: Web, engine: Engine) -> None:
    """README: the token poll answers "400 ... with the RFC 8628 codes (... `invalid_grant`)"."""
    refused = _poll(web(), "made-up-device-code")
    assert refused.status_code == 400 and error_code(refused) == "invalid_grant"
    assert count(engine, AccessToken) == 0


def test_sign_in_starts_are_limited_to_20_per_10_minutes_per_ip(web: Web, engine: Engine) -> None:
    """`mosoo_core/identity/_device.py`: "Starting a sign-in is unauthenticated; this bounds how
    many codes one address can mint" (20 per 10-minute window, 429 with Retry-After)."""
    for _ in range(2):  # once more if a 10-minute window boundary fell between the calls
        window = int(time.time()) // 600
        before = count(engine, DeviceAuthorization)
        client = web(next_loopback_address())
        answers = [_start(client) for _ in range(21)]
        if int(time.time()) // 600 == window:
            break
    assert [a.status_code for a in answers] == [200] * 20 + [429]
    refused = answers[-1]
    assert error_code(refused) == "rate_limited"
    assert 1 <= int(refused.headers["retry-after"]) <= 600
    assert count(engine, DeviceAuthorization) - before == 20
    assert _start(web()).status_code == 200  # another address is not held back
