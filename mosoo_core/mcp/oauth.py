"""OAuth 2.1 for MCP servers that require it: authorization code with PKCE (S256), the
`resource` indicator (RFC 8707), and refresh.

Endpoints are configured on the server, or discovered when the owner connects, as MCP's
authorization spec says: the server's protected-resource metadata (RFC 9728, from its
`WWW-Authenticate` challenge or the well-known paths) names its authorization server, whose
metadata (RFC 8414, or OpenID discovery) gives the endpoints. A server without resource
metadata is taken as its own authorization server (the 2025-03-26 revision's fallback).

The browser round trip: `start_authorization` stores a single-use state (its digest, the
account that started it, the PKCE verifier) and answers the URL to send the browser to;
`complete_authorization` checks the state (unknown, used, expired, or another account's is
refused), exchanges the code and seals the tokens in the vault. `access_token` refreshes an
expired access token with the refresh token, for the proxy and Test connection.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpx
from sqlmodel import Session, select

from mosoo_core.clock import utcnow
from mosoo_core.db import commit_refusal
from mosoo_core.errors import Conflict, InvalidInput, MosooError
from mosoo_core.logs import get_logger
from mosoo_core.mcp.service import drop_secret, owned_server, reveal, seal_secret
from mosoo_core.network import outbound
from mosoo_core.tables.mcp import McpOAuthState, McpServer

log = get_logger("mosoo.mcp.oauth")
STATE_TTL = timedelta(minutes=10)
HTTP_TIMEOUT_SECONDS = 10.0
# Refresh this long before the access token's stated expiry.
REFRESH_MARGIN_SECONDS = 60
_METADATA_MAX_BYTES = 256 * 1024


class OAuthUnavailable(MosooError):
    """No usable access token: never connected, refused, or the refresh failed."""

    code = "mcp_oauth_unavailable"


@dataclass(frozen=True)
class Endpoints:
    authorization_endpoint: str
    token_endpoint: str
    resource: str


@dataclass(frozen=True)
class Completed:
    server_id: str
    app_id: str


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _http() -> httpx.Client:
    # No redirects: a metadata or token endpoint that moves is refused rather than followed.
    # Every connection through the outbound guard (these URLs are the owner's, or the server's).
    return httpx.Client(
        transport=outbound.transport(),
        timeout=HTTP_TIMEOUT_SECONDS,
        follow_redirects=False,
        trust_env=False,
    )


def _discovery_refused(error: httpx.HTTPError) -> None:
    """A refusal of the outbound guard is the owner's to read, not a missing document."""
    refusal = outbound.refusal_in(error)
    if refusal is not None:
        raise Conflict(str(refusal), code="oauth_discovery_failed") from None


def _get_json(client: httpx.Client, url: str) -> dict[str, Any] | None:
    try:
        response = client.get(url, headers={"Accept": "application/json"})
    except httpx.HTTPError as error:
        _discovery_refused(error)
        return None
    if response.status_code != 200 or len(response.content) > _METADATA_MAX_BYTES:
        return None
    try:
        value = response.json()
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def _path(url: str) -> str:
    return urlsplit(url).path.rstrip("/")


def _resource_metadata_url(client: httpx.Client, url: str) -> list[str]:
    """Where the server says its resource metadata is (its 401 challenge), then the
    well-known locations for its path and its origin (RFC 9728 section 3)."""
    found: list[str] = []
    try:
        response = client.post(
            url,
            json={"jsonrpc": "2.0", "id": 0, "method": "ping"},
            headers={"Accept": "application/json, text/event-stream"},
        )
        challenge = response.headers.get("www-authenticate", "")
        match = re.search(r'resource_metadata="([^"]+)"', challenge)
        if response.status_code == 401 and match:
            found.append(match.group(1))
    except httpx.HTTPError as error:
        _discovery_refused(error)
    origin, path = _origin(url), _path(url)
    if path:
        found.append(f"{origin}/.well-known/oauth-protected-resource{path}")
    found.append(f"{origin}/.well-known/oauth-protected-resource")
    return found


def _authorization_server_metadata(client: httpx.Client, issuer: str) -> dict[str, Any] | None:
    origin, path = _origin(issuer), _path(issuer)
    candidates = [
        f"{origin}/.well-known/oauth-authorization-server{path}",
        f"{origin}/.well-known/openid-configuration{path}",
    ]
    if path:
        candidates.append(f"{origin}{path}/.well-known/openid-configuration")
    for candidate in candidates:
        metadata = _get_json(client, candidate)
        if metadata and metadata.get("authorization_endpoint") and metadata.get("token_endpoint"):
            return metadata
    return None


