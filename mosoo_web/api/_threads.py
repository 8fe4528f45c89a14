"""Blocking work (database, Redis) off the event loop, in a pool of threads."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

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
