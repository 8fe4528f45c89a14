"""Rate limit per token (Redis DB 5) and `Idempotency-Key` on creating calls."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import idempotency
from mosoo_core.clock import utcnow
from mosoo_core.errors import Conflict, RateLimited
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.identity import IdempotencyRecord
from mosoo_core.tables.sessions import AgentSession, SessionRun
from mosoo_web.api.v1 import _ratelimit
from tests.api.conftest import REDIS_URL, ApiOwner, use_redis
from tests.support.processes import free_port
from tests.support.runs import set_run_status

# --- rate limit ------------------------------------------------------------------------------


def test_over_the_limit_is_429_with_retry_after_per_token(
    client: TestClient, owner: ApiOwner, other: ApiOwner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOSOO_API_RATE_LIMIT_PER_MINUTE", "3")
    reset_settings_cache()
    # Start at the beginning of a window so the four calls share it.
    for key in redis.Redis.from_url(REDIS_URL).scan_iter("mosoo:api:rate:*"):
        redis.Redis.from_url(REDIS_URL).delete(key)
    answers = [client.get("/api/v1/agents", headers=owner.headers) for _ in range(4)]
    statuses = [a.status_code for a in answers]
    if statuses[:3] != [200, 200, 200]:  # a window boundary fell between the calls: once more
        answers = [client.get("/api/v1/agents", headers=owner.headers) for _ in range(4)]
        statuses = [a.status_code for a in answers]
    assert statuses == [200, 200, 200, 429]
    limited = answers[3]
    assert limited.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    assert (
        client.get("/api/v1/agents", headers=other.headers).status_code == 200
    )  # the limit is per token


async def test_the_window_resets_and_retry_after_counts_down_to_it(
    api_env: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOSOO_API_RATE_LIMIT_PER_MINUTE", "1")
    reset_settings_cache()
    start = 1_800_000_000.0  # a window boundary
    await _ratelimit.check_rate_limit("token-a", now=start + 10)
    with pytest.raises(RateLimited) as refused:
        await _ratelimit.check_rate_limit("token-a", now=start + 15)
    assert refused.value.retry_after_seconds == 45
    await _ratelimit.check_rate_limit("token-a", now=start + 60)  # the next minute


def _burst(client: TestClient, owner: ApiOwner, path: str, count: int) -> list[int]:
    return [client.get(path, headers=owner.headers).status_code for _ in range(count)]


def _burst_from_nothing(
    client: TestClient, owner: ApiOwner, path: str, monkeypatch: pytest.MonkeyPatch
) -> list[int]:
    """70 requests with nothing counted before them: no counter in Redis (the thread's
    creation, or the requests of a burst a window boundary cut, are not counted) and no
    lease held in the process."""
    store = redis.Redis.from_url(REDIS_URL)
    for key in store.scan_iter("mosoo:api:rate:*"):
        store.delete(key)
    monkeypatch.setattr(_ratelimit, "LIMITER", _ratelimit.Limiter())
    return _burst(client, owner, path, 70)


@pytest.mark.parametrize("read", ["agents", "thread"])
def test_a_burst_through_http_is_served_up_to_the_limit_and_not_one_more(
    client: TestClient, owner: ApiOwner, monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    """At 64 a minute the burst takes its requests in leases of up to 4: still exactly 64.
    Both ways a request is checked: the list (in the thread pool) and a thread's read (on
    SQLite, on the event loop while a lease lasts: tests/api/test_reads_on_the_loop.py)."""
    monkeypatch.setenv("MOSOO_API_RATE_LIMIT_PER_MINUTE", "64")
    reset_settings_cache()
    path = "/api/v1/agents"
    if read == "thread":
        created = client.post(f"/api/v1/agents/{owner.agent_id}/threads", headers=owner.headers)
        path = f"/api/v1/threads/{created.json()['thread']['id']}"
    statuses = _burst_from_nothing(client, owner, path, monkeypatch)
    if statuses != [200] * 64 + [429] * 6:  # a window boundary fell inside the burst: once more
        statuses = _burst_from_nothing(client, owner, path, monkeypatch)
    assert statuses == [200] * 64 + [429] * 6
    # The counter in Redis holds the 64 served and at most the unused rest of the last
    # lease; the six refused, answered without asking Redis, added nothing.
    store = redis.Redis.from_url(REDIS_URL)
    windows = [key for key in store.scan_iter(f"mosoo:api:rate:{owner.token_id}:*")]
    counted = int(store.get(max(windows, key=lambda key: int(key.rsplit(b":", 1)[1]))) or 0)
    assert 64 <= counted < 64 + _ratelimit.lease_cap(64)


class _CountedLimiter(_ratelimit.Limiter):
    """A process's limiter that counts its round trips to Redis."""

    def __init__(self) -> None:
        super().__init__()
        self.trips = 0

    async def _take(self, url: str, key: str, size: int) -> int:
        self.trips += 1
        return await super()._take(url, key, size)


