"""Pet sandbox operations, the refusals and the record: another owner's Agent is not found
(and nothing is recorded), a Task has no sandbox, a reset needs the Agent's name, nothing is
done while a run is active, and every attempt is in the Agent's operations, newest first.
What the operations do to a real sandbox: tests/integration/test_pet_operations.py."""

from __future__ import annotations

import io

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import agents, sessions
from mosoo_core.errors import Conflict, InvalidInput, NotFound
from mosoo_core.files import get_store
from mosoo_core.identity import list_apps, sign_in_identity
from mosoo_core.runtime import pet_operations, runs
from mosoo_core.tables.pets import PetOperation


def _owner(engine: Engine, email: str, kind: str = "pet") -> tuple[str, str, str]:
    """(account_id, app_id, agent_id) of a new account's Agent named "Keeper"."""
    with Session(engine) as db:
        account = sign_in_identity(db, provider="email", subject=email, email=email)
        app_id = list_apps(db, account.id)[0].id
        agent = agents.create_agent(db, account.id, app_id, name="Keeper", kind=kind)
        db.commit()
        return account.id, app_id, agent.id


def _records(engine: Engine) -> list[tuple[str, str]]:
    with Session(engine) as db:
        return [(r.operation, r.outcome) for r in db.exec(select(PetOperation)).all()]


def test_another_owners_agent_is_not_found_and_nothing_is_recorded(engine: Engine) -> None:
    _, _, agent_id = _owner(engine, "mine@example.com")
    intruder, _, _ = _owner(engine, "theirs@example.com")
    for operation in pet_operations.OPERATIONS:
        with pytest.raises(NotFound):
            pet_operations.run_operation(intruder, agent_id, operation, confirm_name="Keeper")
    with Session(engine) as db, pytest.raises(NotFound):
        pet_operations.sandbox_status(db, intruder, agent_id)
    with Session(engine) as db, pytest.raises(NotFound):
        pet_operations.list_operations(db, intruder, agent_id)
    assert _records(engine) == []


def test_a_task_has_no_sandbox_to_operate(engine: Engine) -> None:
    account_id, _, agent_id = _owner(engine, "task@example.com", kind="cattle")
    with pytest.raises(Conflict, match="Only an Assistant has a sandbox"):
        pet_operations.run_operation(account_id, agent_id, "restart")
    with Session(engine) as db, pytest.raises(Conflict, match="Only an Assistant"):
        pet_operations.sandbox_status(db, account_id, agent_id)


def test_reset_without_the_agents_name_is_refused_and_recorded(engine: Engine) -> None:
    account_id, _, agent_id = _owner(engine, "reset@example.com")
    with pytest.raises(InvalidInput) as refused:
        pet_operations.run_operation(account_id, agent_id, "reset", confirm_name="keeper")
    assert refused.value.field == "confirm_name"
    with Session(engine) as db:
        [record] = pet_operations.list_operations(db, account_id, agent_id)
    assert (record.operation, record.outcome, record.account_id) == ("reset", "refused", account_id)
    assert "name" in record.error


def test_an_unknown_operation_names_its_field(engine: Engine) -> None:
    account_id, _, agent_id = _owner(engine, "unknown@example.com")
    with pytest.raises(InvalidInput) as refused:
        pet_operations.run_operation(account_id, agent_id, "reboot")
    assert refused.value.field == "operation"


def test_every_operation_is_refused_while_a_run_is_active(engine: Engine) -> None:
    account_id, app_id, agent_id = _owner(engine, "busy@example.com")
    with Session(engine) as db:
        thread = sessions.create_session(db, account_id, app_id, agent_id, purpose="preview")
        sessions.send_message(db, account_id, thread.id, "still thinking")  # queued: active
        db.commit()
    for operation in pet_operations.OPERATIONS:
        with pytest.raises(Conflict, match="A run is in progress"):
            pet_operations.run_operation(account_id, agent_id, operation, confirm_name="Keeper")
    assert sorted(_records(engine)) == sorted(
        (operation, "refused") for operation in pet_operations.OPERATIONS
    )


def test_status_is_none_then_hibernated_while_a_workspace_is_saved_and_reset_wipes_it(
    engine: Engine,
) -> None:
    account_id, app_id, agent_id = _owner(engine, "status@example.com")
    with Session(engine) as db:
        assert pet_operations.sandbox_status(db, account_id, agent_id).state == "none"
    key = runs.pet_checkpoint_key(app_id, agent_id)
    get_store().put(key, io.BytesIO(b"a saved workspace"))
    with Session(engine) as db:
        status = pet_operations.sandbox_status(db, account_id, agent_id)
    assert (status.state, status.sandbox_id, status.uptime_seconds) == ("hibernated", "", None)

    result = pet_operations.run_operation(account_id, agent_id, "reset", confirm_name="Keeper")

    assert "wiped" in result.message
    assert not get_store().exists(key)
    with Session(engine) as db:
        assert pet_operations.sandbox_status(db, account_id, agent_id).state == "none"
        [record] = pet_operations.list_operations(db, account_id, agent_id)
    assert (record.operation, record.outcome, record.error) == ("reset", "done", "")


def test_waking_without_a_saved_workspace_is_refused_and_the_log_is_newest_first(
    engine: Engine,
) -> None:
    account_id, _, agent_id = _owner(engine, "wake@example.com")
    pet_operations.run_operation(account_id, agent_id, "reset", confirm_name="Keeper")
    with pytest.raises(Conflict, match="nothing to wake"):
        pet_operations.run_operation(account_id, agent_id, "wake")
    with Session(engine) as db:
        log = pet_operations.list_operations(db, account_id, agent_id)
    assert [(r.operation, r.outcome) for r in log] == [("wake", "refused"), ("reset", "done")]
