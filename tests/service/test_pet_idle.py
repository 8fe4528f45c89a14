"""Which Assistants the beat hibernates: those whose last activity (a run's end, a Wake or
Recreate, an owner's terminal, a failed idle hibernation) is older than the idle time, never
one with an active run, never a Task. What the hibernation does to a real sandbox, and the
waking message that follows: tests/integration/test_pet_idle.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import agents, sessions
from mosoo_core.identity import list_apps, sign_in_identity
from mosoo_core.runtime import pet_operations
from mosoo_core.runtime.pet_idle import IdlePet, idle_pets
from mosoo_core.sessions.transcript import build_transcript
from mosoo_core.tables.pets import PetOperation
from mosoo_core.tables.sessions import SessionRun

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
IDLE = timedelta(minutes=5)


def _agent(engine: Engine, email: str, kind: str = "pet") -> tuple[str, str, str]:
    """(account_id, app_id, agent_id) of a new account's Agent."""
    with Session(engine) as db:
        account = sign_in_identity(db, provider="email", subject=email, email=email)
        app_id = list_apps(db, account.id)[0].id
        agent = agents.create_agent(db, account.id, app_id, name="Keeper", kind=kind)
        db.commit()
        return account.id, app_id, agent.id


def _run(
    engine: Engine, owner: tuple[str, str, str], status: str, finished_at: datetime | None
) -> None:
    account_id, app_id, agent_id = owner
    with Session(engine) as db:
        thread = sessions.create_session(db, account_id, app_id, agent_id, purpose="preview")
        sessions.send_message(db, account_id, thread.id, "hello")
        db.commit()
        run = db.exec(select(SessionRun).where(SessionRun.session_id == thread.id)).one()
        run.status, run.finished_at = status, finished_at
        run.created_at = (finished_at or NOW) - timedelta(seconds=30)
        db.add(run)
        db.commit()


def _operation(
    engine: Engine, agent_id: str, operation: str, outcome: str, at: datetime, actor: str
) -> None:
    with Session(engine) as db:
        db.add(
            PetOperation(
                agent_id=agent_id,
                account_id=actor,
                operation=operation,
                outcome=outcome,
                created_at=at,
            )
        )
        db.commit()


def _idle(engine: Engine, *agent_ids: str) -> list[str]:
    with Session(engine) as db:
        found = idle_pets(db, agent_ids, now=NOW, idle=IDLE)
    return sorted(pet.agent_id for pet in found)


def test_an_assistant_is_idle_only_once_its_last_run_ended_longer_ago_than_the_idle_time(
    engine: Engine,
) -> None:
    just_now = _agent(engine, "recent@example.com")
    _run(engine, just_now, "completed", NOW - timedelta(minutes=1))
    on_the_boundary = _agent(engine, "boundary@example.com")
    _run(engine, on_the_boundary, "completed", NOW - IDLE)
    past = _agent(engine, "past@example.com")
    _run(engine, past, "failed", NOW - IDLE - timedelta(seconds=1))
    # Its older run does not count: the newer one ended a minute ago.
    old_and_new = _agent(engine, "both@example.com")
    _run(engine, old_and_new, "completed", NOW - timedelta(hours=2))
    _run(engine, old_and_new, "completed", NOW - timedelta(minutes=1))

    ids = [just_now[2], on_the_boundary[2], past[2], old_and_new[2]]
    assert _idle(engine, *ids) == [past[2]]
    with Session(engine) as db:
        [found] = idle_pets(db, ids, now=NOW, idle=IDLE)
    assert found == IdlePet(app_id=past[1], agent_id=past[2])


def test_an_active_run_keeps_an_assistant_awake_and_a_task_is_never_hibernated(
    engine: Engine,
) -> None:
    busy = _agent(engine, "busy@example.com")
    _run(engine, busy, "completed", NOW - timedelta(hours=1))
    _run(engine, busy, "running", None)
    queued = _agent(engine, "queued@example.com")
    _run(engine, queued, "queued", None)
    task = _agent(engine, "task@example.com", kind="cattle")
    _run(engine, task, "completed", NOW - timedelta(hours=1))
    idle = _agent(engine, "idle@example.com")
    _run(engine, idle, "completed", NOW - timedelta(hours=1))

    assert _idle(engine, busy[2], queued[2], task[2], idle[2], "no-such-agent") == [idle[2]]
    assert _idle(engine) == []


