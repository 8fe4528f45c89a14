"""The public API driving a real run: real worker, control, Docker sandbox and driver, a
scripted OpenAI-compatible model, the API in a real uvicorn server. An integration caller
creates, configures, checks and publishes an Agent from code, uploads a file, starts a thread
with a message, streams the answer, answers a permission request and reads the artifact back."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import identity
from tests.api.conftest import REDIS_DB, LiveServer, add_provider_key, live_server
from tests.api.test_sse import _frames
from tests.support.openai_server import TextTurn, ToolCall, ToolCallsTurn
from tests.support.stack import RuntimeStack, runtime_stack

pytestmark = pytest.mark.integration
PROVIDER_KEY = "sk-api-" + uuid.uuid4().hex


@pytest.fixture
def stack(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RuntimeStack]:
    monkeypatch.setenv("MOSOO_API_SSE_KEEPALIVE_SECONDS", "1")
    with runtime_stack(engine, database_url, tmp_path, monkeypatch, redis_db=REDIS_DB) as stack:
        yield stack


def _follow(
    server: LiveServer,
    headers: dict[str, str],
    thread_id: str,
    after: int,
    until: set[str],
    timeout: float = 120,
) -> list[dict[str, Any]]:
    """Stream events after seq `after` until one of the `until` types arrives."""
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    with httpx.stream(
        "GET",
        f"{server.base_url}/api/v1/threads/{thread_id}/events/stream",
        headers={**headers, "Last-Event-ID": str(after)},
        timeout=httpx.Timeout(10, read=120),
    ) as response:
        assert response.status_code == 200
        for frame in _frames(response.iter_lines()):
            if time.monotonic() > deadline:
                break
            if "comment" in frame:  # a keep-alive, every second here
                continue
            events.append(json.loads(frame["data"]))
            if events[-1]["type"] in until:
                return events
    raise AssertionError(f"no {until} within {timeout} s: {[e['type'] for e in events]}")


def _owner_with_a_key(stack: RuntimeStack) -> tuple[str, str]:
    """What the console gives an owner before any API call: an account, its default App with
    a provider key (the key is added on Providers; the API never takes one), and a token."""
    email = "api-e2e@example.com"
    with Session(stack.engine) as db:
        account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
        app_id = identity.list_apps(db, account.id)[0].id
        credential = add_provider_key(
            db, account.id, app_id, api_key=PROVIDER_KEY, base_url=stack.model.base_url
        )
        token = identity.create_access_token(db, account.id, "backend").secret
        db.commit()
    return token, credential.id


def _agent_made_and_published_from_code(base: str, headers: dict[str, str], key: str) -> str:
    """The Agent is created, configured, checked and published through /api/v1 only."""
    made = httpx.post(f"{base}/agents", headers=headers, json={"name": "From CI", "kind": "cattle"})
    assert made.status_code == 201, made.text
    agent_url = f"{base}/agents/{made.json()['id']}"
    configured = httpx.patch(
        agent_url,
        headers=headers,
        json={
            "provider_credential_id": key,
            "model": "test-model",
            "system_prompt": "You are a test agent.",
            "tools": {"bash": "ask", "write": "allow"},
        },
    )
    assert configured.status_code == 200, configured.text
    readiness = httpx.get(f"{agent_url}/readiness", headers=headers).json()
    assert readiness["ready"] is True, readiness
    published = httpx.post(f"{agent_url}/publish", headers=headers, json={"summary": "From CI"})
    assert published.status_code == 201, published.text
    return str(made.json()["id"])


def test_an_integration_runs_an_agent_through_the_public_api(stack: RuntimeStack) -> None:
    token, key = _owner_with_a_key(stack)
    headers = {"Authorization": f"Bearer {token}"}
    secret_words = "blue pelican " + uuid.uuid4().hex[:6]
    stack.model.add(
        ToolCallsTurn(
            [
                ToolCall(
                    "bash",
                    {
                        "command": "mkdir -p outputs && cat /mnt/attachments/*/notes.txt > outputs/copy.txt"
                    },
                    id="call_1",
                )
            ]
        ),
        TextTurn("The notes say " + secret_words),
    )
    with live_server() as server:
        base = f"{server.base_url}/api/v1"
        agent_id = _agent_made_and_published_from_code(base, headers, key)
        uploaded = httpx.post(
            f"{base}/agents/{agent_id}/files",
            headers=headers,
            files={"file": ("notes.txt", secret_words.encode(), "text/plain")},
        )
        assert uploaded.status_code == 201, uploaded.text
        created = httpx.post(
            f"{base}/agents/{agent_id}/threads",
            headers={**headers, "Idempotency-Key": "first"},
            json={
                "message": "Copy my notes to outputs, then tell me what they say.",
                "file_ids": [uploaded.json()["id"]],
                "end_user_id": "customer-7",
            },
        )
        assert created.status_code == 201, created.text
        thread_id = created.json()["thread"]["id"]

        asked = _follow(
            server,
            headers,
            thread_id,
            0,
            {"tool.confirmation.required", "run.failed", "run.completed"},
        )
        request = asked[-1]
        assert request["type"] == "tool.confirmation.required", asked
        answered = httpx.post(
            f"{base}/threads/{thread_id}/events",
            headers=headers,
            json={
                "type": "permission_decision",
                "request_id": request["payload"]["request_id"],
                "decision": "allow_once",
            },
        )
        assert answered.status_code == 202, answered.text

        finished = _follow(
            server, headers, thread_id, request["seq"], {"run.completed", "run.failed"}
        )
        assert finished[-1]["type"] == "run.completed", finished
        text = "".join(
            e["payload"].get("text", "") for e in finished if e["type"] == "agent.message.delta"
        )
        assert secret_words in text

        detail = httpx.get(f"{base}/threads/{thread_id}", headers=headers).json()
        assert (
            detail["latest_run"]["status"] == "completed" and detail["end_user_id"] == "customer-7"
        )
        polled = httpx.get(
            f"{base}/threads/{thread_id}/events", headers=headers, params={"limit": 1000}
        ).json()
        assert [e["seq"] for e in polled["events"]] == list(range(1, len(polled["events"]) + 1))
        assert len(polled["events"]) >= detail["last_seq"]

        # Artifacts are collected after the turn and announced on the same stream.
        if not any(e["type"] == "session_files.updated" for e in finished):
            _follow(
                server,
                headers,
                thread_id,
                finished[-1]["seq"],
                {"session_files.updated"},
                timeout=60,
            )
        artifacts = [
            f
            for f in httpx.get(f"{base}/threads/{thread_id}/files", headers=headers).json()["files"]
            if f["kind"] == "artifact"
        ]
        assert [f["name"] for f in artifacts] == ["copy.txt"]
        content = httpx.get(f"{base}/files/{artifacts[0]['id']}/content", headers=headers)
        assert content.status_code == 200 and content.content == secret_words.encode()