async def _serve(limiter: _ratelimit.Limiter, token: str, limit: int, now: float) -> bool:
    try:
        await limiter.check(REDIS_URL, token, limit, now)
    except RateLimited:
        return False
    return True


async def test_a_burst_leases_its_requests_and_stops_asking_once_the_window_is_used_up(
    api_env: Engine,
) -> None:
    limiter, limit, start = _CountedLimiter(), 400, 1_800_000_000.0
    served = [await _serve(limiter, "token-b", limit, start + 1) for _ in range(450)]
    assert served == [True] * limit + [False] * 50
    # Leases of 1, 2, 4, 8, 16 and then 25 (a sixteenth of 400): not a trip per request, and
    # none once Redis said the window is used up.
    assert limiter.trips < limit // 10
    counted = int(redis.Redis.from_url(REDIS_URL).get(_ratelimit.window_key("token-b", 30_000_000)))
    assert counted >= limit
    # Calls spread out take one request at a time again, as a plain counter.
    assert await _serve(limiter, "token-b", limit, start + 60)
    limiter.trips = 0
    assert all([await _serve(limiter, "token-b", limit, start + 61 + n) for n in range(5)])
    assert limiter.trips == 5
    assert redis.Redis.from_url(REDIS_URL).get(_ratelimit.window_key("token-b", 30_000_001)) == b"6"


async def test_requests_arriving_during_a_lease_wait_for_it_instead_of_leasing_too(
    api_env: Engine,
) -> None:
    """A burst of 30 at once on the loop: one round trip at a time, each lease twice the
    last (1, 2, 4, 8, 16: five trips for 31 requests), and every request served."""
    limiter, limit, now = _CountedLimiter(), 1000, 1_800_000_000.0 + 1
    served = await asyncio.gather(*(_serve(limiter, "token-e", limit, now) for _ in range(30)))
    assert served == [True] * 30
    assert limiter.trips == 5
    counter = _ratelimit.window_key("token-e", 30_000_000)
    assert redis.Redis.from_url(REDIS_URL).get(counter) == b"31"


