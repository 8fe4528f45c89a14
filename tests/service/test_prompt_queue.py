"""The prompt queue: messages sent while a thread's run is still starting wait their turn
(`pending`), are stored at once in order, and each becomes the next run when the one before
it ends, however it ends; at most ten wait; Stop cancels them with the active run; a message
while the run is running is still refused; only a run whose turn has come can be claimed; a
message racing the end of the run ahead is never left waiting behind nothing. After a run
ends, the worker hands the next one on (`runtime.run_queue`), and the lost-run sweep counts a
queued message from the end of the run before it. The real-stack journey (a hibernated
Assistant woken by one message, three more answered in order): tests/integration/test_pet_idle.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from mosoo_core import sessions
from mosoo_core.clock import utcnow
from mosoo_core.errors import Conflict
from mosoo_core.identity import list_apps, sign_in_identity
from mosoo_core.runtime import lost_runs, run_queue
from mosoo_core.runtime.runs import plan_boot
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import AgentSession, DriverInstance, SessionEvent, SessionRun
from tests.support.redis_db import own_redis_database, redis_url
from tests.support.runs import dispatch_tasks


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch) -> Iterator[redis.Redis]:
    """The worker's task queue, in a Redis db shared with test_lost_runs.py (flushed around
    each test)."""
    yield from own_redis_database(monkeypatch, redis_url(8))


def _thread(db: Session, email: str = "q@example.com") -> tuple[str, str]:
    """(account_id, thread_id): a new account's thread with an Agent."""
    account = sign_in_identity(db, provider="email", subject=email, email=email)
    app_id = list_apps(db, account.id)[0].id
    agent = Agent(app_id=app_id, name="Q", model="m")
    db.add(agent)
    db.flush()
    return account.id, sessions.create_session(db, account.id, app_id, agent.id).id


def _set_status(db: Session, run_id: str, status: str) -> SessionRun:
    run = db.get(SessionRun, run_id)
    assert run is not None
    run.status = status
    db.add(run)
    db.flush()
    return run


def _statuses(db: Session, thread_id: str) -> list[str]:
    db.flush()
    db.expire_all()  # what the database holds
    runs = db.exec(
        select(SessionRun)
        .where(SessionRun.session_id == thread_id)
        .order_by(col(SessionRun.created_at))
    ).all()
    return [run.status for run in runs]


def _thread_status(db: Session, thread_id: str) -> str:
    thread = db.get(AgentSession, thread_id)
    assert thread is not None
    db.refresh(thread)
    return thread.status


def _messages(db: Session, thread_id: str) -> list[tuple[str, str | None]]:
    rows = db.exec(
        select(SessionEvent)
        .where(SessionEvent.session_id == thread_id, SessionEvent.type == "user.message")
        .order_by(col(SessionEvent.seq))
    ).all()
    return [(str(row.payload["text"]), row.run_id) for row in rows]


def _three_waiting(db: Session) -> tuple[str, str, list[str]]:
    """A thread whose first run is booting, with three messages waiting behind it."""
    account_id, thread_id = _thread(db)
    first = sessions.send_message(db, account_id, thread_id, "first").run.id
    _set_status(db, first, "booting")
    waiting = [
        sessions.send_message(db, account_id, thread_id, text).run.id
        for text in ("second", "third", "fourth")
    ]
    return account_id, thread_id, [first, *waiting]


def test_messages_sent_while_the_run_starts_wait_their_turn_in_order(db: Session) -> None:
    account_id, thread_id = _thread(db)
    first = sessions.send_message(db, account_id, thread_id, "first")
    assert first.run.status == "queued"
    second = sessions.send_message(db, account_id, thread_id, "second")  # still queued
    _set_status(db, first.run.id, "booting")  # e.g. a hibernated Assistant waking
    third = sessions.send_message(db, account_id, thread_id, "third")

    assert (second.run.status, third.run.status) == ("pending", "pending")
    # Stored at once, each as the thread's next event; the thread was running already.
    assert [e.type for e in second.events] == ["user.message"]
    assert third.events[0].seq == second.events[0].seq + 1
    assert _messages(db, thread_id) == [
        ("first", first.run.id),
        ("second", second.run.id),
        ("third", third.run.id),
    ]
    assert _statuses(db, thread_id) == ["booting", "pending", "pending"]
    assert sessions.active_run(db, thread_id).id == first.run.id  # type: ignore[union-attr]
    assert _thread_status(db, thread_id) == "running"


