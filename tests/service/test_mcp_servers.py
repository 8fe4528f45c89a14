"""MCP servers of an App: validation naming the field, write-only credentials sealed in the
vault, Test connection against a real MCP server (the SDK on both ends) storing the tool list
or why it failed, delete refused while bound, another owner's id not found; an Agent's
bindings and tool policies, readiness, published versions, and the per-run grants a boot
issues (never in the stored snapshot)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlmodel import Session, select

from mosoo_core import agents, identity, mcp, sessions, vault
from mosoo_core.errors import Conflict, FieldConflict, InvalidInput, NotFound
from mosoo_core.mcp import McpServerChanges
from mosoo_core.runtime.runs import plan_boot
from mosoo_core.tables.mcp import McpGrant, McpServer
from mosoo_core.tables.sessions import SessionRun
from mosoo_core.tables.vault import VaultSecret
from tests.support.mcp_server import TOOL_NAMES, MCPTestServer, allow_private_networks

TOKEN = "mcp-bearer-Vq9Lr2Xn7TbW4yHc8PmM3kJd"
HEADER_SECRET = "hdr-Secret-Zq8Xn4Lr7TvW2yHc9"


@dataclass(frozen=True)
class Owner:
    account_id: str
    app_id: str
    agent_id: str


def _owner(db: Session, email: str = "mcp-owner@example.com") -> Owner:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    app_id = identity.list_apps(db, account.id)[0].id
    credential = vault.create_provider_credential(
        db,
        account.id,
        app_id,
        vault.ProviderCredentialInput(
            name="P",
            provider="openai_compatible",
            base_url="http://127.0.0.1:9/v1",
            api_key="sk-test-mcp-owner-0123456789",
            models=["m"],
        ),
    )
    agent = agents.create_agent(db, account.id, app_id, name="Helper")
    agents.update_agent(
        db,
        account.id,
        app_id,
        agent.id,
        agents.AgentChanges(provider_credential_id=credential.id, model="m"),
    )
    return Owner(account.id, app_id, agent.id)


def _create(db: Session, owner: Owner, **fields: object) -> mcp.McpServerView:
    values: dict[str, object] = {"name": "tools", "url": "https://mcp.example.com/mcp", **fields}
    return mcp.create_server(
        db,
        owner.account_id,
        owner.app_id,
        McpServerChanges(**values),  # type: ignore[arg-type]
    )


def _bind(db: Session, owner: Owner, server_ids: list[str], **policies: object) -> agents.AgentView:
    return agents.update_agent(
        db,
        owner.account_id,
        owner.app_id,
        owner.agent_id,
        agents.AgentChanges(mcp_servers=server_ids, mcp_policies=policies or None),
    )


@pytest.fixture(autouse=True)
def _servers_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    allow_private_networks(monkeypatch)


@pytest.fixture
def server() -> Iterator[MCPTestServer]:
    with MCPTestServer(bearer=TOKEN) as running:
        yield running


# --- the servers -------------------------------------------------------------------------


def test_a_bearer_token_is_sealed_in_the_vault_and_never_in_a_view(db: Session) -> None:
    owner = _owner(db)
    made = _create(db, owner, auth_kind="bearer", bearer_token=TOKEN, description="  Our   tools ")
    assert (made.name, made.auth_kind, made.enabled, made.has_credential) == (
        "tools",
        "bearer",
        True,
        True,
    )
    assert made.description == "Our tools"
    assert TOKEN not in repr(made)
    row = db.get(McpServer, made.id)
    assert row is not None and row.credential_secret_id is not None
    assert TOKEN not in json.dumps(row.model_dump(mode="json"))
    secret = db.get(VaultSecret, row.credential_secret_id)
    assert secret is not None and TOKEN.encode() not in secret.ciphertext
    # Changing the description keeps the token; a new token replaces it in place.
    mcp.update_server(
        db, owner.account_id, owner.app_id, made.id, McpServerChanges(bearer_token="new-token")
    )
    assert mcp.credential_headers(db, row) == {"Authorization": "Bearer new-token"}


def test_custom_headers_show_their_names_and_never_their_values(db: Session) -> None:
    owner = _owner(db)
    made = _create(
        db, owner, auth_kind="headers", headers={"X-Api-Key": HEADER_SECRET, "X-Team": "blue"}
    )
    assert made.header_names == ["X-Api-Key", "X-Team"]
    assert HEADER_SECRET not in repr(made)
    row = db.get(McpServer, made.id)
    assert row is not None
    assert mcp.credential_headers(db, row) == {"X-Api-Key": HEADER_SECRET, "X-Team": "blue"}
    with pytest.raises(InvalidInput) as refused:
        _create(db, owner, name="other", auth_kind="headers", headers={"Mcp-Session-Id": "x"})
    assert refused.value.field == "headers"
    with pytest.raises(FieldConflict):
        _create(db, owner, name="other", auth_kind="headers", headers={"X-A": "1", "x-a": "2"})


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": "Tools"}, "name"),
        ({"name": "my__tools"}, "name"),
        ({"name": "x" * 33}, "name"),
        ({"url": "ftp://mcp.example.com"}, "url"),
        ({"url": "https://user:pass@mcp.example.com/mcp"}, "url"),
        ({"url": "https://mcp.example.com/mcp#frag"}, "url"),
        ({"url": "https://mcp.example.com:99999/mcp"}, "url"),
        # Whatever the operator allows: the cloud metadata service.
        ({"url": "http://169.254.169.254/latest/meta-data"}, "url"),
        ({"url": "http://[::ffff:169.254.169.254]/"}, "url"),
        ({"auth_kind": "basic"}, "auth_kind"),
        ({"auth_kind": "bearer", "bearer_token": "has space"}, "bearer_token"),
    ],
)
def test_invalid_fields_are_refused_naming_them_and_nothing_is_saved(
    db: Session, fields: dict[str, object], field: str
) -> None:
    owner = _owner(db)
    with pytest.raises(InvalidInput) as refused:
        _create(db, owner, **fields)
    assert refused.value.field == field
    assert mcp.list_servers(db, owner.account_id, owner.app_id) == []


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("http://127.0.0.1:6379/", "127.0.0.1 is a loopback address"),
        ("http://10.0.0.5/mcp", "10.0.0.5 is a private address"),
        ("http://[::1]:8080/mcp", "::1 is a loopback address"),
        ("http://[::ffff:10.0.0.5]/mcp", "::ffff:10.0.0.5 is a private address"),
        ("http://0x7f000001/mcp", "0x7f000001 resolves to a loopback address (127.0.0.1)"),
        ("http://100.100.100.200/", "100.100.100.200 is a carrier-grade NAT address"),
    ],
)
def test_an_address_of_a_private_range_is_refused_unless_the_operator_allows_them(
    db: Session, monkeypatch: pytest.MonkeyPatch, url: str, refused: str
) -> None:
    owner = _owner(db)
    allow_private_networks(monkeypatch, allowed=False)
    # Well-formed, refused by the installation's rules: a conflict naming the field.
    with pytest.raises(FieldConflict) as refusal:
        _create(db, owner, url=url)
    assert refusal.value.field == "url"
    assert refused in refusal.value.message
    assert "MOSOO_MCP_ALLOW_PRIVATE_NETWORKS=true" in refusal.value.message
    assert mcp.list_servers(db, owner.account_id, owner.app_id) == []
    allow_private_networks(monkeypatch)
    assert _create(db, owner, url=url).url == url


def test_credentials_must_go_with_the_authentication_kind(db: Session) -> None:
    owner = _owner(db)
    for fields, field in (
        ({"auth_kind": "bearer"}, "bearer_token"),
        ({"auth_kind": "none", "bearer_token": "t"}, "bearer_token"),
        ({"auth_kind": "oauth"}, "oauth_client_id"),
        ({"auth_kind": "bearer", "bearer_token": "t", "oauth_scopes": "x"}, "oauth_scopes"),
    ):
        with pytest.raises(FieldConflict) as refused:
            _create(db, owner, **fields)
        assert refused.value.field == field


def test_names_are_unique_in_an_app(db: Session) -> None:
    owner = _owner(db)
    _create(db, owner)
    with pytest.raises(FieldConflict) as refused:
        _create(db, owner)
    assert refused.value.code == "name_taken"


def test_changing_the_authentication_kind_forgets_the_old_credential(db: Session) -> None:
    owner = _owner(db)
    made = _create(db, owner, auth_kind="bearer", bearer_token=TOKEN)
    row = db.get(McpServer, made.id)
    assert row is not None
    old_secret = row.credential_secret_id
    changed = mcp.update_server(
        db, owner.account_id, owner.app_id, made.id, McpServerChanges(auth_kind="none")
    )
    assert (changed.auth_kind, changed.has_credential) == ("none", False)
    assert db.get(VaultSecret, old_secret) is None


def test_another_owners_server_is_not_found(db: Session) -> None:
    owner = _owner(db)
    other = _owner(db, "other-mcp@example.com")
    made = _create(db, owner)
    for call in (
        lambda: mcp.get_server(db, other.account_id, other.app_id, made.id),
        lambda: mcp.get_server(db, other.account_id, owner.app_id, made.id),
        lambda: mcp.mcp_server_app_id(db, other.account_id, made.id),
        lambda: mcp.update_server(
            db, other.account_id, other.app_id, made.id, McpServerChanges(enabled=False)
        ),
        lambda: mcp.delete_server(db, other.account_id, other.app_id, made.id),
    ):
        with pytest.raises(NotFound):
            call()
    assert mcp.get_server(db, owner.account_id, owner.app_id, made.id).enabled


def test_delete_is_refused_while_a_draft_or_a_published_version_binds_it(db: Session) -> None:
    owner = _owner(db)
    made = _create(db, owner, auth_kind="bearer", bearer_token=TOKEN)
    _bind(db, owner, [made.id])
    agents.publish_agent(db, owner.account_id, owner.app_id, owner.agent_id)
    with pytest.raises(Conflict) as refused:
        mcp.delete_server(db, owner.account_id, owner.app_id, made.id)
    assert "agent Helper" in refused.value.message
    assert "Helper version 1" in refused.value.message
    assert mcp.get_server(db, owner.account_id, owner.app_id, made.id).used_by == [
        "agent Helper",
        "Helper version 1",
    ]
    _bind(db, owner, [])
    with pytest.raises(Conflict) as still:
        mcp.delete_server(db, owner.account_id, owner.app_id, made.id)
    assert "version 1" in still.value.message and "agent Helper" not in still.value.message
    agents.unpublish_agent(db, owner.account_id, owner.app_id, owner.agent_id)
    mcp.delete_server(db, owner.account_id, owner.app_id, made.id)
    assert mcp.list_servers(db, owner.account_id, owner.app_id) == []
    assert (
        db.exec(select(VaultSecret).where(VaultSecret.owner_ref.startswith("mcp_server:"))).all()
        == []
    )  # type: ignore[attr-defined]


# --- test connection ----------------------------------------------------------------------


def test_test_connection_lists_the_tools_and_the_server_saw_the_vaulted_token(
    db: Session, server: MCPTestServer
) -> None:
    owner = _owner(db)
    made = _create(db, owner, url=server.url, auth_kind="bearer", bearer_token=TOKEN)
    db.commit()
    result = mcp.test_server(owner.account_id, owner.app_id, made.id)
    assert result.ok, result.error
    assert sorted(tool.name for tool in result.tools) == sorted(TOOL_NAMES)
    echo = next(tool for tool in result.tools if tool.name == "echo")
    assert echo.description == "Answers the text it is given."
    assert echo.input_schema["properties"]["text"]["type"] == "string"
    assert {r.authorization for r in server.mcp_requests()} == {f"Bearer {TOKEN}"}
    db.expire_all()
    stored = mcp.get_server(db, owner.account_id, owner.app_id, made.id)
    assert stored.test_ok is True and stored.tested_at is not None and stored.test_error == ""
    assert [tool.name for tool in stored.tools] == [tool.name for tool in result.tools]
    assert stored.server_info["name"] == "mosoo-test"


def test_a_refused_credential_and_a_down_server_are_stored_with_the_reason(
    db: Session, server: MCPTestServer
) -> None:
    owner = _owner(db)
    made = _create(db, owner, url=server.url, auth_kind="bearer", bearer_token="wrong")
    db.commit()
    refused = mcp.test_server(owner.account_id, owner.app_id, made.id)
    assert not refused.ok and "401" in refused.error and refused.tools == []
    # The last good list stays while a later test fails.
    mcp.update_server(
        db, owner.account_id, owner.app_id, made.id, McpServerChanges(bearer_token=TOKEN)
    )
    db.commit()
    assert mcp.test_server(owner.account_id, owner.app_id, made.id).ok
    mcp.update_server(
        db, owner.account_id, owner.app_id, made.id, McpServerChanges(url="http://127.0.0.1:9/mcp")
    )
    db.commit()
    down = mcp.test_server(owner.account_id, owner.app_id, made.id)
    assert not down.ok and "could not be reached" in down.error
    db.expire_all()
    stored = mcp.get_server(db, owner.account_id, owner.app_id, made.id)
    assert stored.test_ok is False and "could not be reached" in stored.test_error
    assert len(stored.tools) == len(TOOL_NAMES)


def test_test_connection_to_loopback_is_refused_and_the_server_sees_no_request(
    db: Session, server: MCPTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = _owner(db)
    made = _create(db, owner, url=server.url, auth_kind="bearer", bearer_token=TOKEN)
    db.commit()
    # Saved while the operator allowed private networks; tested after they stopped.
    allow_private_networks(monkeypatch, allowed=False)
    result = mcp.test_server(owner.account_id, owner.app_id, made.id)
    assert not result.ok and result.tools == []
    assert result.error.startswith("refused: 127.0.0.1 is a loopback address;")
    assert "MOSOO_MCP_ALLOW_PRIVATE_NETWORKS=true" in result.error
    assert server.requests() == []
    db.expire_all()
    stored = mcp.get_server(db, owner.account_id, owner.app_id, made.id)
    assert stored.test_ok is False and stored.test_error == result.error


def test_test_connection_to_a_name_on_loopback_is_refused(
    db: Session, server: MCPTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    allow_private_networks(monkeypatch, allowed=False)
    owner = _owner(db)
    # A name passes the form (it is checked when it resolves), then its address is refused.
    made = _create(db, owner, url=f"http://localhost:{server.port}/mcp")
    db.commit()
    result = mcp.test_server(owner.account_id, owner.app_id, made.id)
    assert not result.ok
    assert result.error.startswith("refused: localhost resolves to a loopback address (")
    assert server.requests() == []


# --- agents: bindings, policies, readiness, versions, runs ----------------------------------


def test_a_missing_or_disabled_server_is_a_readiness_blocker(db: Session) -> None:
    owner = _owner(db)
    made = _create(db, owner)
    view = _bind(db, owner, [made.id, "01MISSINGSERVER"])
    blockers = {b.code for b in agents.readiness(db, view).blockers}
    assert blockers == {"mcp_server_invalid"}
    mcp.set_enabled(db, owner.account_id, owner.app_id, made.id, False)
    blockers = {b.code for b in agents.readiness(db, view).blockers}
    assert blockers == {"mcp_server_invalid", "mcp_server_disabled"}
    mcp.set_enabled(db, owner.account_id, owner.app_id, made.id, True)
    assert agents.readiness(db, _bind(db, owner, [made.id])).ready


def test_policies_are_checked_and_those_of_unbound_servers_dropped(db: Session) -> None:
    owner = _owner(db)
    made = _create(db, owner)
    view = _bind(
        db,
        owner,
        [made.id],
        **{
            made.id: {
                "default": "allow",
                "tools": {"broken": "off", "slow": "ask"},
                "required": True,
            },
            "01NOTBOUND": {"default": "off"},
        },
    )
    assert view.mcp_policies == {
        made.id: {"default": "allow", "tools": {"broken": "off", "slow": "ask"}, "required": True}
    }
    for bad in (
        {"default": "always"},
        {"tools": {"x": "maybe"}},
        {"required": "yes"},
        {"color": 1},
    ):
        with pytest.raises(InvalidInput) as refused:
            _bind(db, owner, [made.id], **{made.id: bad})
        assert refused.value.field == "mcp_policies"
    # Unbinding the server forgets its policy.
    assert _bind(db, owner, []).mcp_policies == {}


def test_a_published_version_keeps_its_bindings_and_policies(db: Session) -> None:
    owner = _owner(db)
    made = _create(db, owner)
    _bind(db, owner, [made.id], **{made.id: {"default": "allow"}})
    version = agents.publish_agent(db, owner.account_id, owner.app_id, owner.agent_id)
    _bind(db, owner, [made.id], **{made.id: {"default": "off"}})
    assert version.profile["mcp_servers"] == [made.id]
    assert version.profile["mcp_policies"][made.id]["default"] == "allow"
    fork = agents.fork_agent(db, owner.account_id, owner.app_id, owner.agent_id)
    assert fork.mcp_servers == [made.id] and fork.mcp_policies[made.id]["default"] == "off"


def test_a_boot_gives_each_bound_server_its_own_grant_kept_out_of_the_snapshot(
    db: Session,
) -> None:
    owner = _owner(db)
    first = _create(db, owner, name="first", auth_kind="bearer", bearer_token=TOKEN)
    second = _create(db, owner, name="second", url="https://two.example.com/mcp")
    off = _create(db, owner, name="quiet", url="https://three.example.com/mcp")
    _bind(
        db,
        owner,
        [first.id, second.id, off.id],
        **{
            first.id: {"default": "allow", "tools": {"slow": "ask"}, "required": True},
            off.id: {"default": "off"},
        },
    )
    thread = sessions.create_session(db, owner.account_id, owner.app_id, owner.agent_id)
    sent = sessions.send_message(db, owner.account_id, thread.id, "hello")
    plan, events = plan_boot(db, sent.run.id)
    assert plan is not None, events
    spec = json.loads(plan.payload_json)["execution_spec"]
    bindings = spec["mcp_servers"]
    assert [(b["ref"], b["name"]) for b in bindings] == [(first.id, "first"), (second.id, "second")]
    assert bindings[0]["tool_policies"] == {"slow": "ask"} and bindings[0]["required"] is True
    assert bindings[1]["default_policy"] == "ask" and bindings[1]["required"] is False
    grants = [b["grant"] for b in bindings]
    assert len(set(grants)) == 2 and all(g.startswith("mcg_") for g in grants)
    # Neither the URL nor the credential travels; the snapshot holds no grant.
    assert "example.com" not in plan.payload_json and TOKEN not in plan.payload_json
    run = db.get(SessionRun, sent.run.id)
    assert run is not None
    assert not any(g in json.dumps(run.snapshot) for g in grants)
    assert [b["name"] for b in run.snapshot["mcp_servers"]] == ["first", "second"]
    # A grant answers for its own server and run only.
    context = mcp.resolve_grant(db, grants[0], first.id)
    assert context is not None and (context.run_id, context.server_id) == (run.id, first.id)
    assert mcp.resolve_grant(db, grants[0], second.id) is None
    assert mcp.resolve_grant(db, grants[1], first.id) is None
    assert mcp.resolve_grant(db, "mcg_unknown", first.id) is None
    assert len(db.exec(select(McpGrant)).all()) == 2
    run.status = "completed"
    db.add(run)
    db.flush()
    assert mcp.resolve_grant(db, grants[0], first.id) is None


def test_an_export_carries_servers_by_reference_and_an_import_binds_the_same_one(
    db: Session,
) -> None:
    owner = _owner(db)
    made = _create(db, owner, auth_kind="bearer", bearer_token=TOKEN)
    _bind(db, owner, [made.id], **{made.id: {"default": "allow", "tools": {"x": "off"}}})
    package = agents.export_agent(db, owner.account_id, owner.app_id, owner.agent_id)
    assert TOKEN.encode() not in package
    # Another account without the server: told to add it; with it (same name and URL): bound.
    other = _owner(db, "importer@example.com")
    report = agents.import_agent(db, other.account_id, other.app_id, package)
    assert any("'tools'" in line and "bearer" in line for line in report.reconnect)
    assert agents.get_agent(db, other.account_id, other.app_id, report.agent_id).mcp_servers == []
    theirs = _create(db, other, auth_kind="bearer", bearer_token="their-own")
    report = agents.import_agent(db, other.account_id, other.app_id, package)
    imported = agents.get_agent(db, other.account_id, other.app_id, report.agent_id)
    assert imported.mcp_servers == [theirs.id]
    assert imported.mcp_policies[theirs.id] == {
        "default": "allow",
        "tools": {"x": "off"},
        "required": False,
    }
    assert not any("MCP" in line for line in report.reconnect)
