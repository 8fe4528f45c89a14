"""`/api/auth`: email-code sign-in for HTTP clients, the ticket hand-off that sets the
HttpOnly cookie for the console, and sign-out."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import BaseModel

from mosoo_core import identity
from mosoo_core.db import session_scope
from mosoo_core.errors import MosooError
from mosoo_web.api.cookies import (
    clear_session_cookie,
    safe_next,
    session_token,
    set_session_cookie,
)
from mosoo_web.api.errors import error_response
from mosoo_web.client_ip import request_client_ip

router = APIRouter(prefix="/api/auth")


class EmailStart(BaseModel):
    email: str


class EmailVerify(BaseModel):
    email: str
    code: str


@router.post("/email/start")
async def email_start(body: EmailStart, request: Request) -> JSONResponse:
    """Ask for a sign-in code. The answer is the same for known and unknown addresses."""
    await run_in_threadpool(
        lambda: identity.send_sign_in_code(email=body.email, ip=request_client_ip(request))
    )
    return JSONResponse(
        {"ok": True, "message": "If the address can receive email, a code is on its way."}
    )


@router.post("/email/verify")
async def email_verify(body: EmailVerify, request: Request) -> Response:
    """Trade a code for a session cookie."""

    def work() -> identity.NewSession:
        with session_scope() as db:
            account = identity.verify_email_code(
                db, email=body.email, code=body.code, ip=request_client_ip(request)
            )
            return identity.start_session(
                db,
                account.id,
                method="email",
                user_agent=request.headers.get("user-agent", ""),
                replaces=session_token(request),
            )

    try:
        session = await run_in_threadpool(work)
    except MosooError as error:
        return error_response(error)
    response = JSONResponse({"ok": True})
    set_session_cookie(response, session)
    return response


@router.get("/finish")
async def finish(request: Request, ticket: str = "", next: str = "/") -> Response:
    """The console's hand-off: a single-use ticket becomes the HttpOnly session cookie."""

    def work() -> identity.NewSession:
        with session_scope() as db:
            return identity.redeem_login_ticket(
                db,
                ticket,
                user_agent=request.headers.get("user-agent", ""),
                replaces=session_token(request),
            )

    try:
        session = await run_in_threadpool(work)
    except MosooError:
        return RedirectResponse("/login?error=expired", status_code=303)
    response = RedirectResponse(safe_next(next), status_code=303)
    set_session_cookie(response, session)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    """Sign out: the session is revoked, and its open console tabs are told to leave."""
    await run_in_threadpool(identity.sign_out, session_token(request))
    response = JSONResponse({"ok": True})
    clear_session_cookie(response)
    return response


@router.get("/me")
async def me(request: Request) -> Response:
    token = session_token(request)

    def work() -> identity.AccountView | None:
        with session_scope() as db:
            account_id = identity.resolve_session(db, token)
            return identity.get_account(db, account_id) if account_id else None

    account = await run_in_threadpool(work)
    if account is None:
        return JSONResponse(
            {"error": {"code": "unauthenticated", "message": "Sign in first."}}, status_code=401
        )
    return JSONResponse(
        {
            "id": account.id,
            "email": account.email,
            "name": account.name,
            "organization": {"id": account.organization_id, "name": account.organization_name},
        }
    )