def discover(url: str) -> Endpoints:
    """The authorization and token endpoints of the MCP server at `url`."""
    with _http() as client:
        resource = url
        issuer = _origin(url)
        for candidate in _resource_metadata_url(client, url):
            metadata = _get_json(client, candidate)
            servers = metadata.get("authorization_servers") if metadata else None
            if isinstance(servers, list) and servers and isinstance(servers[0], str):
                issuer = servers[0]
                if isinstance(metadata.get("resource"), str):  # type: ignore[union-attr]
                    resource = metadata["resource"]  # type: ignore[index]
                break
        found = _authorization_server_metadata(client, issuer)
    if found is None:
        raise Conflict(
            "The server publishes no OAuth metadata: enter its authorization and token endpoints.",
            code="oauth_discovery_failed",
        )
    return Endpoints(
        authorization_endpoint=str(found["authorization_endpoint"]),
        token_endpoint=str(found["token_endpoint"]),
        resource=resource,
    )


def _endpoints(row: McpServer) -> Endpoints:
    config = row.oauth or {}
    if config.get("authorization_endpoint") and config.get("token_endpoint"):
        return Endpoints(
            str(config["authorization_endpoint"]),
            str(config["token_endpoint"]),
            str(config.get("resource") or row.url),
        )
    found = discover(row.url)
    row.oauth = {
        **config,
        "authorization_endpoint": found.authorization_endpoint,
        "token_endpoint": found.token_endpoint,
        "resource": found.resource,
    }
    return found


def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(64)[:96]
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=")
    return verifier, challenge.decode()


def start_authorization(
    db: Session, account_id: str, app_id: str, server_id: str, redirect_uri: str
) -> str:
    """The authorization server's URL to send the owner's browser to (discovering the
    endpoints first when they are not configured)."""
    row = owned_server(db, account_id, app_id, server_id)
    if row.auth_kind != "oauth":
        raise InvalidInput("This server does not use OAuth.", field="auth_kind")
    endpoints = _endpoints(row)
    db.add(row)
    state = secrets.token_urlsafe(32)
    verifier, challenge = _pkce()
    db.add(
        McpOAuthState(
            state_hash=_digest(state),
            server_id=row.id,
            account_id=account_id,
            code_verifier=verifier,
            redirect_uri=redirect_uri,
            expires_at=utcnow() + STATE_TTL,
        )
    )
    db.flush()
    config = row.oauth or {}
    query = {
        "response_type": "code",
        "client_id": str(config.get("client_id", "")),
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": endpoints.resource,
    }
    if config.get("scopes"):
        query["scope"] = str(config["scopes"])
    separator = "&" if "?" in endpoints.authorization_endpoint else "?"
    log.info("mcp.oauth_started", app_id=row.app_id, server_id=row.id)
    return f"{endpoints.authorization_endpoint}{separator}{urlencode(query)}"


def _token_request(db: Session, row: McpServer, form: dict[str, str]) -> dict[str, Any]:
    """POST to the token endpoint (the client secret, if any, as HTTP Basic)."""
    config = row.oauth or {}
    client_id = str(config.get("client_id", ""))
    secret = reveal(db, row, "oauth_client_secret_id", "oauth_client_secret")
    auth: httpx.Auth | None = httpx.BasicAuth(client_id, secret) if secret else None
    body = dict(form) if secret else {**form, "client_id": client_id}
    resource = str(config.get("resource") or row.url)
    body.setdefault("resource", resource)
    try:
        with _http() as client:
            response = client.post(
                str(config.get("token_endpoint", "")),
                data=body,
                auth=auth or httpx.USE_CLIENT_DEFAULT,
                headers={"Accept": "application/json"},
            )
    except httpx.HTTPError as error:
        refusal = outbound.refusal_in(error)
        if refusal is not None:  # without the address: the proxy passes this to the sandbox
            raise OAuthUnavailable(
                outbound.describe_refusal("the token endpoint", refusal.reason) + "."
            ) from None
        raise OAuthUnavailable(
            f"The authorization server could not be reached ({type(error).__name__})."
        ) from None
    try:
        answer = response.json()
    except ValueError:
        answer = {}
    if (
        response.status_code != 200
        or not isinstance(answer, dict)
        or not answer.get("access_token")
    ):
        code = answer.get("error") if isinstance(answer, dict) else None
        raise OAuthUnavailable(
            f"The authorization server refused the request ({code or response.status_code})."
        )
    return answer


def _store_tokens(
    db: Session, row: McpServer, answer: dict[str, Any], previous: dict[str, Any] | None = None
) -> None:
    expires_in = answer.get("expires_in")
    tokens = {
        "access_token": str(answer["access_token"]),
        # A refresh may not rotate the refresh token: keep the one we had.
        "refresh_token": answer.get("refresh_token") or (previous or {}).get("refresh_token"),
        "token_type": str(answer.get("token_type") or "Bearer"),
        "scope": answer.get("scope") or (previous or {}).get("scope"),
        "expires_at": time.time() + float(expires_in)
        if isinstance(expires_in, int | float) and not isinstance(expires_in, bool)
        else None,
    }
    seal_secret(db, row, "oauth_token_secret_id", "oauth_tokens", json.dumps(tokens))
    db.add(row)
    db.flush()


