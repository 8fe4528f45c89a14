"""Following a thread's event log: the database first, then the Redis stream.

Every viewer (the console's chat, the API's Server-Sent Events) follows a thread the same
way: note where the Redis stream ends, read the stored events from the database, then read
the stream from the noted entry on, skipping seqs already seen and going back to the
database on a gap or when Redis is unavailable. The database stays the source of truth.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import redis
import redis.asyncio as aioredis

from mosoo_core import sessions, streams
from mosoo_core.db import session_scope
from mosoo_core.logs import get_logger
from mosoo_core.settings import get_settings

log = get_logger(__name__)
EVENTS_PAGE = 1000


def read_public_events(account_id: str, thread_id: str, after_seq: int) -> list[dict[str, Any]]:
    """Every stored event after `after_seq`, in public form (NotFound when not the account's)."""
    events: list[dict[str, Any]] = []
    with session_scope() as db:
        while True:
            page = sessions.list_events(db, account_id, thread_id, after_seq=after_seq, limit=EVENTS_PAGE)
            events += [event.to_public() for event in page]
            if len(page) < EVENTS_PAGE:
                return events
            after_seq = page[-1].seq


class ThreadFeed:
    def __init__(self, account_id: str, thread_id: str) -> None:
        self.account_id = account_id
        self.thread_id = thread_id
        self.stream = streams.events_stream(thread_id)
        self.last_id: bytes | str = "0-0"
        self.redis = aioredis.Redis.from_url(get_settings().redis_url, socket_connect_timeout=5)
        self.redis_ok = True

    async def mark_stream_position(self) -> None:
        """Remember where the stream ends BEFORE reading the database, so nothing published
        in between is missed."""
        try:
            entries = await self.redis.xrevrange(self.stream, count=1)
        except redis.RedisError as error:
            self._redis_failed(error)
            return
        if entries:
            self.last_id = entries[0][0]

    async def read_database(self, after_seq: int) -> list[dict[str, Any]]:
        return await asyncio.to_thread(read_public_events, self.account_id, self.thread_id, after_seq)

    async def read_stream(self, block_ms: int) -> list[dict[str, Any]] | None:
        """Events after the last entry read (waiting up to `block_ms`); None when Redis fails."""
        try:
            answer = await self.redis.xread({self.stream: self.last_id}, block=max(1, block_ms), count=500)
        except redis.RedisError as error:
            self._redis_failed(error)
            return None
        events: list[dict[str, Any]] = []
        for _name, entries in answer or []:
            for entry_id, fields in entries:
                self.last_id = entry_id
                try:
                    events.append(streams.decode_event(fields))
                except (TypeError, ValueError):
                    continue
        self.redis_ok = True
        return events

    def _redis_failed(self, error: Exception) -> None:
        if self.redis_ok:
            log.warning("feed.stream_unavailable", thread_id=self.thread_id, error=type(error).__name__)
        self.redis_ok = False

    async def close(self) -> None:
        with contextlib.suppress(redis.RedisError):
            await self.redis.aclose()
