"""`/api/v1/mcp-servers`: create, list, read, change, test (the tool list), delete refused
while bound; credentials accepted and never answered; an agent's PATCH binds servers with
their tool policies, and readiness reports a disabled one."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import ApiOwner
from tests.support.mcp_server import TOOL_NAMES, MCPTestServer, allow_private_networks

TOKEN = "api-mcp-token-Lr7Tb4yHc8PmM3kJd6Fs"


@pytest.fixture(autouse=True)
def _servers_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    allow_private_networks(monkeypatch)


@pytest.fixture
def mcp_server() -> Iterator[MCPTestServer]:
    with MCPTestServer(bearer=TOKEN) as server:
        yield server


def _create(client: TestClient, owner: ApiOwner, url: str, **fields: object) -> dict[str, object]:
    answer = client.post(
        "/api/v1/mcp-servers",
        headers=owner.headers,
        json={"name": "tools", "url": url, "auth_kind": "bearer", "bearer_token": TOKEN, **fields},
    )
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def test_a_server_is_created_tested_and_listed_without_its_token(
    client: TestClient, owner: ApiOwner, mcp_server: MCPTestServer
) -> None:
    made = _create(client, owner, mcp_server.url)
    assert (made["auth_kind"], made["has_credential"], made["tools"], made["test_ok"]) == (
        "bearer",
        True,
        [],
        None,
    )
    tested = client.post(f"/api/v1/mcp-servers/{made['id']}/test", headers=owner.headers)
    assert tested.status_code == 200, tested.text
    body = tested.json()
    assert body["ok"] is True and body["error"] == ""
    assert sorted(tool["name"] for tool in body["tools"]) == sorted(TOOL_NAMES)
    assert body["server"]["test_ok"] is True
    listed = client.get("/api/v1/mcp-servers", headers=owner.headers).json()["mcp_servers"]
    assert [server["name"] for server in listed] == ["tools"]
    assert len(listed[0]["tools"]) == len(TOOL_NAMES)
    for answer in (made, body, listed):
        assert TOKEN not in json.dumps(answer)
    assert {r.authorization for r in mcp_server.mcp_requests()} == {f"Bearer {TOKEN}"}


def test_changes_keep_the_stored_token_and_refusals_name_the_field(
    client: TestClient, owner: ApiOwner, mcp_server: MCPTestServer
) -> None:
    made = _create(client, owner, mcp_server.url)
    url = f"/api/v1/mcp-servers/{made['id']}"
    changed = client.patch(url, headers=owner.headers, json={"description": "Team tools"})
    assert changed.status_code == 200 and changed.json()["has_credential"] is True
    assert client.post(f"{url}/test", headers=owner.headers).json()["ok"] is True
    for body, status, field in (
        ({"url": "ftp://x"}, 400, "url"),
        ({"name": "Not A Name"}, 400, "name"),
        ({"headers": {"X-A": "1"}}, 409, "headers"),
        ({"auth_kind": "headers"}, 409, "headers"),
        ({"bearer_token": "two words"}, 400, "bearer_token"),
    ):
        refused = client.patch(url, headers=owner.headers, json=body)
        assert refused.status_code == status, (body, refused.text)
        assert refused.json()["error"].get("field") == field, (body, refused.text)
    assert client.get(url, headers=owner.headers).json()["description"] == "Team tools"
    taken = client.post(
        "/api/v1/mcp-servers", headers=owner.headers, json={"name": "tools", "url": mcp_server.url}
    )
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "name_taken"


def test_without_private_networks_a_loopback_server_is_refused_and_never_contacted(
    client: TestClient, owner: ApiOwner, mcp_server: MCPTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _create(client, owner, mcp_server.url)  # saved while the operator allowed them
    allow_private_networks(monkeypatch, allowed=False)
    tested = client.post(f"/api/v1/mcp-servers/{made['id']}/test", headers=owner.headers)
    assert tested.status_code == 200, tested.text
    body = tested.json()
    assert body["ok"] is False and body["tools"] == []
    assert body["error"].startswith("refused: 127.0.0.1 is a loopback address;")
    assert body["server"]["test_error"] == body["error"]
    assert mcp_server.requests() == []
    refused = client.post(
        "/api/v1/mcp-servers",
        headers=owner.headers,
        json={"name": "metadata", "url": "http://169.254.169.254/latest/meta-data/"},
    )
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["field"] == "url"
    assert "cloud metadata address" in refused.json()["error"]["message"]


def test_an_agent_binds_servers_with_policies_and_delete_is_refused_while_it_does(
    client: TestClient, owner: ApiOwner, mcp_server: MCPTestServer
) -> None:
    made = _create(client, owner, mcp_server.url)
    agent_url = f"/api/v1/agents/{owner.agent_id}"
    bound = client.patch(
        agent_url,
        headers=owner.headers,
        json={
            "mcp_servers": [made["id"]],
            "mcp_policies": {
                made["id"]: {"default": "allow", "tools": {"broken": "off"}, "required": True}
            },
        },
    )
    assert bound.status_code == 200, bound.text
    assert client.get(f"{agent_url}/readiness", headers=owner.headers).json()["ready"] is True
    refused = client.delete(f"/api/v1/mcp-servers/{made['id']}", headers=owner.headers)
    assert refused.status_code == 409 and "agent" in refused.json()["error"]["message"]
    client.patch(
        f"/api/v1/mcp-servers/{made['id']}", headers=owner.headers, json={"enabled": False}
    )
    readiness = client.get(f"{agent_url}/readiness", headers=owner.headers).json()
    assert readiness["ready"] is False
    assert [b["code"] for b in readiness["blockers"]] == ["mcp_server_disabled"]
    bad = client.patch(
        agent_url,
        headers=owner.headers,
        json={"mcp_policies": {made["id"]: {"default": "sometimes"}}},
    )
    assert bad.status_code == 400
    client.patch(agent_url, headers=owner.headers, json={"mcp_servers": None})
    # The published version (from the fixture) never bound it: the delete goes through.
    deleted = client.delete(f"/api/v1/mcp-servers/{made['id']}", headers=owner.headers)
    assert deleted.status_code == 200, deleted.text
    assert client.get(f"/api/v1/mcp-servers/{made['id']}", headers=owner.headers).status_code == 404
