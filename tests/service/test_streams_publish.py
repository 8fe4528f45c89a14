"""Publishing stored events to the threads' Redis streams (`streams.publish_events` and its
asyncio twin): every new event lands on its own thread's stream, in order, as exactly the
JSON the viewers decode, whatever its payload holds; duplicates are not published again.
Against the real Redis (the script runs in it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis
import redis.asyncio as aioredis

from mosoo_core import streams
from mosoo_core.streams import StoredEvent
from tests.support.redis_db import db_number, own_redis_database

REDIS_URL = f"redis://127.0.0.1:6379/{db_number(9)}"
AWKWARD = [
    "plain",
    "two words and a line\nbreak\r\n",
    'a \\n that is not a newline, a \\\\ and a " quote',
    "héllo — 😀 \u2028 \u0000 tab\tend",
    " 12 34 leading spaces and numbers ",
    "",
]


@pytest.fixture
def redis_db(monkeypatch: pytest.MonkeyPatch) -> Iterator[redis.Redis]:
    yield from own_redis_database(monkeypatch, REDIS_URL)


def _events(threads: list[str], per_thread: int) -> list[StoredEvent]:
    start = datetime(2026, 12, 7, 4, 0, tzinfo=UTC)
    events = []
    for number in range(per_thread):
        for index, thread in enumerate(threads):
            events.append(
                StoredEvent(
                    session_id=thread,
                    seq=number + 1,
                    type="agent.message.delta",
                    payload={
                        "text": AWKWARD[(number + index) % len(AWKWARD)],
                        "nested": {"n": number, "list": [1, None, True, 2.5]},
                    },
                    run_id=None if number % 3 else f"run-{index}",
                    source_event_id=f"s-{index}-{number}",
                    occurred_at=start + timedelta(microseconds=number),
                )
            )
    return events


def _stream(client: redis.Redis, thread: str) -> list[tuple[int, dict[str, object]]]:
    out = []
    for _id, fields in client.xrange(streams.events_stream(thread)):
        events = streams.decode_events(fields)
        assert int(fields[b"seq"]) == events[0]["seq"]  # an entry names its first event's seq
        out += [(event["seq"], event) for event in events]
    return out


def _expected(events: list[StoredEvent], thread: str) -> list[tuple[int, dict[str, object]]]:
    return [
        (event.seq, json.loads(json.dumps(event.to_public())))
        for event in events
        if event.session_id == thread and not event.duplicate
    ]


def test_each_event_lands_on_its_threads_stream_in_order_as_the_viewers_decode_it(
    redis_db: redis.Redis,
) -> None:
    threads = [f"T{index:025d}" for index in range(7)]
    # More than one call's worth (PUBLISH_CHUNK), a thread's events spread over both.
    events = _events(threads, streams.PUBLISH_CHUNK // len(threads) + 40)
    events[5] = StoredEvent(**{**events[5].__dict__, "duplicate": True})
    streams.publish_events(events, client=redis_db)
    for thread in threads:
        assert _stream(redis_db, thread) == _expected(events, thread)
    assert sum(len(_stream(redis_db, thread)) for thread in threads) == len(events) - 1


def test_the_asyncio_publish_appends_the_same(redis_db: redis.Redis) -> None:
    threads = ["A" * 26, "B" * 26]
    events = _events(threads, 30)

    async def publish() -> None:
        client = aioredis.Redis.from_url(REDIS_URL)
        try:
            await streams.publish_events_async(client, events)
        finally:
            await client.aclose()

    asyncio.run(publish())
    for thread in threads:
        assert _stream(redis_db, thread) == _expected(events, thread)


def test_nothing_new_publishes_nothing(redis_db: redis.Redis) -> None:
    (event,) = _events(["C" * 26], 1)
    streams.publish_events([StoredEvent(**{**event.__dict__, "duplicate": True})], redis_db)
    streams.publish_events([], redis_db)
    assert redis_db.keys("*") == []


def test_a_threads_events_of_one_call_make_one_entry(redis_db: redis.Redis) -> None:
    threads = [f"E{index:025d}" for index in range(3)]
    events = _events(threads, 20)  # 60 events, one call
    streams.publish_events(events, client=redis_db)
    for thread in threads:
        (entry,) = redis_db.xrange(streams.events_stream(thread))
        assert [event["seq"] for event in streams.decode_events(entry[1])] == list(range(1, 21))
    # Past PUBLISH_CHUNK a thread's events go on in the next call's entry, in order.
    more = _events(threads, streams.PUBLISH_CHUNK // len(threads) + 5)
    redis_db.flushdb()
    streams.publish_events(more, client=redis_db)
    for thread in threads:
        assert len(redis_db.xrange(streams.events_stream(thread))) == 2
        assert _stream(redis_db, thread) == _expected(more, thread)


def test_an_entry_of_one_event_still_decodes_and_a_malformed_one_is_refused() -> None:
    event = {"seq": 4, "type": "agent.message.delta", "payload": {}}
    assert streams.decode_events({b"seq": b"4", b"event": json.dumps(event).encode()}) == [event]
    for fields in (
        {b"seq": b"4"},
        {b"events": b"not json"},
        {b"events": b'{"seq": 4}'},
        {b"events": b"[1, 2]"},
    ):
        with pytest.raises(ValueError):
            streams.decode_events(fields)
