"""Personal access tokens (`mst_…`): the Bearer credential of the public API and the CLI."""

from __future__ import annotations

import dataclasses
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam
from sqlmodel import Session, col, select

from mosoo_core.clock import utcnow
from mosoo_core.db import Connectable
from mosoo_core.errors import InvalidInput, NotFound, Unauthenticated
from mosoo_core.identity._secrets import token_digest
from mosoo_core.prepared import PreparedRead
from mosoo_core.tables.identity import AccessToken, Account

TOKEN_PREFIX = "mst_"
LABEL_MAX = 80
SOURCES = ("console", "cli")
_SUFFIX_LENGTH = 4
# `token_urlsafe(32)` is 43 characters of the URL-safe base64 alphabet.
_TOKEN_SHAPE = re.compile(r"mst_[A-Za-z0-9_-]{43}")
# Writing on every request would turn each API read into a write; a minute is precise enough.
_LAST_USED_GRANULARITY = timedelta(minutes=1)
_REFUSED = "Missing, invalid or revoked access token."


@dataclass(frozen=True)
class AccessTokenView:
    id: str
    account_id: str
    label: str
    display_suffix: str
    source: str
    created_at: datetime
    last_used_at: datetime | None


@dataclass(frozen=True)
class CreatedToken:
    token: AccessTokenView
    secret: str  # shown to its owner once; only its digest is stored


def _view(row: AccessToken | sa.Row[Any]) -> AccessTokenView:
    return AccessTokenView(
        id=row.id,
        account_id=row.account_id,
        label=row.label,
        display_suffix=row.display_suffix,
        source=row.source,
        created_at=row.created_at,
        last_used_at=row.last_used_at,
    )


def clean_label(raw: str) -> str:
    label = " ".join((raw or "").split())
    if not label:
        raise InvalidInput("Give the token a label, e.g. where it will be used.", field="label")
    if len(label) > LABEL_MAX:
        raise InvalidInput(f"The label must be at most {LABEL_MAX} characters.", field="label")
    return label


def create_access_token(
    db: Session,
    account_id: str,
    label: str,
    *,
    source: str = "console",
    now: datetime | None = None,
) -> CreatedToken:
    """Mint a token for an account. The secret is returned once and never stored."""
    if source not in SOURCES:
        raise InvalidInput(f"Unknown token source {source!r}.", field="source")
    clean = clean_label(label)
    if db.get(Account, account_id) is None:
        raise NotFound("Account not found.")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = AccessToken(
        account_id=account_id,
        label=clean,
        token_hash=token_digest(secret),
        display_suffix=secret[-_SUFFIX_LENGTH:],
        source=source,
        created_at=now or utcnow(),
    )
    db.add(row)
    db.flush()
    return CreatedToken(token=_view(row), secret=secret)


def list_access_tokens(db: Session, account_id: str) -> list[AccessTokenView]:
    """The account's live tokens, newest first."""
    rows = db.exec(
        select(AccessToken)
        .where(AccessToken.account_id == account_id, col(AccessToken.revoked_at).is_(None))
        .order_by(col(AccessToken.created_at).desc(), col(AccessToken.id).desc())
    ).all()
    return [_view(row) for row in rows]


def revoke_access_token(
    db: Session, account_id: str, token_id: str, *, now: datetime | None = None
) -> None:
    """The token stops working at once. Another account's (or an unknown) id is NotFound."""
    row = db.get(AccessToken, token_id) if token_id else None
    if row is None or row.account_id != account_id or row.revoked_at is not None:
        raise NotFound("Access token not found.")
    row.revoked_at = now or utcnow()
    db.add(row)
    db.flush()


_TOKENS: sa.Table = AccessToken.__table__  # type: ignore[attr-defined]
# Built once, read as columns (not an ORM row): every API request looks its token up.
_BY_DIGEST = PreparedRead(sa.select(_TOKENS).where(_TOKENS.c.token_hash == bindparam("digest")))
# Conditional, so that concurrent requests of one token write the time once a minute at most.
_TOUCH = (
    sa.update(_TOKENS)
    .where(
        _TOKENS.c.id == bindparam("token_id"),
        sa.or_(_TOKENS.c.last_used_at.is_(None), _TOKENS.c.last_used_at <= bindparam("stale_at")),
    )
    .values(last_used_at=bindparam("now"))
)


def read_access_token(db: Connectable, secret: str | None) -> AccessTokenView:
    """The live token behind a secret, as stored; Unauthenticated when malformed, unknown or
    revoked. Only reads: `authenticate_access_token` also records the use."""
    if not secret or not _TOKEN_SHAPE.fullmatch(secret):
        raise Unauthenticated(_REFUSED)
    row = _BY_DIGEST.first(db, {"digest": token_digest(secret)})
    if row is None or row.revoked_at is not None:
        raise Unauthenticated(_REFUSED)
    return _view(row)


def use_unrecorded(token: AccessTokenView, now: datetime) -> bool:
    """Whether a use at `now` is to be written (`last_used_at` is kept to the minute)."""
    return token.last_used_at is None or token.last_used_at <= now - _LAST_USED_GRANULARITY


def authenticate_access_token(
    db: Connectable, secret: str | None, *, now: datetime | None = None
) -> AccessTokenView:
    """The live token behind a secret, its use recorded (once a minute); Unauthenticated when
    malformed, unknown or revoked. Read on every request, never cached: a revoked token is
    refused on the next one."""
    view = read_access_token(db, secret)
    now = now or utcnow()
    if use_unrecorded(view, now):
        stale_at = now - _LAST_USED_GRANULARITY
        db.execute(_TOUCH, {"token_id": view.id, "stale_at": stale_at, "now": now})
        view = dataclasses.replace(view, last_used_at=now)
    return view
