"""The Agent profile as Preview edits it: every field saved alone (autosave), bad values refused
with the field named and nothing lost, every readiness rule, and the environment / skill / MCP
bindings carried into versions, runs, packages and fork. Also: a provider key a published
version still uses cannot be deleted."""

from __future__ import annotations

import dataclasses
import io
import json
import zipfile
from dataclasses import dataclass
from typing import Any

import pytest
from sqlmodel import Session

from mosoo_core import agents, identity, sessions, vault
from mosoo_core.errors import Conflict, InvalidInput, NotFound
from mosoo_core.runtime.runs import plan_boot
from mosoo_core.tables.agents import Agent, AgentVersion
from mosoo_core.tables.sessions import SessionRun

PROVIDER_KEY = "sk-proj-Zq8Xn4Lr7TvW2yHc9PbM3kJd6FsG1aQeR5uI0oplabcd"
SKILL, OTHER_SKILL = "01SKILLCHANGELOG0000000000", "01SKILLRELEASE000000000000"
MCP_SERVER = "01MCPGITHUB000000000000000"
ENVIRONMENT = "01ENVPYTHON000000000000000"


@dataclass(frozen=True)
class Owner:
    account_id: str
    app_id: str
    agent_id: str
    credential_id: str


def _owner(
    db: Session, email: str = "owner@example.com", *, ready: bool = True, kind: str = "cattle"
) -> Owner:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    app_id = identity.list_apps(db, account.id)[0].id
    credential = vault.create_provider_credential(
        db,
        account.id,
        app_id,
        vault.ProviderCredentialInput(
            name="Team key",
            provider="openai_compatible",
            base_url="http://10.0.0.5:8000/v1",
            api_key=PROVIDER_KEY,
            models=["model-a", "model-b"],
        ),
    )
    agent = agents.create_agent(db, account.id, app_id, name="Helper", kind=kind)
    if ready:
        agents.update_agent(
            db,
            account.id,
            app_id,
            agent.id,
            agents.AgentChanges(provider_credential_id=credential.id, model="model-a"),
        )
    return Owner(account.id, app_id, agent.id, credential.id)


def _edit(db: Session, owner: Owner, **changes: Any) -> agents.AgentView:
    return agents.update_agent(
        db, owner.account_id, owner.app_id, owner.agent_id, agents.AgentChanges(**changes)
    )


def _get(db: Session, owner: Owner) -> agents.AgentView:
    return agents.get_agent(db, owner.account_id, owner.app_id, owner.agent_id)


def _codes(db: Session, owner: Owner) -> tuple[set[str], set[str]]:
    ready = agents.readiness(db, _get(db, owner))
    return {b.code for b in ready.blockers}, {w.code for w in ready.warnings}


# --- autosave: each field alone -----------------------------------------------------------

GOOD_VALUES: dict[str, Any] = {
    "name": "Billing helper",
    "description": "Answers billing questions.",
    "system_prompt": "You answer billing questions, briefly.",
    "model": "model-b",
    "kind": "pet",
    "tools": {"read": "allow", "grep": "ask"},
    "provider_options": {"temperature": 0.4, "max_tokens": 2048, "reasoning_effort": "low"},
    "environment_id": ENVIRONMENT,
    "skills": [SKILL, OTHER_SKILL],
    "mcp_servers": [MCP_SERVER],
}


@pytest.mark.parametrize("field", sorted(GOOD_VALUES))
def test_each_field_saves_alone_and_leaves_the_others_as_they_were(db: Session, field: str) -> None:
    owner = _owner(db)
    before = _get(db, owner)

    after = _edit(db, owner, **{field: GOOD_VALUES[field]})

    assert getattr(after, field) == GOOD_VALUES[field]
    assert getattr(_get(db, owner), field) == GOOD_VALUES[field]
    for other in agents.service.UPDATABLE - {field}:
        assert getattr(after, other) == getattr(before, other), other


def test_the_provider_key_saves_alone_and_can_be_cleared(db: Session) -> None:
    owner = _owner(db, ready=False)
    assert (
        _edit(db, owner, provider_credential_id=owner.credential_id).provider_credential_id
        == owner.credential_id
    )
    assert _edit(db, owner, provider_credential_id=None).provider_credential_id is None


