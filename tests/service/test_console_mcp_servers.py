"""The MCP servers pages' calls (`mosoo_web.pages.mcp_servers.services`): the rows of the list
and the editor never hold a credential; a save sends only what the form changed (an empty
secret keeps the stored one, an untouched OAuth form keeps its tokens); Test connection
against a real MCP server fills the tool browser, or says why it failed; delete is refused
while an Agent binds the server. And Preview's picker rows and policy changes
(`mosoo_web.pages.preview.mcp_rows`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import agents, identity
from mosoo_core.errors import Conflict, FieldConflict, InvalidInput
from mosoo_core.mcp.service import seal_secret
from mosoo_core.tables.mcp import McpServer
from mosoo_web.pages.mcp_servers import services
from mosoo_web.pages.mcp_servers.services import StoredFields, changes_from_form
from mosoo_web.pages.preview import mcp_rows
from mosoo_web.pages.preview.mcp_rows import McpOption
from tests.support.mcp_server import TOOL_NAMES, MCPTestServer, allow_private_networks

TOKEN = "console-mcp-Bearer-Zq8Xn4Lr7TvW2yHc9"
HEADER_SECRET = "console-hdr-Secret-Kq9Vn2Lr7Tb"
CLIENT_SECRET = "console-oauth-Secret-Wm3Jd8Pq"


@dataclass(frozen=True)
class Owner:
    account_id: str
    app_id: str


@pytest.fixture(autouse=True)
def _servers_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    allow_private_networks(monkeypatch)


@pytest.fixture
def server() -> Iterator[MCPTestServer]:
    with MCPTestServer(bearer=TOKEN) as running:
        yield running


def _owner(engine: Engine, email: str = "console-mcp@example.com") -> Owner:
    with Session(engine) as db:
        account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
        owner = Owner(account.id, identity.list_apps(db, account.id)[0].id)
        db.commit()
    return owner


def _add(owner: Owner, form: dict[str, str], auth_kind: str = "none") -> services.EditorContent:
    changes = changes_from_form(form, None, auth_kind, True)
    saved = services.save(owner.account_id, owner.app_id, "", changes)
    assert saved.created
    return saved.content


def _stored(content: services.EditorContent) -> StoredFields:
    """What the editor's state remembers of the loaded server (see `_stored` there)."""
    return StoredFields(
        name=content.name,
        description=content.description,
        url=content.url,
        auth_kind=content.auth_kind,
        enabled=content.enabled,
        oauth_client_id=content.oauth_client_id,
        oauth_scopes=content.oauth_scopes,
        oauth_authorization_endpoint=content.oauth_authorization_endpoint,
        oauth_token_endpoint=content.oauth_token_endpoint,
    )


def _form(content: services.EditorContent, **typed: str) -> dict[str, str]:
    """The form as the browser submits it: the loaded values, secrets empty, then `typed`."""
    return {
        "name": content.name,
        "description": content.description,
        "url": content.url,
        "bearer_token": "",
        "headers": "",
        "oauth_client_id": content.oauth_client_id,
        "oauth_client_secret": "",
        "oauth_scopes": content.oauth_scopes,
        "oauth_authorization_endpoint": content.oauth_authorization_endpoint,
        "oauth_token_endpoint": content.oauth_token_endpoint,
        **typed,
    }


def _everything(*shown: Any) -> str:
    return json.dumps([asdict(item) for item in shown], default=str)


def test_a_bearer_server_lists_with_its_host_and_no_credential_anywhere(
    engine: Engine, server: MCPTestServer
) -> None:
    owner = _owner(engine)
    content = _add(
        owner, {"name": "tools", "url": server.url, "bearer_token": TOKEN}, auth_kind="bearer"
    )
    [row] = services.list_rows(owner.account_id, owner.app_id)
    assert (row.name, row.host, row.auth_label, row.enabled) == (
        "tools",
        f"127.0.0.1:{server.port}",
        "Bearer token",
        True,
    )
    assert (row.test_state, row.tested, row.tool_count, row.used_by) == ("untested", "", 0, "")
    loaded = services.load_editor(owner.account_id, owner.app_id, content.id)
    assert loaded.has_credential and loaded.test.state == "untested"
    assert TOKEN not in _everything(row, content, loaded)


