"""A run whose task was lost (Redis restarted and dropped its queue) is handed to the worker
again by the beat's sandbox sweep, once per `RESEND_EVERY`; and a run dispatched twice is
booted once, because `plan_boot` claims it with one conditional UPDATE even while another
dispatch of it has not committed yet."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import sessions
from mosoo_core.clock import utcnow
from mosoo_core.identity import list_apps, sign_in_identity
from mosoo_core.runtime import lost_runs
from mosoo_core.runtime.runs import plan_boot
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import DriverInstance, SessionEvent, SessionRun
from tests.support.redis_db import db_number, redis_url

REDIS_DB = db_number(8)


@pytest.fixture(autouse=True)
def _redis(monkeypatch: pytest.MonkeyPatch) -> Iterator[redis.Redis]:
    monkeypatch.setenv("MOSOO_REDIS_URL", redis_url(8))
    reset_settings_cache()
    client = redis.Redis(db=REDIS_DB)
    client.flushdb()
    yield client
    client.flushdb()


def _queued_run(engine: Engine, email: str, *, age: timedelta) -> str:
    """A run queued `age` ago by a message, on an Agent with no provider key (not ready)."""
    with Session(engine) as db:
        account = sign_in_identity(db, provider="email", subject=email, email=email)
        app_id = list_apps(db, account.id)[0].id
        agent = Agent(app_id=app_id, name="Lost", model="m")
        db.add(agent)
        db.flush()
        thread_id = sessions.create_session(db, account.id, app_id, agent.id).id
        run = db.get(SessionRun, sessions.send_message(db, account.id, thread_id, "hi").run.id)
        assert run is not None
        run.created_at = utcnow() - age
        db.add(run)
        db.commit()
        return run.id


def _dispatch_tasks(client: redis.Redis) -> list[str]:
    """The run ids of the `mosoo.dispatch_run` tasks waiting in the worker's queue."""
    found = []
    for raw in client.lrange("celery", 0, -1):
        headers = json.loads(raw)["headers"]
        if headers["task"] == "mosoo.dispatch_run":
            found.append(headers["argsrepr"].strip("(),' "))
    return found


def test_a_run_queued_too_long_is_sent_again_once_per_interval(
    engine: Engine, _redis: redis.Redis
) -> None:
    lost = _queued_run(engine, "lost@example.com", age=timedelta(minutes=3))
    recent = _queued_run(engine, "recent@example.com", age=timedelta(seconds=30))

    assert lost_runs.resend_lost_runs() == 1
    assert _dispatch_tasks(_redis) == [lost]  # the recent one may still be on its way
    assert lost_runs.resend_lost_runs() == 0  # not again within RESEND_EVERY
    assert _dispatch_tasks(_redis) == [lost]

    later = utcnow() + timedelta(minutes=2)
    _redis.delete(f"mosoo:run:resent:{lost}")  # as if RESEND_EVERY had passed
    assert lost_runs.resend_lost_runs(now=later) == 2  # and the recent one is lost too by then
    assert sorted(_dispatch_tasks(_redis)) == sorted([lost, lost, recent])


def test_a_run_that_left_queued_is_not_sent_again(engine: Engine, _redis: redis.Redis) -> None:
    run_id = _queued_run(engine, "booting@example.com", age=timedelta(minutes=10))
    with Session(engine) as db:
        run = db.get(SessionRun, run_id)
        assert run is not None
        run.status = "booting"
        db.add(run)
        db.commit()
    assert lost_runs.resend_lost_runs() == 0
    assert _dispatch_tasks(_redis) == []


def test_two_dispatches_of_one_run_boot_it_once(engine: Engine) -> None:
    """The first dispatch holds its transaction open; the second, meanwhile, must wait for it
    and then find the run taken, not plan a boot of its own."""
    run_id = _queued_run(engine, "twice@example.com", age=timedelta(minutes=3))
    first = Session(engine)
    planned, failed = plan_boot(first, run_id)  # the Agent is not ready: it fails the run
    assert planned is None and "run.failed" in [e.type for e in failed]

    second: dict[str, object] = {}

    def dispatch_again() -> None:
        with Session(engine) as db:
            second["result"] = plan_boot(db, run_id)
            db.commit()

    racing = threading.Thread(target=dispatch_again)
    racing.start()
    time.sleep(0.5)  # the second dispatch is now waiting on the first one's claim
    first.commit()
    first.close()
    racing.join(timeout=60)
    assert not racing.is_alive()
    assert second["result"] == (None, [])
    with Session(engine) as db:
        events = db.exec(select(SessionEvent).where(SessionEvent.type == "run.failed")).all()
        assert len(events) == 1
        assert db.exec(select(DriverInstance)).all() == []
        run = db.get(SessionRun, run_id)
        assert run is not None and run.status == "failed"
