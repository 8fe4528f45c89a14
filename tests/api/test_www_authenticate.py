"""Every 401 of the public API names its scheme (RFC 6750): `WWW-Authenticate: Bearer`, with
`error="invalid_token"` when a token was sent and refused."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import identity
from mosoo_web.api.v1 import build_v1
from tests.api.conftest import ApiOwner, live_server

OPERATIONS = [
    (method.upper(), path)
    for path, item in build_v1().openapi()["paths"].items()
    for method in item
]
# Ids that look real: the token is checked before any id is looked up.
IDS = {
    "agent_id": "0" * 26,
    "thread_id": "0" * 26,
    "file_id": "0" * 26,
    "environment_id": "0" * 26,
    "skill_id": "0" * 26,
    "server_id": "0" * 26,
    "operation": "reset",  # a sandbox operation: the token is checked before it runs
}

REFUSED_TOKENS = {
    "none": ({}, "Bearer"),
    "basic": ({"Authorization": "Basic dXNlcjpwYXNz"}, "Bearer"),
    "empty bearer": ({"Authorization": "Bearer "}, "Bearer"),
    "malformed": ({"Authorization": "Bearer not-a-token"}, 'Bearer error="invalid_token"'),
    "unknown": ({"Authorization": "Bearer mst_" + "x" * 43}, 'Bearer error="invalid_token"'),
}


def _request(client: TestClient, method: str, path: str, headers: dict[str, str]) -> Any:
    kwargs: dict[str, Any] = {"headers": headers}
    if (method, path) == ("POST", "/agents/{agent_id}/files"):
        kwargs["files"] = {"file": ("x.txt", b"x", "text/plain")}
    elif method == "POST":
        kwargs["json"] = (
            {"type": "user_message", "text": "hello"} if path.endswith("/events") else {}
        )
    return client.request(method, "/api/v1" + path.format(**IDS), **kwargs)


@pytest.mark.parametrize("refused", list(REFUSED_TOKENS), ids=list(REFUSED_TOKENS))
def test_every_401_names_the_bearer_scheme(client: TestClient, refused: str) -> None:
    # Every operation in one test per kind of refused token (the refusals change nothing).
    headers, challenge = REFUSED_TOKENS[refused]
    wrong = {}
    for method, path in OPERATIONS:
        response = _request(client, method, path, headers)
        answer = (
            response.status_code,
            response.json().get("error", {}).get("code"),
            response.headers.get("www-authenticate"),
        )
        if answer != (401, "unauthenticated", challenge):
            wrong[(method, path)] = answer
    assert wrong == {}


def test_a_revoked_token_is_an_invalid_token(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    assert "www-authenticate" not in client.get("/api/v1/agents", headers=owner.headers).headers
    with Session(api_env) as db:
        token = identity.list_access_tokens(db, owner.account_id)[0]
        identity.revoke_access_token(db, owner.account_id, token.id)
        db.commit()
    response = client.get("/api/v1/agents", headers=owner.headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer error="invalid_token"'


def test_other_errors_carry_no_challenge(client: TestClient, owner: ApiOwner) -> None:
    missing = client.get(f"/api/v1/agents/{'0' * 26}", headers=owner.headers)
    assert missing.status_code == 404 and "www-authenticate" not in missing.headers
    unknown_route = client.get("/api/v1/nowhere")
    assert unknown_route.status_code == 404 and "www-authenticate" not in unknown_route.headers


def test_the_event_stream_refuses_with_a_challenge_over_a_real_server(owner: ApiOwner) -> None:
    with live_server() as server:
        url = f"{server.base_url}/api/v1/threads/{'0' * 26}/events/stream"
        response = httpx.get(url, timeout=10)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"


def test_the_openapi_document_describes_the_challenge(client: TestClient) -> None:
    document = client.get("/api/v1/openapi.json").json()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            unauthorized = operation["responses"]["401"]
            assert "WWW-Authenticate" in unauthorized.get("headers", {}), f"{method.upper()} {path}"
            assert "WWW-Authenticate: Bearer" in unauthorized["description"]
