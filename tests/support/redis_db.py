"""The Redis databases tests use, and one of the test's own, flushed before and after.

Each module that needs Redis names a fixed database number; `db_number` shifts it by
`MOSOO_TEST_REDIS_DB_OFFSET`, so two test runs can share one Redis server without sharing a
database. (Running the two database passes of `make test` side by side this way was tried
and measured slower on 2 cores: the journeys are CPU-bound while they render and boot.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

from mosoo_core.settings import reset_settings_cache

OFFSET = int(os.environ.get("MOSOO_TEST_REDIS_DB_OFFSET", "0"))


def db_number(number: int) -> int:
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
