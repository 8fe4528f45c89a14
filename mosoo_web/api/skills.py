"""`/api/skills/{id}/versions/{number}/content`: a skill version's download for the console
(the Skills page), authenticated by the session cookie; the same bytes as the public API's
`GET /api/v1/skills/{id}/content?version=`. Always an attachment, never rendered or embedded
as a page of this origin."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from mosoo_core import identity, skills
from mosoo_core.db import session_scope
from mosoo_core.errors import NotFound, Unauthenticated
from mosoo_web.api.cookies import session_token
from mosoo_web.api.files import content_disposition

router = APIRouter(prefix="/api/skills")

MAX_VERSION = 2**31 - 1  # the `number` column (INTEGER)


def _open(token: str | None, skill_id: str, number: int) -> skills.SkillContent:
    with session_scope() as db:
        account_id = identity.resolve_session(db, token)
        if account_id is None:
            raise Unauthenticated("Sign in to the console to download skills.")
        if not 1 <= number <= MAX_VERSION:
            raise NotFound(f"This skill has no version {number}.")
        app_id = skills.skill_app_id(db, account_id, skill_id)
        return skills.open_skill_content(db, account_id, app_id, skill_id, number)


@router.get("/{skill_id}/versions/{number}/content")
async def skill_content(skill_id: str, number: int, request: Request) -> StreamingResponse:
    """The version as uploaded (SKILL.md, or the zip of its files). Another owner's (or an
    unknown, or an uninstalled) skill is 404, no session 401."""
    content = await run_in_threadpool(_open, session_token(request), skill_id, number)
    chunks: Iterator[bytes] = content.chunks
    headers = {
        "Content-Disposition": content_disposition(content.filename, inline=False),
        "Content-Length": str(content.size),
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox",
        "Cross-Origin-Resource-Policy": "same-origin",
        "Cache-Control": "private, no-store",
    }
    return StreamingResponse(chunks, media_type=content.media_type, headers=headers)
