"""`Authorization: Bearer mst_…` on every /api/v1 call: the token's account scopes everything."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Depends
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlmodel import Session

from mosoo_core import identity
from mosoo_core.db import session_scope
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


def authenticate(db: Session, credentials: HTTPAuthorizationCredentials | None) -> Caller:
    """The token's account, or Unauthenticated; RateLimited past the token's limit. The token
    is read on every request, never cached: a revoked one is refused on the next request."""
    token = identity.authenticate_access_token(
        db, credentials.credentials if credentials is not None else None
    )
    check_rate_limit(token.id)
    return Caller(account_id=token.account_id, token_id=token.id)


def authenticated_caller(credentials: CredentialsDep) -> Caller:
    # A plain `def`: FastAPI runs it in the thread pool, so the database work does not block the loop.
    with session_scope() as db:
        return authenticate(db, credentials)


CallerDep = Annotated[Caller, Depends(authenticated_caller)]


async def as_caller(
    credentials: HTTPAuthorizationCredentials | None, work: Callable[[Session, Caller], T]
) -> T:
    """The token check, the rate limit and `work` in one trip to the thread pool and one
    database session, for the routes clients call most (with `CallerDep`, the check is a
    trip and a session of its own). The check is committed before `work` runs, so a refusal
    by `work` keeps the token's last-used time."""

    def unit() -> T:
        with session_scope() as db:
            caller = authenticate(db, credentials)
            db.commit()
            return work(db, caller)

    return await run_in_threadpool(unit)