def test_test_connection_fills_the_tool_browser_with_names_descriptions_and_schemas(
    engine: Engine, server: MCPTestServer
) -> None:
    owner = _owner(engine)
    content = _add(
        owner, {"name": "tools", "url": server.url, "bearer_token": TOKEN}, auth_kind="bearer"
    )
    tested = services.test_connection(owner.account_id, owner.app_id, content.id)
    assert tested.ok, tested.error
    tools = {tool.name: tool for tool in tested.content.test.tools}
    assert sorted(tools) == sorted(TOOL_NAMES)
    echo = tools["echo"]
    assert echo.description == "Answers the text it is given."
    assert echo.properties == "text"
    schema = json.loads(echo.schema)
    assert schema["properties"]["text"]["type"] == "string" and schema["required"] == ["text"]
    assert echo.schema.startswith("{\n  ")  # pretty, for the browser's <pre>
    assert (tested.content.test.state, tested.content.test.tested) == ("ok", "just now")
    [row] = services.list_rows(owner.account_id, owner.app_id)
    assert (row.test_state, row.tool_count, row.tested) == ("ok", len(TOOL_NAMES), "just now")
    # The server saw the stored token, which no row holds.
    assert {r.authorization for r in server.mcp_requests()} == {f"Bearer {TOKEN}"}
    assert TOKEN not in _everything(tested.content, row)


def test_an_empty_token_keeps_the_stored_one_and_a_wrong_one_fails_the_test_keeping_the_tools(
    engine: Engine, server: MCPTestServer
) -> None:
    owner = _owner(engine)
    content = _add(
        owner, {"name": "tools", "url": server.url, "bearer_token": TOKEN}, auth_kind="bearer"
    )
    services.test_connection(owner.account_id, owner.app_id, content.id)

    # Renamed, the token field left empty: only the name is sent, the token stays.
    changes = changes_from_form(_form(content, name="tools-2"), _stored(content), "bearer", True)
    assert changes.set_fields() == {"name": "tools-2"}
    renamed = services.save(owner.account_id, owner.app_id, content.id, changes).content
    assert renamed.name == "tools-2" and renamed.has_credential
    assert services.test_connection(owner.account_id, owner.app_id, content.id).ok

    # Nothing changed: nothing is sent.
    untouched = changes_from_form(_form(renamed), _stored(renamed), "bearer", True)
    assert untouched.set_fields() == {}

    # A wrong token: the test fails with why, and the browser keeps the last good list.
    wrong = changes_from_form(
        _form(renamed, bearer_token="not-the-token"), _stored(renamed), "bearer", True
    )
    assert wrong.set_fields() == {"bearer_token": "not-the-token"}
    services.save(owner.account_id, owner.app_id, content.id, wrong)
    failed = services.test_connection(owner.account_id, owner.app_id, content.id)
    assert not failed.ok and "401" in failed.error
    assert failed.content.test.state == "failed" and "401" in failed.content.test.error
    assert len(failed.content.test.tools) == len(TOOL_NAMES)
    [row] = services.list_rows(owner.account_id, owner.app_id)
    assert (row.test_state, row.tool_count) == ("failed", len(TOOL_NAMES))


def test_headers_are_written_one_a_line_and_only_their_names_come_back(engine: Engine) -> None:
    owner = _owner(engine)
    form = {
        "name": "keyed",
        "url": "https://mcp.example.com/mcp",
        "headers": f"X-Api-Key: {HEADER_SECRET}\n\nX-Team:  blue \n",
    }
    content = _add(owner, form, auth_kind="headers")
    assert content.header_names == ["X-Api-Key", "X-Team"] and content.has_credential
    [row] = services.list_rows(owner.account_id, owner.app_id)
    assert row.auth_label == "Custom headers"
    assert HEADER_SECRET not in _everything(row, content)
    # Left empty, the stored headers stay; a line without a colon is refused under headers.
    kept = changes_from_form(_form(content), _stored(content), "headers", True)
    assert "headers" not in kept.set_fields()
    with pytest.raises(InvalidInput) as refused:
        changes_from_form(_form(content, headers="X-Api-Key"), _stored(content), "headers", True)
    assert refused.value.field == "headers"


