"""`/api/usage/export.csv`: the Usage page's CSV download of an App's raw usage records or
daily rollup over a range of UTC days, authenticated by the session cookie. Streamed as it is
read (mosoo_core.usage.export); always an attachment, never rendered or embedded as a page of
this origin."""

from __future__ import annotations

from datetime import date

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from mosoo_core import identity, usage
from mosoo_core.db import session_scope
from mosoo_core.errors import InvalidInput, NotFound, Unauthenticated
from mosoo_web.api.cookies import session_token
from mosoo_web.api.files import content_disposition

router = APIRouter(prefix="/api/usage")

APP_ID_LENGTH = 26  # a ULID; anything longer names no App


def _day(value: str | None, field: str) -> date:
    if not value:
        raise InvalidInput(f"{field} is required (YYYY-MM-DD).", field=field)
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise InvalidInput(
            f"{field}: {value[:40]!r} is not a date (YYYY-MM-DD).", field=field
        ) from None


def _open(
    token: str | None, app_id: str, start: str | None, end: str | None, kind: str
) -> usage.UsageCsv:
    with session_scope() as db:
        account_id = identity.resolve_session(db, token)
    if account_id is None:
        raise Unauthenticated("Sign in to the console to export usage.")
    if not app_id or len(app_id) > APP_ID_LENGTH or "\x00" in app_id:
        raise NotFound("App not found.")
    return usage.usage_csv(
        session_scope,
        account_id,
        app_id,
        start=_day(start, "from"),
        end=_day(end, "to"),
        kind=kind,
    )


@router.get("/export.csv")
async def usage_export(request: Request, app_id: str = "", kind: str = "raw") -> StreamingResponse:
    """The CSV of `kind` (raw | rollup) from `from` to `to`. No session 401; another owner's
    (or an unknown) App 404; a missing or bad date, a reversed or too long range, 400."""
    start, end = request.query_params.get("from"), request.query_params.get("to")
    export = await run_in_threadpool(_open, session_token(request), app_id, start, end, kind)
    headers = {
        "Content-Disposition": content_disposition(export.filename, inline=False),
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox",
        "Cross-Origin-Resource-Policy": "same-origin",
        "Cache-Control": "private, no-store",
    }
    return StreamingResponse(export.chunks, media_type="text/csv; charset=utf-8", headers=headers)
