"""The session cookie: HttpOnly, SameSite=Lax, Secure behind HTTPS."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlsplit

from fastapi import Response
from starlette.requests import HTTPConnection

from mosoo_core.identity import NewSession
from mosoo_core.settings import get_settings


def set_session_cookie(response: Response, session: NewSession) -> None:
    settings = get_settings()
    max_age = max(0, int((session.expires_at - datetime.now(UTC)).total_seconds()))
    response.set_cookie(
        settings.session_cookie,
        session.token,
        max_age=max_age,
        httponly=True,
        samesite="lax",
        secure=settings.cookies_secure,
        path="/",
    )


def clear_session_cookie(response: Response) -> None:
    settings = get_settings()
    response.delete_cookie(
        settings.session_cookie,
        path="/",
        httponly=True,
        samesite="lax",
        secure=settings.cookies_secure,
    )


def session_token(request: HTTPConnection) -> str | None:
    """The cookie's token, from a request or a websocket handshake."""
    return request.cookies.get(get_settings().session_cookie)


def safe_next(target: str | None) -> str:
    """Only same-site paths are followed after sign-in (no open redirects)."""
    if not target:
        return "/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    if "\\" in target:
        return "/"
    return target
