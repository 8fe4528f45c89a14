"""The public API's limits through `/api/v1` of a real `mosoo web` (started with
MOSOO_API_RATE_LIMIT_PER_MINUTE=5): rate limit per token, body and upload sizes,
attachments per message and per thread, idempotency keys, revoked tokens, other owners."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import files, identity
from mosoo_core.clock import utcnow
from mosoo_core.tables.files import StoredFile
from mosoo_core.tables.identity import AccessToken, IdempotencyRecord
from mosoo_core.tables.sessions import AgentSession, SessionRun
from tests.api.conftest import ApiOwner as Owner
from tests.api.conftest import make_owner
from tests.security.conftest import (
    API_RATE_LIMIT_PER_MINUTE,
    Installation,
    count,
    error_code,
    new_token,
    rows,
    update,
)
from tests.support.runs import set_run_status

pytestmark = pytest.mark.integration

Web = Callable[..., httpx.Client]
MiB = 1024 * 1024


def _threads_url(owner: Owner) -> str:
    return f"/api/v1/agents/{owner.agent_id}/threads"


def _upload_in_db(
    engine: Engine, owner: Owner, n: int, *, session_id: str | None = None, prefix: str = "f"
) -> list[str]:
    """Attachments stored through the upload service (the setup; the refusal comes over HTTP)."""
    with Session(engine) as db:
        ids = [
            files.upload_file(
                db,
                owner.account_id,
                owner.app_id,
                owner.agent_id,
                io.BytesIO(f"{prefix}{i}".encode()),
                f"{prefix}{i}.txt",
                "text/plain",
                session_id=session_id,
            ).id
            for i in range(n)
        ]
        db.commit()
    return ids


def _blobs(installation: Installation) -> list[Path]:
    return [p for p in (installation.data_dir / "objects").rglob("*") if p.is_file()]


def _spooled(installation: Installation) -> list[Path]:
    spool = installation.data_dir / "tmp" / "files"
    return [p for p in spool.rglob("*") if p.is_file()] if spool.exists() else []


def test_api_requests_are_limited_per_token_per_minute_with_retry_after(
    web: Web, engine: Engine
) -> None:
    """README: "Limits: `MOSOO_API_RATE_LIMIT_PER_MINUTE` (120 per token)" and
    "`rate_limited` 429 with `Retry-After`" (this web runs with 5 a minute)."""
    owner = make_owner(engine, "rate@example.com")
    client = web()
    for attempt in range(2):  # once more if a minute boundary fell between the calls
        token, _ = new_token(engine, owner, f"rate {attempt}")
        headers = {"Authorization": f"Bearer {token}"}
        minute, threads_before = int(time.time()) // 60, count(engine, AgentSession)
        allowed = [
            client.get("/api/v1/agents", headers=headers).status_code
            for _ in range(API_RATE_LIMIT_PER_MINUTE)
        ]
        refused = client.post(
            _threads_url(owner), headers=headers, json={"end_user_id": "over-the-limit"}
        )
        if int(time.time()) // 60 == minute:
            break
    assert allowed == [200] * API_RATE_LIMIT_PER_MINUTE
    assert refused.status_code == 429 and error_code(refused) == "rate_limited"
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert count(engine, AgentSession) == threads_before  # the refused call created nothing
    assert client.get("/api/v1/agents", headers=owner.headers).status_code == 200  # per token


def test_json_bodies_over_2_mib_are_payload_too_large(web: Web, engine: Engine) -> None:
    """README: errors include "`payload_too_large` 413"; `_body_limit.py`: "JSON bodies are
    small ... refuse anything bigger [than 2 MiB] before it is read into memory" — with a
    Content-Length and without one (chunked)."""
    owner = make_owner(engine, "body@example.com")
    client = web()
    body = json.dumps({"end_user_id": "u", "title": "x" * (2 * MiB)}).encode()
    declared = client.post(
        _threads_url(owner),
        headers={**owner.headers, "Content-Type": "application/json"},
        content=body,
    )
    assert declared.status_code == 413 and error_code(declared) == "payload_too_large"

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(body), 64 * 1024):
            yield body[start : start + 64 * 1024]

    chunked = client.post(
        _threads_url(owner),
        headers={**owner.headers, "Content-Type": "application/json"},
        content=chunks(),
    )
    assert chunked.status_code == 413, chunked.text
    assert error_code(chunked) == "payload_too_large"
    assert count(engine, AgentSession) == 0


def test_uploads_over_64_mib_are_payload_too_large_and_leave_nothing_behind(
    web: Web, engine: Engine, installation: Installation
) -> None:
    """README: "upload attachments with `POST /agents/{id}/files` (multipart field `file`, ≤ 64 MiB)";
    PRODUCT: "size and type limits give a clear error". One byte over: 413, no file row, no
    object in the store and no spooled bytes left on disk."""
    owner = make_owner(engine, "upload@example.com")
    client = web()
    url = f"/api/v1/agents/{owner.agent_id}/files"
    small = client.post(
        url, headers=owner.headers, files={"file": ("ok.txt", b"fits", "text/plain")}
    )
    assert small.status_code == 201, small.text
    blobs_before = _blobs(installation)
    assert len(blobs_before) == 1
    big = client.post(
        url,
        headers=owner.headers,
        files={
            "file": (
                "big.bin",
                io.BytesIO(b"\0" * (files.MAX_FILE_BYTES + 1)),
                "application/octet-stream",
            )
        },
    )
    assert big.status_code == 413 and error_code(big) == "payload_too_large"
    assert [f.name for f in rows(engine, StoredFile)] == ["ok.txt"]
    assert _blobs(installation) == blobs_before
    assert _spooled(installation) == []


def test_a_message_names_at_most_20_attachments(web: Web, engine: Engine) -> None:
    """README: *Attach* adds files "(up to 64 MiB each, 20 per message, 100 per thread)"."""
    owner = make_owner(engine, "twenty@example.com")
    client = web()
    ids = _upload_in_db(engine, owner, 21)
    refused = client.post(
        _threads_url(owner), headers=owner.headers, json={"message": "see files", "file_ids": ids}
    )
    assert refused.status_code == 400 and error_code(refused) == "invalid_request"
    assert refused.json()["error"]["field"] == "file_ids"
    assert count(engine, AgentSession) == 0 and count(engine, SessionRun) == 0
    assert count(engine, StoredFile, StoredFile.session_id.is_not(None)) == 0  # type: ignore[union-attr]
    allowed = client.post(
        _threads_url(owner),
        headers=owner.headers,
        json={"message": "see files", "file_ids": ids[:20]},
    )
    assert allowed.status_code == 201, allowed.text
    thread_id = allowed.json()["thread"]["id"]
    assert count(engine, StoredFile, StoredFile.session_id == thread_id) == 20


def test_a_thread_holds_at_most_100_attachments(web: Web, engine: Engine) -> None:
    """README: *Attach* adds files "(up to 64 MiB each, 20 per message, 100 per thread)";
    PRODUCT: attachments "up to 64 MiB each, 100 per thread"."""
    owner = make_owner(engine, "hundred@example.com")
    client = web()
    created = client.post(_threads_url(owner), headers=owner.headers, json={})
    assert created.status_code == 201, created.text
    thread_id = created.json()["thread"]["id"]
    _upload_in_db(engine, owner, 100, session_id=thread_id)
    uploaded = client.post(
        f"/api/v1/agents/{owner.agent_id}/files",
        headers=owner.headers,
        files={"file": ("one-more.txt", b"101", "text/plain")},
    )
    assert uploaded.status_code == 201, uploaded.text
    refused = client.post(
        f"/api/v1/threads/{thread_id}/events",
        headers=owner.headers,
        json={"type": "user_message", "text": "one more", "file_ids": [uploaded.json()["id"]]},
    )
    assert refused.status_code == 400 and error_code(refused) == "invalid_request"
    assert count(engine, StoredFile, StoredFile.session_id == thread_id) == 100
    [extra] = rows(engine, StoredFile, StoredFile.id == uploaded.json()["id"])
    assert extra.session_id is None
    assert count(engine, SessionRun, SessionRun.session_id == thread_id) == 0


def test_an_idempotency_key_replays_the_first_answer_and_refuses_another_body(
    web: Web, engine: Engine
) -> None:
    """README: "An `Idempotency-Key` on thread creation or event posting replays the first
    answer (with `Idempotency-Replayed: true`) for 24 hours; the same key with another body is
    `409 idempotency_conflict`"."""
    owner = make_owner(engine, "idem@example.com")
    client = web()
    headers = {**owner.headers, "Idempotency-Key": "security-key-1"}
    first = client.post(_threads_url(owner), headers=headers, json={"end_user_id": "customer-42"})
    assert first.status_code == 201 and "idempotency-replayed" not in first.headers
    replay = client.post(_threads_url(owner), headers=headers, json={"end_user_id": "customer-42"})
    assert replay.status_code == 201 and replay.headers["idempotency-replayed"] == "true"
    assert replay.json() == first.json()
    conflict = client.post(
        _threads_url(owner), headers=headers, json={"end_user_id": "customer-43"}
    )
    assert conflict.status_code == 409 and error_code(conflict) == "idempotency_conflict"
    [thread] = rows(engine, AgentSession)
    assert thread.id == first.json()["thread"]["id"] and thread.end_user_id == "customer-42"
    assert count(engine, IdempotencyRecord) == 1