def test_an_untouched_oauth_form_keeps_the_tokens_and_a_new_client_id_forgets_them(
    engine: Engine,
) -> None:
    owner = _owner(engine)
    form = {
        "name": "secured",
        "url": "https://mcp.example.com/mcp",
        "oauth_client_id": "client-1",
        "oauth_client_secret": CLIENT_SECRET,
        "oauth_scopes": "tools read",
    }
    content = _add(owner, form, auth_kind="oauth")
    assert (content.oauth_client_id, content.oauth_has_client_secret) == ("client-1", True)
    assert content.authorize_path == f"/api/mcp-servers/{content.id}/oauth/authorize"
    assert not content.oauth_connected
    # Connected (what the callback stores).
    with Session(engine) as db:
        row = db.get(McpServer, content.id)
        assert row is not None
        seal_secret(db, row, "oauth_token_secret_id", "oauth_tokens", '{"access_token": "a"}')
        db.commit()
    loaded = services.load_editor(owner.account_id, owner.app_id, content.id)
    assert loaded.oauth_connected
    [row_view] = services.list_rows(owner.account_id, owner.app_id)
    assert row_view.auth_label == "OAuth · connected"

    # A new description, the OAuth fields as loaded: still connected, the secret kept.
    changes = changes_from_form(_form(loaded, description="Ours"), _stored(loaded), "oauth", True)
    assert changes.set_fields() == {"description": "Ours"}
    saved = services.save(owner.account_id, owner.app_id, content.id, changes).content
    assert saved.oauth_connected and saved.oauth_has_client_secret

    # Another client id: the tokens belong to the old one.
    changes = changes_from_form(
        _form(saved, oauth_client_id="client-2"), _stored(saved), "oauth", True
    )
    assert changes.set_fields() == {"oauth_client_id": "client-2"}
    moved = services.save(owner.account_id, owner.app_id, content.id, changes).content
    assert not moved.oauth_connected and moved.oauth_client_id == "client-2"
    assert CLIENT_SECRET not in _everything(content, loaded, saved, moved)

    # One endpoint without the other is refused naming the missing one.
    with pytest.raises(FieldConflict) as refused:
        services.save(
            owner.account_id,
            owner.app_id,
            content.id,
            changes_from_form(
                _form(moved, oauth_authorization_endpoint="https://auth.example.com/authorize"),
                _stored(moved),
                "oauth",
                True,
            ),
        )
    assert refused.value.field == "oauth_token_endpoint"


def test_a_new_kind_needs_its_credential_and_refusals_name_their_field(engine: Engine) -> None:
    owner = _owner(engine)
    content = _add(owner, {"name": "open", "url": "https://mcp.example.com/mcp"})
    with pytest.raises(FieldConflict) as refused:
        services.save(
            owner.account_id,
            owner.app_id,
            content.id,
            changes_from_form(_form(content), _stored(content), "bearer", True),
        )
    assert refused.value.field == "bearer_token"
    with pytest.raises(InvalidInput) as bad_name:
        _add(owner, {"name": "Open Tools", "url": "https://mcp.example.com/mcp"})
    assert bad_name.value.field == "name"
    with pytest.raises(InvalidInput) as taken:
        _add(owner, {"name": "open", "url": "https://mcp.example.com/other"})
    assert taken.value.field == "name"


