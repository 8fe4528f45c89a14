"""Applying pending changes to a Pet sandbox: the changed fields are computed from the label the
sandbox was built with; Apply is refused while a run is active, checkpoints /workspace,
removes the sandbox and the next run's sandbox gets the workspace back; a failed checkpoint
keeps the old sandbox and says why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import agents, environments, sessions
from mosoo_core.errors import Conflict
from mosoo_core.files import get_store
from mosoo_core.identity import list_apps, sign_in_identity
from mosoo_core.runtime import runs
from mosoo_core.runtime.pets import apply_pet_changes, pet_sandbox_status
from mosoo_core.runtime.sandbox import LABEL_SUBJECT, WORKSPACE, SandboxBackend, SandboxRef
from mosoo_core.sessions import driver_plane
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.sessions import DriverInstance
from tests.integration.sandbox.conftest import MakeSandbox

SKILL = "01SKILLCHANGELOG0000000000"


@pytest.fixture
def pet(engine: Engine) -> Iterator[tuple[str, str, str]]:
    """(account_id, app_id, agent_id) of a Pet Agent that has had a driver."""
    with Session(engine) as db:
        account = sign_in_identity(
            db, provider="email", subject="pet@example.com", email="pet@example.com"
        )
        app_id = list_apps(db, account.id)[0].id
        agent = agents.create_agent(db, account.id, app_id, name="Keeper", kind="pet")
        driver_plane.register_driver(
            db, app_id=app_id, subject=f"agent:{agent.id}", runtime="openai"
        )
        ids = (account.id, app_id, agent.id)
        db.commit()
    yield ids


def _profile(engine: Engine, pet: tuple[str, str, str]) -> agents.AgentView:
    with Session(engine) as db:
        return agents.get_agent(db, *pet)


def _pet_sandbox_fingerprint(engine: Engine, pet: tuple[str, str, str]) -> str:
    """What a run labels a new Pet sandbox with: the profile and its environment's current
    revision."""
    profile = _profile(engine, pet)
    with Session(engine) as db:
        revision_id = environments.revision_for_thread(
            db, profile.app_id, profile.environment_id
        ).id
        db.commit()
    return agents.sandbox_fingerprint(profile, revision_id)


def _pet_sandbox(
    make_sandbox: MakeSandbox, engine: Engine, pet: tuple[str, str, str]
) -> SandboxRef:
    """The Pet sandbox as a run creates it: labelled with what it was built from."""
    built_from = _pet_sandbox_fingerprint(engine, pet)
    return make_sandbox(
        subject=f"agent:{pet[2]}",
        labels={**runs.installation_label(), runs.LABEL_BUILT_FROM: built_from},
    )


def _pets(backend: SandboxBackend, agent_id: str) -> list[SandboxRef]:
    return backend.list_by_label({LABEL_SUBJECT: f"agent:{agent_id}", **runs.installation_label()})


def test_apply_recreates_the_sandbox_with_the_workspace_restored(
    backend: SandboxBackend,
    make_sandbox: MakeSandbox,
    engine: Engine,
    pet: tuple[str, str, str],
    echo_socket: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    account_id, app_id, agent_id = pet
    old = _pet_sandbox(make_sandbox, engine, pet)
    backend.put_file(old, f"{WORKSPACE}/notes.md", b"remember the milk\n", mode=0o644)
    assert pet_sandbox_status(*pet, backend=backend).pending == []

    with Session(engine) as db:
        agents.update_agent(db, *pet, agents.AgentChanges(skills=[SKILL], model="changed-model"))
        db.commit()
    status = pet_sandbox_status(*pet, backend=backend)
    assert status.exists and status.pending == ["skills"]  # the model needs no Apply

    assert apply_pet_changes(*pet, backend=backend) == "recreated"

    assert _pets(backend, agent_id) == []
    assert get_store().exists(runs.pet_checkpoint_key(app_id, agent_id))
    with Session(engine) as db:
        assert all(d.status == "stopped" for d in db.query(DriverInstance).all())

    # The next run creates the sandbox from the current profile, workspace restored.
    monkeypatch.setenv("MOSOO_CONTROL_SOCKET", str(echo_socket))
    reset_settings_cache()
    plan = runs.BootPlan(
        run_id="r",
        session_id="s",
        app_id=app_id,
        agent_id=agent_id,
        kind="pet",
        subject=f"agent:{agent_id}",
        instance_id="01NEWDRIVER000000000000000",
        payload_json="{}",
        built_from=_pet_sandbox_fingerprint(engine, pet),
    )
    fresh, created = runs.sandbox_for(backend, plan)
    assert created
    try:
        assert fresh.id != old.id
        result = backend.exec(fresh, ["cat", f"{WORKSPACE}/notes.md"])
        assert result.stdout == b"remember the milk\n"
        assert not get_store().exists(runs.pet_checkpoint_key(app_id, agent_id))
        status = pet_sandbox_status(*pet, backend=backend)
        assert status.exists and status.pending == []
        assert account_id
    finally:
        backend.remove(fresh)


def test_apply_is_refused_while_a_run_is_active_and_the_sandbox_stays(
    backend: SandboxBackend,
    make_sandbox: MakeSandbox,
    engine: Engine,
    pet: tuple[str, str, str],
) -> None:
    account_id, app_id, agent_id = pet
    with Session(engine) as db:
        thread = sessions.create_session(db, account_id, app_id, agent_id, purpose="preview")
        sessions.send_message(db, account_id, thread.id, "still thinking")  # queued: active
        db.commit()
    old = _pet_sandbox(make_sandbox, engine, pet)

    with pytest.raises(Conflict, match="run is in progress"):
        apply_pet_changes(*pet, backend=backend)

    assert [ref.id for ref in _pets(backend, agent_id)] == [old.id]


def test_a_failed_checkpoint_keeps_the_old_sandbox_and_says_why(
    backend: SandboxBackend,
    make_sandbox: MakeSandbox,
    engine: Engine,
    pet: tuple[str, str, str],
) -> None:
    _account_id, app_id, agent_id = pet
    old = _pet_sandbox(make_sandbox, engine, pet)
    # A directory the sandbox user cannot read: tar fails, so there is no good checkpoint.
    made = backend.exec(old, ["sh", "-c", "mkdir locked && echo x > locked/f && chmod 000 locked"])
    assert made.exit_code == 0, made.stderr_text

    with pytest.raises(Conflict, match="could not be saved, so the sandbox was kept"):
        apply_pet_changes(*pet, backend=backend)

    assert [ref.id for ref in _pets(backend, agent_id)] == [old.id]
    assert not get_store().exists(runs.pet_checkpoint_key(app_id, agent_id))


def test_without_a_sandbox_there_is_nothing_pending_and_nothing_to_apply(
    backend: SandboxBackend, engine: Engine, pet: tuple[str, str, str]
) -> None:
    assert pet_sandbox_status(*pet, backend=backend).exists is False
    assert apply_pet_changes(*pet, backend=backend) == "none"


def test_a_new_revision_of_the_environment_is_pending_until_apply(
    backend: SandboxBackend,
    make_sandbox: MakeSandbox,
    engine: Engine,
    pet: tuple[str, str, str],
) -> None:
    account_id, app_id, _ = pet
    _pet_sandbox(make_sandbox, engine, pet)
    assert pet_sandbox_status(*pet, backend=backend).pending == []
    with Session(engine) as db:
        default = environments.default_environment(db, app_id)
        environments.update_environment(
            db,
            account_id,
            app_id,
            default.id,
            environments.EnvironmentChanges(setup_script="echo new tools"),
        )
        db.commit()
    assert pet_sandbox_status(*pet, backend=backend).pending == ["environment_id"]
