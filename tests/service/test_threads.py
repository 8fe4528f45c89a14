"""Thread and run rules of the session service."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from mosoo_core import sessions
from mosoo_core.errors import Conflict, InvalidInput, NotFound
from mosoo_core.identity import list_apps, sign_in_identity
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import SessionRun


def _owner(db: Session, email: str) -> tuple[str, str, str]:
    account = sign_in_identity(db, provider="email", subject=email, email=email)
    app_id = list_apps(db, account.id)[0].id
    agent = Agent(app_id=app_id, name="A", model="m")
    db.add(agent)
    db.flush()
    return account.id, app_id, agent.id


def test_message_queues_a_run_and_logs_the_message_then_running(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db, "t@example.com")
    thread = sessions.create_session(db, account_id, app_id, agent_id)
    sent = sessions.send_message(db, account_id, thread.id, "  run pwd  ")
    assert sent.run.status == "queued"
    assert [(e.seq, e.type) for e in sent.events] == [(1, "user.message"), (2, "session.status")]
    assert sent.events[0].payload == {"text": "run pwd"}
    assert sessions.get_session(db, account_id, thread.id).status == "running"


def test_one_active_run_per_thread(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db, "t@example.com")
    thread = sessions.create_session(db, account_id, app_id, agent_id)
    sent = sessions.send_message(db, account_id, thread.id, "first")
    run = db.get(SessionRun, sent.run.id)
    assert run is not None
    run.status = "running"  # before it starts, a message waits its turn (test_prompt_queue.py)
    with pytest.raises(Conflict, match="still working"):
        sessions.send_message(db, account_id, thread.id, "second")


@pytest.mark.parametrize("text", ["", "   ", "x" * 100_001])
def test_empty_or_huge_messages_are_refused(db: Session, text: str) -> None:
    account_id, app_id, agent_id = _owner(db, "t@example.com")
    thread = sessions.create_session(db, account_id, app_id, agent_id)
    with pytest.raises(InvalidInput):
        sessions.send_message(db, account_id, thread.id, text)
    assert sessions.list_events(db, account_id, thread.id) == []


def test_stop_before_a_driver_has_the_run_cancels_it_at_once(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db, "t@example.com")
    thread = sessions.create_session(db, account_id, app_id, agent_id)
    sent = sessions.send_message(db, account_id, thread.id, "go")
    events = sessions.cancel_active_run(db, account_id, thread.id)
    assert [e.type for e in events] == ["run.cancelled", "session.status"]
    assert db.get(SessionRun, sent.run.id).status == "cancelled"  # type: ignore[union-attr]
    # The thread takes a new message again.
    sessions.send_message(db, account_id, thread.id, "again")


def test_stop_with_a_driver_queues_turn_cancel(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db, "t@example.com")
    thread = sessions.create_session(db, account_id, app_id, agent_id)
    sent = sessions.send_message(db, account_id, thread.id, "go")
    driver = driver_plane.register_driver(
        db, app_id=app_id, subject=f"session:{thread.id}", runtime="openai"
    )
    run = db.get(SessionRun, sent.run.id)
    assert run is not None
    run.driver_instance_id, run.status = driver.instance_id, "running"
    sessions.cancel_active_run(db, account_id, thread.id)
    [command] = driver_plane.undelivered_commands(db, driver.instance_id)
    assert command.kind == "turn.cancel" and command.payload["run_id"] == run.id


def test_permission_answer_needs_a_pending_request(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db, "t@example.com")
    thread = sessions.create_session(db, account_id, app_id, agent_id)
    sent = sessions.send_message(db, account_id, thread.id, "go")
    driver = driver_plane.register_driver(
        db, app_id=app_id, subject=f"session:{thread.id}", runtime="openai"
    )
    run = db.get(SessionRun, sent.run.id)
    assert run is not None
    run.driver_instance_id, run.status = driver.instance_id, "waiting_input"
    driver_plane.append_events(
        db,
        thread.id,
        [
            driver_plane.NewEvent(
                type="tool.confirmation.required", payload={"request_id": "r1"}, run_id=run.id
            )
        ],
    )
    with pytest.raises(NotFound):
        sessions.resolve_permission(db, account_id, thread.id, "r-unknown", "allow_once")
    with pytest.raises(InvalidInput):
        sessions.resolve_permission(db, account_id, thread.id, "r1", "always")
    sessions.resolve_permission(db, account_id, thread.id, "r1", "allow_once")
    [command] = driver_plane.undelivered_commands(db, driver.instance_id)
    assert command.kind == "permission.resolve" and command.payload == {
        "request_id": "r1",
        "decision": "allow_once",
    }


def test_another_owners_thread_is_not_found(db: Session) -> None:
    owner, app_id, agent_id = _owner(db, "owner@example.com")
    intruder, intruder_app, _ = _owner(db, "intruder@example.com")
    thread = sessions.create_session(db, owner, app_id, agent_id)
    for call in (
        lambda: sessions.get_session(db, intruder, thread.id),
        lambda: sessions.send_message(db, intruder, thread.id, "hi"),
        lambda: sessions.list_events(db, intruder, thread.id),
        lambda: sessions.cancel_active_run(db, intruder, thread.id),
        lambda: sessions.create_session(db, intruder, intruder_app, agent_id),
    ):
        with pytest.raises(NotFound):
            call()


def test_duplicate_source_events_keep_their_first_seq(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db, "t@example.com")
    thread = sessions.create_session(db, account_id, app_id, agent_id)
    first = driver_plane.append_events(
        db,
        thread.id,
        [driver_plane.NewEvent(type="x", payload={}, source_event_id=f"s{i}") for i in range(3)],
    )
    again = driver_plane.append_events(
        db,
        thread.id,
        [
            driver_plane.NewEvent(type="x", payload={}, source_event_id=s)
            for s in ("s1", "s3", "s3", "s2")
        ],
    )
    assert [e.seq for e in first] == [1, 2, 3]
    assert [(e.source_event_id, e.seq, e.duplicate) for e in again] == [
        ("s1", 2, True),
        ("s3", 4, False),
        ("s2", 3, True),
    ]
    assert [e.seq for e in driver_plane.read_events(db, thread.id)] == [1, 2, 3, 4]
