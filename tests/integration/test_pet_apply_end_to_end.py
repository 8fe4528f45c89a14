"""Applying a pending change to an Assistant (Pet) with real runs: the first run writes to
/workspace in the Agent's sandbox, a skill binding makes that sandbox stale, Apply recreates
it, and the next run works in a fresh sandbox built from the current profile with the file
still there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import agents
from mosoo_core.runtime import runs
from mosoo_core.runtime.pets import apply_pet_changes, pet_sandbox_status
from mosoo_core.runtime.sandbox import LABEL_SUBJECT, get_backend
from mosoo_core.sessions import driver_plane
from tests.support.openai_server import TextTurn, ToolCall, ToolCallsTurn
from tests.support.redis_db import db_number
from tests.support.stack import RuntimeStack, make_agent, new_thread, runtime_stack, send, wait_run

pytestmark = pytest.mark.integration
REDIS_DB = db_number(7)
PROVIDER_KEY = "sk-pet-apply-TOPSECRET-1a2b3c4d"
SKILL = "01SKILLCHANGELOG0000000000"


@pytest.fixture
def stack(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RuntimeStack]:
    with runtime_stack(engine, database_url, tmp_path, monkeypatch, redis_db=REDIS_DB) as stack:
        yield stack


def test_apply_recreates_the_pet_sandbox_and_the_next_run_finds_its_workspace(
    stack: RuntimeStack,
) -> None:
    stack.model.add(
        ToolCallsTurn([ToolCall("bash", {"command": "echo remembered > notes.txt"})]),
        TextTurn("Written."),
        ToolCallsTurn([ToolCall("bash", {"command": "cat notes.txt"})]),
        TextTurn("It says remembered."),
    )
    owner = make_agent(stack.engine, stack.model.base_url, PROVIDER_KEY, kind="pet")
    ids = (owner.account_id, owner.app_id, owner.agent_id)
    thread_id = new_thread(stack.engine, owner)
    first = wait_run(stack.engine, send(stack.engine, owner.account_id, thread_id, "write a note"))
    assert first.status == "completed", (first.error_code, first.error_message)
    backend = get_backend()
    selector = {LABEL_SUBJECT: f"agent:{owner.agent_id}", **runs.installation_label()}
    [before] = backend.list_by_label(selector)
    assert pet_sandbox_status(*ids).pending == []

    with Session(stack.engine) as db:
        agents.update_agent(db, *ids, agents.AgentChanges(skills=[SKILL]))
        db.commit()
    assert pet_sandbox_status(*ids).pending == ["skills"]

    assert apply_pet_changes(*ids) == "recreated"
    assert backend.list_by_label(selector) == []

    second = wait_run(stack.engine, send(stack.engine, owner.account_id, thread_id, "read it back"))
    assert second.status == "completed", (second.error_code, second.error_message)
    with Session(stack.engine) as db:
        outputs = [
            e.payload["output"]
            for e in driver_plane.read_events(db, thread_id, limit=1000)
            if e.type == "tool.use.completed"
        ]
    assert outputs[-1].strip() == "remembered"
    [after] = backend.list_by_label(selector)
    assert after.id != before.id
    status = pet_sandbox_status(*ids)
    assert status.exists and status.pending == []