def test_an_idempotency_key_is_free_again_after_24_hours(web: Web, engine: Engine) -> None:
    """README: an `Idempotency-Key` "replays the first answer ... for 24 hours"."""
    owner = make_owner(engine, "idem-expiry@example.com")
    client = web()
    headers = {**owner.headers, "Idempotency-Key": "security-key-2"}
    first = client.post(_threads_url(owner), headers=headers, json={"end_user_id": "day-one"})
    assert first.status_code == 201
    [record] = rows(engine, IdempotencyRecord)
    assert record.expires_at - record.created_at == timedelta(hours=24)
    update(
        engine,
        IdempotencyRecord,
        IdempotencyRecord.id == record.id,
        expires_at=utcnow() - timedelta(seconds=1),
    )
    later = client.post(_threads_url(owner), headers=headers, json={"end_user_id": "day-two"})
    assert later.status_code == 201 and "idempotency-replayed" not in later.headers
    assert sorted(t.end_user_id for t in rows(engine, AgentSession)) == ["day-one", "day-two"]


def test_a_message_while_a_run_is_active_is_refused_and_so_is_archiving(
    web: Web, engine: Engine
) -> None:
    """PRODUCT: "One active run per thread; a message sent while a run is active is refused
    with a clear reason"; README: "archiving is refused while a run is active"."""
    owner = make_owner(engine, "busy@example.com")
    client = web()
    started = client.post(_threads_url(owner), headers=owner.headers, json={"message": "first"})
    assert started.status_code == 201 and started.json()["run"]["status"] == "queued"
    thread_id = started.json()["thread"]["id"]
    # Running: before it starts, a second message waits its turn (tests/api/test_prompt_queue.py).
    set_run_status(engine, started.json()["run"]["id"], "running")
    second = client.post(
        f"/api/v1/threads/{thread_id}/events",
        headers=owner.headers,
        json={"type": "user_message", "text": "second"},
    )
    assert second.status_code == 409 and error_code(second) == "conflict"
    archive = client.post(f"/api/v1/threads/{thread_id}/archive", headers=owner.headers)
    assert archive.status_code == 409 and error_code(archive) == "thread_active"
    assert count(engine, SessionRun, SessionRun.session_id == thread_id) == 1
    [thread] = rows(engine, AgentSession)
    assert thread.archived_at is None


