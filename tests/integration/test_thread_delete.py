"""Deleting a thread removes it everywhere: its rows, its file objects and checkpoint in the
object store, and its live Cattle sandbox. Real control, worker, Redis and Docker sandbox."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import files, sessions, streams
from mosoo_core.errors import NotFound
from mosoo_core.runtime.runs import checkpoint_key
from mosoo_core.runtime.sandbox import LABEL_DRIVER_INSTANCE, get_backend
from mosoo_core.runtime.threads import delete_thread_everywhere
from mosoo_core.tables.files import StoredFile
from mosoo_core.tables.sessions import AgentSession, SessionEvent, SessionRun
from mosoo_core.tasks_client import enqueue_run_dispatch
from tests.support.openai_server import TextTurn, ToolCall, ToolCallsTurn
from tests.support.processes import wait_for
from tests.support.redis_db import db_number
from tests.support.stack import RuntimeStack, make_agent, new_thread, runtime_stack, wait_run

pytestmark = pytest.mark.integration
REDIS_DB = db_number(6)
PROVIDER_KEY = "sk-delete-" + uuid.uuid4().hex


@pytest.fixture
def stack(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RuntimeStack]:
    with runtime_stack(engine, database_url, tmp_path, monkeypatch, redis_db=REDIS_DB) as stack:
        yield stack


def _send(
    engine: Engine, account_id: str, thread_id: str, text: str, file_ids: list[str] | None = None
) -> str:
    with Session(engine) as db:
        sent = sessions.send_message(db, account_id, thread_id, text, file_ids=file_ids or [])
        db.commit()
    streams.publish_events(sent.events)
    enqueue_run_dispatch(sent.run.id)
    return sent.run.id


def _count(engine: Engine, model: type, **where: str) -> int:
    with Session(engine) as db:
        query = select(sa.func.count()).select_from(model)
        for name, value in where.items():
            query = query.where(getattr(model, name) == value)
        return int(db.exec(query).one())


def test_deleting_a_thread_removes_rows_objects_checkpoint_and_its_live_sandbox(
    stack: RuntimeStack,
) -> None:
    owner = make_agent(stack.engine, stack.model.base_url, PROVIDER_KEY, tools={"bash": "ask"})
    thread_id = new_thread(stack.engine, owner)
    with Session(stack.engine) as db:
        upload = files.upload_file(
            db,
            owner.account_id,
            owner.app_id,
            owner.agent_id,
            io.BytesIO(b"quarterly numbers " + uuid.uuid4().hex.encode()),
            "notes.txt",
        )
        object_key = db.exec(select(StoredFile.object_key).where(StoredFile.id == upload.id)).one()
        db.commit()
    store = files.get_store()
    assert store.exists(object_key)

    # A completed Cattle run leaves its /workspace checkpoint in the store.
    stack.model.add(TextTurn("Noted."))
    first = wait_run(
        stack.engine, _send(stack.engine, owner.account_id, thread_id, "keep this", [upload.id])
    )
    assert first.status == "completed", (first.error_code, first.error_message)
    checkpoint = checkpoint_key(owner.app_id, thread_id)
    wait_for(lambda: store.exists(checkpoint), 60, "the workspace checkpoint")

    # A second run waits for a permission: its sandbox is live when the thread is deleted.
    stack.model.add(
        ToolCallsTurn([ToolCall("bash", {"command": "ls"}, id="call_ls")]), TextTurn("done")
    )
    second_id = _send(stack.engine, owner.account_id, thread_id, "list the files")

    def waiting() -> bool:
        with Session(stack.engine) as db:
            run = db.get(SessionRun, second_id)
            return run is not None and run.status == "waiting_input"

    wait_for(waiting, 120, "the run to ask for permission")
    with Session(stack.engine) as db:
        run = db.get(SessionRun, second_id)
        assert run is not None and run.driver_instance_id
        instance_id = run.driver_instance_id
    backend = get_backend()
    assert backend.list_by_label({LABEL_DRIVER_INSTANCE: instance_id}), "the run's sandbox is up"

    # Another owner cannot delete it.
    with Session(stack.engine) as db:
        from mosoo_core.identity import sign_in_identity

        stranger = sign_in_identity(
            db, provider="email", subject="x@example.com", email="x@example.com"
        ).id
        db.commit()
    with pytest.raises(NotFound):
        delete_thread_everywhere(stranger, thread_id)
    assert _count(stack.engine, AgentSession, id=thread_id) == 1

    delete_thread_everywhere(owner.account_id, thread_id)

    assert _count(stack.engine, AgentSession, id=thread_id) == 0
    assert _count(stack.engine, SessionEvent, session_id=thread_id) == 0
    assert _count(stack.engine, SessionRun, session_id=thread_id) == 0
    assert _count(stack.engine, StoredFile, id=upload.id) == 0
    assert not store.exists(object_key), "the attachment's object is gone from the store"
    assert not store.exists(checkpoint), "the checkpoint is gone from the store"
    assert backend.list_by_label({LABEL_DRIVER_INSTANCE: instance_id}) == [], (
        "the sandbox is removed"
    )
    with Session(stack.engine) as db, pytest.raises(NotFound):
        sessions.get_session(db, owner.account_id, thread_id)
