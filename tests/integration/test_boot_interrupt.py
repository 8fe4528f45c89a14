"""Stop while the sandbox boots, end to end: real control, worker, Redis, Docker and driver.

The run is stopped as soon as its container exists (or, on a running Pet sandbox, its driver
process) and before its driver is ready (checked, not timed), through the call the API's
`user_interrupt` and the console's Stop make. What the boot made goes at once, not at the
next minute's sweep: the Cattle sandbox is removed; the Pet sandbox stays, but the run's
driver and attachments do not. A stop whose dispatcher died is released by the teardown it
asks for, and a late teardown never takes a file the thread's next message named again."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import files, sessions
from mosoo_core.files import get_store
from mosoo_core.identity import list_apps, sign_in_identity
from mosoo_core.runtime import attachments
from mosoo_core.runtime.runs import (
    DISPATCHING_MARK_SECONDS,
    checkpoint_key,
    dispatch_run,
    finish_run_sandbox,
    installation_label,
)
from mosoo_core.runtime.sandbox import LABEL_SUBJECT, SandboxSpec, get_backend
from mosoo_core.sessions import actions, driver_plane
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import DriverCommand, DriverInstance, SessionRun
from tests.support.openai_server import TextTurn, ToolCall, ToolCallsTurn
from tests.support.processes import wait_for
from tests.support.redis_db import db_number
from tests.support.stack import (
    Owner,
    RuntimeStack,
    bind_unserved_control_socket,
    kill_worker_once_sandbox_created,
    labelled_containers,
    make_agent,
    new_thread,
    runtime_env,
    runtime_stack,
    send,
    wait_run,
)

pytestmark = pytest.mark.integration
REDIS_DB = db_number(13)
PROVIDER_KEY = "sk-boot-interrupt-5e4d3c2b1a"
GONE_WITHIN_SECONDS = 5.0


@pytest.fixture
def stack(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RuntimeStack]:
    with runtime_stack(engine, database_url, tmp_path, monkeypatch, redis_db=REDIS_DB) as stack:
        yield stack


def _containers(subject: str) -> list[Any]:
    return labelled_containers(
        f"{LABEL_SUBJECT}={subject}", *(f"{k}={v}" for k, v in installation_label().items())
    )


def _run(engine: Engine, run_id: str) -> SessionRun:
    with Session(engine) as db:
        run = db.get(SessionRun, run_id)
        assert run is not None
        return run


def _driver(engine: Engine, instance_id: str) -> DriverInstance:
    with Session(engine) as db:
        instance = db.get(DriverInstance, instance_id)
        assert instance is not None
        return instance


def _stop_while_booting(
    stack: RuntimeStack,
    owner: Owner,
    thread_id: str,
    subject: str,
    file_ids: list[str] | None = None,
) -> tuple[str, float, Any]:
    """Send a message and stop its run the moment its sandbox exists, before the driver is
    ready. Returns the run id, when it was stopped and the container."""
    sent = actions.send_and_dispatch(
        owner.account_id, thread_id, "this message is stopped", file_ids=file_ids or []
    )
    deadline = time.monotonic() + 120
    while not (found := _containers(subject)):
        assert time.monotonic() < deadline, "the sandbox was never created"
        run = _run(stack.engine, sent.run.id)
        assert run.status in ("queued", "booting"), (run.status, run.error_code, run.error_message)
        time.sleep(0.02)
    (container,) = found
    run = _run(stack.engine, sent.run.id)
    assert run.status == "booting" and run.driver_instance_id is not None
    assert _driver(stack.engine, run.driver_instance_id).ready_at is None, (
        "too late: the driver is already ready"
    )
    stopped = actions.stop_run(owner.account_id, thread_id)
    stopped_at = time.monotonic()
    assert "run.cancelled" in [e.type for e in stopped]
    return sent.run.id, stopped_at, container


@contextlib.contextmanager
def _paused(process: subprocess.Popen[bytes]) -> Iterator[None]:
    """Hold a process group we started still (SIGSTOP), then let it go on (SIGCONT)."""
    os.killpg(process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(process.pid, signal.SIGCONT)


def _driver_processes(container: Any) -> list[str]:
    listing = container.exec_run(
        [
            "sh",
            "-c",
            "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < \"$f\"; echo; done 2>/dev/null",
        ],
        user="0",
    )
    # `mosoo-driver` execs `python -m driver.main`.
    return [
        line
        for line in listing.output.decode(errors="replace").splitlines()
        if "driver.main" in line
    ]


def test_a_cattle_run_stopped_while_booting_loses_its_sandbox_at_once_and_the_thread_goes_on(
    stack: RuntimeStack,
) -> None:
    stack.model.add(
        ToolCallsTurn([ToolCall("bash", {"command": "echo kept > notes.txt"})]),
        TextTurn("Written."),
        ToolCallsTurn([ToolCall("bash", {"command": "cat notes.txt"})]),
        TextTurn("It says kept."),
    )
    owner = make_agent(stack.engine, stack.model.base_url, PROVIDER_KEY)
    thread_id = new_thread(stack.engine, owner)
    subject = f"session:{thread_id}"
    first = wait_run(
        stack.engine, actions.send_and_dispatch(owner.account_id, thread_id, "write a note").run.id
    )
    assert first.status == "completed", (first.error_code, first.error_message)
    wait_for(lambda: not _containers(subject), 60, "the first run's sandbox to be removed")
    store = get_store()
    key = checkpoint_key(owner.app_id, thread_id)
    with store.open(key) as handle:
        checkpoint = handle.read()

    run_id, stopped_at, container = _stop_while_booting(stack, owner, thread_id, subject)
    attachments = stack.data_dir / "sandbox-attachments" / container.name
    wait_for(
        lambda: not _containers(subject) and not attachments.exists(),
        GONE_WITHIN_SECONDS,
        "the stopped run's sandbox and its attachments folder to be removed",
    )
    print(f"stop to sandbox removed: {time.monotonic() - stopped_at:.2f}s")
    stopped = _run(stack.engine, run_id)
    assert (stopped.status, stopped.error_code) == ("cancelled", None)
    assert stopped.driver_instance_id is not None
    wait_for(
        lambda: _driver(stack.engine, stopped.driver_instance_id).status == "stopped",
        10,
        "the driver to be stopped",
    )  # type: ignore[arg-type]
    # A stopped run is not checkpointed: the thread's workspace is the one the first run left.
    with store.open(key) as handle:
        assert handle.read() == checkpoint
    # Whatever runs again for it (a re-delivered dispatch, a second teardown) changes nothing.
    assert dispatch_run(run_id) == "cancelled"
    assert finish_run_sandbox(run_id) == "removed"
    assert _run(stack.engine, run_id).status == "cancelled"

    with Session(stack.engine) as db:
        assert sessions.get_session(db, owner.account_id, thread_id).status == "idle"
    third = wait_run(
        stack.engine, actions.send_and_dispatch(owner.account_id, thread_id, "read it back").run.id
    )
    assert third.status == "completed", (third.error_code, third.error_message)
    with Session(stack.engine) as db:
        events = driver_plane.read_events(db, thread_id, limit=1000)
    outputs = [e.payload["output"] for e in events if e.type == "tool.use.completed"]
    assert outputs[-1].strip() == "kept"
    # The stopped message never reached the model.
    assert len(stack.model.chat_requests) == 4
    assert not any(
        m.get("content") == "this message is stopped" and m.get("role") == "user"
        for request in stack.model.chat_requests
        for m in request.messages
    )
    assert [e.type for e in events if e.run_id == run_id] == ["user.message", "run.cancelled"]
    wait_for(lambda: not _containers(subject), 60, "the last run's sandbox to be removed")


def test_a_pet_run_stopped_while_booting_stops_only_its_driver_and_the_thread_goes_on(
    stack: RuntimeStack,
) -> None:
    owner = make_agent(stack.engine, stack.model.base_url, PROVIDER_KEY, kind="pet")
    thread_id = new_thread(stack.engine, owner)
    subject = f"agent:{owner.agent_id}"
    with Session(stack.engine, expire_on_commit=False) as db:
        notes = files.upload_file(
            db,
            owner.account_id,
            owner.app_id,
            owner.agent_id,
            io.BytesIO(b"for one message\n"),
            "notes.txt",
            "text/plain",
            session_id=thread_id,
        )
        db.commit()

    run_id, stopped_at, container = _stop_while_booting(
        stack, owner, thread_id, subject, file_ids=[notes.id]
    )
    stopped = _run(stack.engine, run_id)
    assert stopped.driver_instance_id is not None
    attachment = stack.data_dir / "sandbox-attachments" / container.name / notes.id

    def released() -> bool:
        return (
            not _driver_processes(container)
            and not attachment.exists()
            and _driver(stack.engine, stopped.driver_instance_id).status == "stopped"  # type: ignore[arg-type]
        )

    wait_for(released, GONE_WITHIN_SECONDS, "the stopped run's driver and attachment to go")
    print(f"stop to driver stopped: {time.monotonic() - stopped_at:.2f}s")
    # The Agent's sandbox itself stays.
    container.reload()
    assert [c.id for c in _containers(subject)] == [container.id] and container.status == "running"
    assert (_run(stack.engine, run_id).status, _run(stack.engine, run_id).error_code) == (
        "cancelled",
        None,
    )
    assert dispatch_run(run_id) == "cancelled"
    with Session(stack.engine) as db:
        stops = db.exec(
            select(DriverCommand).where(
                DriverCommand.driver_instance_id == stopped.driver_instance_id,
                DriverCommand.kind == "session.stop",
            )
        ).all()
        assert len(stops) <= 1  # told once, however often the teardown runs

    # The next message names the same file again and reads it while a late teardown of the
    # stopped run comes by: that file is the new run's now and stays.
    path = f"/mnt/attachments/{notes.id}/notes.txt"
    stack.model.add(
        ToolCallsTurn([ToolCall("bash", {"command": f"sleep 4; cat {path}"})]), TextTurn("Read it.")
    )
    nxt_id = actions.send_and_dispatch(
        owner.account_id, thread_id, "read the file", file_ids=[notes.id]
    ).run.id
    wait_for(
        lambda: attachment.exists() and _run(stack.engine, nxt_id).status == "running",
        60,
        "the file to reach the next run",
    )
    assert finish_run_sandbox(run_id) == "kept"
    assert attachment.exists() and _run(stack.engine, nxt_id).status == "running"
    # While it runs, only the new run's driver lives in the Agent's sandbox (the check sees
    # drivers at all). Read before the run ends: a run's driver is stopped once it is over.
    assert len(_driver_processes(container)) == 1
    nxt = wait_run(stack.engine, nxt_id)
    assert nxt.status == "completed", (nxt.error_code, nxt.error_message)
    with Session(stack.engine) as db:
        outputs = [
            e.payload["output"]
            for e in driver_plane.read_events(db, thread_id, limit=1000)
            if e.type == "tool.use.completed"
        ]
    assert [output.strip() for output in outputs] == ["for one message"]
    assert [c.id for c in _containers(subject)] == [container.id]
    assert len(stack.model.chat_requests) == 2  # the stopped message never reached the model
    wait_for(
        lambda: not attachment.exists(), 60, "the next run's attachment to be taken out after it"
    )


def test_a_pet_run_stopped_once_its_driver_runs_stops_that_driver_only(stack: RuntimeStack) -> None:
    stack.model.add(TextTurn("First thread."), TextTurn("Second thread, after the stop."))
    owner = make_agent(stack.engine, stack.model.base_url, PROVIDER_KEY, kind="pet")
    subject = f"agent:{owner.agent_id}"
    other_thread = new_thread(stack.engine, owner)
    first = wait_run(
        stack.engine, actions.send_and_dispatch(owner.account_id, other_thread, "hello").run.id
    )
    assert first.status == "completed", (first.error_code, first.error_message)
    (container,) = _containers(subject)
    # A run's driver goes once its run is over; the Agent's sandbox stays.
    assert first.driver_instance_id is not None
    wait_for(
        lambda: _driver(stack.engine, first.driver_instance_id).status == "stopped",  # type: ignore[arg-type]
        60,
        "the finished run's driver to be stopped",
    )
    wait_for(lambda: _driver_processes(container) == [], 60, "the finished run's driver to exit")
    drivers_before = _driver_processes(container)

    thread_id = new_thread(stack.engine, owner)
    with Session(stack.engine, expire_on_commit=False) as db:
        notes = files.upload_file(
            db,
            owner.account_id,
            owner.app_id,
            owner.agent_id,
            io.BytesIO(b"for one message\n"),
            "notes.txt",
            "text/plain",
            session_id=thread_id,
        )
        db.commit()
    attachment = stack.data_dir / "sandbox-attachments" / container.name / notes.id
    # A warm driver is ready within a few tens of milliseconds of starting: control is held
    # still (SIGSTOP) so that its hello waits, and the stop lands while it boots, every time.
    with _paused(stack.started["control"]):
        sent = actions.send_and_dispatch(
            owner.account_id, thread_id, "this message is stopped", file_ids=[notes.id]
        )
        deadline = time.monotonic() + 60
        while len(_driver_processes(container)) <= len(drivers_before):
            assert time.monotonic() < deadline, "the run's driver never started"
        run = _run(stack.engine, sent.run.id)
        assert run.status == "booting" and run.driver_instance_id is not None
        assert _driver(stack.engine, run.driver_instance_id).ready_at is None, (
            "too late: the driver is already ready"
        )
        assert attachment.exists(), "delivered before the driver starts"
        assert "run.cancelled" in [e.type for e in actions.stop_run(owner.account_id, thread_id)]
    stopped_at = time.monotonic()

    wait_for(
        lambda: (
            not attachment.exists()
            and _driver(stack.engine, run.driver_instance_id).status == "stopped"
        ),  # type: ignore[arg-type]
        GONE_WITHIN_SECONDS,
        "the stopped run's attachment to go and its driver to be stopped",
    )
    print(f"stop to attachment out and driver stopped: {time.monotonic() - stopped_at:.2f}s")
    # The process exits as soon as it reaches control (refused at hello), however slow its boot.
    wait_for(
        lambda: _driver_processes(container) == drivers_before,
        60,
        "the stopped run's driver to exit",
    )
    print(f"stop to its driver process gone: {time.monotonic() - stopped_at:.2f}s")
    container.reload()
    assert [c.id for c in _containers(subject)] == [container.id] and container.status == "running"
    assert (_run(stack.engine, sent.run.id).status, _run(stack.engine, sent.run.id).error_code) == (
        "cancelled",
        None,
    )

    nxt = wait_run(
        stack.engine, actions.send_and_dispatch(owner.account_id, thread_id, "hello again").run.id
    )
    assert nxt.status == "completed", (nxt.error_code, nxt.error_message)
    assert len(stack.model.chat_requests) == 2


def test_a_stop_after_the_dispatcher_died_still_releases_the_boot(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No control process: a socket nobody serves keeps the boot waiting, so the worker can be
    # killed in it (as in test_run_end_to_end's worker-killed test).
    with runtime_stack(
        engine, database_url, tmp_path, monkeypatch, redis_db=REDIS_DB, start_control=False
    ) as stack:
        dead_socket = bind_unserved_control_socket(stack)
        owner = make_agent(engine, stack.model.base_url, PROVIDER_KEY)
        thread_id = new_thread(engine, owner)
        subject = f"session:{thread_id}"
        run_id = send(engine, owner.account_id, thread_id, "hello")
        kill_worker_once_sandbox_created(stack)
        dead_socket.close()
        assert _containers(subject), "the dead worker left its sandbox"
        assert _run(engine, run_id).status == "booting"

        assert "run.cancelled" in [e.type for e in actions.stop_run(owner.account_id, thread_id)]
        stopped_at = time.monotonic()
        stack.start("worker-again", "worker", "--concurrency", "2")

        # The dead dispatcher's mark lapses, then the teardown the stop asked for runs: it
        # removes the sandbox, then marks the driver stopped (wait for both, not the first).
        def released() -> bool:
            instance_id = _run(engine, run_id).driver_instance_id
            return not _containers(subject) and (
                instance_id is not None and _driver(engine, instance_id).status == "stopped"
            )

        wait_for(released, 2 * DISPATCHING_MARK_SECONDS + 30, "the boot to be released")
        print(f"stop (no dispatcher alive) to boot released: {time.monotonic() - stopped_at:.2f}s")
        stopped = _run(engine, run_id)
        assert (stopped.status, stopped.error_code) == ("cancelled", None)
        assert _driver(engine, stopped.driver_instance_id).status == "stopped"  # type: ignore[arg-type]


def test_a_late_teardown_of_a_stopped_pet_boot_leaves_the_files_a_newer_message_named_again(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stopped run's dispatcher died, so its teardown comes later, when the thread's next
    # message may already have named one of its files again (and had it delivered).
    runtime_env(tmp_path / "data", database_url, REDIS_DB, monkeypatch)
    with Session(engine, expire_on_commit=False) as db:
        account = sign_in_identity(
            db, provider="email", subject="late@example.com", email="late@example.com"
        )
        app_id = list_apps(db, account.id)[0].id
        agent = Agent(app_id=app_id, name="Pet", model="m", kind="pet")
        db.add(agent)
        db.flush()
        thread_id = sessions.create_session(db, account.id, app_id, agent.id).id
        kept, dropped = (
            files.upload_file(
                db,
                account.id,
                app_id,
                agent.id,
                io.BytesIO(name.encode()),
                name,
                "text/plain",
                session_id=thread_id,
            )
            for name in ("kept.txt", "dropped.txt")
        )
        stopped_id = sessions.send_message(
            db, account.id, thread_id, "stopped", file_ids=[kept.id, dropped.id]
        ).run.id
        driver = driver_plane.register_driver(
            db, app_id=app_id, subject=f"agent:{agent.id}", runtime="openai", session_id=thread_id
        )
        stopped = db.get(SessionRun, stopped_id)
        assert stopped is not None
        stopped.status, stopped.driver_instance_id, stopped.snapshot = (
            "booting",
            driver.instance_id,
            {"kind": "pet"},
        )
        driver_plane.finish_run(db, stopped, "cancelled", emit_event=True)
        sessions.send_message(db, account.id, thread_id, "again", file_ids=[kept.id])
        db.commit()
    backend = get_backend()
    pet = backend.create(
        SandboxSpec(subject=f"agent:{agent.id}", app_id=app_id, labels=installation_label())
    )
    try:
        attachments.deliver_attachments(backend, pet, stopped_id)
        folder = backend.attachments_dir(pet)
        assert (folder / kept.id).exists() and (folder / dropped.id).exists()

        assert finish_run_sandbox(stopped_id, backend) == "kept"
        assert (folder / kept.id).exists(), "the newer message's file stays"
        assert not (folder / dropped.id).exists()
        assert _driver(engine, driver.instance_id).status == "stopped"
        assert finish_run_sandbox(stopped_id, backend) == "kept"
        assert (folder / kept.id).exists()
    finally:
        backend.remove(pet)
