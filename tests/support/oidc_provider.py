"""A small, real OpenID Connect provider standing in for Google, built from Authlib's server parts.

It serves discovery, JWKS, authorize and token over HTTP on a free 127.0.0.1 port. The
authorize endpoint approves `provider.user` at once (set it per test). Client credentials,
S256 PKCE and a nonce are required; ID tokens are signed with an RSA key made at start.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

import uvicorn
from authlib.common.security import generate_token
from authlib.oauth2.rfc6749 import (
    AuthorizationServer,
    ClientMixin,
    InvalidRequestError,
    OAuth2Error,
    OAuth2Request,
)
from authlib.oauth2.rfc6749.grants import AuthorizationCodeGrant
from authlib.oauth2.rfc6749.requests import BasicOAuth2Payload
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import AuthorizationCodeMixin, UserInfo
from authlib.oidc.core.grants import OpenIDCode
from joserfc.jwk import RSAKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.processes import loopback_listener


@dataclass
class ProviderUser:
    """Whoever is "signed in at Google"; the authorize endpoint approves them at once."""

    sub: str = "google-subject-1"
    email: str = "ada@example.com"
    email_verified: bool = True
    name: str = "Ada Lovelace"


@dataclass(frozen=True)
class _Client(ClientMixin):
    client_id: str
    client_secret: str
    redirect_uri: str

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_allowed_scope(self, scope: str | None) -> str:
        allowed = {"openid", "email", "profile"}
        return " ".join(s for s in (scope or "").split() if s in allowed)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri == self.redirect_uri

    def check_client_secret(self, client_secret: str) -> bool:
        return secrets.compare_digest(client_secret, self.client_secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method in ("client_secret_basic", "client_secret_post")  # a confidential client

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "authorization_code"


@dataclass
class _Code(AuthorizationCodeMixin):
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    user: ProviderUser
    nonce: str | None
    code_challenge: str | None
    code_challenge_method: str | None
    auth_time: int

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def get_nonce(self) -> str | None:
        return self.nonce

    def get_auth_time(self) -> int:
        return self.auth_time


class _Request(OAuth2Request):  # Authlib's request shape; the form is read beforehand (async)
    def __init__(self, request: Request, form: dict[str, str]):
        super().__init__(request.method, str(request.url), headers=request.headers)
        self._args = dict(request.query_params)
        self._form = form
        self.payload = BasicOAuth2Payload({**self._args, **form})

    @property
    def args(self) -> dict[str, str]:
        return self._args

    @property
    def form(self) -> dict[str, str]:
        return self._form


class _StrictPKCE(CodeChallenge):
    """Unlike Authlib's default, confidential clients must use PKCE too, and only S256."""

    def validate_code_challenge(self, grant: Any, redirect_uri: str) -> None:
        data = grant.request.payload.data
        if not data.get("code_challenge") or data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("S256 PKCE is required.", redirect_uri=redirect_uri)
        super().validate_code_challenge(grant, redirect_uri)


