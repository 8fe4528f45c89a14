"""Connecting an MCP server with OAuth, from the console: the authorize redirect and the
callback, authenticated by the session cookie. The state is single use, expires in ten
minutes and belongs to the account that started it (`mosoo_core.mcp.oauth`); tokens go to the
vault and never to the browser."""

from __future__ import annotations

import re
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse

from mosoo_core import identity, mcp
from mosoo_core.db import session_scope
from mosoo_core.errors import MosooError
from mosoo_core.logs import get_logger
from mosoo_core.settings import get_settings
from mosoo_web.api.cookies import session_token

log = get_logger(__name__)
router = APIRouter(prefix="/api/mcp-servers")
CALLBACK_PATH = "/api/mcp-servers/oauth/callback"
# Where the callback sends the browser when it cannot tell the server (a refused state): the
# server page this browser's last round trip started from, kept in this cookie by the
# authorize step for the state's lifetime (ids only, checked against `_SERVER_PAGE` before
# it is followed), else the Apps page.
RETURN_COOKIE = "mosoo_mcp_oauth_return"
FALLBACK_PATH = "/apps"
_SERVER_PAGE = re.compile(r"^/apps/[0-9A-Za-z]{1,40}/mcp/[0-9A-Za-z]{1,40}$")


def redirect_uri() -> str:
    return f"{get_settings().public_url.rstrip('/')}{CALLBACK_PATH}"


def server_page(app_id: str, server_id: str) -> str:
    """The console's page of one MCP server, which shows how the round trip went."""
    return f"/apps/{app_id}/mcp/{server_id}"


def _back(page: str | None, **query: str) -> RedirectResponse:
    target = page if page and _SERVER_PAGE.match(page) else FALLBACK_PATH
    return RedirectResponse(f"{target}?{urlencode(query)}", status_code=303)


@router.get("/{server_id}/oauth/authorize")
async def authorize(server_id: str, request: Request) -> RedirectResponse:
    """Send the signed-in owner's browser to the server's authorization endpoint."""
    token = session_token(request)
    found: dict[str, str] = {}  # the server's App, once known (where a refusal goes back to)

    def work() -> str | None:
        with session_scope() as db:
            account_id = identity.resolve_session(db, token)
            if account_id is None:
                return None
            found["app_id"] = mcp.mcp_server_app_id(db, account_id, server_id)
            return mcp.start_authorization(
                db, account_id, found["app_id"], server_id, redirect_uri()
            )

    try:
        target = await run_in_threadpool(work)
    except MosooError as error:
        log.warning("mcp.oauth_start_failed", server_id=server_id[:26], reason=error.code)
        page = server_page(found["app_id"], server_id) if "app_id" in found else None
        return _back(page, oauth="failed", reason=error.code)
    if target is None:
        path = f"/api/mcp-servers/{quote(server_id[:26], safe='')}/oauth/authorize"
        return RedirectResponse(f"/login?{urlencode({'next': path})}", status_code=303)
    response = RedirectResponse(target, status_code=303)
    settings = get_settings()
    response.set_cookie(
        RETURN_COOKIE,
        server_page(found["app_id"], server_id),
        max_age=600,  # the state's own lifetime
        httponly=True,
        samesite="lax",  # sent on the authorization server's redirect back (a top-level GET)
        secure=settings.cookies_secure,
        path=CALLBACK_PATH,
    )
    return response


@router.get("/oauth/callback")
async def callback(
    request: Request, state: str = "", code: str = "", error: str = ""
) -> RedirectResponse:
    """The authorization server's answer: check the state, exchange the code, seal the tokens."""
    token = session_token(request)

    def work() -> mcp.Completed | None:
        with session_scope() as db:
            account_id = identity.resolve_session(db, token)
            if account_id is None:
                return None
            return mcp.complete_authorization(db, account_id, state, code or None, error or None)

    try:
        completed = await run_in_threadpool(work)
    except MosooError as refused:
        log.warning("mcp.oauth_refused", reason=refused.code)
        return _back(request.cookies.get(RETURN_COOKIE), oauth="failed", reason=refused.code)
    if completed is None:
        return RedirectResponse("/login", status_code=303)
    return _back(server_page(completed.app_id, completed.server_id), oauth="connected")