class _HangingRedisLimiter(_ratelimit.Limiter):
    """A limiter whose Redis answers every lease with a timeout, after `seconds`."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.trips = 0

    async def _take(self, url: str, key: str, size: int) -> int:
        self.trips += 1
        await asyncio.sleep(self.seconds)
        raise redis.TimeoutError("Timeout reading from socket")


async def test_requests_waiting_on_a_lease_redis_never_answers_pass_with_it_at_once(
    api_env: Engine,
) -> None:
    """Not one timeout after another: the ten pass when the one round trip fails."""
    limiter, now = _HangingRedisLimiter(0.3), 1_800_000_000.0 + 1
    started = time.monotonic()
    served = await asyncio.gather(*(_serve(limiter, "token-f", 5, now) for _ in range(10)))
    assert served == [True] * 10
    assert limiter.trips == 1
    assert time.monotonic() - started < 0.3 * 3


async def test_processes_sharing_the_counter_never_serve_more_than_the_limit(
    api_env: Engine,
) -> None:
    """Two web processes (two limiters, each on its own event loop and Redis connection, the
    same counter), 120 requests each at once, in one window."""
    limit, now = 300, 1_800_000_000.0 + 1

    def process() -> list[bool]:
        limiter = _ratelimit.Limiter()

        async def burst() -> list[bool]:
            return list(
                await asyncio.gather(*(_serve(limiter, "token-c", limit, now) for _ in range(240)))
            )

        return asyncio.run(burst())

    with ThreadPoolExecutor(2) as pool:
        served = [
            answer for answers in pool.map(lambda _: process(), range(2)) for answer in answers
        ]
    # What one process leased and had not served when the window ran out is lost to the
    # other: at most a lease less one.
    assert limit - (_ratelimit.lease_cap(limit) - 1) <= served.count(True) <= limit
    assert len(served) == 480


def test_requests_pass_when_redis_is_down(
    client: TestClient, owner: ApiOwner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOSOO_API_RATE_LIMIT_PER_MINUTE", "1")
    use_redis(monkeypatch, f"redis://127.0.0.1:{free_port()}/0")
    assert [client.get("/api/v1/agents", headers=owner.headers).status_code for _ in range(3)] == [
        200,
        200,
        200,
    ]


# --- idempotency -----------------------------------------------------------------------------


def _threads(engine: Engine) -> list[AgentSession]:
    with Session(engine) as db:
        return list(db.exec(select(AgentSession)).all())


def test_same_key_and_body_replays_the_first_answer(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    url = f"/api/v1/agents/{owner.agent_id}/threads"
    headers = {**owner.headers, "Idempotency-Key": "create-1"}
    first = client.post(url, headers=headers, json={"message": "hi", "end_user_id": "u1"})
    assert first.status_code == 201 and "idempotency-replayed" not in first.headers
    again = client.post(
        url, headers=headers, json={"end_user_id": "u1", "message": "hi"}
    )  # key order differs
    assert again.status_code == 201 and again.headers["idempotency-replayed"] == "true"
    assert again.json() == first.json()
    assert len(_threads(api_env)) == 1


def test_same_key_with_another_body_is_idempotency_conflict(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    url = f"/api/v1/agents/{owner.agent_id}/threads"
    headers = {**owner.headers, "Idempotency-Key": "create-2"}
    assert client.post(url, headers=headers, json={"message": "hi"}).status_code == 201
    conflict = client.post(url, headers=headers, json={"message": "something else"})
    assert (
        conflict.status_code == 409 and conflict.json()["error"]["code"] == "idempotency_conflict"
    )
    assert "different request" in conflict.json()["error"]["message"]
    assert len(_threads(api_env)) == 1


def test_keys_are_per_account(
    client: TestClient, owner: ApiOwner, other: ApiOwner, api_env: Engine
) -> None:
    for who in (owner, other):
        response = client.post(
            f"/api/v1/agents/{who.agent_id}/threads",
            headers={**who.headers, "Idempotency-Key": "shared"},
            json={},
        )
        assert response.status_code == 201 and "idempotency-replayed" not in response.headers
    assert len(_threads(api_env)) == 2


def test_a_duplicate_while_the_first_is_in_flight_is_refused(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    url = f"/api/v1/agents/{owner.agent_id}/threads"
    body: dict[str, str] = {"message": "slow"}
    with Session(api_env) as db:  # the first call has claimed the key and is still working
        assert (
            idempotency.claim_key(
                db,
                owner.account_id,
                "POST /agents/{agent_id}/threads",
                "busy",
                idempotency.request_fingerprint(
                    url, {"message": "slow", "file_ids": [], "end_user_id": None, "title": None}
                ),
            )
            is None
        )
        db.commit()
    response = client.post(url, headers={**owner.headers, "Idempotency-Key": "busy"}, json=body)
    assert (
        response.status_code == 409 and response.json()["error"]["code"] == "idempotency_conflict"
    )
    assert "still being processed" in response.json()["error"]["message"]
    assert _threads(api_env) == []


def test_a_failed_call_releases_its_key(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    url = f"/api/v1/agents/{owner.agent_id}/threads"
    headers = {**owner.headers, "Idempotency-Key": "retry-me"}
    first = client.post(url, headers=headers, json={"message": "one"})
    thread_id = first.json()["thread"]["id"]
    # Running (before it starts, a second message waits its turn: test_prompt_queue.py).
    set_run_status(api_env, first.json()["run"]["id"], "running")
    events = f"/api/v1/threads/{thread_id}/events"
    busy = client.post(
        events,
        headers={**owner.headers, "Idempotency-Key": "msg"},
        json={"type": "user_message", "text": "two"},
    )
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "conflict"  # a run is active
    client.post(events, headers=owner.headers, json={"type": "user_interrupt"})
    retried = client.post(
        events,
        headers={**owner.headers, "Idempotency-Key": "msg"},
        json={"type": "user_message", "text": "two"},
    )
    assert retried.status_code == 202 and "idempotency-replayed" not in retried.headers
    replayed = client.post(
        events,
        headers={**owner.headers, "Idempotency-Key": "msg"},
        json={"type": "user_message", "text": "two"},
    )
    assert replayed.status_code == 202 and replayed.headers["idempotency-replayed"] == "true"
    assert replayed.json()["run"]["id"] == retried.json()["run"]["id"]
    with Session(api_env) as db:
        assert len(db.exec(select(SessionRun).where(SessionRun.session_id == thread_id)).all()) == 2


def test_invalid_keys_are_refused(client: TestClient, owner: ApiOwner) -> None:
    url = f"/api/v1/agents/{owner.agent_id}/threads"
    too_long = client.post(url, headers={**owner.headers, "Idempotency-Key": "k" * 256}, json={})
    assert too_long.status_code == 400 and too_long.json()["error"]["field"] == "Idempotency-Key"


def test_records_expire_after_24_hours_and_are_purged(owner: ApiOwner, api_env: Engine) -> None:
    scope, now = "POST /threads/{thread_id}/events", utcnow()
    with Session(api_env) as db:
        idempotency.claim_key(
            db, owner.account_id, scope, "old", "a" * 64, now=now - timedelta(hours=25)
        )
        idempotency.store_answer(db, owner.account_id, scope, "old", 202, {"ok": True})
        idempotency.claim_key(db, owner.account_id, scope, "new", "b" * 64, now=now)
        idempotency.store_answer(db, owner.account_id, scope, "new", 202, {"ok": True})
        db.commit()
        # An expired key is free again, even with another request.
        assert idempotency.claim_key(db, owner.account_id, scope, "old", "c" * 64, now=now) is None
        db.rollback()
        assert idempotency.purge_expired_idempotency_records(db, now=now) == 1
        db.commit()
        assert [r.key for r in db.exec(select(IdempotencyRecord)).all()] == ["new"]


def test_an_abandoned_claim_can_be_taken_over(owner: ApiOwner, api_env: Engine) -> None:
    scope, now = "POST /agents/{agent_id}/threads", utcnow()
    with Session(api_env) as db:
        idempotency.claim_key(
            db, owner.account_id, scope, "crashed", "a" * 64, now=now - timedelta(minutes=10)
        )
        db.commit()
        with pytest.raises(Conflict):
            idempotency.claim_key(
                db, owner.account_id, scope, "crashed", "a" * 64, now=now - timedelta(minutes=9)
            )
        assert (
            idempotency.claim_key(db, owner.account_id, scope, "crashed", "a" * 64, now=now) is None
        )