@pytest.mark.parametrize("status", ["running", "waiting_input"])
def test_a_message_while_the_run_is_running_is_refused(db: Session, status: str) -> None:
    account_id, thread_id, runs = _three_waiting(db)
    _set_status(db, runs[0], status)
    with pytest.raises(Conflict, match="still working on the previous message") as refused:
        sessions.send_message(db, account_id, thread_id, "fifth")
    assert refused.value.code == "conflict"
    assert [text for text, _ in _messages(db, thread_id)] == ["first", "second", "third", "fourth"]


def test_at_most_ten_messages_wait_and_the_next_is_refused_with_a_reason(db: Session) -> None:
    account_id, thread_id = _thread(db)
    sessions.send_message(db, account_id, thread_id, "first")
    for number in range(sessions.MAX_PENDING_MESSAGES):
        sessions.send_message(db, account_id, thread_id, f"waiting {number}")
    with pytest.raises(Conflict, match="10 messages are already waiting") as refused:
        sessions.send_message(db, account_id, thread_id, "one too many")
    assert refused.value.code == "queue_full"
    assert len(_messages(db, thread_id)) == 1 + sessions.MAX_PENDING_MESSAGES
    assert _statuses(db, thread_id) == ["queued"] + ["pending"] * sessions.MAX_PENDING_MESSAGES


@pytest.mark.parametrize("ending", ["completed", "failed", "cancelled", "expired"])
def test_each_end_of_a_run_makes_the_oldest_waiting_message_the_next_run(
    db: Session, ending: str
) -> None:
    _account_id, thread_id, runs = _three_waiting(db)
    first = db.get(SessionRun, runs[0])
    assert first is not None
    events = driver_plane.finish_run(db, first, ending, emit_event=True)
    assert [e.type for e in events] == [f"run.{ending}"]  # the thread stays running
    assert _statuses(db, thread_id) == [ending, "queued", "pending", "pending"]
    assert _thread_status(db, thread_id) == "running"

    for turn, later in enumerate(runs[1:], start=1):
        run = _set_status(db, later, "running")
        driver_plane.finish_run(db, run, "completed")
        expected = ["completed"] * turn + ["queued"] + ["pending"] * (2 - turn)
        assert _statuses(db, thread_id)[1:] == expected[:3]
    assert _thread_status(db, thread_id) == "idle"


def test_a_run_lost_with_its_driver_hands_the_thread_to_the_next_message(db: Session) -> None:
    account_id, thread_id = _thread(db)
    first = sessions.send_message(db, account_id, thread_id, "first").run.id
    waiting = sessions.send_message(db, account_id, thread_id, "second").run.id
    thread = db.get(AgentSession, thread_id)
    assert thread is not None
    driver = driver_plane.register_driver(
        db, app_id=thread.app_id, subject=f"session:{thread_id}", runtime="openai"
    )
    run = _set_status(db, first, "running")
    run.driver_instance_id = driver.instance_id
    db.add(run)
    instance = db.get(DriverInstance, driver.instance_id)
    assert instance is not None
    instance.status, instance.last_heartbeat_at = "connected", utcnow()
    db.add(instance)
    db.flush()
    # Silent for longer than the 120 s a driver has to come back: the run fails, driver_lost.
    later = utcnow() + timedelta(minutes=10)
    stored = driver_plane.sweep_lost_drivers(db, heartbeat_interval=timedelta(seconds=1), now=later)
    assert ("run.failed", first) in [(e.type, e.run_id) for e in stored]
    assert _statuses(db, thread_id) == ["failed", "queued"]
    assert sessions.active_run(db, thread_id).id == waiting  # type: ignore[union-attr]
    assert _thread_status(db, thread_id) == "running"


def test_stop_cancels_the_starting_run_and_every_waiting_message(db: Session) -> None:
    account_id, thread_id, runs = _three_waiting(db)
    events = sessions.cancel_active_run(db, account_id, thread_id)
    assert [(e.type, e.run_id) for e in events] == [
        ("run.cancelled", runs[1]),
        ("run.cancelled", runs[2]),
        ("run.cancelled", runs[3]),
        ("run.cancelled", runs[0]),
        ("session.status", None),
    ]
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    assert _statuses(db, thread_id) == ["cancelled"] * 4
    assert _thread_status(db, thread_id) == "idle"
    # The thread takes a message again, as a new run of its own.
    assert sessions.send_message(db, account_id, thread_id, "again").run.status == "queued"


