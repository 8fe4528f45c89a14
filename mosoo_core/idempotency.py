"""`Idempotency-Key`: a retried API call gets the first call's answer instead of a second effect.

The first call claims the key (a row with `status_code = 0`) in its own transaction before it
does anything, so a concurrent duplicate finds the claim and is refused; the answer is stored
when the call succeeds. A failed call releases the key so the caller can retry with it.
Records are kept 24 hours (`purge_expired_idempotency_records`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from mosoo_core.clock import utcnow
from mosoo_core.errors import Conflict, InvalidInput
from mosoo_core.tables.identity import IdempotencyRecord

RETENTION = timedelta(hours=24)
# A claim this old belongs to a call whose process died; the key may be claimed again.
ABANDONED_AFTER = timedelta(minutes=5)
KEY_MAX = 255
IN_FLIGHT = 0


@dataclass(frozen=True)
class StoredAnswer:
    status_code: int
    body: dict[str, Any]


def clean_key(raw: str) -> str:
    key = raw.strip()
    if not key or len(key) > KEY_MAX or not key.isascii() or not key.isprintable():
        raise InvalidInput(
            f"Idempotency-Key must be 1 to {KEY_MAX} printable ASCII characters.",
            field="Idempotency-Key",
        )
    return key


def request_fingerprint(path: str, body: Any) -> str:
    """The same call means the same path and the same JSON body (key order does not matter)."""
    canonical = json.dumps(
        {"path": path, "body": body}, sort_keys=True, separators=(",", ":"), default=str
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def _find(db: Session, account_id: str, scope: str, key: str) -> IdempotencyRecord | None:
    return db.exec(
        select(IdempotencyRecord).where(
            IdempotencyRecord.account_id == account_id,
            IdempotencyRecord.scope == scope,
            IdempotencyRecord.key == key,
        )
    ).first()


def claim_key(
    db: Session,
    account_id: str,
    scope: str,
    key: str,
    fingerprint: str,
    *,
    now: datetime | None = None,
) -> StoredAnswer | None:
    """Claim the key for a new call (None: go ahead) or return the stored answer of the same
    call. The caller commits right after a claim so duplicates see it. Conflict
    (`idempotency_conflict`) when the key was used with another request or is still in flight."""
    now = now or utcnow()
    existing = _find(db, account_id, scope, key)
    if existing is not None and existing.expires_at <= now:
        db.delete(existing)
        db.flush()
        existing = None
    if existing is None:
        row = IdempotencyRecord(
            account_id=account_id,
            scope=scope,
            key=key,
            request_hash=fingerprint,
            status_code=IN_FLIGHT,
            created_at=now,
            expires_at=now + RETENTION,
        )
        try:
            with db.begin_nested():
                db.add(row)
                db.flush()
        except IntegrityError:
            existing = _find(db, account_id, scope, key)  # a concurrent call claimed it first
            if existing is None:
                raise
        else:
            return None
    if existing.request_hash != fingerprint:
        raise Conflict(
            "This Idempotency-Key was already used with a different request. Use a new key for a new request.",
            code="idempotency_conflict",
        )
    if existing.status_code == IN_FLIGHT and existing.created_at <= now - ABANDONED_AFTER:
        existing.created_at = now
        existing.expires_at = now + RETENTION
        db.add(existing)
        db.flush()
        return None
    if existing.status_code == IN_FLIGHT:
        raise Conflict(
            "A request with this Idempotency-Key is still being processed. Retry after it has finished.",
            code="idempotency_conflict",
        )
    return StoredAnswer(status_code=existing.status_code, body=dict(existing.response_body))


def store_answer(
    db: Session, account_id: str, scope: str, key: str, status_code: int, body: dict[str, Any]
) -> None:
    """Keep the answer of a successful call for its retries."""
    row = _find(db, account_id, scope, key)
    if row is None:  # purged meanwhile: nothing to replay, nothing to keep
        return
    row.status_code = status_code
    row.response_body = body
    db.add(row)
    db.flush()


def release_key(db: Session, account_id: str, scope: str, key: str) -> None:
    """Forget an in-flight claim whose call failed, so a retry runs again."""
    db.execute(
        sa.delete(IdempotencyRecord).where(
            col(IdempotencyRecord.account_id) == account_id,
            col(IdempotencyRecord.scope) == scope,
            col(IdempotencyRecord.key) == key,
            col(IdempotencyRecord.status_code) == IN_FLIGHT,
        )
    )


def purge_expired_idempotency_records(db: Session, *, now: datetime | None = None) -> int:
    """Delete records older than their 24 hours; returns how many went."""
    result = db.execute(
        sa.delete(IdempotencyRecord).where(col(IdempotencyRecord.expires_at) <= (now or utcnow()))
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
