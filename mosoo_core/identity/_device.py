"""CLI sign-in as an OAuth 2.0 device authorization grant (RFC 8628 style).

The CLI holds a secret device code and polls; the person confirms the short user code in
the console. The access token is minted on the first poll after approval and handed over
once: only its digest exists afterwards.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

import redis
import sqlalchemy as sa
from sqlmodel import Session, col, select

from mosoo_core.clock import utcnow
from mosoo_core.errors import Conflict, NotFound, RateLimited
from mosoo_core.identity._secrets import token_digest
from mosoo_core.identity._tokens import create_access_token
from mosoo_core.logs import get_logger
from mosoo_core.streams import sync_client
from mosoo_core.tables.identity import Account, DeviceAuthorization

log = get_logger("mosoo.identity.device")

DEVICE_CODE_TTL = timedelta(minutes=10)
POLL_INTERVAL_SECONDS = 5
SLOW_DOWN_STEP_SECONDS = 5
# RFC 8628 6.1: consonants only, no vowels (no words) and nothing that looks alike (0/O, 1/I).
USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"
USER_CODE_LENGTH = 8
CLIENT_NAME_MAX = 60
DEFAULT_CLIENT_NAME = "Mosoo CLI"
# Starting a sign-in is unauthenticated; this bounds how many codes one address can mint.
STARTS_PER_IP = 20
STARTS_WINDOW_SECONDS = 600
# Rows are kept a day past expiry so a late poll still gets a precise answer.
_KEEP_AFTER_EXPIRY = timedelta(days=1)

PENDING, AUTHORIZED, DENIED, EXPIRED, CONSUMED = (
    "pending",
    "authorized",
    "denied",
    "expired",
    "consumed",
)


@dataclass(frozen=True)
class DeviceRefusal:
    """A poll that yields no token. `code` is the RFC 8628 error code. A value, not an
    exception: the poll's own bookkeeping (last poll, slower interval, expiry) must commit."""

    code: str  # authorization_pending | slow_down | expired_token | access_denied | invalid_grant
    message: str
    interval: int


@dataclass(frozen=True)
class DeviceStart:
    device_code: str  # the CLI's secret; only its digest is stored
    user_code: str  # formatted XXXX-XXXX
    expires_in: int
    interval: int


@dataclass(frozen=True)
class DeviceAuthorizationView:
    user_code: str  # formatted XXXX-XXXX
    client_name: str
    status: str
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class DeviceGrant:
    access_token: str
    token_id: str
    account_id: str
    account_email: str


def format_user_code(code: str) -> str:
    return f"{code[:4]}-{code[4:]}"


def normalize_user_code(raw: str) -> str:
    """What a person typed, compared without case, spaces or dashes."""
    return re.sub(r"[^A-Z]", "", (raw or "").upper())[: USER_CODE_LENGTH + 1]


def _clean_client_name(raw: str | None) -> str:
    printable = "".join(ch for ch in (raw or "") if ch.isprintable())
    name = " ".join(printable.split())[:CLIENT_NAME_MAX]
    return name or DEFAULT_CLIENT_NAME


def _new_user_code() -> str:
    return "".join(secrets.choice(USER_CODE_ALPHABET) for _ in range(USER_CODE_LENGTH))


def _check_start_rate(ip: str) -> None:
    """A fixed window per client address in Redis; without Redis the start is allowed
    (sign-in must not depend on a cache) and the failure is logged."""
    if not ip:
        return
    window = int(utcnow().timestamp()) // STARTS_WINDOW_SECONDS
    key = f"mosoo:ratelimit:cli-start:{ip}:{window}"
    try:
        client = sync_client()
        pipe = client.pipeline()
        pipe.incr(key)
        pipe.expire(key, STARTS_WINDOW_SECONDS)
        count = int(pipe.execute()[0])
    except redis.RedisError as error:
        log.warning("device.rate_limit_unavailable", error=type(error).__name__)
        return
    if count > STARTS_PER_IP:
        retry = STARTS_WINDOW_SECONDS - int(utcnow().timestamp()) % STARTS_WINDOW_SECONDS
        raise RateLimited(
            "Too many sign-in attempts from this address. Try again later.", max(1, retry)
        )


