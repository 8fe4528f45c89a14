"""`POST /threads/{id}/events` with `user_message` while the thread's run is still booting,
over HTTP (a real uvicorn server on loopback): each message is taken (202, run `pending`),
stored at once in order, and waits its turn; the database agrees afterwards. At most ten wait;
an idempotent retry stores a message once; an interrupt cancels them with the run; another
owner's thread takes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from mosoo_core import sessions
from mosoo_core.runtime import run_queue
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.sessions import AgentSession, SessionEvent, SessionRun
from tests.api.conftest import REDIS_URL, ApiOwner, LiveServer, live_server
from tests.support.runs import dispatch_tasks, set_run_status


@pytest.fixture
def server(api_env: Engine) -> Iterator[LiveServer]:
    with live_server() as running:
        yield running


def _dispatches() -> list[str]:
    return dispatch_tasks(redis.Redis.from_url(REDIS_URL))


def _booting_thread(server: LiveServer, owner: ApiOwner, engine: Engine) -> tuple[str, str]:
    """(thread_id, run_id): a thread whose first message's run a worker is booting."""
    created = httpx.post(
        f"{server.base_url}/api/v1/agents/{owner.agent_id}/threads",
        headers=owner.headers,
        json={"message": "first"},
    )
    assert created.status_code == 201, created.text
    thread_id, run_id = created.json()["thread"]["id"], created.json()["run"]["id"]
    set_run_status(engine, run_id, "booting")
    return thread_id, run_id


def _post(
    server: LiveServer, owner: ApiOwner, thread_id: str, body: dict[str, Any], **headers: str
) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/api/v1/threads/{thread_id}/events",
        headers={**owner.headers, **headers},
        json=body,
        timeout=30,
    )


def _message(
    server: LiveServer, owner: ApiOwner, thread_id: str, text: str, **headers: str
) -> httpx.Response:
    return _post(server, owner, thread_id, {"type": "user_message", "text": text}, **headers)


def _runs(engine: Engine, thread_id: str) -> list[tuple[str, str]]:
    """(input, status) of the thread's runs, in the order they are answered."""
    with Session(engine) as db:
        rows = db.exec(
            select(SessionRun)
            .where(SessionRun.session_id == thread_id)
            .order_by(col(SessionRun.created_at), col(SessionRun.id))
        ).all()
        return [(row.input_text, row.status) for row in rows]


def _stored_messages(engine: Engine, thread_id: str) -> list[str]:
    with Session(engine) as db:
        rows = db.exec(
            select(SessionEvent)
            .where(SessionEvent.session_id == thread_id, SessionEvent.type == "user.message")
            .order_by(col(SessionEvent.seq))
        ).all()
        return [str(row.payload["text"]) for row in rows]


