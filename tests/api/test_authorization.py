"""Authorization matrix over every operation of the OpenAPI document: without a valid token
`unauthenticated`; with another owner's token, every id of the first owner is `not_found`."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import identity
from mosoo_core.tables import metadata
from mosoo_web.api.v1 import build_v1
from tests.api.conftest import ApiOwner
from tests.support.mcp_server import allow_private_networks

SKILL_MD = b"---\nname: mine\ndescription: The first owner's skill.\n---\nDo it my way.\n"
OPERATIONS = [
    (method.upper(), path)
    for path, item in build_v1().openapi()["paths"].items()
    for method in item
]


def _request(
    client: TestClient, method: str, path: str, ids: dict[str, str], headers: dict[str, str]
) -> Any:
    url = "/api/v1" + path.format(**ids)
    kwargs: dict[str, Any] = {"headers": headers}
    if (method, path) == ("POST", "/agents/{agent_id}/files"):
        kwargs["files"] = {"file": ("x.txt", b"x", "text/plain")}
    elif (method, path) == ("POST", "/skills"):
        kwargs["files"] = {"file": ("SKILL.md", SKILL_MD.replace(b"mine", b"theirs"))}
    elif (method, path) == ("POST", "/threads/{thread_id}/events"):
        kwargs["json"] = {"type": "user_message", "text": "hello"}
    elif (method, path) == ("PATCH", "/environments/{environment_id}"):
        kwargs["json"] = {"setup_script": "echo changed"}
    elif (method, path) == ("PATCH", "/mcp-servers/{server_id}"):
        kwargs["json"] = {"enabled": False, "bearer_token": "theirs"}
    elif (method, path) == ("POST", "/mcp-servers"):
        kwargs["json"] = {"name": "theirs", "url": "http://127.0.0.1:9/mcp"}
    elif (method, path) == ("PATCH", "/agents/{agent_id}"):
        kwargs["json"] = {"system_prompt": "changed"}
    elif method == "POST":
        kwargs["json"] = {}
    return client.request(method, url, **kwargs)


@pytest.fixture(autouse=True)
def _servers_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    allow_private_networks(monkeypatch)  # the servers below are at a closed loopback port


@pytest.fixture
def first_owner_ids(client: TestClient, owner: ApiOwner) -> dict[str, str]:
    uploaded = client.post(
        f"/api/v1/agents/{owner.agent_id}/files",
        headers=owner.headers,
        files={"file": ("a.txt", b"a", "text/plain")},
    ).json()
    created = client.post(
        f"/api/v1/agents/{owner.agent_id}/threads",
        headers=owner.headers,
        json={"message": "mine", "file_ids": [uploaded["id"]]},
    ).json()
    environment = client.post(
        "/api/v1/environments",
        headers=owner.headers,
        json={"name": "Mine", "setup_script": "echo mine"},
    ).json()
    skill = client.post(
        "/api/v1/skills", headers=owner.headers, files={"file": ("SKILL.md", SKILL_MD)}
    ).json()
    return {
        "agent_id": owner.agent_id,
        "thread_id": created["thread"]["id"],
        "file_id": uploaded["id"],
        "environment_id": environment["id"],
        "server_id": client.post(
            "/api/v1/mcp-servers",
            headers=owner.headers,
            # A closed loopback port: a test that got through would reach nothing.
            json={
                "name": "mine",
                "url": "http://127.0.0.1:9/mcp",
                "auth_kind": "bearer",
                "bearer_token": "mine",
            },
        ).json()["id"],
        "skill_id": skill["skill"]["id"],
        "operation": "reset",  # the sandbox operation that changes the most
    }


def test_the_matrix_covers_every_endpoint_of_the_product_contract() -> None:
    assert sorted(OPERATIONS) == sorted(
        [
            ("GET", "/agents"),
            ("POST", "/agents"),
            ("GET", "/agents/{agent_id}"),  # added for the CLI
            ("PATCH", "/agents/{agent_id}"),
            ("GET", "/agents/{agent_id}/readiness"),
            ("POST", "/agents/{agent_id}/publish"),
            ("GET", "/agents/{agent_id}/sandbox"),
            ("POST", "/agents/{agent_id}/sandbox/{operation}"),
            ("GET", "/environments"),
            ("POST", "/environments"),
            ("GET", "/environments/{environment_id}"),
            ("PATCH", "/environments/{environment_id}"),
            ("DELETE", "/environments/{environment_id}"),
            ("GET", "/environments/{environment_id}/revisions"),
            ("POST", "/environments/{environment_id}/rebuild"),
            ("POST", "/agents/{agent_id}/files"),
            ("POST", "/agents/{agent_id}/threads"),
            ("GET", "/agents/{agent_id}/threads"),
            ("GET", "/threads/{thread_id}"),
            ("GET", "/threads/{thread_id}/events"),
            ("GET", "/threads/{thread_id}/events/stream"),
            ("POST", "/threads/{thread_id}/events"),
            ("GET", "/threads/{thread_id}/files"),
            ("DELETE", "/threads/{thread_id}/files/{file_id}"),
            ("GET", "/files/{file_id}"),
            ("DELETE", "/files/{file_id}"),
            ("GET", "/files/{file_id}/content"),
            ("POST", "/threads/{thread_id}/archive"),
            ("POST", "/threads/{thread_id}/unarchive"),
            ("DELETE", "/threads/{thread_id}"),
            ("GET", "/mcp-servers"),
            ("POST", "/mcp-servers"),
            ("GET", "/mcp-servers/{server_id}"),
            ("PATCH", "/mcp-servers/{server_id}"),
            ("DELETE", "/mcp-servers/{server_id}"),
            ("POST", "/mcp-servers/{server_id}/test"),
            ("GET", "/skills"),
            ("GET", "/usage"),
            ("POST", "/skills"),
            ("GET", "/skills/{skill_id}"),
            ("DELETE", "/skills/{skill_id}"),
            ("GET", "/skills/{skill_id}/versions"),
            ("GET", "/skills/{skill_id}/content"),
        ]
    )


_CHANGED_BY_ANY_CALL = {"access_token"}


def _rows(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table but the tokens' (their last use is recorded on every call)."""
    with engine.connect() as connection:
        return {
            table.name: sorted(map(tuple, connection.execute(table.select())), key=repr)
            for table in metadata.sorted_tables
            if table.name not in _CHANGED_BY_ANY_CALL
        }


