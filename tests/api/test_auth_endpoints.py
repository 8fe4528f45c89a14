"""`/api/auth` and `/api/health` over HTTP (the FastAPI app the web process serves): HTTP tests
live with the API's, not with the service tests."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import identity, mail
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.identity import AuthSession, EmailCode, SignInFailure
from mosoo_web.api import build_api


@pytest.fixture
def client(engine: Engine) -> Iterator[TestClient]:
    with TestClient(build_api(), base_url="http://127.0.0.1") as client:
        yield client


def _latest_code(engine: Engine) -> str:
    with Session(engine) as db:
        match = re.search(r"\b(\d{6})\b", mail.list_dev_mailbox(db, limit=1)[0].body)
    assert match
    return match.group(1)


def test_email_code_sign_in_sets_an_httponly_lax_cookie(client: TestClient, engine: Engine) -> None:
    assert (
        client.post("/api/auth/email/start", json={"email": "api@example.com"}).json()["ok"] is True
    )
    response = client.post(
        "/api/auth/email/verify", json={"email": "api@example.com", "code": _latest_code(engine)}
    )
    assert response.status_code == 200
    header = response.headers["set-cookie"].lower()
    assert "mosoo_session=" in header and "httponly" in header and "samesite=lax" in header
    assert "secure" not in header  # plain HTTP on loopback
    me = client.get("/api/auth/me").json()
    assert me["email"] == "api@example.com" and me["organization"]["id"]


def test_cookie_is_secure_behind_https(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOSOO_PUBLIC_URL", "https://mosoo.example.com")
    reset_settings_cache()
    with Session(engine) as db:
        account = identity.sign_in_identity(
            db, provider="email", subject="s@example.com", email="s@example.com"
        )
        ticket = identity.issue_login_ticket(db, account.id)
        db.commit()
    with TestClient(build_api(), base_url="https://127.0.0.1") as client:
        response = client.get(f"/api/auth/finish?ticket={ticket}", follow_redirects=False)
    assert "secure" in response.headers["set-cookie"].lower()


def test_unknown_and_known_addresses_get_identical_answers(client: TestClient) -> None:
    known = client.post("/api/auth/email/start", json={"email": "api@example.com"})
    client.post("/api/auth/email/verify", json={"email": "api@example.com", "code": "000000"})
    unknown = client.post("/api/auth/email/start", json={"email": "ghost@example.com"})
    assert known.status_code == unknown.status_code == 200
    assert known.json() == unknown.json()


def test_wrong_code_is_refused_without_a_cookie(client: TestClient) -> None:
    client.post("/api/auth/email/start", json={"email": "api@example.com"})
    response = client.post(
        "/api/auth/email/verify", json={"email": "api@example.com", "code": "not-it"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert "set-cookie" not in response.headers
    assert client.get("/api/auth/me").status_code == 401


def test_rate_limit_answers_429_with_retry_after(client: TestClient) -> None:
    for _ in range(5):
        assert (
            client.post("/api/auth/email/start", json={"email": "busy@example.com"}).status_code
            == 200
        )
    response = client.post("/api/auth/email/start", json={"email": "busy@example.com"})
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "rate_limited"
    assert int(response.headers["retry-after"]) > 0


def test_login_ticket_sets_cookie_once_and_follows_only_local_next(
    client: TestClient, engine: Engine
) -> None:
    with Session(engine) as db:
        account = identity.sign_in_identity(
            db, provider="email", subject="t@example.com", email="t@example.com"
        )
        ticket = identity.issue_login_ticket(db, account.id)
        db.commit()
    first = client.get(
        f"/api/auth/finish?ticket={ticket}&next=https://evil.example/", follow_redirects=False
    )
    assert first.status_code == 303 and first.headers["location"] == "/"
    assert "mosoo_session=" in first.headers["set-cookie"]
    client.cookies.clear()
    replay = client.get(f"/api/auth/finish?ticket={ticket}", follow_redirects=False)
    assert replay.status_code == 303 and replay.headers["location"] == "/login?error=expired"
    assert "set-cookie" not in replay.headers


def test_logout_revokes_the_session(client: TestClient, engine: Engine) -> None:
    client.post("/api/auth/email/start", json={"email": "bye@example.com"})
    client.post(
        "/api/auth/email/verify", json={"email": "bye@example.com", "code": _latest_code(engine)}
    )
    token = client.cookies.get("mosoo_session")
    assert client.post("/api/auth/logout").status_code == 200
    with Session(engine) as db:
        assert identity.resolve_session(db, token) is None
    client.cookies.set("mosoo_session", token or "")
    assert client.get("/api/auth/me").status_code == 401


def test_health_checks_database_and_redis(client: TestClient) -> None:
    response = client.get("/api/health")
    assert response.status_code == 200
    assert response.json()["ok"] is True


def test_health_is_503_when_redis_is_down(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.processes import free_port

    monkeypatch.setenv("MOSOO_REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    reset_settings_cache()
    with TestClient(build_api()) as client:
        response = client.get("/api/health")
    assert response.status_code == 503
    assert response.json()["ok"] is False and response.json()["checks"]["database"] == "ok"


def _wrong(code: str) -> str:
    return f"{(int(code) + 1) % 1_000_000:06d}"


def test_500_wrong_codes_then_the_right_one_is_refused_and_the_tries_persist(
    client: TestClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's reproduction through `POST /api/auth/email/verify`: the refusals' counters
    are committed (a rollback of the refused request once undid them), so the code is dead."""
    monkeypatch.setenv("MOSOO_EMAIL_VERIFY_FAILURES_PER_ADDRESS_PER_HOUR", "1000")
    monkeypatch.setenv("MOSOO_EMAIL_VERIFY_FAILURES_PER_IP_PER_HOUR", "1000")
    reset_settings_cache()
    client.post("/api/auth/email/start", json={"email": "brute@example.com"})
    code = _latest_code(engine)
    statuses = {
        client.post(
            "/api/auth/email/verify", json={"email": "brute@example.com", "code": _wrong(code)}
        ).status_code
        for _ in range(500)
    }
    assert statuses == {400}
    response = client.post(
        "/api/auth/email/verify", json={"email": "brute@example.com", "code": code}
    )
    assert response.status_code == 400 and "set-cookie" not in response.headers
    with Session(engine) as db:
        assert (
            db.exec(select(EmailCode.attempts).where(EmailCode.email == "brute@example.com")).one()
            == 5
        )
        assert db.exec(select(AuthSession)).all() == []
        assert (
            len(
                db.exec(
                    select(SignInFailure).where(SignInFailure.email == "brute@example.com")
                ).all()
            )
            == 501
        )