def test_stop_during_a_running_run_cancels_the_waiting_messages_and_tells_the_driver(
    db: Session,
) -> None:
    account_id, thread_id, runs = _three_waiting(db)
    thread = db.get(AgentSession, thread_id)
    assert thread is not None
    driver = driver_plane.register_driver(
        db, app_id=thread.app_id, subject=f"session:{thread_id}", runtime="openai"
    )
    run = _set_status(db, runs[0], "running")
    run.driver_instance_id = driver.instance_id
    db.add(run)

    events = sessions.cancel_active_run(db, account_id, thread_id)
    assert [(e.type, e.run_id) for e in events] == [("run.cancelled", r) for r in runs[1:]]
    [command] = driver_plane.undelivered_commands(db, driver.instance_id)
    assert command.kind == "turn.cancel" and command.payload["run_id"] == runs[0]
    assert _statuses(db, thread_id) == ["running", "cancelled", "cancelled", "cancelled"]
    # The driver reports the cancellation: nothing is left to run after it.
    driver_plane.finish_run(db, run, "cancelled")
    assert _statuses(db, thread_id) == ["cancelled"] * 4
    assert _thread_status(db, thread_id) == "idle"


def test_only_a_run_whose_turn_has_come_can_be_claimed(db: Session) -> None:
    _account_id, thread_id, runs = _three_waiting(db)
    # A dispatch of a waiting run (a task sent twice, a resend) finds nothing to boot.
    assert plan_boot(db, runs[1]) == (None, [])
    assert _statuses(db, thread_id) == ["booting", "pending", "pending", "pending"]
    first = db.get(SessionRun, runs[0])
    assert first is not None
    driver_plane.finish_run(db, first, "completed")
    # Its turn: claimed (the Agent has no provider key, so the claim fails the run at once),
    # and the failure hands the thread on to the next message.
    planned, failed = plan_boot(db, runs[1])
    assert planned is None and [e.type for e in failed] == ["run.failed"]
    assert _statuses(db, thread_id) == ["completed", "failed", "queued", "pending"]
    assert plan_boot(db, runs[3]) == (None, [])  # still not its turn


def test_a_run_finished_twice_by_racing_processes_promotes_one_message(engine: Engine) -> None:
    with Session(engine) as db:
        _account_id, thread_id, runs = _three_waiting(db)
        _set_status(db, runs[0], "running")
        db.commit()
    first, second = Session(engine), Session(engine)
    try:
        seen_by_first = first.get(SessionRun, runs[0])
        seen_by_second = second.get(SessionRun, runs[0])  # both read it running
        assert seen_by_first is not None and seen_by_second is not None
        driver_plane.finish_run(first, seen_by_first, "completed")
        first.commit()
        driver_plane.finish_run(second, seen_by_second, "failed", code="driver_lost")
        second.commit()
    finally:
        first.close()
        second.close()
    with Session(engine) as db:
        assert _statuses(db, thread_id)[1:] == ["queued", "pending", "pending"]


def _race(engine: Engine, holder: object, waiter: object) -> None:
    """Run `holder(db)` and keep its transaction open while `waiter(db)` starts in another
    thread and must wait for the thread's lock; then commit the holder and let the waiter end."""
    held = Session(engine)
    done: dict[str, BaseException | None] = {"error": None}

    def wait_then_commit() -> None:
        try:
            with Session(engine) as db:
                waiter(db)  # type: ignore[operator]
                db.commit()
        except BaseException as error:  # reported by the test thread
            done["error"] = error

    try:
        holder(held)  # type: ignore[operator]
        racing = threading.Thread(target=wait_then_commit)
        racing.start()
        time.sleep(0.5)  # the waiter has now reached the thread's lock and waits on it
        assert racing.is_alive(), "the waiter did not wait for the thread's lock"
        held.commit()
    finally:
        held.close()
    racing.join(timeout=60)
    assert not racing.is_alive()
    if done["error"] is not None:
        raise done["error"]