def test_three_messages_sent_during_a_boot_wait_their_turn_in_order(
    server: LiveServer, owner: ApiOwner, other: ApiOwner, api_env: Engine
) -> None:
    thread_id, first = _booting_thread(server, owner, api_env)
    texts = ["second", "third", "fourth"]
    with ThreadPoolExecutor(3) as pool:  # at once: the thread's lock puts them in one order
        answers = list(pool.map(lambda text: _message(server, owner, thread_id, text), texts))

    for answer in answers:
        assert answer.status_code == 202, answer.text
        body = answer.json()
        assert body["run"]["status"] == "pending"
        assert [e["type"] for e in body["events"]] == ["user.message"]
    # Viewers read them in the order they will be answered.
    page = httpx.get(f"{server.base_url}/api/v1/threads/{thread_id}/events", headers=owner.headers)
    shown = [e for e in page.json()["events"] if e["type"] == "user.message"]
    run_of = {a.json()["run"]["id"]: a.json()["events"][0]["payload"]["text"] for a in answers}
    order = [e["payload"]["text"] for e in shown]
    assert order[0] == "first" and sorted(order[1:]) == sorted(texts)
    assert [run_of.get(e["run_id"], "first") for e in shown] == order
    assert _runs(api_env, thread_id) == [("first", "booting")] + [(t, "pending") for t in order[1:]]
    assert _dispatches() == [first]  # a waiting message is not the worker's yet

    # Another owner's token: not found, and nothing stored.
    refused = _message(server, other, thread_id, "intruder")
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"
    assert _stored_messages(api_env, thread_id) == order

    # The first run ends: the oldest waiting message is next, and goes to the worker.
    with Session(api_env) as db:
        run = db.get(SessionRun, first)
        assert run is not None
        driver_plane.finish_run(db, run, "completed")
        db.commit()
    next_id = [e["run_id"] for e in shown][1]
    assert run_queue.dispatch_next_run(first) == next_id
    assert _dispatches() == [first, next_id]
    thread = httpx.get(f"{server.base_url}/api/v1/threads/{thread_id}", headers=owner.headers)
    assert thread.json()["status"] == "running"

    # Once a run is running, a message is refused with the reason, as before.
    set_run_status(api_env, next_id, "running")
    busy = _message(server, owner, thread_id, "fifth")
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "conflict"
    assert "still working" in busy.json()["error"]["message"]
    assert len(_runs(api_env, thread_id)) == 4


def test_the_eleventh_waiting_message_is_refused_with_queue_full(
    server: LiveServer, owner: ApiOwner, api_env: Engine
) -> None:
    thread_id, _first = _booting_thread(server, owner, api_env)
    for number in range(sessions.MAX_PENDING_MESSAGES):
        assert _message(server, owner, thread_id, f"m{number}").status_code == 202
    full = _message(server, owner, thread_id, "one too many")
    assert full.status_code == 409, full.text
    error = full.json()["error"]
    assert error["code"] == "queue_full" and "10 messages are already waiting" in error["message"]
    assert len(_runs(api_env, thread_id)) == 1 + sessions.MAX_PENDING_MESSAGES
    assert "one too many" not in _stored_messages(api_env, thread_id)


def test_a_retried_waiting_message_with_its_idempotency_key_is_stored_once(
    server: LiveServer, owner: ApiOwner, api_env: Engine
) -> None:
    thread_id, _first = _booting_thread(server, owner, api_env)
    key = {"Idempotency-Key": "queue-retry-1"}
    sent = _message(server, owner, thread_id, "second", **key)
    again = _message(server, owner, thread_id, "second", **key)
    assert sent.status_code == again.status_code == 202
    assert again.headers.get("Idempotency-Replayed") == "true"
    assert again.json()["run"] == sent.json()["run"] and sent.json()["run"]["status"] == "pending"
    assert _runs(api_env, thread_id) == [("first", "booting"), ("second", "pending")]
    assert _stored_messages(api_env, thread_id) == ["first", "second"]


def test_an_interrupt_cancels_the_booting_run_and_the_waiting_messages(
    server: LiveServer, owner: ApiOwner, api_env: Engine
) -> None:
    thread_id, first = _booting_thread(server, owner, api_env)
    for text in ("second", "third"):
        assert _message(server, owner, thread_id, text).status_code == 202
    stopped = _post(server, owner, thread_id, {"type": "user_interrupt"})
    assert stopped.status_code == 202, stopped.text
    events = stopped.json()["events"]
    assert [e["type"] for e in events] == ["run.cancelled"] * 3 + ["session.status"]
    assert events[-2]["run_id"] == first  # after the waiting ones: nothing left to promote
    assert _runs(api_env, thread_id) == [
        ("first", "cancelled"),
        ("second", "cancelled"),
        ("third", "cancelled"),
    ]
    with Session(api_env) as db:
        thread = db.get(AgentSession, thread_id)
        assert thread is not None and thread.status == "idle"
    # The thread takes a message again, as a run of its own for the worker.
    again = _message(server, owner, thread_id, "again")
    assert again.status_code == 202 and again.json()["run"]["status"] == "queued"
