"""Sign-out everywhere: `identity.sign_out` revokes, commits, then announces the session on
Redis; `identity.revoked_sessions` hears it in every web process. Against the real Redis,
database 15 (flushed around each test; Pub/Sub itself ignores database numbers, which is why
the channel name carries it)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
import redis
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import identity
from mosoo_core.clock import utcnow
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.identity import AuthSession
from tests.support.redis_db import db_number, own_redis_database, redis_url

REDIS_URL = redis_url(15)
UNREACHABLE_REDIS_URL = "redis://127.0.0.1:1/15"  # nothing listens on port 1
WAIT_SECONDS = 10.0


@pytest.fixture
def redis_db(monkeypatch: pytest.MonkeyPatch) -> Iterator[redis.Redis]:
    yield from own_redis_database(monkeypatch, REDIS_URL)


def _signed_in(engine: Engine, email: str = "owner@example.com") -> identity.NewSession:
    with Session(engine) as db:
        account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
        new = identity.start_session(db, account.id, method="email")
        db.commit()
    return new


@dataclass
class Listener:
    """`revoked_sessions` consumed in a task, as the web process does."""

    received: asyncio.Queue[str] = field(default_factory=asyncio.Queue)
    subscriptions: int = 0
    subscribed: asyncio.Event = field(default_factory=asyncio.Event)
    on_message: list = field(default_factory=list)  # callbacks run as each id arrives

    async def next(self) -> str:
        return await asyncio.wait_for(self.received.get(), WAIT_SECONDS)

    async def wait_subscribed(self, times: int = 1) -> None:
        async def reached() -> None:
            while self.subscriptions < times:
                self.subscribed.clear()
                await self.subscribed.wait()

        await asyncio.wait_for(reached(), WAIT_SECONDS)


@pytest.fixture
async def listener(redis_db: redis.Redis) -> AsyncIterator[Listener]:
    found = Listener()

    async def subscribed() -> None:
        found.subscriptions += 1
        found.subscribed.set()

    async def consume() -> None:
        async for session_id in identity.revoked_sessions(
            on_subscribed=subscribed, resubscribe_seconds=0.1
        ):
            for callback in found.on_message:
                callback(session_id)
            found.received.put_nowait(session_id)

    task = asyncio.create_task(consume())
    try:
        await found.wait_subscribed()
        yield found
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_sign_out_announces_the_session_once_it_is_committed(
    engine: Engine, listener: Listener
) -> None:
    new = _signed_in(engine)
    # What a listening web process would find in the database when the announcement arrives.
    seen_by_listener: list[str | None] = []

    def look_up(_session_id: str) -> None:
        with Session(engine) as db:
            seen_by_listener.append(identity.resolve_session(db, new.token))

    listener.on_message.append(look_up)

    assert await asyncio.to_thread(identity.sign_out, new.token) is True

    assert await listener.next() == new.session_id
    assert seen_by_listener == [None], "announced before the revocation was committed"
    with Session(engine) as db:
        assert identity.resolve_session(db, new.token) is None


async def test_only_a_live_session_is_announced(engine: Engine, listener: Listener) -> None:
    new = _signed_in(engine)
    assert await asyncio.to_thread(identity.sign_out, new.token) is True
    assert await listener.next() == new.session_id

    # Again, forged, missing: nothing to revoke, nothing announced (the marker comes next).
    for token in (new.token, "forged-token", None):
        assert await asyncio.to_thread(identity.sign_out, token) is False
    assert identity.publish_session_revoked("marker") is True
    assert await listener.next() == "marker"


async def test_sign_out_still_revokes_when_redis_is_down(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    new = _signed_in(engine)
    monkeypatch.setenv("MOSOO_REDIS_URL", UNREACHABLE_REDIS_URL)
    reset_settings_cache()

    assert await asyncio.to_thread(identity.sign_out, new.token) is True
    assert identity.publish_session_revoked(new.session_id) is False
    with Session(engine) as db:
        assert identity.resolve_session(db, new.token) is None


async def test_announcements_stay_within_their_redis_database(listener: Listener) -> None:
    other = redis_url(14)
    assert identity.revoked_channel(other) != identity.revoked_channel(REDIS_URL)
    assert identity.publish_session_revoked("for-database-14", redis_url=other) is True
    assert identity.publish_session_revoked("for-database-15") is True
    assert await listener.next() == "for-database-15"


async def test_a_listener_whose_connection_drops_subscribes_again(
    redis_db: redis.Redis, listener: Listener
) -> None:
    # Only this process's own subscriber connection is closed (named after its pid).
    name = f"mosoo-revocations-{os.getpid()}"
    mine = [
        c
        for c in redis_db.client_list(_type="pubsub")
        if c.get("name") == name and c.get("db") == str(db_number(15))
    ]
    assert len(mine) == 1
    redis_db.client_kill_filter(_id=mine[0]["id"])

    # A second subscription: the moment a web process re-checks its tabs against the database.
    await listener.wait_subscribed(times=2)
    assert identity.publish_session_revoked("after-reconnect") is True
    assert await listener.next() == "after-reconnect"


def test_ended_sessions_are_the_expired_revoked_and_unknown_ones(db: Session) -> None:
    account = identity.sign_in_identity(
        db, provider="email", subject="e@example.com", email="e@example.com"
    )
    now = utcnow()
    live = identity.start_session(db, account.id, method="email", now=now).session_id
    expired = identity.start_session(
        db, account.id, method="email", now=now - timedelta(days=31)
    ).session_id
    revoked_now, revoked_earlier = (
        identity.start_session(db, account.id, method="email", now=now - timedelta(hours=1))
        for _ in range(2)
    )
    identity.revoke_session(db, revoked_now.token, now=now)
    identity.revoke_session(db, revoked_earlier.token, now=now - timedelta(minutes=2))
    db.flush()
    assert db.get(AuthSession, live) is not None
    ids = {
        live,
        expired,
        revoked_now.session_id,
        revoked_earlier.session_id,
        "01UNKNOWNSESSION0000000000",
    }

    assert identity.ended_sessions(db, ids, now=now) == ids - {live}
    # A sweep leaves revocations younger than its period to their announcement.
    assert identity.ended_sessions(
        db, ids, now=now, revoked_before=now - timedelta(seconds=30)
    ) == ids - {
        live,
        revoked_now.session_id,
    }
    assert identity.ended_sessions(db, [], now=now) == set()