def _purge_stale(db: Session, now: datetime) -> None:
    db.exec(
        sa.delete(DeviceAuthorization).where(
            col(DeviceAuthorization.expires_at) < now - _KEEP_AFTER_EXPIRY
        )
    )


def start_device_authorization(
    db: Session, *, client_name: str | None = None, ip: str = "", now: datetime | None = None
) -> DeviceStart:
    """A new device code (secret, for the CLI) and user code (for the person), valid 10 minutes."""
    _check_start_rate(ip)
    now = now or utcnow()
    _purge_stale(db, now)
    device_code = secrets.token_urlsafe(32)
    user_code = _new_user_code()
    # 20^8 codes: a clash is rare, but the column is unique, so draw again rather than fail.
    while db.exec(
        select(DeviceAuthorization.id).where(DeviceAuthorization.user_code == user_code)
    ).first():
        user_code = _new_user_code()
    db.add(
        DeviceAuthorization(
            device_code_hash=token_digest(device_code),
            user_code=user_code,
            status=PENDING,
            client_name=_clean_client_name(client_name),
            interval_seconds=POLL_INTERVAL_SECONDS,
            created_at=now,
            expires_at=now + DEVICE_CODE_TTL,
        )
    )
    db.flush()
    return DeviceStart(
        device_code=device_code,
        user_code=format_user_code(user_code),
        expires_in=int(DEVICE_CODE_TTL.total_seconds()),
        interval=POLL_INTERVAL_SECONDS,
    )


def _expire_if_due(db: Session, row: DeviceAuthorization, now: datetime) -> None:
    if row.status in (PENDING, AUTHORIZED) and row.expires_at <= now:
        row.status = EXPIRED
        db.add(row)
        db.flush()


def _by_user_code(db: Session, user_code: str, now: datetime) -> DeviceAuthorization:
    code = normalize_user_code(user_code)
    row = None
    if len(code) == USER_CODE_LENGTH:
        row = db.exec(
            select(DeviceAuthorization).where(DeviceAuthorization.user_code == code)
        ).first()
    if row is None:
        raise NotFound("No sign-in request has this code. Check the code shown in your terminal.")
    _expire_if_due(db, row, now)
    return row


def _view(row: DeviceAuthorization) -> DeviceAuthorizationView:
    return DeviceAuthorizationView(
        user_code=format_user_code(row.user_code),
        client_name=row.client_name,
        status=row.status,
        created_at=row.created_at,
        expires_at=row.expires_at,
    )


def describe_device_authorization(
    db: Session, user_code: str, *, now: datetime | None = None
) -> DeviceAuthorizationView:
    """What the confirmation page shows for a user code (NotFound when nobody issued it)."""
    return _view(_by_user_code(db, user_code, now or utcnow()))


_NOT_DECIDABLE = {
    AUTHORIZED: "This code has already been approved.",
    CONSUMED: "This code has already been used.",
    DENIED: "This code has been denied. Run `mosoo login` again.",
    EXPIRED: "This code has expired. Run `mosoo login` again.",
}


def _decide(
    db: Session, account_id: str, user_code: str, status: str, now: datetime | None
) -> DeviceAuthorizationView:
    now = now or utcnow()
    if db.get(Account, account_id) is None:
        raise NotFound("Account not found.")
    row = _by_user_code(db, user_code, now)
    # Conditional update: of two concurrent decisions, exactly one wins.
    changed = db.exec(
        sa.update(DeviceAuthorization)
        .where(col(DeviceAuthorization.id) == row.id, col(DeviceAuthorization.status) == PENDING)
        .values(status=status, account_id=account_id, decided_at=now)
    ).rowcount
    db.refresh(row)
    if changed != 1:
        raise Conflict(_NOT_DECIDABLE.get(row.status, "This code can no longer be used."))
    log.info("device.decided", device_authorization_id=row.id, account_id=account_id, status=status)
    return _view(row)


