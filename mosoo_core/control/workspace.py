"""`GET /driver/workspace`: a Task run's thread checkpoint, for the driver that took the run
(from the warm pool, or started cold with its sandbox), which extracts it into /workspace
before it says ready. The run's model grant is the bearer, as at the gateway: only a driver
holding a live run of that thread gets that thread's files. 204 when the thread has none."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from mosoo_core.db import session_scope
from mosoo_core.files import checkpoint_key, get_store
from mosoo_core.logs import get_logger
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.sessions import SessionRun

log = get_logger(__name__)
PATH = "/driver/workspace"  # driver/workspace.py WORKSPACE_PATH
_CHUNK = 256 * 1024


def _checkpoint_of(grant: str | None) -> str | None:
    """The object key of the grant's thread checkpoint; None when the grant is no live Task
    run's."""
    with session_scope() as db:
        context = driver_plane.resolve_model_grant(db, grant)
        if context is None:
            return None
        run = db.get(SessionRun, context.run_id)
        if run is None or run.snapshot.get("kind", "cattle") != "cattle":
            return None
        return checkpoint_key(context.app_id, context.session_id)


async def workspace(request: Request) -> Response:
    header = request.headers.get("authorization", "")
    grant = header[7:].strip() if header.lower().startswith("bearer ") else None
    key = await asyncio.to_thread(_checkpoint_of, grant)
    if key is None:
        return JSONResponse({"error": {"code": "unauthenticated"}}, status_code=401)
    store = get_store()
    if not await asyncio.to_thread(store.exists, key):
        return Response(status_code=204)
    handle = await asyncio.to_thread(store.open, key)

    async def chunks() -> AsyncIterator[bytes]:
        try:
            while chunk := await asyncio.to_thread(handle.read, _CHUNK):
                yield chunk
        finally:
            await asyncio.to_thread(handle.close)

    log.info("driver.workspace_sent", key=key.rsplit("/", 2)[-2])
    return StreamingResponse(chunks(), media_type="application/x-tar")


def build_routes() -> list[Route]:
    return [Route(PATH, workspace, methods=["GET"])]
