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
from mosoo_web.api._threads import in_thread, loop_may_read
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


def _secret(credentials: HTTPAuthorizationCredentials | None) -> str | None:
    return credentials.credentials if credentials is not None else None


def authenticate(db: Connectable, credentials: HTTPAuthorizationCredentials | None) -> Caller:
    """The token's account, or Unauthenticated, its use recorded (once a minute, committed at
    once: kept whatever comes next). The token is read on every request, never cached: a
    revoked one is refused on the next request. The rate limit is the caller's to check, on
    the event loop (`check_rate_limit`)."""
    now = utcnow()
    token = identity.authenticate_access_token(db, _secret(credentials), now=now)
    if token.last_used_at == now:  # recorded just now
        db.commit()
    return Caller(account_id=token.account_id, token_id=token.id)


async def authenticated_caller(credentials: CredentialsDep) -> Caller:
    """Unauthenticated, or RateLimited past the token's limit, before the route does anything."""

    def check() -> Caller:
        with connection_scope() as db:
            return authenticate(db, credentials)

    caller = await in_thread(check)
    await check_rate_limit(caller.token_id)
    return caller


CallerDep = Annotated[Caller, Depends(authenticated_caller)]


async def as_caller(
    credentials: HTTPAuthorizationCredentials | None,
    read: Callable[[sa.Connection, Caller], T],
) -> T:
    """The token check, the rate limit and `read` on one connection, for the reads clients
    call most (with `CallerDep`, the check is a trip to the pool and a unit of work of its
    own). `read` runs a few indexed Core reads and writes nothing.

    On SQLite it all runs on the event loop (`loop_may_read`) unless the token's use is to be
    recorded (a write, once a minute): then, as on PostgreSQL, in one trip to the pool, and
    the rate limit is checked on the loop after it (a refused request has only read)."""
    if loop_may_read():
        with connection_scope() as db:
            token = identity.read_access_token(db, _secret(credentials))
            if not identity.use_unrecorded(token, utcnow()):
                await check_rate_limit(token.id)
                return read(db, Caller(account_id=token.account_id, token_id=token.id))

    def unit() -> tuple[Caller, T]:
        with connection_scope() as db:
            caller = authenticate(db, credentials)
            return caller, read(db, caller)

    caller, answer = await in_thread(unit)
    await check_rate_limit(caller.token_id)
    return answer
