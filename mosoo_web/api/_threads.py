"""Blocking work (database, Redis) off the event loop, in a pool of threads."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

# As many threads as Starlette's pool. asyncio's executor, not `run_in_threadpool`: anyio's
# capacity limiter and cancel scopes cost more CPU per trip than the API's reads themselves.
_pool = ThreadPoolExecutor(max_workers=40, thread_name_prefix="api")


async def in_thread(work: Callable[[], T]) -> T:
    """`work()` in the pool, with this task's context (its trace span) as the thread's."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(_pool, context.run, work)
