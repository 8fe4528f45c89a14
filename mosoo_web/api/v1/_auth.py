"""`Authorization: Bearer mst_…` on every /api/v1 call: the token's account scopes everything."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from mosoo_core import identity
from mosoo_core.db import session_scope
from mosoo_web.api.v1._ratelimit import check_rate_limit

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="AccessToken",
    bearerFormat="mst_…",
    description="A personal access token (`mst_…`), created on the console's Access tokens page or by `mosoo login`.",
)


@dataclass(frozen=True)
class Caller:
    account_id: str
    token_id: str


def authenticated_caller(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Caller:
    # A plain `def`: FastAPI runs it in the thread pool, so the database work does not block the loop.
    secret = credentials.credentials if credentials is not None else None
    with session_scope() as db:
        token = identity.authenticate_access_token(db, secret)
    check_rate_limit(token.id)
    return Caller(account_id=token.account_id, token_id=token.id)


CallerDep = Annotated[Caller, Depends(authenticated_caller)]
