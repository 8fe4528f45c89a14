"""Deleting and forking Agents: a delete takes the threads, events, runs, versions and
checkpoints with it and nothing of another Agent; a fork is a fresh draft of the profile."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlmodel import Session, select

from mosoo_core import agents, identity, sessions, vault
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_core.files import get_store
from mosoo_core.runtime.runs import checkpoint_key, delete_agent_everywhere
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.agents import Agent, AgentVersion
from mosoo_core.tables.sessions import AgentSession, DriverInstance, SessionEvent, SessionRun


def _owner(db: Session, email: str = "owner@example.com") -> tuple[str, str]:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    return account.id, identity.list_apps(db, account.id)[0].id


def _ready_agent(
    db: Session, account_id: str, app_id: str, name: str = "Release notes writer"
) -> agents.AgentView:
    credential = vault.create_provider_credential(
        db,
        account_id,
        app_id,
        vault.ProviderCredentialInput(
            name=f"Key for {name}",
            provider="openai_compatible",
            base_url="https://llm.example.com/v1",
            api_key="sk-proj-Zq8Xn4Lr7TvW2yHc9PbM3kJd6FsG1aQeR5uI0oplabcd",
            models=["example-large"],
        ),
    )
    created = agents.create_agent(db, account_id, app_id, name=name, kind="pet")
    return agents.update_agent(
        db,
        account_id,
        app_id,
        created.id,
        agents.AgentChanges(
            description="Drafts release notes.",
            model="example-large",
            system_prompt="Be accurate.",
            tools={"read": "allow", "bash": "ask"},
            provider_options={"temperature": 0.2},
            provider_credential_id=credential.id,
        ),
    )


def _thread_with_a_run(db: Session, account_id: str, app_id: str, agent_id: str) -> str:
    thread = sessions.create_session(db, account_id, app_id, agent_id)
    sessions.send_message(db, account_id, thread.id, "Summarise the last release.")
    return thread.id


def _count(db: Session, model: Any, *where: Any) -> int:
    return len(db.exec(select(model).where(*where)).all())


def test_delete_cascades_threads_events_runs_and_versions_and_leaves_other_agents(
    db: Session,
) -> None:
    account_id, app_id = _owner(db)
    doomed = _ready_agent(db, account_id, app_id)
    kept = _ready_agent(db, account_id, app_id, name="Kept")
    agents.publish_agent(db, account_id, app_id, doomed.id)
    agents.publish_agent(db, account_id, app_id, kept.id)
    doomed_threads = [_thread_with_a_run(db, account_id, app_id, doomed.id) for _ in range(2)]
    kept_thread = _thread_with_a_run(db, account_id, app_id, kept.id)
    db.commit()

    deleted = agents.delete_agent(db, account_id, app_id, doomed.id)
    db.commit()

    assert sorted(deleted.thread_ids) == sorted(doomed_threads)
    assert deleted.subject == f"agent:{doomed.id}"
    db.expunge_all()
    assert db.get(Agent, doomed.id) is None
    assert _count(db, AgentSession, AgentSession.agent_id == doomed.id) == 0
    for thread_id in doomed_threads:
        assert _count(db, SessionEvent, SessionEvent.session_id == thread_id) == 0
        assert _count(db, SessionRun, SessionRun.session_id == thread_id) == 0
    assert _count(db, AgentVersion, AgentVersion.agent_id == doomed.id) == 0
    # The other Agent keeps everything.
    assert db.get(Agent, kept.id) is not None
    assert _count(db, AgentSession, AgentSession.id == kept_thread) == 1
    assert _count(db, SessionEvent, SessionEvent.session_id == kept_thread) > 0
    assert _count(db, SessionRun, SessionRun.session_id == kept_thread) == 1
    assert _count(db, AgentVersion, AgentVersion.agent_id == kept.id) == 1


def test_delete_stops_the_live_drivers_of_its_threads(db: Session) -> None:
    account_id, app_id = _owner(db)
    agent = _ready_agent(db, account_id, app_id)
    thread_id = _thread_with_a_run(db, account_id, app_id, agent.id)
    driver = driver_plane.register_driver(
        db, app_id=app_id, subject=f"agent:{agent.id}", runtime="openai", session_id=thread_id
    )
    db.commit()

    deleted = agents.delete_agent(db, account_id, app_id, agent.id)
    db.commit()

    assert deleted.had_sandboxes
    assert deleted.driver_instance_ids == [driver.instance_id]
    db.expunge_all()
    instance = db.get(DriverInstance, driver.instance_id)
    assert instance is not None and instance.status == "stopped"


def test_delete_everywhere_removes_the_checkpoints_of_its_threads_only(db: Session) -> None:
    account_id, app_id = _owner(db)
    doomed = _ready_agent(db, account_id, app_id)
    kept = _ready_agent(db, account_id, app_id, name="Kept")
    doomed_thread = _thread_with_a_run(db, account_id, app_id, doomed.id)
    kept_thread = _thread_with_a_run(db, account_id, app_id, kept.id)
    db.commit()
    store = get_store()
    store.put(checkpoint_key(app_id, doomed_thread), io.BytesIO(b"doomed workspace"))
    store.put(checkpoint_key(app_id, kept_thread), io.BytesIO(b"kept workspace"))

    deleted = delete_agent_everywhere(account_id, app_id, doomed.id)

    assert deleted.thread_ids == [doomed_thread]
    assert not store.exists(checkpoint_key(app_id, doomed_thread))
    assert store.exists(checkpoint_key(app_id, kept_thread))
    db.expunge_all()
    assert db.get(Agent, doomed.id) is None
    assert db.get(Agent, kept.id) is not None


def test_another_owners_agent_is_not_found_for_delete_and_fork(db: Session) -> None:
    account_id, app_id = _owner(db)
    agent = _ready_agent(db, account_id, app_id)
    stranger_id, stranger_app_id = _owner(db, "stranger@example.com")
    db.commit()

    for call in (agents.delete_agent, agents.fork_agent):
        with pytest.raises(NotFound):
            call(db, stranger_id, app_id, agent.id)
        with pytest.raises(NotFound):
            call(db, stranger_id, stranger_app_id, agent.id)
    with pytest.raises(NotFound):
        delete_agent_everywhere(stranger_id, stranger_app_id, agent.id)
    db.expunge_all()
    assert db.get(Agent, agent.id) is not None
    assert len(agents.list_agents(db, stranger_id, stranger_app_id)) == 0


def test_fork_copies_the_profile_as_a_draft_without_versions_or_threads(db: Session) -> None:
    account_id, app_id = _owner(db)
    source = _ready_agent(db, account_id, app_id)
    agents.publish_agent(db, account_id, app_id, source.id)
    _thread_with_a_run(db, account_id, app_id, source.id)

    fork = agents.fork_agent(db, account_id, app_id, source.id)

    assert fork.id != source.id
    assert fork.name == "Release notes writer (copy)"
    assert fork.status == "draft" and fork.published_version is None
    for name in (
        "description",
        "runtime",
        "kind",
        "provider_credential_id",
        "model",
        "system_prompt",
        "tools",
        "provider_options",
    ):
        assert getattr(fork, name) == getattr(source, name), name
    assert agents.list_versions(db, account_id, app_id, fork.id) == []
    assert _count(db, AgentSession, AgentSession.agent_id == fork.id) == 0
    assert agents.count_threads(db, account_id, app_id, source.id) == 1
    # The copy is its own: changing it leaves the original alone, and kind is free again.
    agents.update_agent(
        db, account_id, app_id, fork.id, agents.AgentChanges(tools={"read": "allow"}, kind="cattle")
    )
    assert agents.get_agent(db, account_id, app_id, source.id).tools == {
        "read": "allow",
        "bash": "ask",
    }


def test_fork_of_a_long_name_stays_within_the_limit(db: Session) -> None:
    account_id, app_id = _owner(db)
    source = agents.create_agent(db, account_id, app_id, name="n" * 80)

    fork = agents.fork_agent(db, account_id, app_id, source.id)

    assert len(fork.name) == 80
    assert fork.name.endswith(" (copy)")


def test_provider_options_are_validated_and_only_good_values_are_saved(db: Session) -> None:
    account_id, app_id = _owner(db)
    agent = _ready_agent(db, account_id, app_id)
    saved = agents.update_agent(
        db,
        account_id,
        app_id,
        agent.id,
        agents.AgentChanges(
            provider_options={
                "temperature": 1.5,
                "max_tokens": 4096,
                "reasoning_effort": "high",
                "seed": 7,
            }
        ),
    )
    assert saved.provider_options == {
        "temperature": 1.5,
        "max_tokens": 4096,
        "reasoning_effort": "high",
        "seed": 7,
    }
    # A None value removes the key; the edges of each range are allowed.
    saved = agents.update_agent(
        db,
        account_id,
        app_id,
        agent.id,
        agents.AgentChanges(
            provider_options={
                "temperature": 0,
                "max_tokens": 200_000,
                "reasoning_effort": None,
                "seed": 7,
            }
        ),
    )
    assert saved.provider_options == {"temperature": 0, "max_tokens": 200_000, "seed": 7}
    db.commit()

    for bad in (
        {"temperature": 2.5},
        {"temperature": -0.1},
        {"temperature": "hot"},
        {"temperature": True},
        {"max_tokens": 0},
        {"max_tokens": 200_001},
        {"max_tokens": 1.5},
        {"reasoning_effort": "extreme"},
    ):
        with pytest.raises(InvalidInput) as refused:
            agents.update_agent(
                db,
                account_id,
                app_id,
                agent.id,
                agents.AgentChanges(description="Changed.", provider_options=bad),
            )
        assert refused.value.field == "provider_options"
        db.rollback()
    db.expunge_all()
    kept = agents.get_agent(db, account_id, app_id, agent.id)
    assert kept.provider_options == {"temperature": 0, "max_tokens": 200_000, "seed": 7}
    assert kept.description == "Drafts release notes."


def test_last_activity_is_the_newest_thread_update_else_the_agent_update(db: Session) -> None:
    account_id, app_id = _owner(db)
    busy = _ready_agent(db, account_id, app_id)
    quiet = _ready_agent(db, account_id, app_id, name="Quiet")
    older, newer = (sessions.create_session(db, account_id, app_id, busy.id) for _ in range(2))
    base = datetime(2030, 1, 1, tzinfo=UTC)
    for thread_id, when in ((older.id, base), (newer.id, base + timedelta(hours=2))):
        row = db.get(AgentSession, thread_id)
        assert row is not None
        row.updated_at = when
        db.add(row)
    db.commit()

    activity = agents.last_activity_by_agent(db, account_id, app_id)
    assert activity == {busy.id: base + timedelta(hours=2), quiet.id: quiet.updated_at}

    stranger_id, stranger_app_id = _owner(db, "stranger@example.com")
    with pytest.raises(NotFound):
        agents.last_activity_by_agent(db, stranger_id, app_id)
    assert agents.last_activity_by_agent(db, stranger_id, stranger_app_id) == {}