def approve_device_authorization(
    db: Session, account_id: str, user_code: str, *, now: datetime | None = None
) -> DeviceAuthorizationView:
    """The signed-in account lets the CLI holding this code sign in as itself."""
    return _decide(db, account_id, user_code, AUTHORIZED, now)


def deny_device_authorization(
    db: Session, account_id: str, user_code: str, *, now: datetime | None = None
) -> DeviceAuthorizationView:
    """Refuse the request: the CLI's next poll gets `access_denied`."""
    return _decide(db, account_id, user_code, DENIED, now)


def poll_device_authorization(
    db: Session, device_code: str, *, now: datetime | None = None
) -> DeviceGrant | DeviceRefusal:
    """The CLI's poll: the token once, on the first poll after approval; otherwise why not."""
    now = now or utcnow()
    row = None
    if device_code and len(device_code) <= 200:
        row = db.exec(
            select(DeviceAuthorization).where(
                DeviceAuthorization.device_code_hash == token_digest(device_code)
            )
        ).first()
    if row is None:
        return DeviceRefusal(
            "invalid_grant", "Unknown device code. Run `mosoo login` again.", POLL_INTERVAL_SECONDS
        )
    if row.status == CONSUMED:
        return DeviceRefusal(
            "invalid_grant", "This device code has already been used.", row.interval_seconds
        )
    _expire_if_due(db, row, now)
    if row.status == EXPIRED:
        return DeviceRefusal(
            "expired_token",
            "The code expired before it was approved. Run `mosoo login` again.",
            row.interval_seconds,
        )
    if row.status == DENIED:
        return DeviceRefusal(
            "access_denied", "The sign-in request was denied.", row.interval_seconds
        )
    too_soon = row.last_polled_at is not None and now - row.last_polled_at < timedelta(
        seconds=row.interval_seconds
    )
    row.last_polled_at = now
    if row.status == PENDING:
        if too_soon:
            row.interval_seconds += SLOW_DOWN_STEP_SECONDS
            db.add(row)
            db.flush()
            return DeviceRefusal(
                "slow_down",
                f"Polling too fast; wait {row.interval_seconds} seconds between polls.",
                row.interval_seconds,
            )
        db.add(row)
        db.flush()
        return DeviceRefusal(
            "authorization_pending",
            "Waiting for the code to be approved in the console.",
            row.interval_seconds,
        )
    db.add(row)
    db.flush()
    # Conditional update: two racing polls cannot both receive a token.
    claimed = db.exec(
        sa.update(DeviceAuthorization)
        .where(col(DeviceAuthorization.id) == row.id, col(DeviceAuthorization.status) == AUTHORIZED)
        .values(status=CONSUMED)
    ).rowcount
    account = db.get(Account, row.account_id) if row.account_id else None
    if claimed != 1 or account is None:
        return DeviceRefusal(
            "invalid_grant", "This device code has already been used.", row.interval_seconds
        )
    created = create_access_token(
        db, account.id, f"CLI · {row.client_name}"[:80], source="cli", now=now
    )
    db.execute(
        sa.update(DeviceAuthorization)
        .where(col(DeviceAuthorization.id) == row.id)
        .values(access_token_id=created.token.id)
    )
    db.refresh(row)
    log.info(
        "device.consumed",
        device_authorization_id=row.id,
        account_id=account.id,
        token_id=created.token.id,
    )
    return DeviceGrant(
        access_token=created.secret,
        token_id=created.token.id,
        account_id=account.id,
        account_email=account.email,
    )
