"""Group commit: the event batches of every driver connection of this control process are
stored by one writer thread, as many to a transaction as have arrived while the previous
transaction was committing; each batch is acknowledged once the transaction holding it has
committed, and the group is published to the threads' Redis streams (in as few calls as
can be) while the next group commits.

One writer keeps SQLite's single write lock uncontended and pays PostgreSQL's commit once
for many batches. A batch that fails (a superseded connection, a run the driver does not
serve, a database error) sends its group back through one transaction per batch, so that
another connection's batch is neither lost nor refused with it."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from sqlmodel import Session, col, select

from driver.protocol import DriverEvent
from mosoo_core import streams, tracing
from mosoo_core.control import _traces
from mosoo_core.db import session_scope
from mosoo_core.logs import get_logger
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.sessions import DriverInstance
from mosoo_core.tasks_client import enqueue_run_finish

log = get_logger(__name__)
# A transaction takes whole batches until it holds this many events (a batch is ≤ 64).
MAX_GROUP_EVENTS = 4096
TERMINAL_TYPES = frozenset({"run.completed", "run.failed", "run.cancelled"})


def request_teardown(stored: list[streams.StoredEvent]) -> None:
    """A run ended: the worker checkpoints and removes its sandbox (best effort; the
    sandbox sweep catches what this misses)."""
    for event in stored:
        if event.type in TERMINAL_TYPES and not event.duplicate and event.run_id:
            try:
                enqueue_run_finish(event.run_id)
            except Exception:
                log.warning("driver.teardown_not_queued", run_id=event.run_id)


@dataclass
class _Batch:
    instance_id: str
    connection_id: str
    events: list[DriverEvent]
    may_repeat: bool  # see sessions.DriverBatch
    done: asyncio.Future[list[streams.StoredEvent]]
    stored: list[streams.StoredEvent] = field(default_factory=list)
    traceparent: str = ""
    error: Exception | None = None


class EventWriter:
    """`await writer.store(instance_id, connection_id, events)` returns the batch as stored
    (its seqs, duplicates flagged) once it is committed and published."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis
        self._queue: deque[_Batch] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Its own thread: a group never waits behind the connections' other database calls.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="event-writer")

    async def store(
        self,
        instance_id: str,
        connection_id: str,
        events: list[DriverEvent],
        *,
        may_repeat: bool = True,
    ) -> list[streams.StoredEvent]:
        """Raises `driver_plane.DriverRefused` when this batch must be refused, or the
        database's error; either way nothing of it is stored. `may_repeat=False` skips the
        duplicate lookup (see `sessions.DriverBatch`)."""
        done: asyncio.Future[list[streams.StoredEvent]] = asyncio.get_running_loop().create_future()
        self._queue.append(_Batch(instance_id, connection_id, events, may_repeat, done))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._write_forever(), name="event-writer")
        self._wake.set()
        return await done

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._thread.shutdown(wait=False)

    async def _write_forever(self) -> None:
        loop = asyncio.get_running_loop()
        publishing: asyncio.Task[None] | None = None
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._queue:
                    group = self._take()
                    storing = loop.run_in_executor(self._thread, _store_group, group)
                    try:
                        # The group before this one goes to Redis while this one commits;
                        # one publish at a time keeps each stream in seq order.
                        if publishing is not None:
                            await publishing
                        await storing
                    except BaseException as error:  # a bug or a cancel: no batch waits for good
                        _fail(group, error)
                        raise
                    _answer(group)
                    publishing = asyncio.create_task(
                        streams.publish_events_async(
                            self.redis, [event for batch in group for event in batch.stored]
                        )
                    )
        finally:  # stopping: what was acknowledged still reaches the streams
            if publishing is not None:
                with contextlib.suppress(Exception):
                    await publishing

    def _take(self) -> list[_Batch]:
        group = [self._queue.popleft()]
        events = len(group[0].events)
        while self._queue and events + len(self._queue[0].events) <= MAX_GROUP_EVENTS:
            batch = self._queue.popleft()
            events += len(batch.events)
            group.append(batch)
        return group


def _answer(group: list[_Batch]) -> None:
    """Committed: each connection acknowledges its batch (or refuses it) now."""
    for batch in group:
        if batch.done.done():  # its connection went away meanwhile
            continue
        if batch.error is not None:
            batch.done.set_exception(batch.error)
        else:
            batch.done.set_result(batch.stored)


def _fail(group: list[_Batch], error: BaseException) -> None:
    for batch in group:
        if not batch.done.done():
            batch.done.set_exception(
                error if isinstance(error, Exception) else RuntimeError("stopped")
            )


def _store_group(group: list[_Batch]) -> None:
    """In the writer's thread: the whole group in one transaction; if any batch fails, each
    batch again in a transaction of its own. Then what follows a commit: spans, teardowns."""
    try:
        with session_scope() as db:
            _store_batches(db, group)
    except Exception:
        for batch in group:
            # Looked up this time: a repeated event is dropped, not refused by the index.
            batch.stored, batch.error, batch.may_repeat = [], None, True
            try:
                with session_scope() as db:
                    _store_batches(db, [batch])
            except Exception as error:
                batch.stored, batch.error = [], error
    for batch in group:
        if batch.traceparent and batch.error is None:
            _traces.record_driver_events(batch.traceparent, batch.events, batch.stored)
        request_teardown(batch.stored)


def _store_batches(db: Session, group: list[_Batch]) -> None:
    ids = {batch.instance_id for batch in group}
    connection_of = dict(
        db.execute(
            select(DriverInstance.id, DriverInstance.connection_id).where(
                col(DriverInstance.id).in_(ids)
            )
        ).all()
    )
    for batch in group:
        if connection_of.get(batch.instance_id) != batch.connection_id:
            raise driver_plane.DriverRefused("superseded", "a newer connection replaced this one")
    if not tracing.enabled():
        answers = driver_plane.ingest_driver_batches(
            db,
            [
                driver_plane.DriverBatch(batch.instance_id, batch.events, batch.may_repeat)
                for batch in group
            ],
        )
        for batch, stored in zip(group, answers, strict=True):
            batch.stored = stored
        return
    for batch in group:  # a span each, parented by its run's trace
        batch.traceparent = _traces.run_traceparent(db, batch.events[0].run_id)
        with tracing.tracer().start_as_current_span(
            "control.ingest",
            context=tracing.context_from(batch.traceparent),
            attributes={"mosoo.run_id": batch.events[0].run_id, "mosoo.events": len(batch.events)},
        ):
            (batch.stored,) = driver_plane.ingest_driver_batches(
                db,
                [driver_plane.DriverBatch(batch.instance_id, batch.events, batch.may_repeat)],
            )
