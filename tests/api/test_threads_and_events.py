"""Contract of the agents, threads and events endpoints: answers and every documented error."""

from __future__ import annotations

import json

import pytest
import redis
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import agents, sessions, vault
from mosoo_core.sessions import driver_plane
from mosoo_core.sessions.driver_plane import NewEvent
from mosoo_core.tables.sessions import AgentSession, DriverCommand, SessionRun
from mosoo_web.api import build_api
from tests.api.conftest import REDIS_URL, ApiOwner, make_owner, use_redis
from tests.support.processes import free_port
from tests.support.runs import set_run_status


def _queued_dispatches() -> list[str]:
    """Run ids of the `mosoo.dispatch_run` tasks waiting in the Celery queue (Redis DB 5)."""
    found = []
    for raw in redis.Redis.from_url(REDIS_URL).lrange("celery", 0, -1):
        message = json.loads(raw)
        if message["headers"]["task"] == "mosoo.dispatch_run":
            found.append(message["headers"]["argsrepr"].strip("(),' "))
    return found


def _error(response, status: int, code: str) -> dict:  # type: ignore[no-untyped-def]
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    assert body["error"]["message"]
    return body["error"]


# --- agents ----------------------------------------------------------------------------------


def test_agents_lists_only_the_token_owners_agents(
    client: TestClient, owner: ApiOwner, other: ApiOwner
) -> None:
    listed = client.get("/api/v1/agents", headers=owner.headers)
    assert listed.status_code == 200
    assert [agent["id"] for agent in listed.json()["agents"]] == [owner.agent_id]
    agent = client.get(f"/api/v1/agents/{owner.agent_id}", headers=owner.headers).json()
    assert (
        agent["status"] == "published"
        and agent["published_version"] == 1
        and agent["model"] == "test-model"
    )
    _error(client.get(f"/api/v1/agents/{other.agent_id}", headers=owner.headers), 404, "not_found")
    _error(client.get("/api/v1/agents/nope", headers=owner.headers), 404, "not_found")


# --- creating threads ------------------------------------------------------------------------


