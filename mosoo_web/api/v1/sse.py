"""Server-Sent Events for a thread: stored events after the client's position, then live ones.

Each seq is sent once, in order. The feed notes the Redis stream's end before reading the
database, so nothing published in between is lost; stream entries at or below the last seq
sent are skipped, and a gap (an entry ahead of the next seq) or a failing Redis sends us
back to the database, which is the source of truth. A quiet stream is also checked against
the database now and then, because publishing to Redis is best effort.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request

from mosoo_core.errors import NotFound
from mosoo_core.event_feed import ThreadFeed
from mosoo_core.logs import get_logger
from mosoo_core.settings import get_settings
from mosoo_web.api.v1.schemas import Event

log = get_logger(__name__)

SSE_HEADERS = {
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",  # nginx: pass each event on at once
}
READ_BLOCK_MS = 1000  # also how often a silent client is checked for having left
QUIET_RECHECK_SECONDS = 5.0
REDIS_DOWN_POLL_SECONDS = 1.0


def format_event(event: dict[str, Any]) -> bytes:
    # Through the same model as `GET /threads/{id}/events`, so `data` is that endpoint's JSON to the byte.
    shaped = Event.model_validate(event)
    return f"id: {shaped.seq}\nevent: {shaped.type}\ndata: {shaped.model_dump_json()}\n\n".encode()


class _Cursor:
    """The last seq sent; hands out only the events that continue it."""

    def __init__(self, last_seq: int) -> None:
        self.last_seq = last_seq

    def take(self, events: list[dict[str, Any]]) -> tuple[list[bytes], bool]:
        """Frames for the events that follow on; True when an event lies beyond a gap."""
        frames: list[bytes] = []
        gap = False
        for event in sorted(events, key=lambda item: int(item["seq"])):
            seq = int(event["seq"])
            if seq <= self.last_seq:
                continue
            if seq != self.last_seq + 1:
                gap = True
                break
            frames.append(format_event(event))
            self.last_seq = seq
        return frames, gap


async def event_stream(request: Request, account_id: str, thread_id: str, after_seq: int) -> AsyncIterator[bytes]:
    keepalive = max(1.0, get_settings().api_sse_keepalive_seconds)
    feed = ThreadFeed(account_id, thread_id)
    cursor = _Cursor(after_seq)
    try:
        await feed.mark_stream_position()
        frames, _ = cursor.take(await feed.read_database(cursor.last_seq))
        for frame in frames:
            yield frame
        last_sent = last_database_check = time.monotonic()
        while not await request.is_disconnected():
            live = await feed.read_stream(READ_BLOCK_MS)
            now = time.monotonic()
            if live is None:  # Redis failed: the database alone, polled
                frames, _ = cursor.take(await feed.read_database(cursor.last_seq))
                last_database_check = now
                if not frames:
                    await asyncio.sleep(REDIS_DOWN_POLL_SECONDS)
            else:
                frames, gap = cursor.take(live)
                quiet = not live and now - last_database_check >= QUIET_RECHECK_SECONDS
                if gap or quiet:
                    more, _ = cursor.take(await feed.read_database(cursor.last_seq))
                    frames += more
                    last_database_check = now
            for frame in frames:
                yield frame
            if frames:
                last_sent = time.monotonic()
            elif time.monotonic() - last_sent >= keepalive:
                yield b": keep-alive\n\n"
                last_sent = time.monotonic()
    except NotFound:
        log.info("api.stream_thread_gone", thread_id=thread_id)
    finally:
        await feed.close()
