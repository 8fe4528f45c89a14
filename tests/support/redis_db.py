"""A Redis database of the test's own, flushed before and after, and set as MOSOO_REDIS_URL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from mosoo_core.settings import reset_settings_cache


def own_redis_database(monkeypatch: pytest.MonkeyPatch, url: str) -> Iterator[redis.Redis]:
    """For a fixture: `yield from own_redis_database(monkeypatch, REDIS_URL)`."""
    monkeypatch.setenv("MOSOO_REDIS_URL", url)
    reset_settings_cache()
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()