def test_create_thread_without_message_pins_the_published_version(
    client: TestClient, owner: ApiOwner
) -> None:
    response = client.post(
        f"/api/v1/agents/{owner.agent_id}/threads",
        headers=owner.headers,
        json={"end_user_id": "customer-42", "title": "  Support   chat "},
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["run"] is None
    thread = body["thread"]
    assert (
        thread["purpose"] == "api" and thread["agent_version"] == 1 and thread["status"] == "idle"
    )
    assert thread["end_user_id"] == "customer-42" and thread["title"] == "Support chat"
    assert thread["archived"] is False and thread["last_seq"] == 0
    assert _queued_dispatches() == []


def test_create_thread_with_message_stores_it_and_queues_the_run(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    response = client.post(
        f"/api/v1/agents/{owner.agent_id}/threads",
        headers=owner.headers,
        json={"message": "Hello there"},
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["run"]["status"] == "queued" and body["run"]["thread_id"] == body["thread"]["id"]
    assert body["thread"]["status"] == "running"
    assert _queued_dispatches() == [body["run"]["id"]]
    events = client.get(
        f"/api/v1/threads/{body['thread']['id']}/events", headers=owner.headers
    ).json()["events"]
    assert events[0]["type"] == "user.message" and events[0]["payload"]["text"] == "Hello there"


def test_create_thread_refuses_an_unpublished_agent(client: TestClient, api_env: Engine) -> None:
    draft = make_owner(api_env, "draft@example.com", publish=False)
    response = client.post(
        f"/api/v1/agents/{draft.agent_id}/threads", headers=draft.headers, json={}
    )
    _error(response, 409, "agent_not_published")
    with Session(api_env) as db:
        # the refusal left no thread behind
        assert db.exec(select(sa.func.count()).select_from(AgentSession)).one() == 0


def test_create_thread_refuses_a_published_version_with_blockers(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    # The draft moves to another key; the published version keeps the old one.
    with Session(api_env) as db:
        replacement = vault.create_provider_credential(
            db,
            owner.account_id,
            owner.app_id,
            vault.ProviderCredentialInput(
                name="Replacement",
                provider="openai_compatible",
                base_url="http://127.0.0.1:9/v1",
                api_key="sk-replacement",
                models=["test-model"],
            ),
        )
        agents.update_agent(
            db,
            owner.account_id,
            owner.app_id,
            owner.agent_id,
            agents.AgentChanges(provider_credential_id=replacement.id),
        )
        db.commit()
    # The console refuses to delete a key a published version uses; a key removed behind its
    # back (e.g. by an operator in the database) is what the API must still catch.
    with api_env.begin() as connection:
        connection.execute(
            sa.text("DELETE FROM provider_credential WHERE id = :id"), {"id": owner.credential_id}
        )
    error = _error(
        client.post(
            f"/api/v1/agents/{owner.agent_id}/threads",
            headers=owner.headers,
            json={"message": "hi"},
        ),
        409,
        "readiness_blocked",
    )
    assert "provider key" in error["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"end_user_id": "x" * 201}, "end_user_id"),
        ({"message": ""}, "message"),
        ({"title": "t" * 81}, "title"),
        ({"unknown": 1}, "unknown"),
        ({"file_ids": "not-a-list"}, "file_ids"),
    ],
)
def test_create_thread_rejects_invalid_bodies_with_the_field(
    client: TestClient, owner: ApiOwner, body: dict, field: str
) -> None:
    error = _error(
        client.post(f"/api/v1/agents/{owner.agent_id}/threads", headers=owner.headers, json=body),
        400,
        "invalid_request",
    )
    assert error["field"] == field


def test_malformed_json_is_invalid_request(client: TestClient, owner: ApiOwner) -> None:
    response = client.post(
        f"/api/v1/agents/{owner.agent_id}/threads",
        headers={**owner.headers, "Content-Type": "application/json"},
        content=b"{not json",
    )
    _error(response, 400, "invalid_request")


def test_unknown_agent_is_not_found(client: TestClient, owner: ApiOwner) -> None:
    _error(
        client.post("/api/v1/agents/01UNKNOWN/threads", headers=owner.headers, json={}),
        404,
        "not_found",
    )


def test_unreachable_worker_answers_worker_unavailable_and_frees_the_thread(
    client: TestClient, owner: ApiOwner, api_env: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread_id = client.post(
        f"/api/v1/agents/{owner.agent_id}/threads", headers=owner.headers, json={}
    ).json()["thread"]["id"]
    use_redis(monkeypatch, f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    response = client.post(
        f"/api/v1/threads/{thread_id}/events",
        headers=owner.headers,
        json={"type": "user_message", "text": "hi"},
    )
    _error(response, 409, "worker_unavailable")
    with Session(api_env) as db:
        runs = db.exec(select(SessionRun).where(SessionRun.session_id == thread_id)).all()
        assert [run.status for run in runs] == ["cancelled"]


# --- listing and reading threads -------------------------------------------------------------


def _new_thread(client: TestClient, owner: ApiOwner, **body: object) -> str:
    response = client.post(
        f"/api/v1/agents/{owner.agent_id}/threads", headers=owner.headers, json=body
    )
    assert response.status_code == 201, response.text
    return str(response.json()["thread"]["id"])


def test_list_threads_filters_batches_and_pages(client: TestClient, owner: ApiOwner) -> None:
    alice = [_new_thread(client, owner, end_user_id="alice") for _ in range(3)]
    bob = _new_thread(client, owner, end_user_id="bob", message="hi")
    url = f"/api/v1/agents/{owner.agent_id}/threads"

    def ids(**params: object) -> list[str]:
        response = client.get(url, headers=owner.headers, params=params)
        assert response.status_code == 200, response.text
        return [thread["id"] for thread in response.json()["threads"]]

    assert sorted(ids(end_user_id="alice")) == sorted(alice)
    assert ids(status="running") == [bob]
    assert sorted(ids(ids=[alice[0], bob, "unknown"])) == sorted([alice[0], bob])
    client.post(f"/api/v1/threads/{alice[1]}/archive", headers=owner.headers)
    assert ids(archived=True) == [alice[1]]
    assert alice[1] not in ids(archived=False)

    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, object] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = client.get(url, headers=owner.headers, params=params).json()
        seen += [thread["id"] for thread in page["threads"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted([*alice, bob]) and len(seen) == 4

    assert (
        _error(
            client.get(url, headers=owner.headers, params={"status": "sleeping"}),
            400,
            "invalid_request",
        )["field"]
        == "status"
    )
    assert (
        _error(client.get(url, headers=owner.headers, params={"limit": 0}), 400, "invalid_request")[
            "field"
        ]
        == "limit"
    )


def test_get_thread_shows_the_latest_run(client: TestClient, owner: ApiOwner) -> None:
    thread_id = _new_thread(client, owner)
    assert (
        client.get(f"/api/v1/threads/{thread_id}", headers=owner.headers).json()["latest_run"]
        is None
    )
    client.post(
        f"/api/v1/threads/{thread_id}/events",
        headers=owner.headers,
        json={"type": "user_message", "text": "go"},
    )
    detail = client.get(f"/api/v1/threads/{thread_id}", headers=owner.headers).json()
    assert detail["id"] == thread_id and detail["latest_run"]["status"] == "queued"
    _error(client.get("/api/v1/threads/unknown", headers=owner.headers), 404, "not_found")


# --- events ----------------------------------------------------------------------------------


def test_events_page_after_seq_with_limit(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    thread_id = _new_thread(client, owner)
    with Session(api_env) as db:
        driver_plane.append_events(
            db, thread_id, [NewEvent("agent.message.delta", {"text": str(n)}) for n in range(5)]
        )
        db.commit()
    url = f"/api/v1/threads/{thread_id}/events"
    first = client.get(url, headers=owner.headers, params={"limit": 2}).json()
    assert [e["seq"] for e in first["events"]] == [1, 2] and first["has_more"] is True
    rest = client.get(
        url, headers=owner.headers, params={"after_seq": first["next_after_seq"]}
    ).json()
    assert [e["seq"] for e in rest["events"]] == [3, 4, 5] and rest["has_more"] is False
    assert rest["events"][0]["type"] == "agent.message.delta" and rest["events"][0]["payload"] == {
        "text": "2"
    }
    empty = client.get(url, headers=owner.headers, params={"after_seq": 5}).json()
    assert empty == {"events": [], "next_after_seq": 5, "has_more": False}
    assert (
        _error(
            client.get(url, headers=owner.headers, params={"after_seq": -1}), 400, "invalid_request"
        )["field"]
        == "after_seq"
    )
    assert (
        _error(
            client.get(url, headers=owner.headers, params={"limit": 1001}), 400, "invalid_request"
        )["field"]
        == "limit"
    )


def test_post_user_message_starts_a_run_and_a_second_is_refused(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    thread_id = _new_thread(client, owner)
    url = f"/api/v1/threads/{thread_id}/events"
    posted = client.post(url, headers=owner.headers, json={"type": "user_message", "text": "first"})
    assert posted.status_code == 202, posted.text
    body = posted.json()
    assert body["type"] == "user_message" and body["run"]["status"] == "queued"
    assert [e["type"] for e in body["events"]] == ["user.message", "session.status"]
    assert _queued_dispatches() == [body["run"]["id"]]
    # Running (before it starts, a second message waits its turn: test_prompt_queue.py).
    set_run_status(api_env, body["run"]["id"], "running")
    _error(
        client.post(url, headers=owner.headers, json={"type": "user_message", "text": "second"}),
        409,
        "conflict",
    )


def test_post_user_interrupt_cancels_a_queued_run(client: TestClient, owner: ApiOwner) -> None:
    thread_id = _new_thread(client, owner, message="work")
    url = f"/api/v1/threads/{thread_id}/events"
    stopped = client.post(url, headers=owner.headers, json={"type": "user_interrupt"})
    assert stopped.status_code == 202, stopped.text
    assert "run.cancelled" in [e["type"] for e in stopped.json()["events"]]
    assert (
        client.get(f"/api/v1/threads/{thread_id}", headers=owner.headers).json()["latest_run"][
            "status"
        ]
        == "cancelled"
    )
    # Nothing active: an interrupt is a no-op, and a new message is taken again.
    assert (
        client.post(url, headers=owner.headers, json={"type": "user_interrupt"}).json()["events"]
        == []
    )
    assert (
        client.post(
            url, headers=owner.headers, json={"type": "user_message", "text": "again"}
        ).status_code
        == 202
    )


def _run_on_a_driver(engine: Engine, owner: ApiOwner, thread_id: str) -> tuple[str, str]:
    """Put the thread's active run on a registered driver waiting for a permission."""
    with Session(engine) as db:
        driver = driver_plane.register_driver(
            db,
            app_id=owner.app_id,
            subject=f"session:{thread_id}",
            runtime="openai",
            session_id=thread_id,
        )
        run = sessions.active_run(db, thread_id)
        assert run is not None
        run.driver_instance_id = driver.instance_id
        run.status = "waiting_input"
        db.add(run)
        driver_plane.append_events(
            db,
            thread_id,
            [
                NewEvent(
                    "tool.confirmation.required",
                    {"request_id": "perm-1", "tool": "bash"},
                    run_id=run.id,
                )
            ],
        )
        db.commit()
        return driver.instance_id, run.id


def _commands(engine: Engine, instance_id: str) -> list[tuple[str, dict]]:
    with Session(engine) as db:
        rows = db.exec(
            select(DriverCommand).where(DriverCommand.driver_instance_id == instance_id)
        ).all()
        return [(row.kind, row.payload) for row in rows]


def test_post_permission_decision_reaches_the_driver(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    thread_id = _new_thread(client, owner)
    url = f"/api/v1/threads/{thread_id}/events"
    error = _error(
        client.post(
            url,
            headers=owner.headers,
            json={"type": "permission_decision", "request_id": "perm-1", "decision": "allow_once"},
        ),
        409,
        "conflict",
    )
    assert "Nothing is waiting" in error["message"]
    client.post(url, headers=owner.headers, json={"type": "user_message", "text": "run ls"})
    instance_id, _ = _run_on_a_driver(api_env, owner, thread_id)

    _error(
        client.post(
            url,
            headers=owner.headers,
            json={"type": "permission_decision", "request_id": "nope", "decision": "allow_once"},
        ),
        404,
        "not_found",
    )
    bad = client.post(
        url,
        headers=owner.headers,
        json={"type": "permission_decision", "request_id": "perm-1", "decision": "always"},
    )
    assert _error(bad, 400, "invalid_request")["field"] == "decision"
    answered = client.post(
        url,
        headers=owner.headers,
        json={"type": "permission_decision", "request_id": "perm-1", "decision": "allow_once"},
    )
    assert answered.status_code == 202, answered.text
    assert ("permission.resolve", {"request_id": "perm-1", "decision": "allow_once"}) in _commands(
        api_env, instance_id
    )


def test_post_user_interrupt_of_a_driver_run_tells_the_driver(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    thread_id = _new_thread(client, owner, message="long job")
    instance_id, run_id = _run_on_a_driver(api_env, owner, thread_id)
    response = client.post(
        f"/api/v1/threads/{thread_id}/events",
        headers=owner.headers,
        json={"type": "user_interrupt"},
    )
    assert response.status_code == 202 and response.json()["events"] == []
    assert ("turn.cancel", {"run_id": run_id, "reason": "user"}) in _commands(api_env, instance_id)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"type": "shout", "text": "x"}, "type"),
        ({"text": "no type"}, "type"),
        ({"type": "user_message"}, "text"),
        ({"type": "user_message", "text": ""}, "text"),
        ({"type": "user_interrupt", "extra": True}, "extra"),
    ],
)
def test_post_event_rejects_invalid_bodies(
    client: TestClient, owner: ApiOwner, body: dict, field: str
) -> None:
    thread_id = _new_thread(client, owner)
    response = client.post(f"/api/v1/threads/{thread_id}/events", headers=owner.headers, json=body)
    assert _error(response, 400, "invalid_request")["field"] == field


def test_archived_threads_refuse_messages_until_unarchived(
    client: TestClient, owner: ApiOwner
) -> None:
    thread_id = _new_thread(client, owner)
    archived = client.post(f"/api/v1/threads/{thread_id}/archive", headers=owner.headers)
    assert archived.status_code == 200 and archived.json()["archived"] is True
    url = f"/api/v1/threads/{thread_id}/events"
    _error(
        client.post(url, headers=owner.headers, json={"type": "user_message", "text": "hi"}),
        409,
        "thread_archived",
    )
    unarchived = client.post(f"/api/v1/threads/{thread_id}/unarchive", headers=owner.headers)
    assert unarchived.status_code == 200 and unarchived.json()["archived"] is False
    assert (
        client.post(
            url, headers=owner.headers, json={"type": "user_message", "text": "hi"}
        ).status_code
        == 202
    )
    # Archiving is refused while that run is active.
    _error(
        client.post(f"/api/v1/threads/{thread_id}/archive", headers=owner.headers),
        409,
        "thread_active",
    )


def test_delete_thread_removes_it(client: TestClient, owner: ApiOwner, api_env: Engine) -> None:
    thread_id = _new_thread(client, owner, message="bye")
    deleted = client.delete(f"/api/v1/threads/{thread_id}", headers=owner.headers)
    assert deleted.status_code == 200 and deleted.json() == {"id": thread_id, "deleted": True}
    _error(client.get(f"/api/v1/threads/{thread_id}", headers=owner.headers), 404, "not_found")
    _error(client.delete(f"/api/v1/threads/{thread_id}", headers=owner.headers), 404, "not_found")


# --- error envelope --------------------------------------------------------------------------


def test_unknown_routes_and_methods_use_the_envelope(client: TestClient, owner: ApiOwner) -> None:
    _error(client.get("/api/v1/nothing/here", headers=owner.headers), 404, "not_found")
    _error(client.get("/api/v1/nothing/here"), 404, "not_found")
    _error(client.put("/api/v1/agents", headers=owner.headers), 405, "method_not_allowed")


def test_unexpected_failures_are_internal_error_without_detail(
    owner: ApiOwner, api_env: Engine
) -> None:
    thread_id = None
    with TestClient(
        build_api(), base_url="http://127.0.0.1", raise_server_exceptions=False
    ) as client:
        thread_id = _new_thread(client, owner)
        # A corrupt stored event (payload not an object) breaks the response shape.
        with api_env.begin() as connection:
            connection.execute(
                sa.text(
                    "INSERT INTO session_event (id, session_id, seq, type, payload, occurred_at, created_at) "
                    "VALUES ('01CORRUPT0000000000000000', :sid, 1, 'x', '[\"secret-detail\"]', :now, :now)"
                ),
                {"sid": thread_id, "now": "2026-01-01 00:00:00"},
            )
        response = client.get(f"/api/v1/threads/{thread_id}/events", headers=owner.headers)
    error = _error(response, 500, "internal_error")
    assert "secret-detail" not in response.text and "Traceback" not in response.text
    assert set(error) == {"code", "message"}


def test_a_thread_can_be_started_without_a_body(client: TestClient, owner: ApiOwner) -> None:
    response = client.post(f"/api/v1/agents/{owner.agent_id}/threads", headers=owner.headers)
    assert response.status_code == 201 and response.json()["run"] is None


def test_oversized_json_bodies_are_refused_before_reading(
    client: TestClient, owner: ApiOwner
) -> None:
    url = f"/api/v1/agents/{owner.agent_id}/threads"
    declared = client.post(
        url, headers=owner.headers, content=b"{" + b" " * (3 * 1024 * 1024) + b"}"
    )
    _error(declared, 413, "payload_too_large")

    def chunked():  # type: ignore[no-untyped-def]
        for _ in range(40):
            yield b" " * (64 * 1024)

    streamed = client.post(
        url, headers={**owner.headers, "Content-Type": "application/json"}, content=chunked()
    )
    _error(streamed, 413, "payload_too_large")
