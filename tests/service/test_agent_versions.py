"""Publishing: numbered immutable versions, the lock on kind and runtime, threads pinning a version."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from sqlmodel import Session

from mosoo_core import agents, identity, sessions, vault
from mosoo_core.agents.versions import PROFILE_FIELDS
from mosoo_core.errors import Conflict, InvalidInput, NotFound
from mosoo_core.runtime.runs import plan_boot
from mosoo_core.tables.sessions import SessionRun

PROVIDER_KEY = "sk-proj-Zq8Xn4Lr7TvW2yHc9PbM3kJd6FsG1aQeR5uI0oplabcd"


@dataclass(frozen=True)
class Owner:
    account_id: str
    app_id: str
    agent_id: str


def _owner(db: Session, email: str = "owner@example.com", *, ready: bool = True) -> Owner:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    app_id = identity.list_apps(db, account.id)[0].id
    agent = agents.create_agent(db, account.id, app_id, name="Helper")
    if ready:
        credential = vault.create_provider_credential(
            db,
            account.id,
            app_id,
            vault.ProviderCredentialInput(
                name="P",
                provider="openai_compatible",
                base_url="http://10.0.0.5:8000/v1",
                api_key=PROVIDER_KEY,
                models=["model-a", "model-b", "model-c"],
            ),
        )
        agents.update_agent(
            db,
            account.id,
            app_id,
            agent.id,
            agents.AgentChanges(
                provider_credential_id=credential.id, model="model-a", system_prompt="prompt one"
            ),
        )
    return Owner(account.id, app_id, agent.id)


def _publish(db: Session, owner: Owner, summary: str = "") -> agents.VersionView:
    return agents.publish_agent(db, owner.account_id, owner.app_id, owner.agent_id, summary)


def _edit(db: Session, owner: Owner, **changes: object) -> agents.AgentView:
    return agents.update_agent(
        db, owner.account_id, owner.app_id, owner.agent_id, agents.AgentChanges(**changes)
    )


def _booted_snapshot(db: Session, owner: Owner, thread_id: str) -> dict[str, object]:
    """Send a message on the thread and freeze its run the way the worker does."""
    sent = sessions.send_message(db, owner.account_id, thread_id, "hello")
    plan, events = plan_boot(db, sent.run.id)
    assert plan is not None, events
    run = db.get(SessionRun, sent.run.id)
    assert run is not None
    return run.snapshot


def test_publishing_numbers_versions_one_two_and_marks_the_agent_published(db: Session) -> None:
    owner = _owner(db)
    assert agents.get_agent(db, owner.account_id, owner.app_id, owner.agent_id).status == "draft"
    first = _publish(db, owner, "  first   cut ")
    _edit(db, owner, model="model-b")
    second = _publish(db, owner)
    assert (first.number, first.summary) == (1, "first cut")
    assert (second.number, second.summary) == (2, "")
    assert first.profile["model"] == "model-a" and second.profile["model"] == "model-b"
    view = agents.get_agent(db, owner.account_id, owner.app_id, owner.agent_id)
    assert (view.status, view.published_version) == ("published", 2)
    assert [
        v.number for v in agents.list_versions(db, owner.account_id, owner.app_id, owner.agent_id)
    ] == [2, 1]


def test_a_version_freezes_the_whole_profile(db: Session) -> None:
    owner = _owner(db)
    _edit(db, owner, description="Does things", provider_options={"temperature": 0.2})
    profile = _publish(db, owner).profile
    assert set(profile) == set(PROFILE_FIELDS)
    assert profile["name"] == "Helper" and profile["description"] == "Does things"
    assert profile["runtime"] == "openai" and profile["kind"] == "cattle"
    assert profile["provider_options"] == {"temperature": 0.2}
    assert profile["tools"] == agents.DEFAULT_TOOLS


def test_editing_the_draft_changes_no_published_version(db: Session) -> None:
    owner = _owner(db)
    _edit(db, owner, provider_options={"temperature": 0.2})
    _publish(db, owner)
    _edit(
        db,
        owner,
        name="Renamed",
        model="model-c",
        system_prompt="prompt two",
        tools={"bash": "allow"},
        provider_options={"temperature": 0.9},
    )
    db.expire_all()  # read back from the database, not the identity map
    version = agents.get_version(db, owner.account_id, owner.app_id, owner.agent_id, 1)
    assert version.profile["name"] == "Helper"
    assert version.profile["model"] == "model-a"
    assert version.profile["system_prompt"] == "prompt one"
    assert version.profile["tools"] == agents.DEFAULT_TOOLS
    assert version.profile["provider_options"] == {"temperature": 0.2}


def test_publish_is_refused_while_blockers_stand_and_names_them(db: Session) -> None:
    owner = _owner(db, ready=False)
    with pytest.raises(Conflict, match="Choose a provider key") as refused:
        _publish(db, owner)
    assert "Set the model" in refused.value.message
    assert agents.list_versions(db, owner.account_id, owner.app_id, owner.agent_id) == []
    assert agents.get_agent(db, owner.account_id, owner.app_id, owner.agent_id).status == "draft"


def test_a_summary_over_200_characters_is_refused(db: Session) -> None:
    owner = _owner(db)
    with pytest.raises(InvalidInput) as refused:
        _publish(db, owner, "x" * 201)
    assert refused.value.field == "summary"


@pytest.mark.parametrize(("field", "value"), [("kind", "pet"), ("runtime", "claude")])
def test_kind_and_runtime_are_free_before_the_first_publish_and_locked_after(
    db: Session, field: str, value: str
) -> None:
    owner = _owner(db)
    other = _owner(db, "other@example.com")
    assert getattr(_edit(db, other, **{field: value}), field) == value  # never published: free
    _publish(db, owner)
    with pytest.raises(InvalidInput, match="locked after the first publish") as refused:
        _edit(db, owner, **{field: value})
    assert refused.value.field == field


def test_after_publishing_other_fields_and_unchanged_kind_and_runtime_still_save(
    db: Session,
) -> None:
    owner = _owner(db)
    _publish(db, owner)
    view = _edit(db, owner, name="Renamed", model="model-b", kind="cattle", runtime="openai")
    assert (view.name, view.model) == ("Renamed", "model-b")


def test_the_lock_outlives_unpublishing(db: Session) -> None:
    owner = _owner(db)
    _publish(db, owner)
    agents.unpublish_agent(db, owner.account_id, owner.app_id, owner.agent_id)
    with pytest.raises(InvalidInput, match="locked"):
        _edit(db, owner, kind="pet")


def test_unpublish_returns_to_draft_and_keeps_the_versions(db: Session) -> None:
    owner = _owner(db)
    _publish(db, owner)
    _publish(db, owner)
    view = agents.unpublish_agent(db, owner.account_id, owner.app_id, owner.agent_id)
    assert (view.status, view.published_version) == ("draft", None)
    assert [
        v.number for v in agents.list_versions(db, owner.account_id, owner.app_id, owner.agent_id)
    ] == [2, 1]
    # Publishing again continues the numbering.
    assert _publish(db, owner).number == 3


def test_non_preview_threads_need_a_published_agent(db: Session) -> None:
    owner = _owner(db)
    with pytest.raises(Conflict, match="not published"):
        sessions.create_session(db, owner.account_id, owner.app_id, owner.agent_id, purpose="api")
    _publish(db, owner)
    agents.unpublish_agent(db, owner.account_id, owner.app_id, owner.agent_id)
    with pytest.raises(Conflict, match="not published"):
        sessions.create_session(
            db, owner.account_id, owner.app_id, owner.agent_id, purpose="console"
        )


def test_a_thread_keeps_running_its_version_after_a_newer_one_is_published(db: Session) -> None:
    owner = _owner(db)
    _publish(db, owner)
    _edit(db, owner, model="model-b", system_prompt="prompt two")
    _publish(db, owner)
    thread = sessions.create_session(
        db, owner.account_id, owner.app_id, owner.agent_id, purpose="console"
    )
    assert thread.agent_version == 2
    _edit(db, owner, model="model-c", system_prompt="prompt three")
    _publish(db, owner)

    snapshot = _booted_snapshot(db, owner, thread.id)
    assert (snapshot["model"], snapshot["system_prompt"], snapshot["agent_version"]) == (
        "model-b",
        "prompt two",
        2,
    )
    # A thread started now pins version 3.
    newer = sessions.create_session(
        db, owner.account_id, owner.app_id, owner.agent_id, purpose="api"
    )
    assert _booted_snapshot(db, owner, newer.id)["model"] == "model-c"


def test_preview_threads_run_the_draft(db: Session) -> None:
    owner = _owner(db)
    _publish(db, owner)
    _edit(db, owner, model="model-b", system_prompt="draft prompt")
    thread = sessions.create_session(
        db, owner.account_id, owner.app_id, owner.agent_id, purpose="preview"
    )
    assert thread.agent_version is None
    snapshot = _booted_snapshot(db, owner, thread.id)
    assert (snapshot["model"], snapshot["system_prompt"], snapshot["agent_version"]) == (
        "model-b",
        "draft prompt",
        None,
    )


def test_a_pinned_version_runs_even_while_the_draft_has_blockers(db: Session) -> None:
    owner = _owner(db)
    _publish(db, owner)
    thread = sessions.create_session(
        db, owner.account_id, owner.app_id, owner.agent_id, purpose="api"
    )
    _edit(db, owner, model="")  # the draft is now blocked; version 1 is not
    assert _booted_snapshot(db, owner, thread.id)["model"] == "model-a"


def test_another_owners_agent_is_not_found(db: Session) -> None:
    owner = _owner(db)
    _publish(db, owner)
    intruder = _owner(db, "intruder@example.com")
    calls = [
        lambda: agents.publish_agent(db, intruder.account_id, intruder.app_id, owner.agent_id),
        lambda: agents.unpublish_agent(db, intruder.account_id, intruder.app_id, owner.agent_id),
        lambda: agents.list_versions(db, intruder.account_id, intruder.app_id, owner.agent_id),
        lambda: agents.get_version(db, intruder.account_id, intruder.app_id, owner.agent_id, 1),
        lambda: agents.list_versions(db, intruder.account_id, owner.app_id, owner.agent_id),
    ]
    for call in calls:
        with pytest.raises(NotFound):
            call()
    assert (
        agents.get_agent(db, owner.account_id, owner.app_id, owner.agent_id).published_version == 1
    )


def test_an_unknown_version_is_not_found(db: Session) -> None:
    owner = _owner(db)
    _publish(db, owner)
    with pytest.raises(NotFound, match="Version not found"):
        agents.get_version(db, owner.account_id, owner.app_id, owner.agent_id, 2)