BAD_VALUES: list[tuple[str, Any, str]] = [
    ("name", "   ", "name"),
    ("name", "x" * 81, "name"),
    ("description", "x" * 501, "description"),
    ("system_prompt", "x" * 100_001, "system_prompt"),
    ("model", "m" * 201, "model"),
    ("kind", "herd", "kind"),
    ("runtime", "cobol", "runtime"),
    ("tools", {"rm": "allow"}, "tools"),
    ("tools", {"bash": "always"}, "tools"),
    ("provider_options", {"temperature": 3}, "provider_options"),
    ("provider_options", {"max_tokens": 0}, "provider_options"),
    ("provider_options", {"reasoning_effort": "extreme"}, "provider_options"),
    ("provider_options", {"acp_command": "opencode acp"}, "provider_options"),
    ("provider_options", {"acp_command": []}, "provider_options"),
    ("provider_credential_id", "01NOTAKEY00000000000000000", "provider_credential_id"),
    ("environment_id", "../etc", "environment_id"),
    ("environment_id", 42, "environment_id"),
    ("skills", "not-a-list", "skills"),
    ("skills", ["ok", "not ok!"], "skills"),
    ("skills", [f"S{i}" for i in range(agents.MAX_BINDINGS + 1)], "skills"),
    ("mcp_servers", [None], "mcp_servers"),
    ("mcp_servers", [f"M{i}" for i in range(agents.MAX_BINDINGS + 1)], "mcp_servers"),
]


@pytest.mark.parametrize(
    ("field", "value", "named"),
    BAD_VALUES,
    ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(BAD_VALUES)],
)
def test_an_invalid_value_is_refused_with_its_field_and_the_last_good_value_stays(
    db: Session, field: str, value: Any, named: str
) -> None:
    owner = _owner(db)
    _edit(db, owner, **GOOD_VALUES)
    before = _get(db, owner)

    with pytest.raises(InvalidInput) as refused:
        _edit(db, owner, **{field: value})

    assert refused.value.field == named
    after = _get(db, owner)
    assert after == before


def test_bindings_are_deduplicated_in_order_and_an_empty_environment_means_the_default(
    db: Session,
) -> None:
    owner = _owner(db)
    saved = _edit(db, owner, skills=[SKILL, OTHER_SKILL, SKILL], environment_id=ENVIRONMENT)
    assert saved.skills == [SKILL, OTHER_SKILL]
    assert _edit(db, owner, environment_id="").environment_id is None


def test_another_owners_agent_cannot_be_edited(db: Session) -> None:
    owner = _owner(db)
    stranger = _owner(db, "stranger@example.com")
    with pytest.raises(NotFound):
        agents.update_agent(
            db,
            stranger.account_id,
            stranger.app_id,
            owner.agent_id,
            agents.AgentChanges(name="Mine now"),
        )
    assert _get(db, owner).name == "Helper"


# --- readiness ----------------------------------------------------------------------------


def test_a_complete_agent_is_ready_with_no_warnings(db: Session) -> None:
    owner = _owner(db)
    assert _codes(db, owner) == (set(), set())
    assert agents.readiness(db, _get(db, owner)).ready


def test_no_provider_key_and_no_model_block_naming_their_fields(db: Session) -> None:
    owner = _owner(db, ready=False)
    ready = agents.readiness(db, _get(db, owner))
    assert not ready.ready
    assert {(b.code, b.field) for b in ready.blockers} == {
        ("no_provider_key", "provider_credential_id"),
        ("model_not_set", "model"),
    }


def test_a_deleted_provider_key_blocks(db: Session) -> None:
    owner = _owner(db)
    db.get(Agent, owner.agent_id).provider_credential_id = "01GONEKEY00000000000000000"  # type: ignore[union-attr]
    db.flush()
    assert _codes(db, owner)[0] == {"provider_key_missing"}


