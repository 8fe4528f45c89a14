"""Requests per minute per access token: a Redis counter per token and minute window.

When Redis is unreachable requests are let through (the limit protects capacity; refusing
every call because the counter is gone would be worse) and that is logged once."""

from __future__ import annotations

import math
import threading
import time

import redis
from redis.commands.core import Script

from mosoo_core.errors import RateLimited
from mosoo_core.logs import get_logger
from mosoo_core.settings import get_settings

log = get_logger(__name__)
WINDOW_SECONDS = 60

# One command, one round trip: count the request, and give a new window its expiry.
_COUNT = """
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return count
"""

_counters: dict[str, Script] = {}
_lock = threading.Lock()
_redis_down_logged = False


def _counter(url: str) -> Script:
    with _lock:
        if url not in _counters:
            client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
            _counters[url] = client.register_script(_COUNT)
        return _counters[url]


def window_key(token_id: str, window: int) -> str:
    return f"mosoo:api:rate:{token_id}:{window}"


def check_rate_limit(token_id: str, *, now: float | None = None) -> None:
    """Count this request; RateLimited (with the seconds until the window ends) over the limit."""
    global _redis_down_logged
    settings = get_settings()
    limit = settings.api_rate_limit_per_minute
    if limit <= 0:
        return
    now = time.time() if now is None else now
    window = int(now // WINDOW_SECONDS)
    key = window_key(token_id, window)
    try:
        count = int(_counter(settings.redis_url)(keys=[key], args=[WINDOW_SECONDS * 2]))
    except redis.RedisError as error:
        if not _redis_down_logged:
            log.warning("api.rate_limit_unavailable", error=type(error).__name__)
            _redis_down_logged = True
        return
    _redis_down_logged = False
    if count > limit:
        retry_after = max(1, math.ceil((window + 1) * WINDOW_SECONDS - now))
        raise RateLimited(
            f"Too many requests: {limit} a minute per token. Retry in {retry_after} s.",
            retry_after_seconds=retry_after,
        )