def test_a_message_sent_as_the_run_ahead_ends_becomes_the_next_run(engine: Engine) -> None:
    with Session(engine) as db:
        account_id, thread_id = _thread(db)
        first = sessions.send_message(db, account_id, thread_id, "first").run.id
        db.commit()

    def end_first(db: Session) -> None:
        run = db.get(SessionRun, first)
        assert run is not None
        driver_plane.finish_run(db, run, "failed", code="sandbox_failed", emit_event=True)

    _race(engine, end_first, lambda db: sessions.send_message(db, account_id, thread_id, "next"))
    with Session(engine) as db:
        assert _statuses(db, thread_id) == ["failed", "queued"]  # not left pending
        assert _thread_status(db, thread_id) == "running"


def test_a_run_ending_as_a_message_is_sent_finds_it_waiting(engine: Engine) -> None:
    with Session(engine) as db:
        account_id, thread_id = _thread(db)
        first = sessions.send_message(db, account_id, thread_id, "first").run.id
        _set_status(db, first, "booting")
        db.commit()

    def end_first(db: Session) -> None:
        run = db.get(SessionRun, first)
        assert run is not None
        driver_plane.finish_run(db, run, "failed", code="sandbox_failed", emit_event=True)

    _race(engine, lambda db: sessions.send_message(db, account_id, thread_id, "next"), end_first)
    with Session(engine) as db:
        assert _statuses(db, thread_id) == ["failed", "queued"]  # promoted, not stranded
        assert _thread_status(db, thread_id) == "running"


def test_waiting_messages_keep_the_thread_from_archive_and_go_with_it(db: Session) -> None:
    account_id, thread_id, _runs = _three_waiting(db)
    with pytest.raises(Conflict) as refused:
        sessions.archive_thread(db, account_id, thread_id)
    assert refused.value.code == "thread_active"
    sessions.delete_thread(db, account_id, thread_id)
    assert db.exec(select(SessionRun).where(SessionRun.session_id == thread_id)).all() == []


def test_the_next_message_goes_to_the_worker_once_the_run_before_it_is_over(
    engine: Engine, queue: redis.Redis
) -> None:
    with Session(engine) as db:
        _account_id, _thread_id, runs = _three_waiting(db)
        db.commit()
    assert run_queue.dispatch_next_run(runs[0]) is None  # still active: nothing yet
    with Session(engine) as db:
        first = db.get(SessionRun, runs[0])
        assert first is not None
        driver_plane.finish_run(db, first, "completed")
        db.commit()
    assert run_queue.dispatch_next_run(runs[0]) == runs[1]
    assert dispatch_tasks(queue) == [runs[1]]
    assert run_queue.dispatch_next_run(runs[1]) is None  # not over yet


def test_a_message_sent_after_the_run_ended_is_not_dispatched_twice(
    engine: Engine, queue: redis.Redis
) -> None:
    with Session(engine) as db:
        account_id, thread_id = _thread(db)
        first = sessions.send_message(db, account_id, thread_id, "first").run.id
        run = db.get(SessionRun, first)
        assert run is not None
        driver_plane.finish_run(db, run, "completed")
        sessions.send_message(db, account_id, thread_id, "after it")  # its front door sent it
        db.commit()
    assert run_queue.dispatch_next_run(first) is None
    assert dispatch_tasks(queue) == []


def test_the_lost_run_sweep_counts_a_waiting_message_from_the_end_before_it(
    engine: Engine, queue: redis.Redis
) -> None:
    with Session(engine) as db:
        _account_id, _thread_id, runs = _three_waiting(db)
        for run_id in runs:  # sent long ago, while the first run booted for minutes
            run = db.get(SessionRun, run_id)
            assert run is not None
            run.created_at = utcnow() - timedelta(minutes=10)
            db.add(run)
        db.commit()
    assert lost_runs.resend_lost_runs() == 0  # booting, and three pending: none is lost
    with Session(engine) as db:
        first = db.get(SessionRun, runs[0])
        assert first is not None
        driver_plane.finish_run(db, first, "completed")
        db.commit()
    # Queued just now (its dispatch waits for the first run's sandbox to be released).
    assert lost_runs.resend_lost_runs() == 0
    assert lost_runs.resend_lost_runs(now=utcnow() + lost_runs.LOST_AFTER * 2) == 1
    assert dispatch_tasks(queue) == [runs[1]]
