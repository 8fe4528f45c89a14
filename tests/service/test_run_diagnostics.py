"""A run's diagnostics: the marks the worker and control write become phases that cover the
run without a gap, in the order they happened; control marks the first token and the event
that ended the run as it stores them; another owner's run is not found; a failed run shows
its error and the events before it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from driver.protocol import PROTOCOL_VERSION, DriverEvent, Hello
from mosoo_core import identity
from mosoo_core.clock import utcnow
from mosoo_core.errors import NotFound
from mosoo_core.sessions import diagnostics, driver_plane
from mosoo_core.tables.sessions import DriverInstance, RunMark, SessionRun
from tests.control.conftest import Booted, boot_fixture


def _hello(booted: Booted, **token: str) -> Hello:
    return Hello(
        driver_instance_id=booted.instance_id,
        protocol_version=PROTOCOL_VERSION,
        driver_version="1.2.3",
        runtime="openai",
        capabilities=["text_stream", "cancel"],
        pid=7,
        **token,
    )


def _hello_and_ready(db: Session, booted: Booted) -> None:
    welcome = driver_plane.accept_hello(db, _hello(booted, boot_token=booted.boot_token))
    driver_plane.mark_ready(db, booted.instance_id, welcome.connection_id)
    db.commit()


def _event(run_id: str, n: int, kind: str, **payload: object) -> DriverEvent:
    return DriverEvent(
        source_event_id=f"e{n}",
        run_id=run_id,
        kind=kind,
        occurred_at=utcnow().isoformat(),
        payload=dict(payload),
    )


def _ingest(engine: Engine, booted: Booted, *events: DriverEvent) -> None:
    with Session(engine) as db:
        row = db.get(DriverInstance, booted.instance_id)
        assert row is not None
        driver_plane.ingest_driver_events(db, row, list(events))
        db.commit()


def test_the_phases_of_a_run_cover_it_in_order_from_message_to_teardown(engine: Engine) -> None:
    with Session(engine) as db:
        booted = boot_fixture(db)
        run = db.get(SessionRun, booted.run_id)
        assert run is not None
        created = run.created_at
        boot = driver_plane.MarkClock()
        boot.mark("dispatch")
        boot.mark("sandbox", created=True, sandbox="c0ffee", image="mosoo-sandbox:test")
        boot.mark("driver_start")
        boot.write(db, booted.run_id)
        db.commit()
        _hello_and_ready(db, booted)
        after_ready = driver_plane.MarkClock()
        after_ready.mark("input")
        after_ready.write(db, booted.run_id)
        db.commit()
    run_id = booted.run_id
    _ingest(engine, booted, _event(run_id, 1, "run.started"))
    _ingest(engine, booted, _event(run_id, 2, "message.delta", text="Hel"))
    _ingest(engine, booted, _event(run_id, 3, "message.delta", text="lo"))
    _ingest(engine, booted, _event(run_id, 4, "run.completed"))
    with Session(engine) as db:
        first_token = db.exec(
            select(RunMark).where(RunMark.run_id == run_id, RunMark.name == "first_token")
        ).one()
        release = driver_plane.MarkClock()
        release.mark("outputs")
        release.mark("checkpoint")
        release.mark("teardown", sandbox="removed")
        release.write(db, run_id)
        # Written once: a retried release keeps the first moment.
        again = driver_plane.MarkClock()
        again.taken["teardown"] = (utcnow() + timedelta(hours=1), {})
        again.write(db, run_id)
        db.commit()

        account_id = booted.account_id
        found = diagnostics.run_diagnostics(db, account_id, run_id)
    names = [phase.name for phase in found.phases]
    assert names == [
        "dispatch",
        "sandbox",
        "driver_start",
        "hello",
        "ready",
        "input",
        "first_token",
        "last_event",
        "outputs",
        "checkpoint",
        "teardown",
    ]
    assert [p.label for p in found.phases][:2] == ["Queued", "Sandbox create"]
    # Contiguous: each phase starts where the one before ended, the first at the message.
    assert found.phases[0].started_at == created
    for before, after in zip(found.phases, found.phases[1:], strict=False):
        assert after.started_at == before.ended_at
        assert after.seconds >= 0
    last = found.phases[-1].ended_at
    assert abs(found.seconds - (last - created).total_seconds()) < 1e-6
    assert last < utcnow()  # the retried teardown an hour later was not taken
    # The second delta did not move the first token.
    assert next(p for p in found.phases if p.name == "first_token").ended_at == first_token.at
    assert found.sandbox == {"created": True, "sandbox": "c0ffee", "image": "mosoo-sandbox:test"}
    assert found.driver is not None
    assert (found.driver.version, found.driver.capabilities) == ("1.2.3", ["text_stream", "cancel"])
    assert found.status == "completed" and found.events_before_failure == []


def test_a_failed_run_shows_its_error_and_the_events_before_it(engine: Engine) -> None:
    with Session(engine) as db:
        booted = boot_fixture(db)
        _hello_and_ready(db, booted)
    run_id = booted.run_id
    _ingest(
        engine,
        booted,
        _event(run_id, 1, "run.started"),
        _event(
            run_id, 2, "tool.call.started", tool_use_id="t1", name="bash", input={"command": "x"}
        ),
        _event(run_id, 3, "run.failed", code="model_error", message="The provider answered 500."),
    )
    with Session(engine) as db:
        found = diagnostics.run_diagnostics(db, booted.account_id, run_id)
    assert (found.status, found.error_code) == ("failed", "model_error")
    assert found.error_message == "The provider answered 500."
    types = [e["type"] for e in found.events_before_failure]
    assert types[-1] == "run.failed" and "run.started" in types
    assert [p.name for p in found.phases][-1] == "last_event"


def test_another_owners_run_is_not_found(engine: Engine) -> None:
    with Session(engine) as db:
        booted = boot_fixture(db)
        stranger = identity.sign_in_identity(
            db, provider="email", subject="other@example.com", email="other@example.com"
        )
        db.commit()
        for account_id, run_id in [
            (stranger.id, booted.run_id),
            (booted.account_id, "01J00000000000000000000000"),
            (booted.account_id, ""),
        ]:
            with pytest.raises(NotFound):
                diagnostics.run_diagnostics(db, account_id, run_id)


def test_a_driver_that_comes_back_with_its_resume_token_counts_a_reconnect(
    engine: Engine,
) -> None:
    with Session(engine) as db:
        booted = boot_fixture(db)
        first = driver_plane.accept_hello(db, _hello(booted, boot_token=booted.boot_token))
        db.commit()
        driver_plane.accept_hello(db, _hello(booted, resume_token=first.resume_token))
        db.commit()
        found = diagnostics.run_diagnostics(db, booted.account_id, booted.run_id)
    assert found.driver is not None and found.driver.reconnects == 1
