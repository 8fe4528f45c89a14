"""`GET /api/health`: the database and Redis both answer."""

from __future__ import annotations

import redis
from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from mosoo_core.db import check_database
from mosoo_core.settings import get_settings

router = APIRouter()


def _checks() -> dict[str, str]:
    checks: dict[str, str] = {}
    try:
        check_database()
        checks["database"] = "ok"
    except Exception as error:
        checks["database"] = f"error: {type(error).__name__}"
    try:
        client = redis.Redis.from_url(
            get_settings().redis_url, socket_timeout=2, socket_connect_timeout=2
        )
        client.ping()
        client.close()
        checks["redis"] = "ok"
    except Exception as error:
        checks["redis"] = f"error: {type(error).__name__}"
    return checks


@router.get("/api/health")
async def health() -> JSONResponse:
    checks = await run_in_threadpool(_checks)
    ok = all(value == "ok" for value in checks.values())
    return JSONResponse({"ok": ok, "checks": checks}, status_code=200 if ok else 503)
