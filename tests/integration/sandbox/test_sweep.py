"""The sandbox sweep (beat, every minute) removes what nothing needs any more, on both
backends: a Cattle sandbox whose run is over or whose driver is unknown, a Pet sandbox of a
deleted Agent; it keeps live ones and never touches another installation's."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import sessions
from mosoo_core.identity import list_apps, sign_in_identity
from mosoo_core.runtime.runs import installation_label, sweep_sandboxes
from mosoo_core.runtime.sandbox import SandboxBackend
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import SessionRun
from tests.integration.sandbox.conftest import RUN_LABEL, MakeSandbox


def _thread_with_run(db: Session, account_id: str, app_id: str, agent_id: str, status: str) -> str:
    """A thread whose run is on a registered driver in the given status; the driver id."""
    thread = sessions.create_session(db, account_id, app_id, agent_id)
    sent = sessions.send_message(db, account_id, thread.id, "hi")
    driver = driver_plane.register_driver(
        db, app_id=app_id, subject=f"session:{thread.id}", runtime="openai", session_id=thread.id
    )
    run = db.get(SessionRun, sent.run.id)
    assert run is not None
    run.driver_instance_id, run.status = driver.instance_id, status
    db.add(run)
    return driver.instance_id


def test_sweep_removes_finished_and_orphaned_sandboxes_and_keeps_live_ones(
    backend: SandboxBackend, make_sandbox: MakeSandbox, engine: Engine, test_run_id: str
) -> None:
    with Session(engine) as db:
        account = sign_in_identity(
            db, provider="email", subject="sweep@example.com", email="sweep@example.com"
        )
        app_id = list_apps(db, account.id)[0].id
        live_agent = Agent(app_id=app_id, name="live", model="m", kind="pet")
        db.add(live_agent)
        db.flush()
        done_driver = _thread_with_run(db, account.id, app_id, live_agent.id, "completed")
        running_driver = _thread_with_run(db, account.id, app_id, live_agent.id, "running")
        db.commit()
        live_agent_id = live_agent.id

    mine = installation_label()
    finished = make_sandbox(subject="session:done", driver_instance_id=done_driver, labels=mine)
    running = make_sandbox(
        subject="session:running", driver_instance_id=running_driver, labels=mine
    )
    unknown = make_sandbox(
        subject="session:ghost", driver_instance_id="01UNKNOWNDRIVER00000000000", labels=mine
    )
    pet_alive = make_sandbox(subject=f"agent:{live_agent_id}", labels=mine)
    pet_deleted = make_sandbox(subject="agent:01DELETEDAGENT000000000000", labels=mine)
    foreign = make_sandbox(
        subject="session:elsewhere", labels={"mosoo.installation": "another-installation"}
    )

    assert sweep_sandboxes(backend, grace=timedelta(0)) == 3

    left = {ref.id for ref in backend.list_by_label({RUN_LABEL: test_run_id})}
    assert {finished.id, unknown.id, pet_deleted.id}.isdisjoint(left)
    assert {running.id, pet_alive.id, foreign.id} <= left
