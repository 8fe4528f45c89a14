"""Google sign-in: Authlib OpenID Connect with state bound to the browser, nonce and PKCE.

Only verified emails are accepted; the same email is the same Account (`sign_in_identity`).
The routes exist only when MOSOO_GOOGLE_CLIENT_ID and MOSOO_GOOGLE_CLIENT_SECRET are set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from authlib.common.errors import AuthlibBaseError
from authlib.integrations.starlette_client import OAuth, StarletteOAuth2App
from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response
from joserfc.errors import JoseError
from starlette.middleware.sessions import SessionMiddleware

from mosoo_core import identity
from mosoo_core.db import session_scope
from mosoo_core.errors import MosooError
from mosoo_core.logs import get_logger
from mosoo_core.settings import Settings, get_settings
from mosoo_web.api.cookies import safe_next, session_token, set_session_cookie

if TYPE_CHECKING:
    from httpx2 import HTTPError
else:
    try:  # Authlib's HTTP client is httpx2 when installed, else httpx
        from httpx2 import HTTPError
    except ImportError:
        from httpx import HTTPError

log = get_logger(__name__)

OAUTH_COOKIE = "mosoo_oauth"
OAUTH_COOKIE_PATH = "/api/auth/google"
OAUTH_COOKIE_MAX_AGE = 600  # the round trip through Google must finish within ten minutes
CALLBACK_PATH = "/api/auth/google/callback"
_NEXT_KEY = "next"

# What can go wrong between the two redirects: missing or wrong state and OAuth errors
# (AuthlibBaseError), a bad ID token (JoseError: signature, nonce, audience, expiry), an
# unreachable provider (HTTPError) or a malformed answer (ValueError).
_FLOW_ERRORS = (AuthlibBaseError, JoseError, HTTPError, ValueError)


def google_sign_in_enabled() -> bool:
    """Whether the login page offers "Sign in with Google"."""
    return get_settings().google_enabled


def _google_client(settings: Settings) -> StarletteOAuth2App:
    # A registry per install: settings are read when the API is built, never at import.
    oauth = OAuth()
    client: StarletteOAuth2App = oauth.register(
        name="google",
        client_id=settings.google_client_id,
        client_secret=settings.google_client_secret,
        server_metadata_url=f"{settings.google_issuer.rstrip('/')}/.well-known/openid-configuration",
        client_kwargs={"scope": "openid email profile", "code_challenge_method": "S256"},
    )
    return client


def _accepted_issuers(issuer: str) -> list[str]:
    # Google documents both "https://accounts.google.com" and "accounts.google.com" as `iss`.
    issuer = issuer.rstrip("/")
    return [issuer, issuer.removeprefix("https://")] if issuer.startswith("https://") else [issuer]


def _refuse(reason: str) -> RedirectResponse:
    return RedirectResponse(f"/login?error={reason}", status_code=303)


def _failure_fields(error: Exception) -> dict[str, str]:
    # The class and OAuth error code only: descriptions may echo request values; tokens never.
    fields = {"reason": type(error).__name__}
    if code := getattr(error, "error", None):
        fields["error"] = str(code)
    return fields


def install(api: FastAPI) -> None:
    """Adds the Google routes when MOSOO_GOOGLE_CLIENT_ID / _SECRET are set."""
    settings = get_settings()
    if not settings.google_enabled:
        return
    api.add_middleware(
        SessionMiddleware,
        secret_key=settings.resolved_secret_key(),
        session_cookie=OAUTH_COOKIE,
        path=OAUTH_COOKIE_PATH,
        max_age=OAUTH_COOKIE_MAX_AGE,
        same_site="lax",
        https_only=settings.cookies_secure,
    )
    client = _google_client(settings)
    redirect_uri = f"{settings.public_url.rstrip('/')}{CALLBACK_PATH}"
    claims_options = {
        "iss": {"essential": True, "values": _accepted_issuers(settings.google_issuer)}
    }
    router = APIRouter(prefix="/api/auth/google")

    @router.get("/login")
    async def google_login(request: Request, next: str = "/") -> Response:
        """Send the browser to Google; state, nonce and PKCE verifier stay in its session."""
        request.session[_NEXT_KEY] = safe_next(next)
        try:
            redirect: Response = await client.authorize_redirect(request, redirect_uri)
            return redirect
        except _FLOW_ERRORS as error:
            log.warning("google.sign_in_unavailable", **_failure_fields(error))
            return _refuse("google_failed")

    @router.get("/callback")
    async def google_callback(request: Request) -> Response:
        """Google's answer: exchange the code, check the ID token, start a Mosoo session."""
        next_path = safe_next(request.session.pop(_NEXT_KEY, None))
        try:
            token = await client.authorize_access_token(request, claims_options=claims_options)
        except _FLOW_ERRORS as error:
            log.warning("google.sign_in_failed", **_failure_fields(error))
            return _refuse("google_failed")

        claims = token.get("userinfo") or {}
        subject, email = claims.get("sub"), claims.get("email")
        if not subject or not email:
            log.warning("google.sign_in_failed", reason="missing_claims")
            return _refuse("google_failed")
        if claims.get("email_verified") is not True:
            log.warning("google.email_unverified", subject=subject)
            return _refuse("google_unverified")

        def work() -> identity.NewSession:
            with session_scope() as db:
                account = identity.sign_in_identity(
                    db,
                    provider="google",
                    subject=str(subject),
                    email=str(email),
                    name=str(claims.get("name") or ""),
                )
                return identity.start_session(
                    db,
                    account.id,
                    method="google",
                    user_agent=request.headers.get("user-agent", ""),
                    replaces=session_token(request),
                )

        try:
            session = await run_in_threadpool(work)
        except MosooError as error:  # e.g. an address our validator refuses
            log.warning("google.sign_in_failed", reason=type(error).__name__, subject=subject)
            return _refuse("google_failed")
        log.info("google.signed_in", account_id=session.account_id, session_id=session.session_id)
        response = RedirectResponse(next_path, status_code=303)
        set_session_cookie(response, session)
        return response

    api.include_router(router)
