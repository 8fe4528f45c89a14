"""Requests per minute per access token: a Redis counter per token and minute window.

A process takes its requests from the counter in leases: one `INCRBY n` grants it up to `n`
requests of the window (no more than the limit leaves), which it then serves without asking
Redis again. A token that calls now and then leases one request at a time, exactly as a
plain counter; a token in a burst doubles its lease each time the last one ran out within
`GROW_SECONDS`, up to a sixteenth of the limit (at most `MAX_LEASE`). bench/api.py: the
counter's round trip was a quarter of the CPU of an authenticated read, and one trip per
lease instead of per request gave it back. The count never exceeds the limit, however many
web processes share it; the price is that a request leased to one process and not used
there cannot be served by another, so with several web processes a token in a burst may be
refused up to `lease - 1` requests per other process before its limit. Once Redis says the
window is used up, the process refuses the token until the window ends without asking.

When Redis is unreachable requests are let through (the limit protects capacity; refusing
every call because the counter is gone would be worse) and that is logged once."""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from dataclasses import dataclass

import redis
import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from mosoo_core.errors import RateLimited
from mosoo_core.logs import get_logger
from mosoo_core.settings import get_settings

log = get_logger(__name__)
WINDOW_SECONDS = 60
MAX_LEASE = 64
# A lease used up sooner than this after it was taken makes the next one twice as large.
GROW_SECONDS = 0.25
# Allowances of past windows are dropped once this many tokens have one.
KEPT_ALLOWANCES = 4096

# One command, one round trip: take `ARGV[2]` requests of the window, and give a new window
# its expiry. The answer is the window's count with them.
_LEASE = """
local count = redis.call('INCRBY', KEYS[1], ARGV[2])
if count == tonumber(ARGV[2]) then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return count
"""


def window_key(token_id: str, window: int) -> str:
    return f"mosoo:api:rate:{token_id}:{window}"


def lease_cap(limit: int) -> int:
    """The largest lease for `limit` requests a minute."""
    return max(1, min(MAX_LEASE, limit // 16))


@dataclass
class _Allowance:
    """What this process holds of one token's window."""

    window: int
    left: int = 0  # leased requests not served yet
    lease: int = 0  # the size of the last lease
    leased_at: float = 0.0
    used_up: bool = False  # Redis said the window's limit is all leased


class Limiter:
    """One process's share of the counters in the Redis at `url` (module-level: `LIMITER`).

    It lives on the event loop (the API checks the limit there, after the token is read):
    a request that finds a leased request left takes it without awaiting anything, and the
    lease's round trip is awaited on the loop with redis.asyncio, one per token at a time,
    the requests that arrive meanwhile waiting for its answer. A round trip made from the
    thread pool instead queued behind the loop for the GIL: with the thread's reads on the
    loop (`as_caller`), the requests that met an empty lease made the p99 (bench/api.py:
    22.5 ms at concurrency 10, against 10.2 ms with the limit off)."""

    def __init__(self) -> None:
        self._allowances: dict[tuple[str, str], _Allowance] = {}
        # The lease in flight per token; its result says whether Redis was unreachable.
        self._leasing: dict[tuple[str, str], asyncio.Future[bool]] = {}
        # A client per loop and Redis URL: a redis.asyncio connection belongs to the loop it
        # was made on (one in a web process; tests start several).
        self._scripts: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, AsyncScript]
        ] = weakref.WeakKeyDictionary()
        self._redis_down_logged = False

    async def check(self, url: str, token_id: str, limit: int, now: float) -> None:
        """Count a request; RateLimited (with the seconds until the window ends) over `limit`."""
        window = int(now // WINDOW_SECONDS)
        key = (url, token_id)
        while True:
            allowance = self._allowance(key, window)
            window = allowance.window  # a request that waited into the next window is in it
            if allowance.left:
                allowance.left -= 1
                return
            if allowance.used_up:
                raise _refusal(limit, window, now)
            leasing = self._leasing.get(key)
            if leasing is None:
                break
            # Another request's lease: then take from it, or, when Redis did not answer it,
            # pass as that request did (not one timeout after another, each waiter in turn).
            if await asyncio.shield(leasing):
                return
        grow = allowance.lease and now - allowance.leased_at < GROW_SECONDS
        size = min(lease_cap(limit), allowance.lease * 2) if grow else 1
        allowance.lease, allowance.leased_at = size, now
        leasing = self._leasing[key] = asyncio.get_running_loop().create_future()
        unreachable = True
        try:
            count = await self._take(url, window_key(token_id, window), size)
            unreachable = False
        except redis.RedisError as error:
            if not self._redis_down_logged:
                log.warning("api.rate_limit_unavailable", error=type(error).__name__)
                self._redis_down_logged = True
            return
        finally:
            del self._leasing[key]
            leasing.set_result(unreachable)
        self._redis_down_logged = False
        granted = min(size, max(0, limit - (count - size)))
        held = self._allowances.get(key)
        if held is None:
            held = self._allowances[key] = _Allowance(window)
        # The next window began meanwhile: what is left of this lease is not kept.
        allowance = held if held.window == window else _Allowance(window)
        if count >= limit:
            allowance.used_up = True
        if not granted:
            raise _refusal(limit, window, now)
        allowance.left += granted - 1

    def _allowance(self, key: tuple[str, str], window: int) -> _Allowance:
        allowance = self._allowances.get(key)
        # Never back to an older window (a request that waited for a lease into the next one).
        if allowance is None or allowance.window < window:
            if allowance is None and len(self._allowances) >= KEPT_ALLOWANCES:
                self._allowances = {k: a for k, a in self._allowances.items() if a.window >= window}
            allowance = self._allowances[key] = _Allowance(window)
        return allowance

    async def _take(self, url: str, key: str, size: int) -> int:
        """Lease `size` requests of the window at `key`; the window's count with them."""
        scripts = self._scripts.setdefault(asyncio.get_running_loop(), {})
        if url not in scripts:
            client = aioredis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
            scripts[url] = client.register_script(_LEASE)
        return int(await scripts[url](keys=[key], args=[WINDOW_SECONDS * 2, size]))


def _refusal(limit: int, window: int, now: float) -> RateLimited:
    retry_after = max(1, math.ceil((window + 1) * WINDOW_SECONDS - now))
    return RateLimited(
        f"Too many requests: {limit} a minute per token. Retry in {retry_after} s.",
        retry_after_seconds=retry_after,
    )


LIMITER = Limiter()


async def check_rate_limit(token_id: str, *, now: float | None = None) -> None:
    """Count this request; RateLimited (with the seconds until the window ends) over the limit."""
    settings = get_settings()
    limit = settings.api_rate_limit_per_minute
    if limit <= 0:
        return
    await LIMITER.check(settings.redis_url, token_id, limit, time.time() if now is None else now)
