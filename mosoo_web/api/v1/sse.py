"""Server-Sent Events for a thread: stored events after the client's position, then live ones.

`mosoo_core.event_feed.ThreadFeed.follow` hands out each seq once, in order, with no gaps
(the database first, then the Redis stream, back to the database on a gap or while Redis is
down). This module only frames them: `id` is the seq, so a client resumes with
`Last-Event-ID`; a comment keeps a quiet connection alive; the stream ends when the client
leaves or the thread goes away.
"""

from __future__ import annotations

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
READ_WAIT_SECONDS = 1.0  # also how often a silent client is checked for having left
QUIET_RECHECK_SECONDS = 5.0  # a quiet stream is checked against the database this often


def format_event(event: dict[str, Any]) -> bytes:
    # Through the same model as `GET /threads/{id}/events`, so `data` is that endpoint's JSON to the byte.
    shaped = Event.model_validate(event)
    return f"id: {shaped.seq}\nevent: {shaped.type}\ndata: {shaped.model_dump_json()}\n\n".encode()


async def event_stream(
    request: Request, account_id: str, thread_id: str, after_seq: int
) -> AsyncIterator[bytes]:
    keepalive = max(1.0, get_settings().api_sse_keepalive_seconds)
    try:
        async with ThreadFeed(
            account_id,
            thread_id,
            wait_seconds=READ_WAIT_SECONDS,
            recheck_seconds=QUIET_RECHECK_SECONDS,
        ) as feed:
            last_sent = time.monotonic()
            async for batch in feed.follow(after_seq):
                for event in batch:
                    yield format_event(event)
                now = time.monotonic()
                if batch:
                    last_sent = now
                elif now - last_sent >= keepalive:
                    yield b": keep-alive\n\n"
                    last_sent = now
                if await request.is_disconnected():
                    break
    except NotFound:
        log.info("api.stream_thread_gone", thread_id=thread_id)
