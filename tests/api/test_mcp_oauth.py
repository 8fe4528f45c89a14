"""Connecting an MCP server with OAuth 2.1 through the console's endpoints, against a real
authorization server (Authlib) and a real MCP server (the SDK) that checks its tokens:
discovery from the server's protected-resource metadata, the authorize redirect with S256
PKCE and the resource indicator, the callback sealing the tokens, Test connection with the
access token, a refresh when it has expired, and refused states (unknown, reused, another
account's, expired)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import identity, mcp
from mosoo_core.errors import Conflict
from mosoo_core.mcp import McpServerChanges
from mosoo_core.mcp.service import reveal, seal_secret
from mosoo_core.settings import get_settings
from mosoo_core.tables.mcp import McpOAuthState, McpServer
from mosoo_web.api.mcp_oauth import CALLBACK_PATH, FALLBACK_PATH, server_page
from tests.api.conftest import ApiOwner
from tests.support.mcp_server import MCPTestServer, allow_private_networks
from tests.support.oauth_server import OAuthServer

CLIENT_ID = "mosoo-mcp-client"
CLIENT_SECRET = "oauth-client-Secret-Kq9Vn2Lr7Tb"


@pytest.fixture(autouse=True)
def _servers_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    allow_private_networks(monkeypatch)


@pytest.fixture
def authorization(api_env: Engine) -> Iterator[OAuthServer]:
    redirect = f"{get_settings().public_url.rstrip('/')}{CALLBACK_PATH}"
    with OAuthServer(
        client_id=CLIENT_ID, client_secret=CLIENT_SECRET, redirect_uri=redirect
    ) as server:
        yield server


@pytest.fixture
def protected(authorization: OAuthServer) -> Iterator[MCPTestServer]:
    with MCPTestServer(
        token_check=authorization.valid, authorization_server=authorization.issuer
    ) as server:
        yield server


def _signed_in(engine: Engine, owner: ApiOwner) -> dict[str, str]:
    with Session(engine) as db:
        started = identity.start_session(db, owner.account_id, method="email")
        db.commit()
    return {get_settings().session_cookie: started.token}


def _oauth_server(engine: Engine, owner: ApiOwner, url: str, name: str = "secured") -> str:
    with Session(engine) as db:
        made = mcp.create_server(
            db,
            owner.account_id,
            owner.app_id,
            McpServerChanges(
                name=name,
                url=url,
                auth_kind="oauth",
                oauth_client_id=CLIENT_ID,
                oauth_client_secret=CLIENT_SECRET,
                oauth_scopes="tools",
            ),
        )
        db.commit()
        return made.id


def _authorize(client: TestClient, cookies: dict[str, str], server_id: str) -> tuple[str, str]:
    """Start the round trip and let the authorization server approve: (state, code)."""
    started = client.get(
        f"/api/mcp-servers/{server_id}/oauth/authorize", cookies=cookies, follow_redirects=False
    )
    assert started.status_code == 303, started.text
    approved = httpx.get(started.headers["location"], follow_redirects=False)
    assert approved.status_code == 302, approved.text
    query = parse_qs(urlsplit(approved.headers["location"]).query)
    return query["state"][0], query["code"][0]


def _callback(
    client: TestClient, cookies: dict[str, str], state: str, code: str, page: str = FALLBACK_PATH
) -> dict[str, list[str]]:
    """The callback's answer: back to the console `page` (the server's own page once the
    server is known, else the Apps page), told how it went."""
    answer = client.get(
        CALLBACK_PATH,
        params={"state": state, "code": code},
        cookies=cookies,
        follow_redirects=False,
    )
    assert answer.status_code == 303, answer.text
    location = urlsplit(answer.headers["location"])
    assert location.path == page
    return parse_qs(location.query)


def test_connecting_discovers_the_endpoints_and_seals_tokens_the_test_then_uses(
    client: TestClient,
    owner: ApiOwner,
    api_env: Engine,
    authorization: OAuthServer,
    protected: MCPTestServer,
) -> None:
    server_id = _oauth_server(api_env, owner, protected.url)
    cookies = _signed_in(api_env, owner)
    # Before connecting, a test says what is missing.
    before = mcp.test_server(owner.account_id, owner.app_id, server_id)
    assert not before.ok and "connect it with OAuth" in before.error

    state, code = _authorize(client, cookies, server_id)
    [asked] = authorization.authorize_requests
    assert asked["code_challenge_method"] == "S256" and len(asked["code_challenge"]) >= 43
    assert asked["resource"] == protected.url and asked["scope"] == "tools"
    assert asked["client_id"] == CLIENT_ID and "client_secret" not in asked
    assert _callback(client, cookies, state, code, server_page(owner.app_id, server_id)) == {
        "oauth": ["connected"]
    }
    [exchange] = authorization.token_requests
    assert exchange["grant_type"] == "authorization_code" and exchange["code_verifier"]

    answer = client.get(f"/api/v1/mcp-servers/{server_id}", headers=owner.headers).json()
    assert answer["oauth"]["connected"] is True
    assert answer["oauth"]["token_endpoint"] == f"{authorization.issuer}/token"
    issued = authorization.tokens[0]
    assert issued.access_token not in json.dumps(answer)
    assert issued.refresh_token not in json.dumps(answer)

    tested = client.post(f"/api/v1/mcp-servers/{server_id}/test", headers=owner.headers).json()
    assert tested["ok"] is True, tested["error"]
    # Besides discovery's unauthenticated probe, every request carried the access token.
    assert {r.authorization for r in protected.mcp_requests() if r.authorization} == {
        f"Bearer {issued.access_token}"
    }


def test_an_expired_access_token_is_refreshed_before_it_is_used(
    client: TestClient,
    owner: ApiOwner,
    api_env: Engine,
    authorization: OAuthServer,
    protected: MCPTestServer,
) -> None:
    server_id = _oauth_server(api_env, owner, protected.url)
    cookies = _signed_in(api_env, owner)
    page = server_page(owner.app_id, server_id)
    _callback(client, cookies, *_authorize(client, cookies, server_id), page=page)
    first = authorization.tokens[0]
    # Time passes: the authorization server no longer takes the token, and we know it expired.
    authorization.expire_all()
    with Session(api_env) as db:
        row = db.get(McpServer, server_id)
        assert row is not None
        tokens = json.loads(reveal(db, row, "oauth_token_secret_id", "oauth_tokens") or "{}")
        tokens["expires_at"] = time.time() - 5
        seal_secret(db, row, "oauth_token_secret_id", "oauth_tokens", json.dumps(tokens))
        db.commit()
    result = mcp.test_server(owner.account_id, owner.app_id, server_id)
    assert result.ok, result.error
    refresh = authorization.token_requests[-1]
    assert (
        refresh["grant_type"] == "refresh_token" and refresh["refresh_token"] == first.refresh_token
    )
    fresh = authorization.tokens[-1]
    assert fresh.access_token != first.access_token
    assert protected.mcp_requests()[-1].authorization == f"Bearer {fresh.access_token}"
    # The rotated refresh token is the one kept.
    with Session(api_env) as db:
        row = db.get(McpServer, server_id)
        assert row is not None
        kept = json.loads(reveal(db, row, "oauth_token_secret_id", "oauth_tokens") or "{}")
    assert kept["refresh_token"] == fresh.refresh_token


def test_refused_states_connect_nothing(
    client: TestClient,
    owner: ApiOwner,
    other: ApiOwner,
    api_env: Engine,
    authorization: OAuthServer,
    protected: MCPTestServer,
) -> None:
    server_id = _oauth_server(api_env, owner, protected.url)
    cookies = _signed_in(api_env, owner)

    def connected() -> bool:
        with Session(api_env) as db:
            row = db.get(McpServer, server_id)
            return row is not None and row.oauth_token_secret_id is not None

    failed = {"oauth": ["failed"], "reason": ["oauth_state_invalid"]}
    # A state this browser never started names no server: back to the Apps page.
    assert _callback(client, cookies, "made-up-state", "made-up-code") == failed
    # Once it started one, refusals go back to that server's page.
    page = server_page(owner.app_id, server_id)
    # Another account's browser cannot finish (and the state is burnt).
    state, code = _authorize(client, cookies, server_id)
    assert _callback(client, _signed_in(api_env, other), state, code, page) == failed
    assert _callback(client, cookies, state, code, page) == failed
    # An expired state.
    state, code = _authorize(client, cookies, server_id)
    with Session(api_env) as db:
        for row in db.exec(select(McpOAuthState)).all():
            row.expires_at = row.expires_at - timedelta(minutes=11)
            db.add(row)
        db.commit()
    assert _callback(client, cookies, state, code, page) == failed
    # The authorization server's own refusal.
    answer = client.get(
        CALLBACK_PATH,
        params={"state": _authorize(client, cookies, server_id)[0], "error": "access_denied"},
        cookies=cookies,
        follow_redirects=False,
    )
    refused = urlsplit(answer.headers["location"])
    assert refused.path == page and parse_qs(refused.query)["reason"] == ["oauth_refused"]
    assert not connected()
    assert [
        t for t in authorization.token_requests if t["grant_type"] == "authorization_code"
    ] == []
    # Without a session the browser is sent to sign in first.
    anonymous = client.get(f"/api/mcp-servers/{server_id}/oauth/authorize", follow_redirects=False)
    assert anonymous.status_code == 303 and anonymous.headers["location"].startswith("/login?next=")
    # Another owner cannot start one for this server.
    theirs = client.get(
        f"/api/mcp-servers/{server_id}/oauth/authorize",
        cookies=_signed_in(api_env, other),
        follow_redirects=False,
    )
    assert theirs.headers["location"] == f"{FALLBACK_PATH}?oauth=failed&reason=not_found"


def test_without_private_networks_discovery_and_refresh_are_refused_before_any_request(
    client: TestClient,
    owner: ApiOwner,
    api_env: Engine,
    authorization: OAuthServer,
    protected: MCPTestServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Connected while the operator allowed private networks; its token has expired since.
    server_id = _oauth_server(api_env, owner, protected.url)
    fresh_id = _oauth_server(api_env, owner, protected.url, name="undiscovered")
    cookies = _signed_in(api_env, owner)
    page = server_page(owner.app_id, server_id)
    _callback(client, cookies, *_authorize(client, cookies, server_id), page=page)
    with Session(api_env) as db:
        row = db.get(McpServer, server_id)
        assert row is not None
        tokens = json.loads(reveal(db, row, "oauth_token_secret_id", "oauth_tokens") or "{}")
        tokens["expires_at"] = time.time() - 5
        seal_secret(db, row, "oauth_token_secret_id", "oauth_tokens", json.dumps(tokens))
        db.commit()
    token_requests, mcp_requests = len(authorization.token_requests), len(protected.requests())
    allow_private_networks(monkeypatch, allowed=False)

    result = mcp.test_server(owner.account_id, owner.app_id, server_id)
    assert not result.ok
    assert result.error.startswith("refused: the token endpoint resolves to a loopback address;")
    with Session(api_env) as db, pytest.raises(Conflict) as refused:
        mcp.start_authorization(
            db, owner.account_id, owner.app_id, fresh_id, "http://localhost:3000/callback"
        )
    assert refused.value.code == "oauth_discovery_failed"
    assert refused.value.message.startswith("refused: 127.0.0.1 is a loopback address;")
    assert len(authorization.token_requests) == token_requests
    assert len(protected.requests()) == mcp_requests