def test_an_archived_thread_refuses_messages_over_the_api(web: Web, engine: Engine) -> None:
    """README: "Archived threads are read-only"; the API answers `thread_archived`."""
    owner = make_owner(engine, "archived@example.com")
    client = web()
    thread_id = client.post(_threads_url(owner), headers=owner.headers, json={}).json()["thread"][
        "id"
    ]
    assert (
        client.post(f"/api/v1/threads/{thread_id}/archive", headers=owner.headers).status_code
        == 200
    )
    refused = client.post(
        f"/api/v1/threads/{thread_id}/events",
        headers=owner.headers,
        json={"type": "user_message", "text": "hello?"},
    )
    assert refused.status_code == 409 and error_code(refused) == "thread_archived"
    assert count(engine, SessionRun) == 0
    [thread] = rows(engine, AgentSession)
    assert thread.archived_at is not None


def test_an_unpublished_agent_is_not_on_the_api(web: Web, engine: Engine) -> None:
    """README: "**Unpublish** takes the Agent off the API again"; errors include
    "`agent_not_published` ... 409"."""
    owner = make_owner(engine, "draft@example.com", publish=False)
    refused = web().post(_threads_url(owner), headers=owner.headers, json={"message": "hi"})
    assert refused.status_code == 409 and error_code(refused) == "agent_not_published"
    assert count(engine, AgentSession) == 0 and count(engine, SessionRun) == 0


