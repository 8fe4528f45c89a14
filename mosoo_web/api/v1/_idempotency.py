"""Runs a creating call at most once per `Idempotency-Key` (see `mosoo_core.idempotency`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from mosoo_core import idempotency
from mosoo_core.db import session_scope
from mosoo_web.api.v1._auth import Caller

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotency-Replayed"
HEADER_DOC = (
    "Makes retries safe for 24 hours: the same key with the same request returns the first answer "
    "(with `Idempotency-Replayed: true`); the same key with a different request is "
    "`409 idempotency_conflict`, as is a retry while the first call is still running."
)


async def answer_once(
    request: Request,
    caller: Caller,
    scope: str,
    body: Any,
    status_code: int,
    work: Callable[[], BaseModel],
) -> JSONResponse:
    """Run `work` (blocking, in the thread pool) unless this key already has an answer."""
    raw_key = request.headers.get(HEADER)
    if raw_key is None:
        result = await run_in_threadpool(work)
        return JSONResponse(result.model_dump(mode="json"), status_code=status_code)
    key = idempotency.clean_key(raw_key)
    fingerprint = idempotency.request_fingerprint(request.url.path, body)

    def claim() -> idempotency.StoredAnswer | None:
        with session_scope() as db:
            return idempotency.claim_key(db, caller.account_id, scope, key, fingerprint)

    stored = await run_in_threadpool(claim)
    if stored is not None:
        return JSONResponse(
            stored.body, status_code=stored.status_code, headers={REPLAYED_HEADER: "true"}
        )
    try:
        result = await run_in_threadpool(work)
    except BaseException:
        await run_in_threadpool(_release, caller.account_id, scope, key)
        raise
    payload = result.model_dump(mode="json")

    def keep() -> None:
        with session_scope() as db:
            idempotency.store_answer(db, caller.account_id, scope, key, status_code, payload)

    await run_in_threadpool(keep)
    return JSONResponse(payload, status_code=status_code)


def _release(account_id: str, scope: str, key: str) -> None:
    with session_scope() as db:
        idempotency.release_key(db, account_id, scope, key)
