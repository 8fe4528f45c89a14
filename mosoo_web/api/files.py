"""`/api/files/{id}/content`: a file's bytes for the console, authenticated by the session
cookie. Streamed; never rendered as a page of this origin (`nosniff`, `CSP: sandbox`, and
`attachment` unless it is an image or a plain-text preview), never embedded by another
origin's page (`Cross-Origin-Resource-Policy: same-origin`)."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from mosoo_core import files, identity
from mosoo_core.db import session_scope
from mosoo_core.errors import Unauthenticated
from mosoo_web.api.cookies import session_token

router = APIRouter(prefix="/api/files")

# Raster images only: an SVG is a document that can carry script, so it always downloads.
INLINE_IMAGE_TYPES = frozenset(
    {"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/bmp"}
)


def content_disposition(name: str, inline: bool) -> str:
    """RFC 6266: an ASCII fallback name plus the UTF-8 name (RFC 5987)."""
    fallback = "".join(c if 32 <= ord(c) < 127 and c not in '"\\;' else "_" for c in name) or "file"
    kind = "inline" if inline else "attachment"
    return f"{kind}; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"


def _open(token: str | None, file_id: str) -> tuple[files.FileView, Iterator[bytes]]:
    with session_scope() as db:
        account_id = identity.resolve_session(db, token)
        if account_id is None:
            raise Unauthenticated("Sign in to the console to open files.")
        view, handle = files.open_file(db, account_id, file_id)
    return view, files.iter_chunks(handle)


@router.get("/{file_id}/content")
async def file_content(file_id: str, request: Request, download: int = 0) -> StreamingResponse:
    """The file's bytes. Another owner's (or an unknown) file is 404, no session 401."""
    view, chunks = await run_in_threadpool(_open, session_token(request), file_id)
    inline = not download and (
        view.media_type in INLINE_IMAGE_TYPES or view.media_type == "text/plain"
    )
    media_type = "text/plain; charset=utf-8" if view.media_type == "text/plain" else view.media_type
    headers = {
        "Content-Disposition": content_disposition(view.name, inline),
        "Content-Length": str(view.size),
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox",
        # Another port's page (same site, so the cookie rides along) cannot embed the bytes.
        "Cross-Origin-Resource-Policy": "same-origin",
        "Cache-Control": "private, no-store",
    }
    return StreamingResponse(chunks, media_type=media_type, headers=headers)
