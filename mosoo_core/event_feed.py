"""Following a thread's event log: the database first, then the Redis stream.

Every viewer (the console's chat, the API's Server-Sent Events) follows a thread through
`ThreadFeed.follow`: it notes where the Redis stream ends, reads the stored events from the
database, then reads the stream from the noted entry on. Stream entries already handed out
are skipped; an entry ahead of the next seq (a publish that never reached Redis) sends it
back to the database, and so does a quiet stream now and then, because publishing is best
effort. While Redis is unavailable the database alone is polled, and Redis is tried again
at each poll. The database stays the source of truth; Redis only makes it fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Iterable
from types import TracebackType
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from mosoo_core import sessions, streams
from mosoo_core.db import session_scope
from mosoo_core.logs import get_logger
from mosoo_core.settings import get_settings

log = get_logger(__name__)
EVENTS_PAGE = 1000
STREAM_READ_COUNT = 500
WAIT_SECONDS = 1.0  # longest a batch waits for news before an empty one is handed out
RECHECK_SECONDS = 2.0  # a quiet stream is checked against the database this often
POLL_SECONDS = 1.0  # how often the database is polled while Redis is unavailable
STREAM_START = "0-0"

PublicEvent = dict[str, Any]  # {seq, type, run_id, occurred_at, payload}


def read_public_events(account_id: str, thread_id: str, after_seq: int) -> list[PublicEvent]:
    """Every stored event after `after_seq`, in public form (NotFound when not the account's)."""
    events: list[PublicEvent] = []
    with session_scope() as db:
        while True:
            page = sessions.list_events(
                db, account_id, thread_id, after_seq=after_seq, limit=EVENTS_PAGE
            )
            events += [event.to_public() for event in page]
            if len(page) < EVENTS_PAGE:
                return events
            after_seq = page[-1].seq


class _Cursor:
    """The last seq handed out; lets through only the events that continue it."""

    def __init__(self, last_seq: int) -> None:
        self.last_seq = last_seq

    def take(self, events: Iterable[PublicEvent]) -> tuple[list[PublicEvent], bool]:
        """The events that follow on, in order; True when one lies beyond a gap."""
        numbered = [event for event in events if isinstance(event.get("seq"), int)]
        following: list[PublicEvent] = []
        for event in sorted(numbered, key=lambda item: int(item["seq"])):
            seq = int(event["seq"])
            if seq <= self.last_seq:
                continue
            if seq != self.last_seq + 1:
                return following, True
            following.append(event)
            self.last_seq = seq
        return following, False


class ThreadFeed:
    """One viewer following one thread: `async with ThreadFeed(...) as feed`, then
    `async for batch in feed.follow(after_seq)`. Leaving the `async with` (a break, an
    error, a cancelled task) closes what `follow` handed out and the Redis connection."""

    def __init__(
        self,
        account_id: str,
        thread_id: str,
        *,
        wait_seconds: float = WAIT_SECONDS,
        recheck_seconds: float = RECHECK_SECONDS,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self.account_id = account_id
        self.thread_id = thread_id
        # Read before each wait: a follower may change it between batches (the console
        # shortens it while deltas wait to be flushed).
        self.wait_seconds = wait_seconds
        self.recheck_seconds = recheck_seconds
        self.poll_seconds = poll_seconds
        self.stream = streams.events_stream(thread_id)
        # One quick retry (a pooled connection Redis dropped on restart), no backoff: a
        # Redis that is down must send us to the database at once, not after seconds of retries.
        self.redis = aioredis.Redis.from_url(
            get_settings().redis_url, socket_connect_timeout=5, retry=Retry(NoBackoff(), 1)
        )
        self._redis_ok = True
        self._followers: list[AsyncGenerator[list[PublicEvent], None]] = []

    async def __aenter__(self) -> ThreadFeed:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.close()

    def follow(self, after_seq: int = 0) -> AsyncGenerator[list[PublicEvent], None]:
        """Every event after `after_seq`, in batches, for as long as the caller iterates.

        Across all batches each seq comes exactly once and in order, with no gaps: the
        first batch is what the database holds (possibly empty), later ones what followed.
        A batch may be empty: one is handed out at least every `wait_seconds` (plus the
        time a read takes), so a follower can keep time (keep-alives, flushes, checks).
        The end of a run does not end the iteration; the caller stops it (break, or
        cancelling its task). Raises `NotFound` when the thread is not (or no longer)
        the account's."""
        batches = self._follow(after_seq)
        self._followers.append(batches)
        return batches

    async def _follow(self, after_seq: int) -> AsyncGenerator[list[PublicEvent], None]:
        cursor = _Cursor(after_seq)
        clock = time.monotonic
        position = (
            await self._stream_end()
        )  # before the database: nothing published in between is missed
        yield cursor.take(await self._read_database(cursor.last_seq))[0]
        database_read = clock()
        next_poll = database_read + self.poll_seconds
        while True:
            if position is None:  # Redis unavailable: the database alone, polled
                pause = next_poll - clock()
                if pause > 0:
                    await asyncio.sleep(min(pause, self._wait()))
                    if clock() < next_poll:
                        yield []
                        continue
                position = await self._stream_end()
                batch, _ = cursor.take(await self._read_database(cursor.last_seq))
                database_read = clock()
                next_poll = database_read + self.poll_seconds
                if position is not None:
                    log.info("feed.stream_available", thread_id=self.thread_id)
                yield batch
                continue
            read = await self._read_stream(position, self._wait())
            if read is None:
                position, next_poll = None, clock()  # poll at once: what failed may have been news
                continue
            position, live = read
            batch, gap = cursor.take(live)
            if gap or (not live and clock() - database_read >= self.recheck_seconds):
                batch += cursor.take(await self._read_database(cursor.last_seq))[0]
                database_read = clock()
            yield batch

    async def close(self) -> None:
        for batches in self._followers:
            await batches.aclose()
        self._followers.clear()
        with contextlib.suppress(redis.RedisError):
            await self.redis.aclose()

    def _wait(self) -> float:
        return max(0.001, self.wait_seconds)

    async def _stream_end(self) -> bytes | str | None:
        """The stream's last entry id (its start when empty); None when Redis fails."""
        try:
            entries = await self.redis.xrevrange(self.stream, count=1)
        except redis.RedisError as error:
            self._redis_failed(error)
            return None
        self._redis_ok = True
        return entries[0][0] if entries else STREAM_START

    async def _read_database(self, after_seq: int) -> list[PublicEvent]:
        return await asyncio.to_thread(
            read_public_events, self.account_id, self.thread_id, after_seq
        )

    async def _read_stream(
        self, position: bytes | str, wait: float
    ) -> tuple[bytes | str, list[PublicEvent]] | None:
        """Entries after `position` (waiting up to `wait` seconds) and the new position; None
        when Redis fails."""
        try:
            answer = await self.redis.xread(
                {self.stream: position}, block=max(1, int(wait * 1000)), count=STREAM_READ_COUNT
            )
        except redis.RedisError as error:
            self._redis_failed(error)
            return None
        events: list[PublicEvent] = []
        for _name, entries in answer or []:
            for entry_id, fields in entries:
                position = entry_id
                try:
                    events += streams.decode_events(fields)
                except (TypeError, ValueError):
                    continue
        return position, events

    def _redis_failed(self, error: Exception) -> None:
        if self._redis_ok:
            log.warning(
                "feed.stream_unavailable", thread_id=self.thread_id, error=type(error).__name__
            )
        self._redis_ok = False
