"""Kill the control process in the middle of a streamed answer and start it again: the run
completes with every event exactly once (ARCHITECTURE.md section 3, "Nothing is lost if a
process dies in the middle").

Real control, worker, Redis and Docker sandbox; the model is the scripted OpenAI-compatible
server. The sandbox sees control's socket through a directory mount, so the running driver
reconnects to the new control (and re-sends what was not acknowledged), and the `openai`
backend retries the model step whose stream died with the old control.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from mosoo_core.runtime.sandbox import LABEL_SUBJECT
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.sessions import SessionEvent
from tests.support.openai_server import TextTurn
from tests.support.processes import stop_group, wait_for
from tests.support.redis_db import db_number
from tests.support.stack import (
    RuntimeStack,
    labelled_containers,
    make_agent,
    new_thread,
    runtime_stack,
    send,
    wait_run,
)

pytestmark = pytest.mark.integration
REDIS_DB = db_number(8)
PROVIDER_KEY = "sk-restart-0a1b2c3d4e5f"
LONG_ANSWER = [f"word{i} " for i in range(80)]
FINAL_ANSWER = "The whole answer, streamed again after control came back."


@pytest.fixture
def stack(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RuntimeStack]:
    # Control is started by the test itself, so it can kill and restart it.
    with runtime_stack(
        engine, database_url, tmp_path, monkeypatch, redis_db=REDIS_DB, start_control=False
    ) as stack:
        yield stack


def _delta_ids(engine: Engine, session_id: str) -> list[str]:
    with Session(engine) as db:
        return [
            str(source)
            for source in db.exec(
                select(SessionEvent.source_event_id)
                .where(
                    SessionEvent.session_id == session_id,
                    SessionEvent.type == "agent.message.delta",
                )
                .order_by(col(SessionEvent.seq))
            ).all()
        ]


def test_control_killed_mid_stream_and_restarted_the_run_completes_with_every_event_once(
    stack: RuntimeStack,
) -> None:
    stack.model.add(TextTurn(LONG_ANSWER, delay=0.1), TextTurn(FINAL_ANSWER))
    control = stack.start("control-1", "control")
    owner = make_agent(
        stack.engine, stack.model.base_url, PROVIDER_KEY, email="restart@example.com", tools={}
    )
    thread_id = new_thread(stack.engine, owner)
    run_id = send(stack.engine, owner.account_id, thread_id, "tell me a long story")

    wait_for(
        lambda: len(_delta_ids(stack.engine, thread_id)) >= 5, 120, "the answer to start streaming"
    )
    before_kill = _delta_ids(stack.engine, thread_id)
    os.killpg(control.pid, signal.SIGKILL)  # no shutdown of any kind: the whole group dies
    assert stop_group(control) == -signal.SIGKILL
    assert len(before_kill) < len(LONG_ANSWER), "the first answer finished before the kill"
    time.sleep(1)
    stack.start("control-2", "control")
    # The new socket, in the directory the sandbox has mounted, usable by its uid 10001.
    socket_path = stack.data_dir / "run" / "control" / "control.sock"
    assert socket_path.is_socket() and socket_path.stat().st_mode & 0o777 == 0o666
    assert socket_path.parent.stat().st_mode & 0o777 == 0o755

    run = wait_run(stack.engine, run_id, timeout=180)
    with Session(stack.engine) as db:
        assert (run.status, run.error_code) == ("completed", None), (
            run.error_code,
            run.error_message,
        )
        events = driver_plane.read_events(db, thread_id, limit=10_000)

    # The log: seqs 1..N without a gap, no driver event stored twice.
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    sources = Counter(e.source_event_id for e in events if e.source_event_id)
    assert [source for source, count in sources.items() if count > 1] == []
    types = [e.type for e in events]
    assert types.count("run.started") == 1 and types.count("run.completed") == 1
    assert "run.failed" not in types and "run.cancelled" not in types
    assert not [e for e in events if "driver_lost" in str(e.payload)], (
        "the thread went through driver_lost"
    )

    # The deltas stored before the kill are there exactly once, where they were.
    stored_deltas = [e.source_event_id for e in events if e.type == "agent.message.delta"]
    assert all(Counter(stored_deltas)[source] == 1 for source in before_kill)
    assert stored_deltas[: len(before_kill)] == before_kill

    # The cut message: closed as interrupted, its text exactly its stored deltas (nothing the
    # driver streamed before the kill was lost or doubled on the way); then the retried step.
    completed = [e for e in events if e.type == "agent.message.completed"]
    assert [bool(e.payload.get("interrupted")) for e in completed] == [True, False]
    cut, final = completed
    cut_deltas = [
        e.payload["text"]
        for e in events
        if e.type == "agent.message.delta" and e.payload["message_id"] == cut.payload["message_id"]
    ]
    assert len(cut_deltas) >= len(before_kill)
    assert "".join(cut_deltas) == cut.payload["text"] == "".join(LONG_ANSWER[: len(cut_deltas)])
    final_deltas = [
        e.payload["text"]
        for e in events
        if e.type == "agent.message.delta"
        and e.payload["message_id"] == final.payload["message_id"]
    ]
    assert "".join(final_deltas) == final.payload["text"] == FINAL_ANSWER
    assert (
        next(e for e in events if e.type == "run.completed").payload["final_text"] == FINAL_ANSWER
    )
    assert types.index("agent.message.completed") < max(
        i for i, t in enumerate(types) if t == "agent.message.started"
    )

    # The provider saw the cut stream and exactly one retry.
    assert stack.model.streams_aborted == 1 and stack.model.streams_completed == 1
    assert len(stack.model.chat_requests) == 2
    assert {r.headers["authorization"] for r in stack.model.chat_requests} == {
        f"Bearer {PROVIDER_KEY}"
    }
    # The same driver carried on: it reconnected to the new control; no second boot.
    worker_log = (stack.logs / "worker.log").read_bytes()
    assert worker_log.count(b"sandbox.created") == 1
    assert b"driver.connected" in (stack.logs / "control-2.log").read_bytes()

    # Cattle: the sandbox is removed once the run is over, by a worker the new control asked.
    wait_for(
        lambda: not labelled_containers(f"{LABEL_SUBJECT}=session:{thread_id}"),
        60,
        "the Cattle sandbox to be removed",
    )
