"""An owner connects an MCP server in the console, against a real MCP server (the SDK, on
loopback) that wants a bearer token: Test connection shows its tools with their input
schemas, the token never comes back to the browser (page or websocket frames), an edit keeps
it; bound in Preview with a default policy, a per-tool override and Required; delete refused
while bound, naming the Agent; disabled, the Agent shows the blocker with its Fix."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from mosoo_core import agents
from mosoo_core.db import session_scope
from mosoo_core.environments import MASK
from tests.browser.actions import choose
from tests.browser.conftest import WebServer, received_frames
from tests.browser.test_console_journey import _sign_in
from tests.browser.test_preview_chat import _account_id
from tests.support.mcp_server import TOOL_NAMES, MCPTestServer
from tests.support.oauth_server import OAuthServer
from tests.support.processes import wait_for

pytestmark = pytest.mark.browser

APP_URL = re.compile(r"/apps/([0-9A-Z]{26})$")
SERVER_URL = re.compile(r"/apps/[0-9A-Z]{26}/mcp/([0-9A-Z]{26})$")
AGENT_URL = re.compile(r"/agents/([0-9A-Z]{26})$")
TOKEN = "mcp-console-" + uuid.uuid4().hex + "Xq7v"
CLIENT_ID = "mosoo-console-client"
CLIENT_SECRET = "oauth-console-" + uuid.uuid4().hex + "Lr7T"


@pytest.fixture
def mcp_server() -> Iterator[MCPTestServer]:
    with MCPTestServer(bearer=TOKEN) as running:
        yield running


def _tool(page: Page, name: str) -> Locator:
    exact = page.get_by_test_id("mcp-tool-name").filter(has_text=re.compile(f"^{name}$"))
    return page.get_by_test_id("mcp-tool").filter(has=exact)


def test_owner_adds_tests_edits_binds_and_cannot_delete_a_bound_mcp_server(
    page: Page, browser: Browser, shared_database: WebServer, mcp_server: MCPTestServer
) -> None:
    web_server = shared_database
    received = received_frames(page)
    page.goto(f"{web_server.url}/login")
    _sign_in(page, browser, web_server, f"mcp-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(APP_URL)
    app_match = APP_URL.search(page.url)
    assert app_match
    app_id = app_match.group(1)
    account_id = _account_id(page)

    # The MCP page, next to Environments: empty at first.
    page.get_by_test_id("nav-mcp").click()
    page.wait_for_url(re.compile(r"/mcp$"))
    expect(page.get_by_test_id("page-title")).to_have_text("MCP servers")
    expect(page.get_by_test_id("mcp-servers-empty")).to_be_visible()

    # Add one with a bearer token; a malformed name is refused next to it first.
    page.get_by_test_id("new-mcp-server").click()
    page.wait_for_url(re.compile(r"/mcp/new$"))
    page.get_by_test_id("mcp-name-input").fill("My Tools")
    page.get_by_test_id("mcp-url-input").fill(mcp_server.url)
    page.get_by_test_id("mcp-auth-bearer").click()
    page.get_by_test_id("mcp-bearer-token").fill(TOKEN)
    page.get_by_test_id("mcp-save").click()
    expect(page.get_by_test_id("mcp-name-error")).to_contain_text("lower-case")
    expect(page.get_by_test_id("mcp-bearer-token")).to_have_value(TOKEN)  # nothing typed lost
    page.get_by_test_id("mcp-name-input").fill("tools")
    page.get_by_test_id("mcp-save").click()
    page.wait_for_url(SERVER_URL)
    server_match = SERVER_URL.search(page.url)
    assert server_match
    server_id = server_match.group(1)
    expect(page.get_by_text("Added tools.")).to_be_visible()
    expect(page.get_by_test_id("page-title")).to_have_text("tools")
    token_field = page.get_by_test_id("mcp-bearer-token")
    expect(token_field).to_have_value("")
    expect(token_field).to_have_attribute("placeholder", MASK)
    expect(page.get_by_test_id("mcp-bearer-token-hint")).to_contain_text("Leave empty to keep")
    expect(page.get_by_test_id("mcp-test-status")).to_have_text("Not tested yet")

    # Test connection: the tool browser lists every tool with its description and schema.
    page.get_by_test_id("mcp-test").click()
    expect(page.get_by_test_id("mcp-tool")).to_have_count(len(TOOL_NAMES))
    expect(page.get_by_test_id("mcp-test-status")).to_contain_text("Connected")
    echo = _tool(page, "echo")
    expect(echo.get_by_test_id("mcp-tool-description")).to_have_text(
        "Answers the text it is given."
    )
    schema = echo.get_by_test_id("mcp-tool-schema")
    expect(schema).to_be_hidden()  # collapsed until asked for
    echo.get_by_test_id("mcp-tool-schema-toggle").click()
    expect(schema).to_be_visible()
    shown = json.loads(schema.inner_text())
    assert shown["properties"]["text"]["type"] == "string" and shown["required"] == ["text"]
    expect(_tool(page, "forecast").get_by_test_id("mcp-tool-schema-toggle")).to_contain_text("city")
    assert {r.authorization for r in mcp_server.mcp_requests()} == {f"Bearer {TOKEN}"}

    # An edit with the token left empty keeps it: a new description, tested again.
    page.get_by_test_id("mcp-description-input").fill("Echo, weather and pictures")
    page.get_by_test_id("mcp-save").click()
    expect(page.get_by_text("Saved.")).to_be_visible()
    page.reload()
    expect(page.get_by_test_id("mcp-description-input")).to_have_value("Echo, weather and pictures")
    expect(page.get_by_test_id("mcp-tool")).to_have_count(len(TOOL_NAMES))  # the stored list
    seen = len(mcp_server.mcp_requests())
    page.get_by_test_id("mcp-test").click()
    wait_for(lambda: len(mcp_server.mcp_requests()) > seen, 20, "a second test")
    expect(page.get_by_text(f"Connected: {len(TOOL_NAMES)} tools.")).to_be_visible()
    assert {r.authorization for r in mcp_server.mcp_requests()} == {f"Bearer {TOKEN}"}

    # The list: host, authentication, the last test and its tool count.
    page.get_by_test_id("mcp-servers-back").click()
    page.wait_for_url(re.compile(r"/mcp$"))
    row = page.get_by_test_id("mcp-server-row")
    expect(row).to_have_count(1)
    expect(row.get_by_test_id("mcp-server-host")).to_have_text(f"127.0.0.1:{mcp_server.port}")
    expect(row.get_by_test_id("mcp-server-auth")).to_have_text("Bearer token")
    expect(row.get_by_test_id("mcp-server-test")).to_have_text(f"{len(TOOL_NAMES)} tools")
    expect(row.get_by_test_id("mcp-server-used-by")).to_have_count(0)

    # Preview: bind it, Allow by default, echo Off, Required.
    page.get_by_test_id("nav-agents").click()
    page.get_by_test_id("new-agent").click()
    page.get_by_test_id("new-agent-name").fill("Helper")
    page.get_by_test_id("new-agent-submit").click()
    page.wait_for_url(AGENT_URL)
    agent_url = page.url
    agent_match = AGENT_URL.search(agent_url)
    assert agent_match
    agent_id = agent_match.group(1)
    expect(page.get_by_test_id("agent-name-input")).to_have_value("Helper")
    choose(page, page.get_by_test_id("agent-mcp-servers-add"), "tools", exact=True)
    bound = page.get_by_test_id("agent-mcp-servers-bound")
    expect(bound).to_have_count(1)
    expect(bound.get_by_test_id("agent-mcp-server-name")).to_have_text("tools")
    expect(page.get_by_test_id("agent-mcp-servers-empty")).to_contain_text("Every MCP server")
    bound.get_by_test_id("agent-mcp-default").get_by_role("radio", name="Allow").click()
    expect(page.get_by_test_id("save-indicator")).to_have_text("Saved")
    bound.get_by_test_id("agent-mcp-tools-toggle").click()
    tools = bound.get_by_test_id("agent-mcp-tool")
    expect(tools).to_have_count(len(TOOL_NAMES))
    echo_row = tools.filter(
        has=page.get_by_test_id("agent-mcp-tool-name").filter(has_text=re.compile("^echo$"))
    )
    choose(page, echo_row.get_by_test_id("agent-mcp-tool-policy"), "Off", exact=True)
    expect(echo_row.get_by_test_id("agent-mcp-tool-policy")).to_have_text("Off")
    bound.get_by_test_id("agent-mcp-required").click()
    expect(bound.get_by_test_id("agent-mcp-tools-toggle")).to_contain_text("(1 of 6)")

    def saved() -> agents.AgentView:
        with session_scope() as db:
            return agents.get_agent(db, account_id, app_id, agent_id)

    expected = {server_id: {"default": "allow", "tools": {"echo": "off"}, "required": True}}
    wait_for(lambda: saved().mcp_policies == expected, 10, "the MCP policies to save")
    assert saved().mcp_servers == [server_id]
    page.reload()
    expect(
        bound.get_by_test_id("agent-mcp-default").get_by_role("radio", name="Allow")
    ).to_be_checked()
    expect(bound.get_by_test_id("agent-mcp-required")).to_be_checked()
    bound.get_by_test_id("agent-mcp-tools-toggle").click()
    expect(echo_row.get_by_test_id("agent-mcp-tool-policy")).to_have_text("Off")
    expect(page.get_by_test_id("readiness-blocker").filter(has_text="MCP servers")).to_have_count(0)

    # Delete is refused while the Agent binds it, naming the Agent; the server stays.
    page.get_by_test_id("nav-mcp").click()
    page.wait_for_url(re.compile(r"/mcp$"))
    expect(row.get_by_test_id("mcp-server-used-by")).to_have_text("Used by agent Helper")
    row.get_by_test_id("mcp-server-delete").click()
    page.get_by_test_id("mcp-server-delete-confirm").click()
    expect(row.get_by_test_id("mcp-server-delete-error")).to_contain_text("agent Helper")
    expect(row).to_have_count(1)

    # Disabled, the Agent is blocked; Fix goes to the picker, which links to the server.
    row.get_by_test_id("mcp-server-enabled").click()
    expect(page.get_by_text("tools disabled.")).to_be_visible()
    expect(row.get_by_test_id("mcp-server-disabled")).to_be_visible()
    page.goto(agent_url)
    blocker = page.get_by_test_id("readiness-blocker").filter(has_text="MCP servers")
    expect(blocker).to_contain_text("MCP server tools is disabled")
    blocker.get_by_test_id("readiness-fix").click()
    expect(bound.get_by_test_id("agent-mcp-disabled")).to_be_visible()
    bound.get_by_test_id("agent-mcp-enable").click()
    page.wait_for_url(SERVER_URL)
    expect(page.get_by_test_id("mcp-server-disabled")).to_be_visible()
    page.get_by_test_id("mcp-enabled").click()
    page.get_by_test_id("mcp-save").click()
    expect(page.get_by_text("Saved.")).to_be_visible()
    expect(page.get_by_test_id("mcp-server-disabled")).to_have_count(0)

    # The token never reached the browser: not in the page, not in any websocket frame.
    assert TOKEN not in page.content()
    assert received, "the page talks to the server over its websocket"
    assert not any(TOKEN in frame for frame in received)


def test_owner_connects_an_oauth_server_and_comes_back_to_its_page(
    page: Page, browser: Browser, web_server: WebServer
) -> None:
    """Connect: the authorization server (which approves at once) sends the browser back to
    the server's page, which says so; Test connection then uses the access token."""
    callback = f"{web_server.url}/api/mcp-servers/oauth/callback"
    with (
        OAuthServer(
            client_id=CLIENT_ID, client_secret=CLIENT_SECRET, redirect_uri=callback
        ) as authorization,
        MCPTestServer(
            token_check=authorization.valid, authorization_server=authorization.issuer
        ) as protected,
    ):
        received = received_frames(page)
        page.goto(f"{web_server.url}/login")
        _sign_in(page, browser, web_server, f"mcp-oauth-{uuid.uuid4().hex[:8]}@example.com")
        page.wait_for_url(APP_URL)
        page.get_by_test_id("nav-mcp").click()
        page.get_by_test_id("new-mcp-server").click()
        page.wait_for_url(re.compile(r"/mcp/new$"))
        page.get_by_test_id("mcp-name-input").fill("secured")
        page.get_by_test_id("mcp-url-input").fill(protected.url)
        page.get_by_test_id("mcp-auth-oauth").click()
        expect(page.get_by_test_id("mcp-oauth-redirect-uri")).to_contain_text(callback)
        page.get_by_test_id("mcp-oauth-client-id").fill(CLIENT_ID)
        page.get_by_test_id("mcp-oauth-client-secret").fill(CLIENT_SECRET)
        page.get_by_test_id("mcp-oauth-scopes").fill("tools")
        page.get_by_test_id("mcp-save").click()
        page.wait_for_url(SERVER_URL)
        server_url = page.url
        expect(page.get_by_test_id("mcp-oauth-status")).to_have_text("Not connected")
        expect(page.get_by_test_id("mcp-oauth-client-secret")).to_have_attribute(
            "placeholder", MASK
        )

        # Not connected yet: the test says what is missing.
        page.get_by_test_id("mcp-test").click()
        expect(page.get_by_test_id("mcp-test-error")).to_contain_text("connect it with OAuth")

        page.get_by_test_id("mcp-oauth-connect").click()
        # Back on the server's page, which reads the answer and drops it from the address.
        expect(page.get_by_test_id("mcp-oauth-notice")).to_contain_text("Connected.")
        expect(page).to_have_url(server_url)
        expect(page.get_by_test_id("mcp-oauth-status")).to_have_text("Connected just now")
        [asked] = authorization.authorize_requests
        assert asked["client_id"] == CLIENT_ID and asked["code_challenge_method"] == "S256"

        page.get_by_test_id("mcp-test").click()
        expect(page.get_by_test_id("mcp-tool")).to_have_count(len(TOOL_NAMES))
        issued = authorization.tokens[0]
        assert protected.mcp_requests()[-1].authorization == f"Bearer {issued.access_token}"

        # Neither the client secret nor a token reached the browser.
        secrets = (CLIENT_SECRET, issued.access_token, issued.refresh_token)
        content = page.content()
        assert not any(secret in content for secret in secrets)
        assert not any(secret in frame for frame in received for secret in secrets)
