"""`ThreadFeed.follow`: every event of a thread once, in order, from a starting seq — the
database first, then the Redis stream, the database again for what the stream missed or
while Redis is down. Against the real Redis (database 9, flushed around each test) and the
real database; "Redis down" is a TCP hop in front of it that is cut and restored."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import sessions, streams
from mosoo_core.errors import NotFound
from mosoo_core.event_feed import ThreadFeed
from mosoo_core.identity import list_apps, sign_in_identity
from mosoo_core.sessions import driver_plane
from mosoo_core.sessions.driver_plane import NewEvent
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import SessionEvent
from tests.support.processes import free_port
from tests.support.redis_db import db_number, own_redis_database

REDIS_DB = db_number(9)
REDIS_URL = f"redis://127.0.0.1:6379/{REDIS_DB}"
WAIT_SECONDS = 10.0  # the most any expected batch may take
Batches = AsyncGenerator[list[dict[str, Any]], None]


@pytest.fixture
def redis_db(monkeypatch: pytest.MonkeyPatch) -> Iterator[redis.Redis]:
    yield from own_redis_database(monkeypatch, REDIS_URL)


@dataclass(frozen=True)
class OwnedThread:
    engine: Engine
    redis: redis.Redis
    account_id: str
    id: str

    def append(
        self, count: int = 1, *, publish: bool = True, kind: str = "agent.message.delta"
    ) -> list[int]:
        """Store `count` events as control does (commit, then publish unless told not to)."""
        with Session(self.engine) as db:
            stored = driver_plane.append_events(
                db, self.id, [NewEvent(kind, {"text": "x"}) for _ in range(count)]
            )
            db.commit()
        if publish:
            streams.publish_events(stored, client=self.redis)
        return [event.seq for event in stored]

    def stored_seqs(self) -> list[int]:
        with Session(self.engine) as db:
            rows = db.exec(
                select(SessionEvent)
                .where(SessionEvent.session_id == self.id)
                .order_by(SessionEvent.seq)
            )
            return [row.seq for row in rows]


def _new_thread(
    engine: Engine, client: redis.Redis, email: str = "owner@example.com"
) -> OwnedThread:
    with Session(engine) as db:
        account = sign_in_identity(db, provider="email", subject=email, email=email)
        app_id = list_apps(db, account.id)[0].id
        agent = Agent(app_id=app_id, name="A", model="m")
        db.add(agent)
        db.flush()
        thread = sessions.create_session(db, account.id, app_id, agent.id)
        db.commit()
        return OwnedThread(engine, client, account.id, thread.id)


@pytest.fixture
def thread(engine: Engine, redis_db: redis.Redis) -> OwnedThread:
    return _new_thread(engine, redis_db)


async def _seqs_until(batches: Batches, last: int) -> list[int]:
    """The seqs handed out until `last` is among them."""
    seqs: list[int] = []
    async with asyncio.timeout(WAIT_SECONDS):
        while not seqs or seqs[-1] < last:
            seqs += [event["seq"] for event in await anext(batches)]
    return seqs


def _connections(client: redis.Redis, command: str | None = None) -> int:
    """Connections to this test's Redis database other than `client`'s own (only those
    running `command` when given)."""
    own = str(client.client_id())
    return sum(
        1
        for entry in client.client_list()
        if entry.get("db") == str(REDIS_DB)
        and entry.get("id") != own
        and command in (None, entry.get("cmd"))
    )


async def _until(condition: Callable[[], bool], what: str) -> None:
    try:
        async with asyncio.timeout(WAIT_SECONDS):
            while not condition():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


class RedisHop:
    """A TCP hop to the real Redis that can be cut (every connection dropped, nothing
    listening) and restored on the same port: what a Redis restart looks like to a viewer."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/{REDIS_DB}"
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def up(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def cut(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await self._server.wait_closed()
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", 6379)
        self._writers |= {writer, up_writer}

        async def pipe(source: asyncio.StreamReader, target: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await source.read(65536):
                    target.write(data)
                    await target.drain()
            target.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}


@pytest.fixture
async def redis_hop(
    redis_db: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[RedisHop]:
    """The feed reaches Redis through the hop; the test still publishes to Redis directly."""
    hop = RedisHop()
    await hop.start()
    monkeypatch.setenv("MOSOO_REDIS_URL", hop.url)
    reset_settings_cache()
    yield hop
    if hop.up:
        await hop.cut()


async def test_following_from_a_seq_hands_out_what_is_stored_after_it_then_live_events(
    thread: OwnedThread,
) -> None:
    thread.append(5)
    async with ThreadFeed(thread.account_id, thread.id) as feed:
        batches = feed.follow(after_seq=2)
        assert [event["seq"] for event in await anext(batches)] == [
            3,
            4,
            5,
        ]  # the database, in one batch
        thread.append(2)
        assert await _seqs_until(batches, 7) == [6, 7]


async def test_an_event_whose_publish_was_lost_is_filled_from_the_database_when_the_next_arrives(
    thread: OwnedThread,
) -> None:
    async with ThreadFeed(
        thread.account_id, thread.id, wait_seconds=0.2, recheck_seconds=600
    ) as feed:
        batches = feed.follow()
        assert await anext(batches) == []
        thread.append(publish=False)  # seq 1 never reaches Redis
        thread.append()  # seq 2 does: the gap sends the feed to the database, long before a recheck
        assert await _seqs_until(batches, 2) == [1, 2]


async def test_a_quiet_stream_is_checked_against_the_database(thread: OwnedThread) -> None:
    async with ThreadFeed(
        thread.account_id, thread.id, wait_seconds=0.1, recheck_seconds=0.5
    ) as feed:
        batches = feed.follow()
        assert await anext(batches) == []
        started = time.monotonic()
        thread.append(publish=False)  # the last event's publish is lost and nothing follows it
        assert await _seqs_until(batches, 1) == [1]
        assert time.monotonic() - started < 5


async def test_batches_are_the_stored_log_exactly_once_while_a_tenth_of_publishes_are_lost(
    thread: OwnedThread,
) -> None:
    total = 400
    chooser = random.Random(7)

    def produce() -> None:
        while (written := len(thread.stored_seqs())) < total:
            thread.append(
                min(chooser.randint(1, 8), total - written), publish=chooser.random() > 0.1
            )
            time.sleep(chooser.uniform(0, 0.005))

    async with ThreadFeed(
        thread.account_id, thread.id, wait_seconds=0.2, recheck_seconds=1
    ) as feed:
        batches = feed.follow()
        producer = asyncio.create_task(asyncio.to_thread(produce))
        seqs = await _seqs_until(batches, total)
        await producer
    assert seqs == thread.stored_seqs() == list(range(1, total + 1))


async def test_the_end_of_a_run_does_not_end_the_feed(thread: OwnedThread) -> None:
    async with ThreadFeed(thread.account_id, thread.id) as feed:
        batches = feed.follow()
        await anext(batches)
        thread.append(kind="run.completed")
        thread.append(kind="user.message")
        assert await _seqs_until(batches, 2) == [1, 2]


async def test_a_quiet_feed_hands_out_empty_batches_as_often_as_its_follower_asks(
    thread: OwnedThread,
) -> None:
    async with ThreadFeed(thread.account_id, thread.id, wait_seconds=60) as feed:
        batches = feed.follow()
        assert await anext(batches) == []
        feed.wait_seconds = 0.1  # changed between batches: the next wait is the short one
        started = time.monotonic()
        assert await anext(batches) == []
        assert time.monotonic() - started < 5


async def test_a_thread_of_another_account_is_not_found(thread: OwnedThread) -> None:
    stranger = _new_thread(thread.engine, thread.redis, "stranger@example.com")
    thread.append()
    async with ThreadFeed(stranger.account_id, thread.id) as feed:
        with pytest.raises(NotFound):
            await anext(feed.follow())


async def test_while_redis_is_down_the_database_is_polled_and_the_stream_is_followed_again_when_it_is_back(
    thread: OwnedThread, redis_hop: RedisHop
) -> None:
    async with ThreadFeed(
        thread.account_id, thread.id, wait_seconds=0.1, recheck_seconds=600, poll_seconds=0.2
    ) as feed:
        batches = feed.follow()
        assert await anext(batches) == []
        thread.append()
        assert await _seqs_until(batches, 1) == [1]

        await redis_hop.cut()
        thread.append(2)  # published, but the feed cannot reach Redis: the database has them too
        assert await _seqs_until(batches, 3) == [2, 3]
        assert await anext(batches) == []  # quiet while down: empty batches still keep time

        await redis_hop.start()
        following = asyncio.create_task(_seqs_until(batches, 6))
        await _until(
            lambda: _connections(thread.redis, "xread") == 1, "the feed to follow the stream again"
        )
        thread.append()
        thread.append(publish=False)
        thread.append()  # back on the stream: this one reveals the gap before it, which the database fills
        assert await following == [4, 5, 6]
    assert thread.stored_seqs() == [1, 2, 3, 4, 5, 6]


async def test_with_redis_unreachable_from_the_start_the_database_alone_is_followed(
    thread: OwnedThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "MOSOO_REDIS_URL", f"redis://127.0.0.1:1/{REDIS_DB}"
    )  # nothing listens on port 1
    reset_settings_cache()
    thread.append(2)
    async with ThreadFeed(thread.account_id, thread.id, wait_seconds=0.1, poll_seconds=0.2) as feed:
        batches = feed.follow()
        assert [event["seq"] for event in await anext(batches)] == [1, 2]
        thread.append(publish=False)
        assert await _seqs_until(batches, 3) == [3]


async def test_cancelling_a_follower_closes_its_redis_connection(thread: OwnedThread) -> None:
    kept: list[ThreadFeed] = []  # still referenced: garbage collection is not what closes it

    async def follow() -> None:
        async with ThreadFeed(thread.account_id, thread.id, wait_seconds=60) as feed:
            kept.append(feed)
            async for _batch in feed.follow():
                pass

    task = asyncio.create_task(follow())
    await _until(lambda: _connections(thread.redis, "xread") == 1, "the feed to wait on the stream")
    task.cancel()
    await asyncio.wait({task}, timeout=WAIT_SECONDS)
    assert task.cancelled()
    await _until(lambda: _connections(thread.redis) == 0, "the feed's connection to close")


async def test_leaving_the_feed_closes_what_it_handed_out_and_its_redis_connection(
    thread: OwnedThread,
) -> None:
    thread.append(3)
    async with ThreadFeed(thread.account_id, thread.id) as feed:
        batches = feed.follow()
        async for _batch in batches:
            break
    with pytest.raises(StopAsyncIteration):
        await anext(batches)
    await _until(lambda: _connections(thread.redis) == 0, "the feed's connection to close")
