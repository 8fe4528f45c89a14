"""`Authorization: Bearer mst_…` on every /api/v1 call: the token's account scopes everything."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, TypeVar

import sqlalchemy as sa
from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from mosoo_core import identity
from mosoo_core.clock import utcnow
from mosoo_core.db import Connectable, connection_scope
from mosoo_web.api._threads import in_thread
from mosoo_web.api.v1._ratelimit import check_rate_limit

T = TypeVar("T")

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="AccessToken",
    bearerFormat="mst_…",
    description="A personal access token (`mst_…`), created on the console's Access tokens page or by `mosoo login`.",
)

CredentialsDep = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


@dataclass(frozen=True)
class Caller:
    account_id: str
    token_id: str


def authenticate(db: Connectable, credentials: HTTPAuthorizationCredentials | None) -> Caller:
    """The token's account, or Unauthenticated; RateLimited past the token's limit. The token
    is read on every request, never cached: a revoked one is refused on the next request."""
    now = utcnow()
    secret = credentials.credentials if credentials is not None else None
    token = identity.authenticate_access_token(db, secret, now=now)
    if token.last_used_at == now:  # recorded just now (once a minute): kept whatever comes next
        db.commit()
    check_rate_limit(token.id)
    return Caller(account_id=token.account_id, token_id=token.id)


async def authenticated_caller(credentials: CredentialsDep) -> Caller:
    def check() -> Caller:
        with connection_scope() as db:
            return authenticate(db, credentials)

    return await in_thread(check)


CallerDep = Annotated[Caller, Depends(authenticated_caller)]


async def as_caller(
    credentials: HTTPAuthorizationCredentials | None,
    work: Callable[[sa.Connection, Caller], T],
) -> T:
    """The token check, the rate limit and `work` in one trip to the thread pool and one
    connection, for the reads clients call most (with `CallerDep`, the check is a trip and
    a unit of work of its own): `work` runs Core statements, without the ORM's session."""

    def unit() -> T:
        with connection_scope() as db:
            return work(db, authenticate(db, credentials))

    return await in_thread(unit)
