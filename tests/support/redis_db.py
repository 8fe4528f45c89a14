"""The Redis databases tests use, and one of the test's own, flushed before and after.

Each module that needs Redis names a fixed database number below `PER_WORKER`; `db_number`
shifts it by `MOSOO_TEST_REDIS_DB_OFFSET`, so two test runs can share one Redis server
without sharing a database, and by `PER_WORKER` for each pytest-xdist worker before this one
(gw1 takes 16-31 above the offset, gw2 32-47...), so the workers of one run never share one
either. Redis must then have offset + 16 x workers databases (scripts/setup.sh starts it with
64; scripts/test.sh runs no more workers than fit).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

from mosoo_core.settings import reset_settings_cache
from tests.support import workers

PER_WORKER = 16
OFFSET = int(os.environ.get("MOSOO_TEST_REDIS_DB_OFFSET", "0")) + PER_WORKER * workers.INDEX


def db_number(number: int) -> int:
    if not 0 <= number < PER_WORKER:
        raise ValueError(f"a test's Redis database is 0-{PER_WORKER - 1}, not {number}")
    return number + OFFSET


def redis_url(number: int) -> str:
    return f"redis://127.0.0.1:6379/{db_number(number)}"


def own_redis_database(monkeypatch: pytest.MonkeyPatch, url: str) -> Iterator[redis.Redis]:
    """For a fixture: `yield from own_redis_database(monkeypatch, REDIS_URL)`."""
    monkeypatch.setenv("MOSOO_REDIS_URL", url)
    reset_settings_cache()
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


def streamed_seqs(client: redis.Redis, thread_id: str) -> list[int]:
    """The seqs of every event on a thread's Redis stream, in the stream's order."""
    from mosoo_core import streams

    entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(  # type: ignore[assignment]
        streams.events_stream(thread_id)
    )
    return [int(event["seq"]) for _, fields in entries for event in streams.decode_events(fields)]