class OIDCProvider:
    """Create it (the port is bound at once), `start()`, set `user` per test, `stop()`."""

    def __init__(self, *, client_id: str, client_secret: str, redirect_uri: str):
        self.loopback = LoopbackServer()
        self.issuer = self.loopback.url
        self.user = ProviderUser()
        self.client = _Client(client_id, client_secret, redirect_uri)
        self.key = RSAKey.generate_key(2048, parameters={"kid": generate_token(8), "use": "sig"})
        self.codes: dict[str, _Code] = {}
        self.issued_tokens: list[dict[str, Any]] = []
        self.server = self._authorization_server()

    def _authorization_server(self) -> AuthorizationServer:
        provider = self

        class Server(AuthorizationServer):
            def query_client(self, client_id: str) -> _Client | None:
                return provider.client if client_id == provider.client.client_id else None

            def save_token(self, token: dict[str, Any], request: OAuth2Request) -> None:
                provider.issued_tokens.append(token)

            def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
                return None

            def create_oauth2_request(self, request: OAuth2Request) -> OAuth2Request:
                return request  # the endpoints below wrap Starlette requests themselves

            def handle_response(self, status: int, body: Any, headers: Any) -> Response:
                if isinstance(body, dict):
                    return JSONResponse(body, status, headers=dict(headers))
                return Response(body, status, headers=dict(headers))

        class CodeGrant(AuthorizationCodeGrant):
            def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
                data = request.payload.data
                provider.codes[code] = _Code(
                    code=code,
                    client_id=request.client.get_client_id(),
                    redirect_uri=data.get("redirect_uri", ""),
                    scope=request.scope,
                    user=request.user,
                    nonce=data.get("nonce"),
                    code_challenge=data.get("code_challenge"),
                    code_challenge_method=data.get("code_challenge_method"),
                    auth_time=int(time.time()),
                )

            def query_authorization_code(self, code: str, client: _Client) -> _Code | None:
                item = provider.codes.get(code)
                return item if item and item.client_id == client.get_client_id() else None

            def delete_authorization_code(self, authorization_code: _Code) -> None:
                provider.codes.pop(authorization_code.code, None)  # codes are single-use

            def authenticate_user(self, authorization_code: _Code) -> ProviderUser:
                return authorization_code.user

        class IDToken(OpenIDCode):
            def exists_nonce(self, nonce: str, request: OAuth2Request) -> bool:
                return any(item.nonce == nonce for item in provider.codes.values())

            def resolve_client_private_key(self, client: _Client) -> RSAKey:
                return provider.key

            def get_client_claims(self, client: _Client) -> dict[str, Any]:
                return {"iss": provider.issuer, "aud": [client.get_client_id()]}

            def get_encode_header(self, client: _Client) -> dict[str, str]:
                return {"alg": "RS256", "kid": provider.key.kid or ""}

            def generate_user_info(self, user: ProviderUser, scope: str) -> UserInfo:
                info = UserInfo(sub=user.sub)
                if "email" in scope.split():
                    info.update(email=user.email, email_verified=user.email_verified)
                if "profile" in scope.split():
                    info["name"] = user.name
                return info

        server = Server(scopes_supported=["openid", "email", "profile"])
        server.register_token_generator(
            "default", BearerTokenGenerator(lambda **_: generate_token(42))
        )
        server.register_grant(CodeGrant, [_StrictPKCE(required=True), IDToken(require_nonce=True)])
        return server

    async def _discovery(self, request: Request) -> Response:
        return JSONResponse(
            {
                "issuer": self.issuer,
                "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token",
                "jwks_uri": f"{self.issuer}/jwks",
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "scopes_supported": ["openid", "email", "profile"],
                "token_endpoint_auth_methods_supported": [
                    "client_secret_basic",
                    "client_secret_post",
                ],
                "code_challenge_methods_supported": ["S256"],
            }
        )

    async def _jwks(self, request: Request) -> Response:
        return JSONResponse({"keys": [self.key.as_dict(private=False)]})

    async def _authorize(self, request: Request) -> Response:
        oauth_request = _Request(request, {})
        try:
            grant = self.server.get_consent_grant(oauth_request, end_user=self.user)
        except OAuth2Error as error:
            return self.server.handle_error_response(oauth_request, error)
        return self.server.create_authorization_response(
            oauth_request, grant_user=self.user, grant=grant
        )

    async def _token(self, request: Request) -> Response:
        form = await request.form()
        oauth_request = _Request(request, {key: str(value) for key, value in form.items()})
        return self.server.create_token_response(oauth_request)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/.well-known/openid-configuration", self._discovery),
                Route("/jwks", self._jwks),
                Route("/authorize", self._authorize),
                Route("/token", self._token, methods=["POST"]),
            ]
        )

    def start(self) -> None:
        self.loopback.start(self.app())

    def stop(self) -> None:
        self.loopback.stop()


class LoopbackServer:
    """An ASGI app served by uvicorn in a background thread. The port is bound at once, so
    `url` is known before the app is built (our redirect URI needs it)."""

    def __init__(self) -> None:
        self.socket = loopback_listener()
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self, app: Any) -> None:
        config = uvicorn.Config(app, log_level="warning", lifespan="off", http="h11", ws="none")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, args=([self.socket],), daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server on {self.url} did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._server and self._thread:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        self.socket.close()
