"""A small, real OAuth 2.1 authorization server for the MCP OAuth path, built from Authlib's
server parts: authorization code with S256 PKCE (required), refresh tokens (rotated), and
RFC 8414 metadata, over HTTP on a free 127.0.0.1 port.

The authorize endpoint approves at once. Access tokens live `access_token_seconds`; `valid`
tells whether a token is a live access token (the MCP test server's `token_check`). Every
authorize and token request is recorded (`authorize_requests`, `token_requests`), so a test
can check the PKCE challenge, the `resource` indicator and which grant was used.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from authlib.common.security import generate_token
from authlib.oauth2.rfc6749 import (
    AuthorizationServer,
    ClientMixin,
    OAuth2Error,
    OAuth2Request,
)
from authlib.oauth2.rfc6749.grants import AuthorizationCodeGrant, RefreshTokenGrant
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.oidc_provider import LoopbackServer, _Request, _StrictPKCE


@dataclass(frozen=True)
class _Client(ClientMixin):
    client_id: str
    client_secret: str  # "" for a public client (PKCE only)
    redirect_uri: str
    scopes: tuple[str, ...]

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_allowed_scope(self, scope: str | None) -> str:
        return " ".join(s for s in (scope or "").split() if s in self.scopes)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri == self.redirect_uri

    def check_client_secret(self, client_secret: str) -> bool:
        return bool(self.client_secret) and secrets.compare_digest(
            client_secret, self.client_secret
        )

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        if self.client_secret:
            return method == "client_secret_basic"
        return method == "none"

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in ("authorization_code", "refresh_token")


@dataclass
class _Code:
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    code_challenge: str | None
    code_challenge_method: str | None

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope


@dataclass
class _Token:
    access_token: str
    refresh_token: str
    client_id: str
    scope: str
    expires_at: float
    revoked: bool = False

    def get_scope(self) -> str:
        return self.scope

    def get_expires_in(self) -> int:
        return int(self.expires_at - time.time())

    def is_revoked(self) -> bool:
        return self.revoked

    def is_expired(self) -> bool:
        return False  # a refresh token does not expire here; access tokens do (`valid`)

    def check_client(self, client: _Client) -> bool:
        return self.client_id == client.client_id


@dataclass
class _User:
    id: str = "mcp-owner"

    def get_user_id(self) -> str:
        return self.id


@dataclass
class OAuthServer:
    """Create it (the port is bound at once), `start()`, `stop()`."""

    client_id: str
    redirect_uri: str
    client_secret: str = ""
    scopes: tuple[str, ...] = ("tools",)
    access_token_seconds: int = 3600
    loopback: LoopbackServer = field(default_factory=LoopbackServer)
    codes: dict[str, _Code] = field(default_factory=dict)
    tokens: list[_Token] = field(default_factory=list)
    authorize_requests: list[dict[str, str]] = field(default_factory=list)
    token_requests: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.issuer = self.loopback.url
        self.client = _Client(self.client_id, self.client_secret, self.redirect_uri, self.scopes)
        self.server = self._authorization_server()

    def valid(self, access_token: str) -> bool:
        with self.lock:
            return any(
                t.access_token == access_token and not t.revoked and t.expires_at > time.time()
                for t in self.tokens
            )

    def expire_all(self) -> None:
        with self.lock:
            for token in self.tokens:
                token.expires_at = time.time() - 1

    def _authorization_server(self) -> AuthorizationServer:
        owner = self

        class Server(AuthorizationServer):
            def query_client(self, client_id: str) -> _Client | None:
                return owner.client if client_id == owner.client.client_id else None

            def save_token(self, token: dict[str, Any], request: OAuth2Request) -> None:
                with owner.lock:
                    owner.tokens.append(
                        _Token(
                            access_token=token["access_token"],
                            refresh_token=token.get("refresh_token", ""),
                            client_id=request.client.get_client_id(),
                            scope=token.get("scope", ""),
                            expires_at=time.time() + int(token.get("expires_in", 0)),
                        )
                    )

            def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
                return None

            def create_oauth2_request(self, request: OAuth2Request) -> OAuth2Request:
                return request

            def handle_response(self, status: int, body: Any, headers: Any) -> Response:
                if isinstance(body, dict):
                    return JSONResponse(body, status, headers=dict(headers))
                return Response(body, status, headers=dict(headers))

        class CodeGrant(AuthorizationCodeGrant):
            TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "none"]

            def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
                data = request.payload.data
                owner.codes[code] = _Code(
                    code=code,
                    client_id=request.client.get_client_id(),
                    redirect_uri=data.get("redirect_uri", ""),
                    scope=request.scope or "",
                    code_challenge=data.get("code_challenge"),
                    code_challenge_method=data.get("code_challenge_method"),
                )

            def query_authorization_code(self, code: str, client: _Client) -> _Code | None:
                item = owner.codes.get(code)
                return item if item and item.client_id == client.get_client_id() else None

            def delete_authorization_code(self, authorization_code: _Code) -> None:
                owner.codes.pop(authorization_code.code, None)

            def authenticate_user(self, authorization_code: _Code) -> _User:
                return _User()

        class Refresh(RefreshTokenGrant):
            TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "none"]
            INCLUDE_NEW_REFRESH_TOKEN = True

            def authenticate_refresh_token(self, refresh_token: str) -> _Token | None:
                with owner.lock:
                    for token in owner.tokens:
                        if token.refresh_token == refresh_token and not token.revoked:
                            return token
                return None

            def authenticate_user(self, refresh_token: _Token) -> _User:
                return _User()

            def revoke_old_credential(self, refresh_token: _Token) -> None:
                with owner.lock:
                    refresh_token.revoked = True

        server = Server(scopes_supported=list(self.scopes))
        lifetime = self.access_token_seconds
        server.register_token_generator(
            "default",
            BearerTokenGenerator(
                lambda **_: generate_token(42),
                lambda **_: generate_token(48),
                lambda *_, **__: lifetime,
            ),
        )
        server.register_grant(CodeGrant, [_StrictPKCE(required=True)])
        server.register_grant(Refresh)
        return server

    async def _metadata(self, request: Request) -> Response:
        return JSONResponse(
            {
                "issuer": self.issuer,
                "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token",
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "none"],
                "scopes_supported": list(self.scopes),
            }
        )

    async def _authorize(self, request: Request) -> Response:
        self.authorize_requests.append(dict(request.query_params))
        oauth_request = _Request(request, {})
        user = _User()
        try:
            grant = self.server.get_consent_grant(oauth_request, end_user=user)
        except OAuth2Error as error:
            return self.server.handle_error_response(oauth_request, error)
        return self.server.create_authorization_response(
            oauth_request, grant_user=user, grant=grant
        )

    async def _token(self, request: Request) -> Response:
        form = {key: str(value) for key, value in (await request.form()).items()}
        self.token_requests.append(form)
        return self.server.create_token_response(_Request(request, form))

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/.well-known/oauth-authorization-server", self._metadata),
                Route("/authorize", self._authorize),
                Route("/token", self._token, methods=["POST"]),
            ]
        )

    def start(self) -> OAuthServer:
        self.loopback.start(self.app())
        return self

    def stop(self) -> None:
        self.loopback.stop()

    def __enter__(self) -> OAuthServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