def complete_authorization(
    db: Session, account_id: str, state: str, code: str | None, error: str | None = None
) -> Completed:
    """The callback: check the state (single use, ten minutes, the account that started it),
    exchange the code, seal the tokens. A refused state changes nothing but burning it."""
    row_state = (
        db.exec(select(McpOAuthState).where(McpOAuthState.state_hash == _digest(state))).first()
        if state and len(state) <= 200
        else None
    )
    if row_state is None:
        raise Conflict(
            "This authorization is unknown or was already used.", code="oauth_state_invalid"
        )
    db.delete(row_state)  # burnt whatever happens next
    db.flush()
    if row_state.account_id != account_id:
        commit_refusal(
            db,
            Conflict(
                "This authorization was started by another account.", code="oauth_state_invalid"
            ),
        )
    if row_state.expires_at <= utcnow():
        commit_refusal(
            db, Conflict("This authorization expired; connect again.", code="oauth_state_invalid")
        )
    row = db.get(McpServer, row_state.server_id)
    if row is None or row.auth_kind != "oauth":
        commit_refusal(db, Conflict("The MCP server is gone.", code="oauth_state_invalid"))
    if error or not code:
        commit_refusal(
            db,
            Conflict(
                f"The authorization server refused: {(error or 'no code')[:100]}.",
                code="oauth_refused",
            ),
        )
    try:
        answer = _token_request(
            db,
            row,
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": row_state.redirect_uri,
                "code_verifier": row_state.code_verifier,
            },
        )
    except OAuthUnavailable as refused:
        commit_refusal(db, Conflict(refused.message, code="oauth_refused"))
    _store_tokens(db, row, answer)
    row.oauth_connected_at = utcnow()
    row.updated_at = utcnow()
    db.add(row)
    db.flush()
    log.info("mcp.oauth_connected", app_id=row.app_id, server_id=row.id)
    return Completed(server_id=row.id, app_id=row.app_id)


def disconnect(db: Session, account_id: str, app_id: str, server_id: str) -> None:
    """Forget the server's tokens (its agents' runs then go without it until reconnected)."""
    row = owned_server(db, account_id, app_id, server_id)
    drop_secret(db, row, "oauth_token_secret_id")
    row.oauth_connected_at = None
    db.add(row)
    db.flush()


def refresh(db: Session, row: McpServer) -> str:
    """A new access token from the refresh token (kept sealed); OAuthUnavailable when there
    is none or it is refused."""
    stored = reveal(db, row, "oauth_token_secret_id", "oauth_tokens")
    tokens = json.loads(stored) if stored else {}
    if not tokens.get("refresh_token"):
        raise OAuthUnavailable(
            "The OAuth token expired and there is no refresh token: connect again."
        )
    answer = _token_request(
        db, row, {"grant_type": "refresh_token", "refresh_token": str(tokens["refresh_token"])}
    )
    _store_tokens(db, row, answer, previous=tokens)
    log.info("mcp.oauth_refreshed", app_id=row.app_id, server_id=row.id)
    return str(answer["access_token"])


def _expired(tokens: dict[str, Any]) -> bool:
    expires_at = tokens.get("expires_at")
    return (
        isinstance(expires_at, int | float) and expires_at - REFRESH_MARGIN_SECONDS <= time.time()
    )


def access_token(db: Session, row: McpServer, *, force_refresh: bool = False) -> str:
    """The server's access token, refreshed first when it has (nearly) expired, or when
    `force_refresh` (the server refused the one we had)."""
    if row.auth_kind != "oauth":
        raise OAuthUnavailable("This server does not use OAuth.")
    stored = reveal(db, row, "oauth_token_secret_id", "oauth_tokens")
    if not stored:
        raise OAuthUnavailable("The server is not connected: connect it with OAuth first.")
    tokens = json.loads(stored)
    if not (force_refresh or _expired(tokens)):
        return str(tokens["access_token"])
    # One refresh at a time per server (PostgreSQL): a rotated refresh token is single-use.
    locked = db.get(McpServer, row.id, with_for_update=True, populate_existing=True)
    if locked is None or locked.oauth_token_secret_id is None:
        raise OAuthUnavailable("The server is not connected: connect it with OAuth first.")
    again = json.loads(reveal(db, locked, "oauth_token_secret_id", "oauth_tokens") or "{}")
    if again.get("access_token") != tokens.get("access_token") and not _expired(again):
        return str(again["access_token"])  # another caller refreshed meanwhile
    return refresh(db, locked)
