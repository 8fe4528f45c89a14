"""Blocking work (database, Redis) off the event loop, in a pool of threads."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from sqlalchemy.pool import QueuePool

from mosoo_core.db import get_engine
from mosoo_core.settings import get_settings

T = TypeVar("T")


@functools.cache
def _pool() -> ThreadPoolExecutor:
    """asyncio's executor, not `run_in_threadpool`: anyio's capacity limiter and cancel scopes
    cost more CPU per trip than the API's reads themselves. Few threads on SQLite
    (`MOSOO_API_THREADS`): at 10 requests at once, 40 threads spent more CPU handing the GIL
    to each other than reading (bench/api.py: a request at concurrency 10 cost 1.6x its CPU
    at concurrency 1 with 40 threads, 1.3x with 2)."""
    return ThreadPoolExecutor(
        max_workers=get_settings().resolved_api_threads, thread_name_prefix="api"
    )


async def in_thread(work: Callable[[], T]) -> T:
    """`work()` in the pool, with this task's context (its trace span) as the thread's."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(_pool(), context.run, work)


def loop_may_read() -> bool:
    """Whether a few indexed reads may run on the event loop itself instead of in the pool.

    Only on SQLite: there a read is a function call into the same process (tens of
    microseconds; in WAL mode it never waits for a writer), while the trip to the pool and
    back, two GIL handoffs between the loop's thread and the pool's, cost several times that
    (bench/api.py). A PostgreSQL read waits on the network, so it always goes to the pool.
    And only while the pool has a connection that no one holds: a checkout past the pool's
    size opens a new connection rather than waiting, but the loop should not pay even that.
    """
    engine = get_engine()
    pool = engine.pool
    return (
        engine.dialect.name == "sqlite"
        and isinstance(pool, QueuePool)
        and pool.checkedout() < pool.size()
    )