def test_a_runtime_the_driver_does_not_implement_blocks(
    db: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every runtime of the catalog runs today: one marked not implemented stands for the next.
    monkeypatch.setitem(
        agents.RUNTIMES, "acp", dataclasses.replace(agents.RUNTIMES["acp"], implemented=False)
    )
    owner = _owner(db)
    _edit(db, owner, runtime="acp")
    assert "runtime_unsupported" in _codes(db, owner)[0]


def test_the_acp_runtime_runs_with_an_openai_compatible_key_only(db: Session) -> None:
    owner = _owner(db)
    _edit(db, owner, runtime="acp", provider_options={"acp_command": ["my-agent", "--acp"]})
    assert _get(db, owner).provider_options == {"acp_command": ["my-agent", "--acp"]}
    assert _codes(db, owner) == (set(), set())  # the owner's key is OpenAI-compatible
    anthropic = vault.create_provider_credential(
        db,
        owner.account_id,
        owner.app_id,
        vault.ProviderCredentialInput(
            name="Claude",
            provider="anthropic",
            base_url="https://api.anthropic.com/v1",
            api_key="sk-ant-test",
            models=["claude-test"],
        ),
    )
    _edit(db, owner, provider_credential_id=anthropic.id, model="claude-test")
    assert _codes(db, owner)[0] == {"provider_unsupported"}


def test_the_claude_runtime_runs_with_an_anthropic_key_only(db: Session) -> None:
    owner = _owner(db)
    _edit(db, owner, runtime="claude")
    assert _codes(db, owner)[0] == {"provider_unsupported"}  # an OpenAI-compatible key
    anthropic = vault.create_provider_credential(
        db,
        owner.account_id,
        owner.app_id,
        vault.ProviderCredentialInput(
            name="Claude",
            provider="anthropic",
            base_url="https://api.anthropic.com/v1",
            api_key="sk-ant-test",
            models=["claude-test"],
        ),
    )
    _edit(db, owner, provider_credential_id=anthropic.id, model="claude-test")
    assert _codes(db, owner) == (set(), set())


def test_a_missing_skill_is_a_warning_and_the_agent_still_runs(db: Session) -> None:
    owner = _owner(db)
    _edit(db, owner, skills=[SKILL])
    ready = agents.readiness(db, _get(db, owner))
    assert ready.ready
    assert [(w.code, w.field) for w in ready.warnings] == [("skill_missing", "skills")]
    assert "runs go without it" in ready.warnings[0].message


def test_an_invalid_mcp_server_blocks(db: Session) -> None:
    owner = _owner(db)
    _edit(db, owner, mcp_servers=[MCP_SERVER])
    ready = agents.readiness(db, _get(db, owner))
    assert not ready.ready
    assert [(b.code, b.field) for b in ready.blockers] == [("mcp_server_invalid", "mcp_servers")]
    _edit(db, owner, mcp_servers=[])
    assert agents.readiness(db, _get(db, owner)).ready


def test_a_missing_environment_blocks_until_the_default_is_chosen(db: Session) -> None:
    owner = _owner(db)
    _edit(db, owner, environment_id=ENVIRONMENT)
    assert _codes(db, owner)[0] == {"environment_missing"}
    _edit(db, owner, environment_id=None)
    assert _codes(db, owner)[0] == set()


def test_publish_is_refused_while_an_mcp_server_is_invalid(db: Session) -> None:
    owner = _owner(db)
    _edit(db, owner, mcp_servers=[MCP_SERVER])
    with pytest.raises(Conflict, match="MCP server"):
        agents.publish_agent(db, owner.account_id, owner.app_id, owner.agent_id)


# --- bindings in versions, runs, fork -------------------------------------------------------


def _booted(db: Session, owner: Owner, thread_id: str) -> dict[str, Any]:
    sent = sessions.send_message(db, owner.account_id, thread_id, "hello")
    plan, events = plan_boot(db, sent.run.id)
    assert plan is not None, events
    run = db.get(SessionRun, sent.run.id)
    assert run is not None
    return run.snapshot


def test_a_version_freezes_the_bindings_and_a_pinned_thread_runs_them(db: Session) -> None:
    owner = _owner(db)
    _edit(db, owner, skills=[SKILL])
    version = agents.publish_agent(db, owner.account_id, owner.app_id, owner.agent_id)
    assert version.profile["skills"] == [SKILL]
    assert version.profile["environment_id"] is None and version.profile["mcp_servers"] == []
    thread = sessions.create_session(
        db, owner.account_id, owner.app_id, owner.agent_id, purpose="api"
    )

    _edit(db, owner, skills=[OTHER_SKILL])  # the draft moves on; version 1 does not

    assert agents.get_version(db, owner.account_id, owner.app_id, owner.agent_id, 1).profile[
        "skills"
    ] == [SKILL]
    snapshot = _booted(db, owner, thread.id)
    assert snapshot["bindings"] == {"environment_id": None, "skills": [SKILL], "mcp_servers": []}
    # The skill does not exist, so the run goes without it (readiness warned).
    assert snapshot["skills"] == [] and snapshot["mcp_servers"] == []


def test_a_preview_run_freezes_the_drafts_bindings(db: Session) -> None:
    owner = _owner(db)
    _edit(db, owner, skills=[SKILL, OTHER_SKILL])
    thread = sessions.create_session(
        db, owner.account_id, owner.app_id, owner.agent_id, purpose="preview"
    )
    assert _booted(db, owner, thread.id)["bindings"]["skills"] == [SKILL, OTHER_SKILL]


def test_a_run_with_an_invalid_mcp_server_fails_as_not_ready(db: Session) -> None:
    owner = _owner(db)
    thread = sessions.create_session(
        db, owner.account_id, owner.app_id, owner.agent_id, purpose="preview"
    )
    _edit(db, owner, mcp_servers=[MCP_SERVER])
    sent = sessions.send_message(db, owner.account_id, thread.id, "hello")
    plan, _events = plan_boot(db, sent.run.id)
    assert plan is None
    run = db.get(SessionRun, sent.run.id)
    assert run is not None and run.status == "failed" and run.error_code == "readiness_blocked"


def test_a_version_published_before_bindings_existed_runs_without_the_drafts_bindings(
    db: Session,
) -> None:
    owner = _owner(db)
    agents.publish_agent(db, owner.account_id, owner.app_id, owner.agent_id)
    row = db.get(
        AgentVersion, agents.get_version(db, owner.account_id, owner.app_id, owner.agent_id, 1).id
    )
    assert row is not None
    row.profile = {
        k: v for k, v in row.profile.items() if k not in ("environment_id", "skills", "mcp_servers")
    }
    db.add(row)
    db.flush()
    _edit(db, owner, skills=[SKILL])
    profile = agents.thread_profile(db, db.get(Agent, owner.agent_id), 1)  # type: ignore[arg-type]
    assert profile is not None and profile.skills == [] and profile.environment_id is None


def test_fork_copies_the_bindings(db: Session) -> None:
    owner = _owner(db)
    _edit(db, owner, skills=[SKILL], mcp_servers=[MCP_SERVER], environment_id=ENVIRONMENT)
    fork = agents.fork_agent(db, owner.account_id, owner.app_id, owner.agent_id)
    assert (fork.skills, fork.mcp_servers, fork.environment_id) == (
        [SKILL],
        [MCP_SERVER],
        ENVIRONMENT,
    )


# --- export / import of bindings ------------------------------------------------------------


def _manifest(package: bytes) -> dict[str, Any]:
    with zipfile.ZipFile(io.BytesIO(package)) as archive:
        return json.loads(archive.read("manifest.json"))  # type: ignore[no-any-return]


def test_export_lists_the_bindings_and_import_reports_them_to_reconnect(db: Session) -> None:
    owner = _owner(db)
    _edit(
        db, owner, skills=[SKILL, OTHER_SKILL], mcp_servers=[MCP_SERVER], environment_id=ENVIRONMENT
    )
    package = agents.export_agent(db, owner.account_id, owner.app_id, owner.agent_id)
    manifest = _manifest(package)
    # Skills travel with their files; these two do not exist, so there is nothing to carry
    # (tests/service/test_skills.py exports real ones).
    assert manifest["skills"] == []
    assert manifest["mcp_servers"] == [{"id": MCP_SERVER}]
    assert manifest["environment"] == {"id": ENVIRONMENT}
    assert PROVIDER_KEY not in package.decode("latin-1")

    elsewhere = _owner(db, "elsewhere@example.com", ready=False)
    report = agents.import_agent(db, elsewhere.account_id, elsewhere.app_id, package)

    assert not any("skill" in line for line in report.reconnect)
    assert any("1 MCP server(s)" in line for line in report.reconnect)
    assert any("environment" in line for line in report.reconnect)
    imported = agents.get_agent(db, elsewhere.account_id, elsewhere.app_id, report.agent_id)
    # Ids of another installation's resources are reported, not bound.
    assert (imported.skills, imported.mcp_servers, imported.environment_id) == ([], [], None)


def test_an_agent_without_bindings_exports_empty_ones_and_imports_with_nothing_to_reconnect_for_them(
    db: Session,
) -> None:
    owner = _owner(db)
    manifest = _manifest(agents.export_agent(db, owner.account_id, owner.app_id, owner.agent_id))
    assert (manifest["skills"], manifest["mcp_servers"], manifest["environment"]) == ([], [], None)


def test_import_refuses_binding_lists_of_non_objects(db: Session) -> None:
    owner = _owner(db)
    package = agents.export_agent(db, owner.account_id, owner.app_id, owner.agent_id)
    manifest = _manifest(package)
    manifest["skills"] = ["changelog"]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("manifest.json", json.dumps(manifest))
    count = len(agents.list_agents(db, owner.account_id, owner.app_id))
    with pytest.raises(InvalidInput, match="skills must be an object"):
        agents.import_agent(db, owner.account_id, owner.app_id, buffer.getvalue())
    assert len(agents.list_agents(db, owner.account_id, owner.app_id)) == count


# --- provider keys still used by published versions -------------------------------------


def _second_key(db: Session, owner: Owner) -> str:
    return vault.create_provider_credential(
        db,
        owner.account_id,
        owner.app_id,
        vault.ProviderCredentialInput(
            name="Other key",
            provider="openai_compatible",
            base_url="http://10.0.0.6:8000/v1",
            api_key=PROVIDER_KEY,
            models=["model-a"],
        ),
    ).id


def test_a_key_the_published_version_uses_cannot_be_deleted_though_the_draft_moved_on(
    db: Session,
) -> None:
    owner = _owner(db)
    agents.publish_agent(db, owner.account_id, owner.app_id, owner.agent_id)
    _edit(db, owner, provider_credential_id=_second_key(db, owner))

    with pytest.raises(Conflict) as refused:
        vault.delete_provider_credential(db, owner.account_id, owner.app_id, owner.credential_id)

    assert "Helper version 1" in refused.value.message
    assert any(
        c.id == owner.credential_id
        for c in vault.list_provider_credentials(db, owner.account_id, owner.app_id)
    )


def test_a_key_a_thread_still_pins_cannot_be_deleted_after_unpublishing(db: Session) -> None:
    owner = _owner(db)
    agents.publish_agent(db, owner.account_id, owner.app_id, owner.agent_id)
    sessions.create_session(db, owner.account_id, owner.app_id, owner.agent_id, purpose="api")
    _edit(db, owner, provider_credential_id=_second_key(db, owner))
    agents.unpublish_agent(db, owner.account_id, owner.app_id, owner.agent_id)

    with pytest.raises(Conflict, match="Helper version 1"):
        vault.delete_provider_credential(db, owner.account_id, owner.app_id, owner.credential_id)


def test_a_key_only_an_old_unpinned_version_used_can_be_deleted(db: Session) -> None:
    owner = _owner(db)
    agents.publish_agent(db, owner.account_id, owner.app_id, owner.agent_id)
    _edit(db, owner, provider_credential_id=_second_key(db, owner))
    agents.publish_agent(
        db, owner.account_id, owner.app_id, owner.agent_id
    )  # version 2 uses the other key

    vault.delete_provider_credential(db, owner.account_id, owner.app_id, owner.credential_id)

    assert all(
        c.id != owner.credential_id
        for c in vault.list_provider_credentials(db, owner.account_id, owner.app_id)
    )


# --- the Pet sandbox fingerprint ------------------------------------------------------------


def test_only_kind_environment_and_skills_make_a_pet_sandbox_stale(db: Session) -> None:
    owner = _owner(db, kind="pet")
    built = agents.sandbox_fingerprint(_get(db, owner))
    _edit(
        db,
        owner,
        model="model-b",
        system_prompt="new",
        tools={"read": "allow"},
        mcp_servers=[MCP_SERVER],
    )
    assert agents.pending_sandbox_fields(_get(db, owner), built) == []
    _edit(db, owner, skills=[SKILL])
    assert agents.pending_sandbox_fields(_get(db, owner), built) == ["skills"]
    _edit(db, owner, kind="cattle", environment_id=ENVIRONMENT)
    assert agents.pending_sandbox_fields(_get(db, owner), built) == [
        "kind",
        "environment_id",
        "skills",
    ]
    assert agents.pending_sandbox_fields(_get(db, owner), None) == list(agents.SANDBOX_FIELDS)
