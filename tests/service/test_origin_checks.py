"""Only the console's own origins may change sign-in state from a browser: the allowed-origin
list (shared with the websocket's check in rxconfig) and the `/api/auth` middleware over HTTP."""

from __future__ import annotations

import io
from collections.abc import Iterator

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import files, identity
from mosoo_core.origins import allowed_origins
from mosoo_core.settings import get_settings, reset_settings_cache
from mosoo_core.tables.agents import Agent
from mosoo_web.api import build_api

CONSOLE = "http://127.0.0.1:3000"
OTHER_PORT = "http://127.0.0.1:8080"  # the same site as the console (cookies ignore ports)


# The allowed-origin computation.


def test_a_loopback_console_allows_every_loopback_spelling_of_its_scheme_and_port() -> None:
    expected = {"http://localhost:3000", "http://127.0.0.1:3000", "http://[::1]:3000"}
    assert set(allowed_origins("http://localhost:3000")) == expected
    assert set(allowed_origins("http://127.0.0.1:3000/")) == expected
    assert set(allowed_origins("http://[::1]:3000")) == expected
    assert allowed_origins("http://127.0.0.1:3000")[0] == "http://127.0.0.1:3000"  # its own first


def test_a_public_host_allows_only_itself() -> None:
    assert allowed_origins("https://mosoo.example.com") == ("https://mosoo.example.com",)
    assert allowed_origins("https://Mosoo.Example.com/console/") == ("https://mosoo.example.com",)
    assert allowed_origins("https://mosoo.example.com:8443") == ("https://mosoo.example.com:8443",)


def test_https_loopback_keeps_its_scheme() -> None:
    assert set(allowed_origins("https://localhost:8443")) == {
        "https://localhost:8443",
        "https://127.0.0.1:8443",
        "https://[::1]:8443",
    }


def test_other_ports_and_schemes_are_other_origins() -> None:
    allowed = allowed_origins("http://localhost:3000")
    for foreign in (
        "http://localhost:8080",
        "http://127.0.0.1:8080",
        "http://localhost",
        "https://localhost:3000",
        "http://localhost:3000.evil.example",
        "null",
    ):
        assert foreign not in allowed, foreign


def test_default_ports_are_left_out_as_browsers_do() -> None:
    assert allowed_origins("https://mosoo.example.com:443/") == ("https://mosoo.example.com",)
    assert allowed_origins("http://localhost:80")[0] == "http://localhost"


@pytest.mark.parametrize(
    "public_url", ["", "localhost:3000", "ftp://example.com", "http://", "http://localhost:99999"]
)
def test_an_unusable_public_url_is_a_configuration_error(public_url: str) -> None:
    # Never an empty list: python-engineio reads `[]` as "check nothing".
    with pytest.raises(ValueError):
        allowed_origins(public_url)


# The middleware, through HTTP.


