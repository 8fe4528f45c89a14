"""Idle hibernation on the real stack (control, worker, driver, Docker), with a 3-second idle
time: an Assistant's first run writes /workspace/notes.txt; the beat's task, called here as
the beat would call it, leaves the sandbox alone before the idle time; a save that fails keeps
the sandbox, is recorded and is not tried again before another idle time; then it saves the
workspace, removes the container and records it as the system's; the next message wakes the
Assistant, its thread saying so before the answer, and finds the file still there; three more
messages sent during the wake wait their turn and are answered in order (the prompt queue)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import tasks
from mosoo_core.clock import utcnow
from mosoo_core.files import get_store
from mosoo_core.runtime import pet_idle, pet_operations, runs
from mosoo_core.runtime.pets import pet_sandboxes
from mosoo_core.runtime.sandbox import get_backend
from mosoo_core.sessions import actions, driver_plane
from mosoo_core.settings import get_settings
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
REDIS_DB = db_number(2)  # shared with test_pet_operations.py: runtime_stack flushes it first
PROVIDER_KEY = "sk-pet-idle-TOPSECRET-9a8b7c6d"
LATER = ("two", "three", "four")  # sent while the Assistant wakes


@pytest.fixture
def stack(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RuntimeStack]:
    with runtime_stack(
        engine,
        database_url,
        tmp_path,
        monkeypatch,
        redis_db=REDIS_DB,
        extra_env={"MOSOO_PET_IDLE_MINUTES": "0.05"},
    ) as stack:
        yield stack


def _waking(stack: RuntimeStack, thread_id: str, run_id: str) -> bool:
    """The run's "Waking the assistant…" is in its thread (its sandbox is being built)."""
    with Session(stack.engine) as db:
        return any(
            e.type == "run.preparing" and e.run_id == run_id
            for e in driver_plane.read_events(db, thread_id)
        )


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    content = next(m["content"] for m in reversed(messages) if m.get("role") == "user")
    return content if isinstance(content, str) else str(content)


def _operations(stack: RuntimeStack, owner: Owner) -> list[pet_operations.OperationRecord]:
    with Session(stack.engine) as db:
        return pet_operations.list_operations(db, owner.account_id, owner.agent_id)


