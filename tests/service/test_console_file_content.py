"""`/api/files/{id}/content`: the console's download and preview endpoint (session cookie)."""

from __future__ import annotations

import io
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import files, identity
from mosoo_core.settings import get_settings
from mosoo_core.tables.agents import Agent
from mosoo_web.api import build_api


@pytest.fixture
def client(engine: Engine) -> Iterator[TestClient]:
    with TestClient(build_api(), base_url="http://127.0.0.1") as client:
        yield client


def _owner_with_file(
    engine: Engine, email: str, name: str, data: bytes, media_type: str | None = None
) -> tuple[str, str]:
    """(session token, file id) for a signed-in owner with one uploaded file."""
    with Session(engine) as db:
        account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
        app_id = identity.list_apps(db, account.id)[0].id
        agent = Agent(app_id=app_id, name="A", model="m")
        db.add(agent)
        db.flush()
        view = files.upload_file(
            db, account.id, app_id, agent.id, io.BytesIO(data), name, media_type
        )
        token = identity.start_session(db, account.id, method="email").token
        db.commit()
    return token, view.id


def _get(client: TestClient, token: str | None, path: str) -> httpx.Response:
    client.cookies.clear()
    if token:
        client.cookies.set(get_settings().session_cookie, token)
    return client.get(path)


def test_owner_downloads_a_file_as_an_attachment_with_safe_headers(
    client: TestClient, engine: Engine
) -> None:
    body = b"# Summary\n\nAll good.\n" * 1000
    token, file_id = _owner_with_file(engine, "dl@example.com", "summary.md", body)
    response = _get(client, token, f"/api/files/{file_id}/content?download=1")
    assert response.status_code == 200
    assert response.content == body
    headers = response.headers
    assert headers["content-disposition"].startswith('attachment; filename="summary.md"')
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["content-security-policy"] == "sandbox"
    assert headers["content-length"] == str(len(body))


def test_plain_text_and_raster_images_open_inline_other_types_never(
    client: TestClient, engine: Engine
) -> None:
    token, text_id = _owner_with_file(engine, "inline@example.com", "notes.txt", b"hello")
    response = _get(client, token, f"/api/files/{text_id}/content")
    assert response.headers["content-disposition"].startswith("inline;")
    assert response.headers["content-type"].startswith("text/plain")
    download = _get(client, token, f"/api/files/{text_id}/content?download=1")
    assert download.headers["content-disposition"].startswith("attachment;")
    for name, media_type in (("page.html", "text/html"), ("logo.svg", "image/svg+xml")):
        token, file_id = _owner_with_file(
            engine, f"{name}@example.com", name, b"<script>alert(1)</script>", media_type
        )
        response = _get(client, token, f"/api/files/{file_id}/content")
        assert response.headers["content-disposition"].startswith("attachment;"), name
        assert response.headers["content-security-policy"] == "sandbox"


def test_unicode_names_keep_a_safe_ascii_fallback(client: TestClient, engine: Engine) -> None:
    token, file_id = _owner_with_file(engine, "uni@example.com", 'résumé "final".txt', b"x")
    disposition = _get(client, token, f"/api/files/{file_id}/content?download=1").headers[
        "content-disposition"
    ]
    assert 'filename="r_sum_ _final_.txt"' in disposition
    assert "filename*=UTF-8''r%C3%A9sum%C3%A9%20%22final%22.txt" in disposition


def test_another_owners_file_is_not_found_and_no_cookie_is_unauthenticated(
    client: TestClient, engine: Engine
) -> None:
    _owner_token, file_id = _owner_with_file(
        engine, "owner@example.com", "secret.txt", b"top secret"
    )
    stranger, _other = _owner_with_file(engine, "stranger@example.com", "mine.txt", b"mine")
    response = _get(client, stranger, f"/api/files/{file_id}/content")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert b"top secret" not in response.content
    assert _get(client, None, f"/api/files/{file_id}/content").status_code == 401
    assert _get(client, "forged-token", f"/api/files/{file_id}/content").status_code == 401
    assert _get(client, stranger, "/api/files/NOPE/content").status_code == 404
