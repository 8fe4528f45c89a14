"""A run stopped while its sandbox boots: the stop asks the worker to release the boot, the
teardown stands aside while the run's dispatcher is alive (it releases the boot itself), and a
Pet run that never started loses its driver, once, and never the Agent's sandbox.
The real-stack journey is tests/integration/test_boot_interrupt.py."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from driver.protocol import DriverEvent
from mosoo_core import sessions
from mosoo_core.identity import list_apps, sign_in_identity
from mosoo_core.runtime.runs import dispatching_key, finish_run_sandbox
from mosoo_core.runtime.sandbox import SandboxBackend, get_backend
from mosoo_core.sessions import actions, driver_plane
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import DriverCommand, DriverInstance, SessionRun
from tests.support.redis_db import db_number

REDIS_DB = db_number(
    13
)  # shared with tests/integration/test_boot_interrupt.py; each flushes it first


@pytest.fixture(autouse=True)
def _redis(monkeypatch: pytest.MonkeyPatch) -> Iterator[redis.Redis]:
    monkeypatch.setenv("MOSOO_REDIS_URL", f"redis://127.0.0.1:6379/{REDIS_DB}")
    reset_settings_cache()
    client = redis.Redis(db=REDIS_DB)
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture
def backend() -> SandboxBackend:
    """Only listed, never asked to create: these runs have no sandbox."""
    return get_backend()


def _booting_run(engine: Engine, kind: str) -> tuple[str, str, str, str]:
    """A thread whose run is booting on a registered driver, as `runs.plan_boot` leaves it."""
    with Session(engine) as db:
        account = sign_in_identity(
            db, provider="email", subject="boot@example.com", email="boot@example.com"
        )
        app_id = list_apps(db, account.id)[0].id
        agent = Agent(app_id=app_id, name="Booter", model="m", kind=kind)
        db.add(agent)
        db.flush()
        thread_id = sessions.create_session(db, account.id, app_id, agent.id).id
        run_id = sessions.send_message(db, account.id, thread_id, "stop me").run.id
        subject = f"agent:{agent.id}" if kind == "pet" else f"session:{thread_id}"
        driver = driver_plane.register_driver(
            db, app_id=app_id, subject=subject, runtime="openai", session_id=thread_id
        )
        run = db.get(SessionRun, run_id)
        assert run is not None
        run.status, run.driver_instance_id, run.snapshot = (
            "booting",
            driver.instance_id,
            {"kind": kind},
        )
        db.add(run)
        db.commit()
        return account.id, thread_id, run_id, driver.instance_id


def _queued_tasks(client: redis.Redis) -> list[tuple[str, str]]:
    found = []
    for raw in client.lrange("celery", 0, -1):
        headers = json.loads(raw)["headers"]
        found.append((headers["task"], headers["argsrepr"].strip("(),' ")))
    return found


def _stops(engine: Engine, instance_id: str) -> int:
    with Session(engine) as db:
        return len(
            db.exec(
                select(DriverCommand).where(
                    DriverCommand.driver_instance_id == instance_id,
                    DriverCommand.kind == "session.stop",
                )
            ).all()
        )


def test_a_stop_while_booting_cancels_at_once_and_asks_the_worker_to_release_the_boot(
    engine: Engine, _redis: redis.Redis
) -> None:
    account_id, thread_id, run_id, _ = _booting_run(engine, "cattle")
    events = actions.stop_run(account_id, thread_id)
    assert [e.type for e in events] == ["run.cancelled", "session.status"]
    assert _queued_tasks(_redis) == [("mosoo.finish_run", run_id)]
    with Session(engine) as db:
        assert db.get(SessionRun, run_id).status == "cancelled"  # type: ignore[union-attr]
    # Nothing active any more: a second stop does nothing and asks for nothing.
    assert actions.stop_run(account_id, thread_id) == []
    assert len(_queued_tasks(_redis)) == 1


def test_the_teardown_stands_aside_while_the_dispatcher_is_alive_and_works_once_it_is_gone(
    engine: Engine, _redis: redis.Redis, backend: SandboxBackend
) -> None:
    account_id, thread_id, run_id, instance_id = _booting_run(engine, "cattle")
    actions.stop_run(account_id, thread_id)
    _redis.set(dispatching_key(run_id), "a live dispatcher", ex=15)
    assert finish_run_sandbox(run_id, backend) == "deferred"
    with Session(engine) as db:
        assert db.get(DriverInstance, instance_id).status == "booting"  # type: ignore[union-attr]
    _redis.delete(dispatching_key(run_id))  # it died (or finished) without releasing the boot
    assert finish_run_sandbox(run_id, backend) == "removed"
    assert finish_run_sandbox(run_id, backend) == "removed"
    with Session(engine) as db:
        assert db.get(DriverInstance, instance_id).status == "stopped"  # type: ignore[union-attr]


def test_a_pet_run_stopped_before_it_started_loses_its_driver_once(
    engine: Engine, backend: SandboxBackend
) -> None:
    account_id, thread_id, run_id, instance_id = _booting_run(engine, "pet")
    actions.stop_run(account_id, thread_id)
    assert finish_run_sandbox(run_id, backend) == "kept"
    assert finish_run_sandbox(run_id, backend) == "kept"
    assert _stops(engine, instance_id) == 1
    with Session(engine) as db:
        assert db.get(DriverInstance, instance_id).status == "stopped"  # type: ignore[union-attr]
        assert db.get(SessionRun, run_id).status == "cancelled"  # type: ignore[union-attr]


def test_a_pet_run_that_ended_stops_its_driver_and_keeps_the_sandbox(
    engine: Engine, backend: SandboxBackend
) -> None:
    """A driver serves one run: once it is over the driver is told to stop (held, each kept
    its runtime's SDK), the Agent's sandbox stays; twice, it is told once."""
    _, _, run_id, instance_id = _booting_run(engine, "pet")
    started_and_completed = [
        DriverEvent(
            source_event_id=kind, run_id=run_id, kind=kind, occurred_at="2026-01-01T00:00:00Z"
        )
        for kind in ("run.started", "run.completed")
    ]
    with Session(engine) as db:
        instance = db.get(DriverInstance, instance_id)
        assert instance is not None
        driver_plane.ingest_driver_events(db, instance, started_and_completed)
        db.commit()
    assert finish_run_sandbox(run_id, backend) == "kept"
    assert _stops(engine, instance_id) == 1
    assert finish_run_sandbox(run_id, backend) == "kept"
    assert _stops(engine, instance_id) == 1