def test_an_idle_assistant_is_hibernated_and_a_message_wakes_it_with_its_files_and_three_sent_during_the_wake_are_answered_in_order(
    stack: RuntimeStack,
) -> None:
    stack.model.add(
        ToolCallsTurn([ToolCall("bash", {"command": "echo milk > /workspace/notes.txt"})]),
        TextTurn("Noted."),
    )
    owner = make_agent(stack.engine, stack.model.base_url, PROVIDER_KEY, kind="pet")
    thread_id = new_thread(stack.engine, owner)
    first = wait_run(stack.engine, send(stack.engine, owner.account_id, thread_id, "remember"))
    assert first.status == "completed", (first.error_code, first.error_message)
    assert first.finished_at is not None
    backend = get_backend()
    [sandbox] = pet_sandboxes(backend, owner.agent_id)

    idle = timedelta(minutes=get_settings().pet_idle_minutes)
    # Within the idle time nothing is done.
    assert pet_idle.hibernate_idle_pets(now=first.finished_at + idle / 2) == 0
    assert [ref.id for ref in pet_sandboxes(backend, owner.agent_id)] == [sandbox.id]

    # A folder the sandbox user cannot read: the save fails, so the sandbox stays running.
    lock = "mkdir /workspace/locked && chmod 000 /workspace/locked"
    locked = backend.exec(sandbox, ["sh", "-c", lock])
    assert locked.exit_code == 0, locked.stderr_text
    wait_for(lambda: utcnow() - first.finished_at > idle, 30, "the idle time to pass")
    assert tasks.hibernate_idle_pets() == 0  # what the beat runs every minute
    assert [ref.id for ref in pet_sandboxes(backend, owner.agent_id)] == [sandbox.id]
    [failed] = _operations(stack, owner)
    assert (failed.operation, failed.outcome, failed.account_id) == (
        "hibernate",
        "failed",
        pet_operations.SYSTEM_ACTOR,
    )
    assert "Permission denied" in failed.error
    assert tasks.hibernate_idle_pets() == 0  # not tried again before another idle time
    assert len(_operations(stack, owner)) == 1

    unlock = "chmod 700 /workspace/locked && rmdir /workspace/locked"
    assert backend.exec(sandbox, ["sh", "-c", unlock]).exit_code == 0
    wait_for(lambda: utcnow() - failed.created_at > idle, 30, "another idle time to pass")
    assert tasks.hibernate_idle_pets() == 1

    assert pet_sandboxes(backend, owner.agent_id) == []
    assert get_store().exists(runs.pet_checkpoint_key(owner.app_id, owner.agent_id))
    done = _operations(stack, owner)[0]
    assert (done.operation, done.outcome, done.account_id) == (
        "hibernate",
        "done",
        pet_operations.SYSTEM_ACTOR,
    )
    with Session(stack.engine) as db:
        status = pet_operations.sandbox_status(db, owner.account_id, owner.agent_id)
    assert status.state == "hibernated"
    assert tasks.hibernate_idle_pets() == 0  # nothing left to hibernate

    stack.model.add(
        ToolCallsTurn([ToolCall("bash", {"command": "cat /workspace/notes.txt"})]),
        TextTurn("You said milk."),
        *(TextTurn(f"Answer to {text}.") for text in LATER),
    )
    asked_before = len(stack.model.chat_requests)
    # Through the front door every console, API and CLI message takes.
    second_id = actions.send_and_dispatch(owner.account_id, thread_id, "what?").run.id
    wait_for(lambda: _waking(stack, thread_id, second_id), 60, "the wake to begin")
    waiting = [actions.send_and_dispatch(owner.account_id, thread_id, text).run for text in LATER]
    assert [run.status for run in waiting] == ["pending"] * 3  # the woken run has not started
    answered = [wait_run(stack.engine, run_id) for run_id in [second_id, *(r.id for r in waiting)]]
    for run in answered:
        assert run.status == "completed", (run.error_code, run.error_message)
    second = answered[0]

    with Session(stack.engine) as db:
        thread_events = driver_plane.read_events(db, thread_id)
    events = [e for e in thread_events if e.run_id == second.id]
    kinds = [e.type for e in events]
    waking = kinds.index("run.preparing")
    assert events[waking].payload == {"stage": "wake", "status": "waking"}
    assert waking < kinds.index("run.started") < kinds.index("agent.message.completed")
    output = next(e.payload for e in events if e.type == "tool.use.completed")["output"]
    assert "milk" in str(output)
    # The three were stored while the woken run had not started, in the order they were sent,
    # and each run started only after the one before it ended.
    seq = {(e.type, e.run_id): e.seq for e in thread_events}
    sent = [seq[("user.message", run.id)] for run in waiting]
    assert seq[("run.preparing", second.id)] < sent[0] < sent[1] < sent[2]
    assert sent[2] < seq[("run.started", second.id)]
    for before, after in itertools.pairwise(answered):
        assert seq[("run.completed", before.id)] < seq[("run.started", after.id)]
    answers = [e.payload.get("text") for e in thread_events if e.type == "agent.message.completed"][
        -4:
    ]
    assert answers == ["You said milk.", *(f"Answer to {text}." for text in LATER)]
    # The model was asked about them in that order, one turn after another.
    asked = [_last_user_text(r.messages) for r in stack.model.chat_requests[asked_before:]]
    assert asked == ["what?", "what?", *LATER]  # "what?" twice: its tool call, then the answer
    [woken] = pet_sandboxes(backend, owner.agent_id)
    assert woken.id != sandbox.id
    # The first run's thread did not wake anything: it had a sandbox.
    with Session(stack.engine) as db:
        earlier = [e.type for e in driver_plane.read_events(db, thread_id) if e.run_id == first.id]
    assert "run.preparing" not in earlier
