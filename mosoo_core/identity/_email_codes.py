"""Sign-in by a 6-digit code sent by email."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, func, select

from mosoo_core.clock import utcnow
from mosoo_core.db import commit_refusal, session_scope
from mosoo_core.errors import InvalidInput, RateLimited
from mosoo_core.identity._accounts import normalize_email, sign_in_identity
from mosoo_core.identity._secrets import code_digest, new_code
from mosoo_core.mail import queue_email
from mosoo_core.settings import get_settings
from mosoo_core.tables.identity import Account, EmailCode, SignInFailure
from mosoo_core.tasks_client import enqueue_email_delivery

WINDOW = timedelta(hours=1)
# One message for every failure, so a guesser learns nothing about which check failed.
INVALID_CODE = "That code is wrong or has expired. Check the latest email or ask for a new code."


@dataclass(frozen=True)
class CodeRequested:
    email: str
    outbound_email_id: str
    ttl_minutes: int

    @property
    def notice(self) -> str:
        """What the person is told after asking (the same for every address)."""
        return f"We sent a 6-digit code to {self.email}. It expires in {self.ttl_minutes} minutes."


def _retry_after(db: Session, created_at: Any, condition: Any, now: datetime) -> int:
    """Seconds until the oldest record of the window (`created_at` column) leaves it."""
    oldest = db.exec(select(func.min(created_at)).where(condition, created_at > now - WINDOW)).one()
    if oldest is None:
        return 60
    if oldest.tzinfo is None:  # SQLite hands back naive UTC from an aggregate
        oldest = oldest.replace(tzinfo=UTC)
    return max(1, int((oldest + WINDOW - now).total_seconds()) + 1)


def _count_since(db: Session, model: Any, condition: Any, since: datetime) -> int:
    return int(
        db.exec(
            select(func.count()).select_from(model).where(condition, model.created_at > since)
        ).one()
    )


def _check_send_limits(db: Session, email: str, ip: str, now: datetime) -> None:
    settings = get_settings()
    since = now - WINDOW
    if (
        _count_since(db, EmailCode, EmailCode.email == email, since)
        >= settings.email_sends_per_address_per_hour
    ):
        raise RateLimited(
            "Too many codes were requested for this address. Try again later.",
            _retry_after(db, EmailCode.created_at, EmailCode.email == email, now),
        )
    if (
        ip
        and _count_since(db, EmailCode, EmailCode.requested_ip == ip, since)
        >= settings.email_sends_per_ip_per_hour
    ):
        raise RateLimited(
            "Too many codes were requested from your network. Try again later.",
            _retry_after(db, EmailCode.created_at, EmailCode.requested_ip == ip, now),
        )


def request_email_code(
    db: Session, *, email: str, ip: str = "", now: datetime | None = None
) -> CodeRequested:
    """Send a fresh sign-in code to an address. Known and unknown addresses get the same
    answer (an account is only created when a code is verified)."""
    settings = get_settings()
    now = now or utcnow()
    email = normalize_email(email)
    _check_send_limits(db, email, ip, now)
    # A new code replaces the ones before it.
    for previous in db.exec(
        select(EmailCode).where(EmailCode.email == email, col(EmailCode.consumed_at).is_(None))
    ).all():
        previous.consumed_at = now
        db.add(previous)
    code = new_code()
    ttl = settings.email_code_ttl_minutes
    db.add(
        EmailCode(
            email=email,
            code_hash=code_digest(email, code),
            requested_ip=ip[:64],
            created_at=now,
            expires_at=now + timedelta(minutes=ttl),
        )
    )
    outbound = queue_email(
        db,
        to_address=email,
        subject=f"Your Mosoo sign-in code: {code}",
        body=(
            f"Your Mosoo sign-in code is {code}\n\n"
            f"It expires in {ttl} minutes. If you did not ask for it, ignore this email.\n"
        ),
        now=now,
    )
    db.flush()
    return CodeRequested(email=email, outbound_email_id=outbound.id, ttl_minutes=ttl)


def send_sign_in_code(*, email: str, ip: str = "") -> CodeRequested:
    """The whole use case for every front door: store the code and its email in one unit of
    work, then hand delivery to the worker (after the commit, so it finds the row)."""
    with session_scope() as db:
        requested = request_email_code(db, email=email, ip=ip)
    enqueue_email_delivery(requested.outbound_email_id)
    return requested


def _check_verify_throttle(db: Session, email: str, ip: str, now: datetime) -> None:
    """Failed verifications in the last hour, per address and per client IP. Counted for
    every address alike, so a throttled answer says nothing about whether it has an account."""
    settings = get_settings()
    since = now - WINDOW
    by_address = SignInFailure.email == email
    if (
        _count_since(db, SignInFailure, by_address, since)
        >= settings.email_verify_failures_per_address_per_hour
    ):
        raise RateLimited(
            "Too many wrong codes for this address. Try again later.",
            _retry_after(db, SignInFailure.created_at, by_address, now),
        )
    by_ip = SignInFailure.ip == ip
    if (
        ip
        and _count_since(db, SignInFailure, by_ip, since)
        >= settings.email_verify_failures_per_ip_per_hour
    ):
        raise RateLimited(
            "Too many wrong codes from your network. Try again later.",
            _retry_after(db, SignInFailure.created_at, by_ip, now),
        )


def _claim_try(db: Session, pending: EmailCode, now: datetime) -> bool:
    """Use up one try of a live code before comparing it. One conditional UPDATE, so
    concurrent guesses cannot share a try (a read-then-write counter loses increments)."""
    claimed = db.exec(
        sa.update(EmailCode)
        .where(
            col(EmailCode.id) == pending.id,
            col(EmailCode.consumed_at).is_(None),
            col(EmailCode.expires_at) > now,
            col(EmailCode.attempts) < get_settings().email_code_max_attempts,
        )
        .values(attempts=EmailCode.attempts + 1)
    ).rowcount
    return bool(claimed == 1)


def verify_email_code(
    db: Session, *, email: str, code: str, ip: str = "", now: datetime | None = None
) -> Account:
    """Check a code; on success the Account (created on first sign-in). At most
    `email_code_max_attempts` tries per code and a throttle on failures per address and per
    IP; expired, used or replaced codes never work. A refusal commits its bookkeeping (the
    try used, the failure counted) before it is raised: a rollback must not hand tries back."""
    now = now or utcnow()
    email = normalize_email(email)
    _check_verify_throttle(db, email, ip[:64], now)
    code = "".join((code or "").split())
    if not (len(code) == 6 and code.isdigit()):
        raise InvalidInput("Enter the 6-digit code from the email.", field="code")
    pending = db.exec(
        select(EmailCode)
        .where(EmailCode.email == email, col(EmailCode.consumed_at).is_(None))
        .order_by(col(EmailCode.created_at).desc())
    ).first()
    right = (
        pending is not None
        and _claim_try(db, pending, now)
        and hmac.compare_digest(pending.code_hash, code_digest(email, code))
    )
    if not right or pending is None:
        db.add(SignInFailure(email=email, ip=ip[:64], created_at=now))
        commit_refusal(db, InvalidInput(INVALID_CODE, field="code"))
    # Conditional: of two requests racing with the right code, one signs in.
    used = db.exec(
        sa.update(EmailCode)
        .where(col(EmailCode.id) == pending.id, col(EmailCode.consumed_at).is_(None))
        .values(consumed_at=now)
    ).rowcount
    if used != 1:
        db.add(SignInFailure(email=email, ip=ip[:64], created_at=now))
        commit_refusal(db, InvalidInput(INVALID_CODE, field="code"))
    return sign_in_identity(db, provider="email", subject=email, email=email, now=now)