def test_a_revoked_access_token_is_refused_at_once(web: Web, engine: Engine) -> None:
    """README: "revoking the token in the console ends it everywhere"; errors include
    "`unauthenticated` 401"."""
    owner = make_owner(engine, "revoked@example.com")
    client = web()
    assert client.get("/api/v1/agents", headers=owner.headers).status_code == 200
    with Session(engine) as db:
        identity.revoke_access_token(db, owner.account_id, owner.token_id)
        db.commit()
    refused = client.post(_threads_url(owner), headers=owner.headers, json={})
    assert refused.status_code == 401 and error_code(refused) == "unauthenticated"
    assert count(engine, AgentSession) == 0


def test_an_access_tokens_stored_digest_or_a_made_up_token_is_refused(
    web: Web, engine: Engine
) -> None:
    """PRODUCT: "Personal access tokens (`mst_…`)"; ARCHITECTURE §6: they "are stored hashed"."""
    owner = make_owner(engine, "digest@example.com")
    [row] = rows(engine, AccessToken, AccessToken.id == owner.token_id)
    client = web()
    for forged in (
        row.token_hash,
        "mst_" + row.token_hash,
        "mst_made-up-token-0000000000000000000000000",
    ):
        refused = client.get("/api/v1/agents", headers={"Authorization": f"Bearer {forged}"})
        assert refused.status_code == 401 and error_code(refused) == "unauthenticated"


def test_another_owners_agent_is_not_found_and_nothing_is_created(web: Web, engine: Engine) -> None:
    """README: "`not_found` 404 — also for another owner's ids"; PRODUCT: "Every resource ...
    is reachable only by its owner"."""
    mine, theirs = make_owner(engine, "mine@example.com"), make_owner(engine, "theirs@example.com")
    client = web()
    thread = client.post(_threads_url(theirs), headers=mine.headers, json={"message": "hi"})
    assert thread.status_code == 404 and error_code(thread) == "not_found"
    upload = client.post(
        f"/api/v1/agents/{theirs.agent_id}/files",
        headers=mine.headers,
        files={"file": ("x.txt", b"x", "text/plain")},
    )
    assert upload.status_code == 404 and error_code(upload) == "not_found"
    assert count(engine, AgentSession) == 0 and count(engine, StoredFile) == 0
