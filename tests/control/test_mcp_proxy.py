"""Control's MCP proxy, driven the way a sandbox drives it: the driver's own MCP client
through the driver's forwarder (over the control socket) to a real MCP server. The grant
becomes the vaulted credential inside control only; the sandbox's headers stay behind; a
grant of another server or run is refused; each tools/call is an event in the thread."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx
import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from driver.forwarder import Forwarder
from driver.mcp_client import McpClient, McpError
from mosoo_core import mcp
from mosoo_core.mcp import McpServerChanges
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.sessions import SessionRun
from tests.control.conftest import ControlServer, boot_fixture
from tests.support.mcp_server import MCPTestServer, allow_private_networks
from tests.support.processes import wait_for

TOKEN = "mcp-proxy-token-Wq2Lr9Xn4TbV7yHc"


@dataclass(frozen=True)
class Granted:
    session_id: str
    run_id: str
    server_id: str
    other_server_id: str
    grant: str
    other_grant: str  # the same run's grant for the other server


@pytest.fixture(autouse=True)
def _servers_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    allow_private_networks(monkeypatch)


@pytest.fixture
def upstream() -> Iterator[MCPTestServer]:
    with MCPTestServer(bearer=TOKEN, authorization_server="http://127.0.0.1:9") as server:
        yield server


@pytest.fixture
def granted(engine: Engine, upstream: MCPTestServer) -> Granted:
    with Session(engine) as db:
        booted = boot_fixture(db)
        server = mcp.create_server(
            db,
            booted.account_id,
            booted.app_id,
            McpServerChanges(
                name="tools", url=upstream.url, auth_kind="bearer", bearer_token=TOKEN
            ),
        )
        other = mcp.create_server(
            db,
            booted.account_id,
            booted.app_id,
            McpServerChanges(name="other", url="http://127.0.0.1:9/mcp"),
        )
        run = db.get(SessionRun, booted.run_id)
        assert run is not None
        grant = mcp.issue_grant(db, run, server.id)
        other_grant = mcp.issue_grant(db, run, other.id)
        db.commit()
        return Granted(booted.session_id, booted.run_id, server.id, other.id, grant, other_grant)


@pytest.fixture
async def forwarder(control: ControlServer) -> AsyncIterator[Forwarder]:
    running = Forwarder(f"unix://{control.socket_path}")
    await running.start()
    yield running
    await running.close()


def _events(engine: Engine, session_id: str, kind: str) -> list[dict[str, object]]:
    with Session(engine) as db:
        return [
            e.payload for e in driver_plane.read_events(db, session_id, limit=500) if e.type == kind
        ]


async def test_a_sandbox_calls_tools_with_its_grant_and_the_server_gets_the_vaulted_token(
    engine: Engine, upstream: MCPTestServer, granted: Granted, forwarder: Forwarder
) -> None:
    url = f"{forwarder.gateway_url}/mcp/{granted.server_id}"
    async with McpClient(url, granted.grant) as client:
        # What the sandbox adds of its own never reaches the server.
        client._http.headers.update({"Cookie": "sandbox=1", "X-Api-Key": "from-the-sandbox"})
        tools = await client.list_tools()
        assert {tool["name"] for tool in tools} >= {"whoami", "slow", "broken"}
        whoami = await client.call_tool("whoami", {})
        assert whoami["content"][0]["text"] == f"authorization=Bearer {TOKEN}"
        slow = await client.call_tool("slow", {"seconds": 0.3})
        assert slow["content"][0]["text"] == "slept 0.3"
        broken = await client.call_tool("broken", {})
        assert broken["isError"] is True
    seen = upstream.mcp_requests()
    assert seen and {r.authorization for r in seen} == {f"Bearer {TOKEN}"}
    assert not any("cookie" in r.headers or "x-api-key" in r.headers for r in seen)
    assert not any(granted.grant in str(r.headers) for r in seen)

    def recorded() -> bool:
        return len(_events(engine, granted.session_id, "mcp.tool_call")) == 3

    wait_for(recorded, 10, "the tool calls to be recorded")
    calls = _events(engine, granted.session_id, "mcp.tool_call")
    assert [(c["server"], c["tool"], c["outcome"]) for c in calls] == [
        ("tools", "whoami", "ok"),
        ("tools", "slow", "ok"),
        ("tools", "broken", "error"),
    ]
    slow_call = calls[1]
    assert isinstance(slow_call["duration_ms"], int) and slow_call["duration_ms"] >= 300
    assert all(c["server_id"] == granted.server_id for c in calls)
    assert TOKEN not in str(calls)


async def test_a_grant_of_another_server_or_run_or_a_finished_run_is_refused(
    engine: Engine, granted: Granted, forwarder: Forwarder
) -> None:
    url = f"{forwarder.gateway_url}/mcp/{granted.server_id}"
    for grant in (granted.other_grant, "mcg_" + "x" * 43, "not-a-grant", TOKEN):
        with pytest.raises(McpError) as refused:
            async with McpClient(url, grant):
                pass
        assert refused.value.status == 401, grant
    # The right grant for the right server works until its run ends.
    async with McpClient(url, granted.grant) as client:
        assert await client.list_tools()
    with Session(engine) as db:
        run = db.get(SessionRun, granted.run_id)
        assert run is not None
        run.status = "completed"
        db.add(run)
        db.commit()
    with pytest.raises(McpError) as over:
        async with McpClient(url, granted.grant):
            pass
    assert over.value.status == 401


async def test_the_server_s_refusal_comes_back_without_naming_the_server(
    engine: Engine, upstream: MCPTestServer, granted: Granted, forwarder: Forwarder
) -> None:
    with Session(engine) as db:
        row = mcp.service.owned_server(db, *_owner_of(db, granted.server_id), granted.server_id)
        mcp.service.seal_secret(db, row, "credential_secret_id", "credential", "revoked-token")
        db.commit()
    async with httpx.AsyncClient(timeout=10) as plain:
        answer = await plain.post(
            f"{forwarder.gateway_url}/mcp/{granted.server_id}",
            headers={
                "Authorization": f"Bearer {granted.grant}",
                "Accept": "application/json, text/event-stream",
            },
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        )
    assert answer.status_code == 401
    assert "www-authenticate" not in answer.headers
    assert str(upstream.port) not in str(answer.headers) + answer.text


async def test_without_private_networks_a_loopback_server_is_refused_and_never_contacted(
    engine: Engine,
    upstream: MCPTestServer,
    granted: Granted,
    forwarder: Forwarder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    allow_private_networks(monkeypatch, allowed=False)  # control reads it per connection
    url = f"{forwarder.gateway_url}/mcp/{granted.server_id}"
    with pytest.raises(McpError) as refused:
        async with McpClient(url, granted.grant):
            pass
    assert refused.value.status == 502
    assert "refused: MCP server 'tools' resolves to a loopback address;" in refused.value.message
    assert "MOSOO_MCP_ALLOW_PRIVATE_NETWORKS=true" in refused.value.message
    # The sandbox is not told where the server is.
    assert str(upstream.port) not in refused.value.message
    assert "127.0.0.1" not in refused.value.message
    assert upstream.requests() == []


def _owner_of(db: Session, server_id: str) -> tuple[str, str]:
    from mosoo_core.ownership import organization_of  # noqa: F401  (documents the lookup)
    from mosoo_core.tables.identity import App, Organization
    from mosoo_core.tables.mcp import McpServer

    row = db.get(McpServer, server_id)
    assert row is not None
    app = db.get(App, row.app_id)
    assert app is not None
    organization = db.get(Organization, app.organization_id)
    assert organization is not None
    return organization.owner_account_id, row.app_id
