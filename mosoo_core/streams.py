"""Redis fast paths in front of the database: per-thread event streams, driver command
notifications and the driver-ready signal. The database stays the source of truth."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pydantic_core
import redis
import redis.asyncio as aioredis

from mosoo_core.logs import get_logger
from mosoo_core.settings import get_settings

STREAM_MAXLEN = 2_000  # entries a stream keeps (about; an entry is a thread's events of a group)
PUBLISH_CHUNK = 500  # events a publishing call appends at most
log = get_logger(__name__)


@dataclass(frozen=True)
class StoredEvent:
    """One event of a thread's log as stored, with its seq: what the streams carry."""

    session_id: str
    seq: int
    type: str
    payload: dict[str, Any]
    run_id: str | None
    source_event_id: str | None
    occurred_at: datetime
    duplicate: bool = False

    def to_public(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "type": self.type,
            "run_id": self.run_id,
            "occurred_at": self.occurred_at.isoformat(),
            "payload": self.payload,
        }


def events_stream(session_id: str) -> str:
    return f"session:{session_id}:events"


def commands_channel(instance_id: str) -> str:
    return f"driver:{instance_id}:commands"


def ready_key(instance_id: str) -> str:
    return f"driver:{instance_id}:ready"


def _ready_signal(instance_id: str) -> str:
    return f"driver:{instance_id}:ready:signal"


async def announce_ready(client: aioredis.Redis, instance_id: str) -> None:
    """Control: the driver said ready. The key says so to anyone who looks; the list wakes the
    dispatcher blocked on it at once (`await_ready`), where polling the key cost ~25 ms."""
    pipe = client.pipeline(transaction=False)
    pipe.set(ready_key(instance_id), "1", ex=3600)
    pipe.rpush(_ready_signal(instance_id), "1")
    pipe.expire(_ready_signal(instance_id), 3600)
    await pipe.execute()


def await_ready(instance_id: str, timeout: float, client: redis.Redis | None = None) -> bool:
    """Block up to `timeout` seconds for the driver's ready (at once if it came before)."""
    client = client or sync_client()
    return client.blpop([_ready_signal(instance_id)], timeout=timeout) is not None


def event_json(event: StoredEvent) -> str:
    # pydantic's encoder: compact JSON like json.dumps's, in a third of the time.
    return pydantic_core.to_json(event.to_public()).decode()


def decode_events(fields: dict[Any, Any]) -> list[dict[str, Any]]:
    """The events of one stream entry, in order: a thread's events of one published group
    (`events`, a JSON array), or one event (`event`, as entries were before). Raises
    ValueError (JSON's own included) for an entry that is neither."""
    raw = fields.get(b"events") or fields.get("events")
    if raw is not None:
        events = json.loads(raw)
    else:
        raw = fields.get(b"event") or fields.get("event")
        if raw is None:
            raise ValueError("a stream entry without events")
        events = [json.loads(raw)]
    if not isinstance(events, list) or not all(isinstance(event, dict) for event in events):
        raise ValueError("a stream entry whose events are not objects")
    return events


def sync_client() -> redis.Redis:
    """The process's client of the configured Redis: one per URL, so its connections are
    pooled (a new client per call cost a TCP connect each, several per run dispatch). Safe
    across a fork: redis-py's pool starts afresh in a child."""
    return _client_for(get_settings().redis_url)


@functools.lru_cache(maxsize=8)
def _client_for(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)


# One call appends a whole group of events to their threads' streams, one entry a thread:
# its events of the group as a JSON array (`events`) and the first one's seq (`seq`). An
# entry an event cost every viewer a reply entry to parse and a JSON text to decode per
# event, the larger part of following a busy thread (bench/events.py). The entries travel as
# one argument, a line each ("<key number> <first seq> <events JSON>"; compact JSON holds no
# raw newline), not two arguments each: redis-py's asyncio client packs every argument in
# Python, 0.63 ms for a call of 264 events that way against 0.07 ms as one. KEYS are the
# streams written, each once.
_APPEND_SCRIPT = """
local entries, at, count = ARGV[2], 1, 0
while at <= #entries do
  local stop = string.find(entries, '\\n', at, true) or (#entries + 1)
  local first = string.find(entries, ' ', at, true)
  local second = string.find(entries, ' ', first + 1, true)
  redis.call('XADD', KEYS[tonumber(string.sub(entries, at, first - 1))],
             'MAXLEN', '~', ARGV[1], '*',
             'seq', string.sub(entries, first + 1, second - 1),
             'events', string.sub(entries, second + 1, stop - 1))
  count = count + 1
  at = stop + 1
end
return count
"""


def _append_calls(events: Iterable[StoredEvent]) -> list[tuple[list[str], list[Any]]]:
    """The script's keys and arguments for the events stored for the first time, a call per
    PUBLISH_CHUNK events (a script holds Redis for its whole run), an entry per thread in
    each call."""
    calls: list[tuple[list[str], list[Any]]] = []
    by_stream: dict[str, list[StoredEvent]] = {}  # the current call's, in order
    count = 0

    def close() -> None:
        lines = [
            f"{number} {group[0].seq} [{','.join(event_json(event) for event in group)}]"
            for number, group in enumerate(by_stream.values(), start=1)
        ]
        calls.append((list(by_stream), [STREAM_MAXLEN, "\n".join(lines)]))
        by_stream.clear()

    for event in events:
        if event.duplicate:
            continue
        if count == PUBLISH_CHUNK:
            close()
            count = 0
        by_stream.setdefault(events_stream(event.session_id), []).append(event)
        count += 1
    if by_stream:
        close()
    return calls


def publish_events(events: Iterable[StoredEvent], client: redis.Redis | None = None) -> None:
    """Append stored events to their threads' Redis streams (best effort: viewers fall
    back to the database when the stream misses something)."""
    calls = _append_calls(events)
    if not calls:
        return
    client = client or sync_client()
    try:
        append = client.register_script(_APPEND_SCRIPT)
        for keys, arguments in calls:
            append(keys=keys, args=arguments)
    except redis.RedisError as error:
        log.warning("streams.publish_failed", error=type(error).__name__)


async def publish_events_async(client: aioredis.Redis, events: Iterable[StoredEvent]) -> None:
    """`publish_events` on an asyncio client."""
    try:
        append = client.register_script(_APPEND_SCRIPT)
        for keys, arguments in _append_calls(events):
            await append(keys=keys, args=arguments)
    except redis.RedisError as error:
        log.warning("streams.publish_failed", error=type(error).__name__)


def notify_driver(instance_id: str, client: redis.Redis | None = None) -> None:
    """Wake the control process holding this driver's socket: new commands are in the DB."""
    client = client or sync_client()
    try:
        client.publish(commands_channel(instance_id), "1")
    except redis.RedisError as error:
        log.warning("streams.notify_failed", error=type(error).__name__)
