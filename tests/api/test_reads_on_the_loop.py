"""A thread's read (`GET /threads/{id}`, `as_caller`) runs on the event loop on SQLite and in
the thread pool otherwise: on PostgreSQL, whenever the token's use is to be recorded, and
while the pool has no idle connection. Either way the answer is the same
(tests/api/test_fresh_reads.py: nothing is cached)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from mosoo_core.db import get_engine
from mosoo_web.api.v1 import _auth
from tests.api.conftest import ApiOwner


@pytest.fixture
def pool_trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the units `as_caller` sent to the thread pool."""
    trips: list[str] = []
    real = _auth.in_thread

    async def counted(work: Callable[[], Any]) -> Any:
        trips.append(work.__name__)
        return await real(work)

    monkeypatch.setattr(_auth, "in_thread", counted)
    return trips


def _thread_path(client: TestClient, owner: ApiOwner) -> str:
    created = client.post(f"/api/v1/agents/{owner.agent_id}/threads", headers=owner.headers)
    assert created.status_code == 201, created.text
    return f"/api/v1/threads/{created.json()['thread']['id']}"


def test_on_sqlite_the_reads_run_on_the_loop_once_the_use_is_recorded(
    client: TestClient, owner: ApiOwner, api_env: Engine, pool_trips: list[str]
) -> None:
    """The rate limit (120 a minute) is checked on the loop either way, its leases from Redis
    too (tests/api/test_limits_and_idempotency.py)."""
    path = _thread_path(client, owner)  # records the token's use (through CallerDep)
    pool_trips.clear()
    answers = [client.get(path, headers=owner.headers) for _ in range(20)]
    assert [answer.status_code for answer in answers] == [200] * 20
    assert all(answer.json() == answers[0].json() for answer in answers)
    assert pool_trips == ([] if api_env.dialect.name == "sqlite" else ["unit"] * 20)


def test_a_use_to_record_goes_to_the_pool_and_is_written(
    client: TestClient, owner: ApiOwner, api_env: Engine, pool_trips: list[str]
) -> None:
    path = _thread_path(client, owner)
    pool_trips.clear()
    with api_env.begin() as connection:  # as if the token was last used long ago
        connection.exec_driver_sql("UPDATE access_token SET last_used_at = NULL")
    assert client.get(path, headers=owner.headers).status_code == 200
    assert pool_trips == ["unit"]
    with api_env.connect() as connection:
        (used,) = connection.exec_driver_sql("SELECT last_used_at FROM access_token").one()
    assert used is not None


def test_with_every_pooled_connection_held_the_read_goes_to_the_pool(
    client: TestClient, owner: ApiOwner, api_env: Engine, pool_trips: list[str]
) -> None:
    """A checkout past the pool's size opens a connection on the loop: it is not made there."""
    path = _thread_path(client, owner)
    assert client.get(path, headers=owner.headers).status_code == 200  # leases its request
    pool_trips.clear()
    engine = get_engine()
    size = engine.pool.size()  # type: ignore[attr-defined]
    held = [engine.connect() for _ in range(size)]
    try:
        answers = [client.get(path, headers=owner.headers).status_code for _ in range(3)]
    finally:
        for connection in held:
            connection.close()
    assert answers == [200] * 3
    assert pool_trips == ["unit"] * 3
