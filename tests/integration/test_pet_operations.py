"""Pet sandbox operations on the real stack (control, worker, driver, Docker): a first run
writes /workspace/notes.txt and /workspace/memory/facts.md in the Assistant's sandbox; restart
keeps the container and its files; a recreate whose checkpoint fails keeps the old sandbox and
says why; recreate builds a new container with the workspace back; hibernate removes the
container and wake brings it back with the files; reset wipes the sandbox and its saved
workspace but keeps the threads and usage; nothing is done while a run is active."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from mosoo_core.errors import Conflict
from mosoo_core.files import get_store
from mosoo_core.runtime import pet_operations, runs
from mosoo_core.runtime.pets import pet_sandboxes
from mosoo_core.runtime.sandbox import SandboxBackend, SandboxRef, get_backend
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.sessions import AgentSession, SessionRun
from mosoo_core.tables.usage import UsageEvent
from tests.support.openai_server import TextTurn, ToolCall, ToolCallsTurn
from tests.support.processes import wait_for
from tests.support.redis_db import db_number
from tests.support.stack import (
    Owner,
    RuntimeStack,
    make_agent,
    new_thread,
    runtime_stack,
    send,
    wait_run,
)

pytestmark = pytest.mark.integration
REDIS_DB = db_number(2)  # shared with test_environment_setup.py: runtime_stack flushes it first
PROVIDER_KEY = "sk-pet-ops-TOPSECRET-5e6f7a8b"
WRITE_FILES = "mkdir -p memory && echo milk > memory/facts.md && echo draft > notes.txt"


@pytest.fixture
def stack(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RuntimeStack]:
    with runtime_stack(engine, database_url, tmp_path, monkeypatch, redis_db=REDIS_DB) as stack:
        yield stack


def _first_run(stack: RuntimeStack, command: str = WRITE_FILES) -> tuple[Owner, str]:
    """An Assistant whose first run ran `command` in its sandbox; (owner, thread id)."""
    stack.model.add(ToolCallsTurn([ToolCall("bash", {"command": command})]), TextTurn("Done."))
    owner = make_agent(stack.engine, stack.model.base_url, PROVIDER_KEY, kind="pet")
    thread_id = new_thread(stack.engine, owner)
    run = wait_run(stack.engine, send(stack.engine, owner.account_id, thread_id, "go"))
    assert run.status == "completed", (run.error_code, run.error_message)
    return owner, thread_id


def _sandbox(backend: SandboxBackend, owner: Owner) -> SandboxRef:
    [ref] = pet_sandboxes(backend, owner.agent_id)
    return ref


def _read(backend: SandboxBackend, ref: SandboxRef, path: str) -> str:
    result = backend.exec(ref, ["cat", path])
    assert result.exit_code == 0, result.stderr_text
    return result.stdout_text


def _state(engine: Engine, owner: Owner) -> pet_operations.SandboxStatus:
    with Session(engine) as db:
        return pet_operations.sandbox_status(db, owner.account_id, owner.agent_id)


def _operate(owner: Owner, operation: str, **options: str) -> pet_operations.OperationResult:
    return pet_operations.run_operation(owner.account_id, owner.agent_id, operation, **options)


def test_restart_recreate_hibernate_and_wake_keep_the_workspace(stack: RuntimeStack) -> None:
    owner, _ = _first_run(stack)
    backend = get_backend()
    first = _sandbox(backend, owner)
    status = _state(stack.engine, owner)
    assert status.state == "running" and status.sandbox_id == first.id
    assert status.image and status.uptime_seconds is not None and status.memory_bytes
    assert status.cpu_percent is not None

    timings = {"restart": _operate(owner, "restart").seconds}
    assert _sandbox(backend, owner).id == first.id
    assert _read(backend, first, "/workspace/notes.txt") == "draft\n"

    # A folder the sandbox user cannot read: tar fails, so there is no good checkpoint.
    locked = backend.exec(first, ["sh", "-c", "mkdir locked && chmod 000 locked"])
    assert locked.exit_code == 0, locked.stderr_text
    with pytest.raises(Conflict, match="could not be saved, so the sandbox was kept"):
        _operate(owner, "recreate")
    assert _sandbox(backend, owner).id == first.id
    assert _read(backend, first, "/workspace/memory/facts.md") == "milk\n"
    backend.exec(first, ["sh", "-c", "chmod 700 locked && rmdir locked"])

    timings["recreate"] = _operate(owner, "recreate").seconds
    second = _sandbox(backend, owner)
    assert second.id != first.id
    assert _read(backend, second, "/workspace/memory/facts.md") == "milk\n"
    assert _read(backend, second, "/workspace/notes.txt") == "draft\n"

    timings["hibernate"] = _operate(owner, "hibernate").seconds
    assert pet_sandboxes(backend, owner.agent_id) == []
    assert _state(stack.engine, owner).state == "hibernated"

    timings["wake"] = _operate(owner, "wake").seconds
    third = _sandbox(backend, owner)
    assert third.id != second.id
    assert _read(backend, third, "/workspace/memory/facts.md") == "milk\n"
    assert _state(stack.engine, owner).state == "running"
    with Session(stack.engine) as db:
        log = pet_operations.list_operations(db, owner.account_id, owner.agent_id)
    assert [(r.operation, r.outcome) for r in reversed(log)] == [
        ("restart", "done"),
        ("recreate", "failed"),
        ("recreate", "done"),
        ("hibernate", "done"),
        ("wake", "done"),
    ]
    assert "Permission denied" in log[3].error
    print("pet operation seconds:", timings)


def test_reset_wipes_the_workspace_and_keeps_the_threads_and_usage(stack: RuntimeStack) -> None:
    owner, thread_id = _first_run(stack)
    backend = get_backend()
    _operate(owner, "hibernate")  # a saved workspace too, which reset must wipe
    _operate(owner, "wake")

    _operate(owner, "reset", confirm_name="E2E pet")

    assert pet_sandboxes(backend, owner.agent_id) == []
    assert not get_store().exists(runs.pet_checkpoint_key(owner.app_id, owner.agent_id))
    with Session(stack.engine) as db:
        assert db.get(AgentSession, thread_id) is not None
        assert db.exec(select(UsageEvent).where(UsageEvent.agent_id == owner.agent_id)).all()
    # The next message starts in a fresh workspace: what the first run wrote is gone.
    stack.model.add(
        ToolCallsTurn([ToolCall("bash", {"command": "ls -A /workspace"})]),
        TextTurn("Counted."),
    )
    run = wait_run(stack.engine, send(stack.engine, owner.account_id, thread_id, "count"))
    assert run.status == "completed", (run.error_code, run.error_message)
    with Session(stack.engine) as db:
        outputs = [
            e.payload["output"]
            for e in driver_plane.read_events(db, thread_id, limit=1000)
            if e.type == "tool.use.completed"
        ]
    assert "notes.txt" not in outputs[-1] and "memory" not in outputs[-1], outputs[-1]


def test_every_operation_is_refused_while_a_run_is_active(stack: RuntimeStack) -> None:
    owner, thread_id = _first_run(stack, "echo first")
    backend = get_backend()
    before = _sandbox(backend, owner)
    stack.model.add(ToolCallsTurn([ToolCall("bash", {"command": "sleep 8"})]), TextTurn("Slept."))
    run_id = send(stack.engine, owner.account_id, thread_id, "sleep")

    def running() -> bool:
        with Session(stack.engine) as db:
            return (
                db.exec(
                    select(SessionRun.id).where(
                        SessionRun.id == run_id, col(SessionRun.status) == "running"
                    )
                ).first()
                is not None
            )

    wait_for(running, 60, "the run to be running")
    for operation in pet_operations.OPERATIONS:
        with pytest.raises(Conflict, match="A run is in progress"):
            _operate(owner, operation, confirm_name="E2E pet")
    assert _sandbox(backend, owner).id == before.id
    finished = wait_run(stack.engine, run_id)
    assert finished.status == "completed", (finished.error_code, finished.error_message)
    assert _sandbox(backend, owner).id == before.id