def test_wrong_codes_are_throttled_per_address_with_retry_after(
    client: TestClient, engine: Engine
) -> None:
    """10 failed verifications an hour per address (MOSOO_EMAIL_VERIFY_FAILURES_PER_ADDRESS_PER_HOUR):
    then even the right code of a fresh code is refused with 429 and Retry-After."""
    for _ in range(2):  # two codes: five tries each
        client.post("/api/auth/email/start", json={"email": "slow@example.com"})
        code = _latest_code(engine)
        for _ in range(5):
            assert (
                client.post(
                    "/api/auth/email/verify",
                    json={"email": "slow@example.com", "code": _wrong(code)},
                ).status_code
                == 400
            )
    client.post("/api/auth/email/start", json={"email": "slow@example.com"})
    response = client.post(
        "/api/auth/email/verify", json={"email": "slow@example.com", "code": _latest_code(engine)}
    )
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "rate_limited"
    assert 3500 <= int(response.headers["retry-after"]) <= 3601
    with Session(engine) as db:
        assert db.exec(select(AuthSession)).all() == []


def test_wrong_codes_are_throttled_per_ip(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOSOO_EMAIL_VERIFY_FAILURES_PER_IP_PER_HOUR", "3")
    reset_settings_cache()
    answers = [
        client.post(
            "/api/auth/email/verify", json={"email": f"spray{i}@example.com", "code": "123456"}
        )
        for i in range(4)
    ]
    assert [a.status_code for a in answers] == [400, 400, 400, 429]
    assert "Retry-After" in answers[-1].headers


def test_throttled_answers_are_identical_for_known_and_unknown_addresses(
    client: TestClient, engine: Engine
) -> None:
    client.post("/api/auth/email/start", json={"email": "known@example.com"})
    client.post(
        "/api/auth/email/verify", json={"email": "known@example.com", "code": _latest_code(engine)}
    )
    client.cookies.clear()

    def answers(email: str) -> list[tuple[int, str, str | None]]:
        seen = []
        for _ in range(11):
            response = client.post(
                "/api/auth/email/verify", json={"email": email, "code": "000000"}
            )
            seen.append((response.status_code, response.text, response.headers.get("retry-after")))
        return seen

    known, unknown = answers("known@example.com"), answers("unknown@example.com")
    assert [s for s, _, _ in known] == [400] * 10 + [429]
    assert [(s, body) for s, body, _ in known] == [(s, body) for s, body, _ in unknown]


def test_signing_in_revokes_the_session_the_browser_already_had(
    client: TestClient, engine: Engine
) -> None:
    """Session tokens rotate at sign-in: a cookie planted before sign-in never becomes signed in."""
    for round_ in range(2):
        client.post("/api/auth/email/start", json={"email": "rotate@example.com"})
        response = client.post(
            "/api/auth/email/verify",
            json={"email": "rotate@example.com", "code": _latest_code(engine)},
        )
        assert response.status_code == 200
        if round_ == 0:
            first = client.cookies.get("mosoo_session")
    second = client.cookies.get("mosoo_session")
    assert first and second and first != second
    with Session(engine) as db:
        assert identity.resolve_session(db, first) is None
        assert identity.resolve_session(db, second) is not None