def test_another_owners_ids_are_not_found(
    client: TestClient,
    api_env: Engine,
    other: ApiOwner,
    first_owner_ids: dict[str, str],
) -> None:
    # Every operation that takes an id, in one test (the owner's data is made once): each must
    # answer not_found and leave the database as it was (every table, read after each request,
    # so the first operation that changed something is the one named).
    # (GET /agents and other id-less operations are scoped by listing: see below.)
    before = _rows(api_env)
    for method, path in OPERATIONS:
        if "{" not in path:
            continue
        response = _request(client, method, path, first_owner_ids, other.headers)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["error"]["code"] == "not_found", (method, path)
        assert _rows(api_env) == before, (method, path)


def test_agents_list_is_scoped(client: TestClient, owner: ApiOwner, other: ApiOwner) -> None:
    assert [
        a["id"] for a in client.get("/api/v1/agents", headers=other.headers).json()["agents"]
    ] == [other.agent_id]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer mst_" + "x" * 43},
        {"Authorization": "Bearer not-a-token"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
    ],
    ids=["none", "unknown", "malformed", "basic"],
)
def test_without_a_valid_token_everything_is_unauthenticated(
    client: TestClient, first_owner_ids: dict[str, str], headers: dict[str, str]
) -> None:
    # Every operation in one test: a refused request changes nothing, so they can share the
    # owner's data (made once instead of once per operation: about 0.8 s each, 160 of them).
    answers = {
        (method, path): _request(client, method, path, first_owner_ids, headers)
        for method, path in OPERATIONS
    }
    wrong = {
        operation: (response.status_code, response.text[:200])
        for operation, response in answers.items()
        if response.status_code != 401
        or response.json().get("error", {}).get("code") != "unauthenticated"
    }
    assert wrong == {}


def test_a_revoked_token_stops_working(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    assert client.get("/api/v1/agents", headers=owner.headers).status_code == 200
    with Session(api_env) as db:
        token = identity.list_access_tokens(db, owner.account_id)[0]
        identity.revoke_access_token(db, owner.account_id, token.id)
        db.commit()
    response = client.get("/api/v1/agents", headers=owner.headers)
    assert response.status_code == 401 and response.json()["error"]["code"] == "unauthenticated"