def test_disabling_and_deleting_a_bound_server_names_its_users(engine: Engine) -> None:
    owner = _owner(engine)
    content = _add(owner, {"name": "tools", "url": "https://mcp.example.com/mcp"})
    with Session(engine) as db:
        agent = agents.create_agent(db, owner.account_id, owner.app_id, name="Helper")
        agents.update_agent(
            db,
            owner.account_id,
            owner.app_id,
            agent.id,
            agents.AgentChanges(mcp_servers=[content.id]),
        )
        db.commit()
    assert services.set_enabled(owner.account_id, owner.app_id, content.id, False) == "tools"
    [row] = services.list_rows(owner.account_id, owner.app_id)
    assert (row.enabled, row.used_by) == (False, "agent Helper")
    with pytest.raises(Conflict) as refused:
        services.delete(owner.account_id, owner.app_id, content.id)
    assert "agent Helper" in refused.value.message
    assert len(services.list_rows(owner.account_id, owner.app_id)) == 1

    with Session(engine) as db:
        agents.update_agent(
            db, owner.account_id, owner.app_id, agent.id, agents.AgentChanges(mcp_servers=[])
        )
        db.commit()
    services.delete(owner.account_id, owner.app_id, content.id)
    assert services.list_rows(owner.account_id, owner.app_id) == []


def test_the_oauth_round_trips_answer_reads_as_a_sentence() -> None:
    assert services.oauth_notice("connected", "") == (
        "Connected. Test connection to see its tools.",
        True,
    )
    message, ok = services.oauth_notice("failed", "oauth_refused") or ("", True)
    assert not ok and "refused" in message
    assert services.oauth_notice("failed", "weird_code") == (
        "Connecting failed (weird_code).",
        False,
    )
    assert services.oauth_notice("", "") is None


# --- Preview's picker ----------------------------------------------------------------------

OPTIONS = [
    McpOption("S1", "tools", True, ["echo", "forecast"]),
    McpOption("S2", "weather", False, []),
]


def test_bound_servers_show_their_policy_and_tools_and_a_gone_one_is_missing() -> None:
    policies = {"S1": {"default": "allow", "tools": {"echo": "ask", "old": "off"}}}
    rows = mcp_rows.bound_mcp_rows(["S1", "S2", "S9"], policies, OPTIONS)
    tools, weather, gone = rows
    assert (tools.label, tools.default, tools.required, tools.overrides) == (
        "tools",
        "allow",
        False,
        2,
    )
    # The last tested tools, then an override for a tool it no longer lists.
    assert [(t.name, t.policy) for t in tools.tools] == [
        ("echo", "ask"),
        ("forecast", "default"),
        ("old", "off"),
    ]
    assert (weather.disabled, weather.missing, weather.default, weather.tools) == (
        True,
        False,
        "ask",
        [],
    )
    assert (gone.label, gone.missing) == ("S9", True)


def test_policy_changes_keep_the_other_servers_and_are_what_the_agent_service_takes(
    engine: Engine,
) -> None:
    start: dict[str, Any] = {"S2": {"default": "off", "tools": {}, "required": True}}
    allowed = mcp_rows.with_default(start, "S1", "allow")
    assert allowed is not None and mcp_rows.with_default(start, "S1", "sometimes") is None
    overridden = mcp_rows.with_tool(allowed, "S1", "echo", "off")
    assert overridden is not None and mcp_rows.with_tool(allowed, "S1", "echo", "x") is None
    required = mcp_rows.with_required(overridden, "S1", True)
    assert required == {
        "S1": {"default": "allow", "tools": {"echo": "off"}, "required": True},
        "S2": {"default": "off", "tools": {}, "required": True},
    }
    reset = mcp_rows.with_tool(required, "S1", "echo", mcp_rows.SERVER_DEFAULT)
    assert reset is not None and reset["S1"]["tools"] == {}
    assert mcp_rows.without(required, "S1") == {"S2": start["S2"]}

    # What the picker saves, the Agent service keeps as it is.
    owner = _owner(engine, "console-mcp-picker@example.com")
    content = _add(owner, {"name": "tools", "url": "https://mcp.example.com/mcp"})
    policies = mcp_rows.with_tool(
        mcp_rows.with_default({}, content.id, "allow") or {}, content.id, "echo", "ask"
    )
    with Session(engine) as db:
        agent = agents.create_agent(db, owner.account_id, owner.app_id, name="Picker")
        saved = agents.update_agent(
            db,
            owner.account_id,
            owner.app_id,
            agent.id,
            agents.AgentChanges(mcp_servers=[content.id], mcp_policies=policies),
        )
        db.commit()
    assert saved.mcp_policies == {
        content.id: {"default": "allow", "tools": {"echo": "ask"}, "required": False}
    }