def test_a_sandbox_made_without_a_run_counts_from_its_making(engine: Engine) -> None:
    woken = _agent(engine, "woken@example.com")
    _run(engine, woken, "completed", NOW - timedelta(hours=1))
    _operation(engine, woken[2], "wake", "done", NOW - timedelta(minutes=2), woken[0])
    recreated = _agent(engine, "recreated@example.com")
    _operation(engine, recreated[2], "recreate", "done", NOW - timedelta(minutes=2), recreated[0])
    long_woken = _agent(engine, "long@example.com")
    _operation(engine, long_woken[2], "wake", "done", NOW - timedelta(minutes=6), long_woken[0])
    # A refused Wake made nothing, and an owner's restart made no new sandbox.
    refused = _agent(engine, "refused@example.com")
    _run(engine, refused, "completed", NOW - timedelta(hours=1))
    _operation(engine, refused[2], "wake", "refused", NOW - timedelta(minutes=1), refused[0])
    _operation(engine, refused[2], "restart", "done", NOW - timedelta(minutes=1), refused[0])
    # A sandbox nothing accounts for (no run, no operation) is idle.
    unknown = _agent(engine, "unknown@example.com")

    ids = [woken[2], recreated[2], long_woken[2], refused[2], unknown[2]]
    assert _idle(engine, *ids) == sorted([long_woken[2], refused[2], unknown[2]])


def test_a_failed_idle_hibernation_is_tried_again_only_after_another_idle_time(
    engine: Engine,
) -> None:
    failing = _agent(engine, "failing@example.com")
    _run(engine, failing, "completed", NOW - timedelta(hours=1))
    actor = pet_operations.SYSTEM_ACTOR
    _operation(engine, failing[2], "hibernate", "failed", NOW - timedelta(minutes=4), actor)
    assert _idle(engine, failing[2]) == []

    with Session(engine) as db:
        later = idle_pets(db, [failing[2]], now=NOW + timedelta(minutes=2), idle=IDLE)
    assert [pet.agent_id for pet in later] == [failing[2]]
    # The owner's own failed Hibernate does not hold the idle one back.
    owners = _agent(engine, "owner-tried@example.com")
    _run(engine, owners, "completed", NOW - timedelta(hours=1))
    _operation(engine, owners[2], "hibernate", "failed", NOW - timedelta(minutes=1), owners[0])
    assert _idle(engine, owners[2]) == [owners[2]]


def test_an_owners_terminal_counts_from_its_close(engine: Engine) -> None:
    # Closed two minutes ago after an hour of typing: the close counts, not the older run.
    typing = _agent(engine, "typing@example.com")
    _run(engine, typing, "completed", NOW - timedelta(hours=2))
    _operation(engine, typing[2], "terminal open", "done", NOW - timedelta(hours=1), typing[0])
    _operation(engine, typing[2], "terminal close", "done", NOW - timedelta(minutes=2), typing[0])
    # A refused open did nothing in the sandbox.
    refused = _agent(engine, "term-refused@example.com")
    _run(engine, refused, "completed", NOW - timedelta(hours=2))
    _operation(
        engine, refused[2], "terminal open", "refused", NOW - timedelta(minutes=1), refused[0]
    )
    assert _idle(engine, typing[2], refused[2]) == [refused[2]]
    # (An open terminal keeps its Assistant awake whatever the records say:
    # tests/api/test_terminal.py.)


def test_the_chat_says_waking_until_the_woken_run_starts() -> None:
    def event(seq: int, kind: str, **payload: str) -> dict[str, Any]:
        return {"seq": seq, "type": kind, "run_id": "run_1", "payload": payload}

    transcript = build_transcript([event(1, "user.message", text="still there?")])
    transcript.apply(event(2, "run.preparing", stage="wake", status="waking"))
    assert transcript.preparing == "waking"
    assert transcript.active_run_id == "run_1"
    transcript.apply(event(3, "run.started"))
    assert transcript.preparing == ""
