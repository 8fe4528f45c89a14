"""The API's hot path caches nothing a change must invalidate: over HTTP (a real uvicorn
server, keep-alive connections), a token revoked between two requests is refused on the
second, a thread changed between two reads is read as it is now, and however many requests
a token makes at once, its last-used time is written once a minute."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import identity, sessions
from mosoo_core.clock import utcnow
from mosoo_core.tables.identity import AccessToken
from mosoo_core.tables.sessions import SessionRun
from tests.api.conftest import ApiOwner, live_server


def _new_thread(client: httpx.Client, owner: ApiOwner) -> str:
    answer = client.post(f"/api/v1/agents/{owner.agent_id}/threads", headers=owner.headers)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["thread"]["id"])


def _token(engine: Engine, token_id: str) -> AccessToken:
    with Session(engine) as db:
        return db.exec(select(AccessToken).where(AccessToken.id == token_id)).one()


def test_a_token_revoked_between_two_requests_is_refused_on_the_second(
    owner: ApiOwner, api_env: Engine
) -> None:
    with live_server() as server, httpx.Client(base_url=server.base_url) as client:
        thread_id = _new_thread(client, owner)
        assert client.get(f"/api/v1/threads/{thread_id}", headers=owner.headers).status_code == 200
        used = _token(api_env, owner.token_id).last_used_at
        with Session(api_env) as db:
            identity.revoke_access_token(db, owner.account_id, owner.token_id)
            db.commit()
        for path in (f"/api/v1/threads/{thread_id}", "/api/v1/agents"):
            refused = client.get(path, headers=owner.headers)
            assert refused.status_code == 401, path
            assert refused.json()["error"]["code"] == "unauthenticated"
    row = _token(api_env, owner.token_id)
    assert row.revoked_at is not None
    assert row.last_used_at == used  # the refused requests did not count as a use


def test_a_thread_changed_between_two_reads_is_read_as_it_is_now(
    owner: ApiOwner, api_env: Engine
) -> None:
    with live_server() as server, httpx.Client(base_url=server.base_url) as client:
        thread_id = _new_thread(client, owner)
        path = f"/api/v1/threads/{thread_id}"
        first = client.get(path, headers=owner.headers).json()
        assert first["title"] == "" and first["latest_run"] is None
        with Session(api_env) as db:
            sessions.rename_thread(db, owner.account_id, thread_id, "Renamed")
            run = SessionRun(session_id=thread_id, app_id=owner.app_id, status="failed")
            run.error_code, run.error_message = "model_error", "The model refused."
            db.add(run)
            db.flush()
            run_id = run.id
            db.commit()
        second = client.get(path, headers=owner.headers).json()
        assert second["title"] == "Renamed"
        assert second["latest_run"]["id"] == run_id
        assert second["latest_run"]["error"]["code"] == "model_error"
        with Session(api_env) as db:
            sessions.delete_thread(db, owner.account_id, thread_id)
            db.commit()
        gone = client.get(path, headers=owner.headers)
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"


def test_a_tokens_last_used_time_is_written_once_however_many_requests_arrive_at_once(
    owner: ApiOwner, api_env: Engine
) -> None:
    written: list[int] = []

    def count(connection: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE ACCESS_TOKEN"):
            written.append(cursor.rowcount)

    with live_server() as server:
        thread_id = _new_thread(httpx.Client(base_url=server.base_url), owner)
        with Session(api_env) as db:  # as if the token was last used two minutes ago
            row = db.get(AccessToken, owner.token_id)
            assert row is not None
            row.last_used_at = utcnow() - timedelta(minutes=2)
            db.commit()
        sa.event.listen(api_env, "after_cursor_execute", count)
        try:
            with (
                httpx.Client(base_url=server.base_url) as client,
                ThreadPoolExecutor(10) as pool,
            ):
                statuses = list(
                    pool.map(
                        lambda _: (
                            client.get(
                                f"/api/v1/threads/{thread_id}", headers=owner.headers
                            ).status_code
                        ),
                        range(40),
                    )
                )
        finally:
            sa.event.remove(api_env, "after_cursor_execute", count)
    assert statuses == [200] * 40
    assert sum(written) == 1  # a request that read the old time too updates no row
    last_used = _token(api_env, owner.token_id).last_used_at
    assert last_used is not None and utcnow() - last_used < timedelta(minutes=1)