@pytest.fixture
def client(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("MOSOO_PUBLIC_URL", CONSOLE)
    reset_settings_cache()
    with TestClient(build_api(), base_url=CONSOLE) as client:
        yield client


def _stored_codes(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(sa.text("SELECT count(*) FROM email_code")).scalar_one())


def _start(client: TestClient, email: str, **headers: str) -> httpx.Response:
    return client.post("/api/auth/email/start", json={"email": email}, headers=headers)


@pytest.mark.parametrize(
    "origin", [OTHER_PORT, "http://localhost:8080", "https://127.0.0.1:3000", "null"]
)
def test_a_code_request_from_another_origin_is_refused_and_stores_nothing(
    client: TestClient, engine: Engine, origin: str
) -> None:
    response = _start(client, "victim@example.com", Origin=origin)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    assert response.json()["error"]["message"]
    assert _stored_codes(engine) == 0


@pytest.mark.parametrize(
    "headers",
    [{"Origin": CONSOLE}, {"Origin": "http://localhost:3000"}, {}],
    ids=["own", "loopback alias", "none"],
)
def test_a_code_request_from_the_console_or_without_origin_works(
    client: TestClient, engine: Engine, headers: dict[str, str]
) -> None:
    response = _start(client, "owner@example.com", **headers)
    assert response.status_code == 200 and response.json()["ok"] is True
    assert _stored_codes(engine) == 1


def test_a_second_origin_header_cannot_smuggle_a_foreign_page_in(
    client: TestClient, engine: Engine
) -> None:
    response = client.post(
        "/api/auth/email/start",
        json={"email": "victim@example.com"},
        headers=[("Origin", CONSOLE), ("Origin", OTHER_PORT)],
    )
    assert response.status_code == 403
    assert _stored_codes(engine) == 0


def _signed_in(engine: Engine, email: str) -> str:
    with Session(engine) as db:
        account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
        token = identity.start_session(db, account.id, method="email").token
        db.commit()
    return token


def _session_lives(engine: Engine, token: str) -> bool:
    with Session(engine) as db:
        return identity.resolve_session(db, token) is not None


def test_a_sign_out_from_another_origin_is_refused_and_keeps_the_session(
    client: TestClient, engine: Engine
) -> None:
    token = _signed_in(engine, "kept@example.com")
    client.cookies.set(get_settings().session_cookie, token)
    refused = client.post("/api/auth/logout", headers={"Origin": OTHER_PORT})
    assert refused.status_code == 403 and "set-cookie" not in refused.headers
    assert _session_lives(engine, token)
    assert (
        client.get("/api/auth/me", headers={"Origin": OTHER_PORT}).status_code == 200
    )  # reads are not guarded here
    signed_out = client.post("/api/auth/logout", headers={"Origin": CONSOLE})
    assert signed_out.status_code == 200
    assert not _session_lives(engine, token)


@pytest.mark.parametrize(
    "path", ["/api/auth/email/verify", "/api/auth/cli/start", "/api/auth/cli/token"]
)
def test_every_unsafe_sign_in_endpoint_is_guarded(client: TestClient, path: str) -> None:
    refused = client.post(path, json={}, headers={"Origin": OTHER_PORT})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert client.post(path, json={}).status_code != 403  # the CLI and curl send no Origin


def test_the_public_api_is_not_origin_checked(client: TestClient) -> None:
    # Bearer tokens only, no cookies: a foreign page gains nothing, so the API answers as usual.
    response = client.post(
        f"/api/v1/agents/{'0' * 26}/threads", json={}, headers={"Origin": OTHER_PORT}
    )
    assert response.status_code == 401


def test_a_public_host_refuses_its_own_name_over_plain_http(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOSOO_PUBLIC_URL", "https://mosoo.example.com")
    reset_settings_cache()
    with TestClient(build_api(), base_url="https://mosoo.example.com") as client:
        assert _start(client, "a@example.com", Origin="http://mosoo.example.com").status_code == 403
        assert (
            _start(client, "a@example.com", Origin="https://mosoo.example.com").status_code == 200
        )
    assert _stored_codes(engine) == 1


def test_console_file_bytes_cannot_be_embedded_by_another_origin(
    client: TestClient, engine: Engine
) -> None:
    with Session(engine) as db:
        account = identity.sign_in_identity(
            db, provider="email", subject="f@example.com", email="f@example.com"
        )
        app_id = identity.list_apps(db, account.id)[0].id
        agent = Agent(app_id=app_id, name="A", model="m")
        db.add(agent)
        db.flush()
        view = files.upload_file(
            db, account.id, app_id, agent.id, io.BytesIO(b"\x89PNG"), "a.png", "image/png"
        )
        token = identity.start_session(db, account.id, method="email").token
        db.commit()
    client.cookies.set(get_settings().session_cookie, token)
    response = client.get(f"/api/files/{view.id}/content")
    assert response.status_code == 200
    assert response.headers["cross-origin-resource-policy"] == "same-origin"
