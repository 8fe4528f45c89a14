"""Sign-in by a 6-digit code sent by email."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlmodel import Session, col, func, select

from mosoo_core.clock import utcnow
from mosoo_core.errors import InvalidInput, RateLimited
from mosoo_core.identity._accounts import normalize_email, sign_in_identity
from mosoo_core.identity._secrets import code_digest, new_code
from mosoo_core.identity.models import Account, EmailCode
from mosoo_core.mail import queue_email
from mosoo_core.settings import get_settings

WINDOW = timedelta(hours=1)
# One message for every failure, so a guesser learns nothing about which check failed.
INVALID_CODE = "That code is wrong or has expired. Check the latest email or ask for a new code."


@dataclass(frozen=True)
class CodeRequested:
    email: str
    outbound_email_id: str


def _retry_after(db: Session, condition: object, now: datetime) -> int:
    oldest = db.exec(
        select(func.min(EmailCode.created_at)).where(condition, EmailCode.created_at > now - WINDOW)  # type: ignore[arg-type]
    ).one()
    if oldest is None:
        return 60
    if oldest.tzinfo is None:
        from datetime import UTC

        oldest = oldest.replace(tzinfo=UTC)
    return max(1, int((oldest + WINDOW - now).total_seconds()) + 1)


def _check_send_limits(db: Session, email: str, ip: str, now: datetime) -> None:
    settings = get_settings()
    since = now - WINDOW
    per_address = db.exec(
        select(func.count()).select_from(EmailCode).where(EmailCode.email == email, EmailCode.created_at > since)
    ).one()
    if per_address >= settings.email_sends_per_address_per_hour:
        raise RateLimited(
            "Too many codes were requested for this address. Try again later.",
            _retry_after(db, EmailCode.email == email, now),
        )
    if ip:
        per_ip = db.exec(
            select(func.count()).select_from(EmailCode).where(EmailCode.requested_ip == ip, EmailCode.created_at > since)
        ).one()
        if per_ip >= settings.email_sends_per_ip_per_hour:
            raise RateLimited(
                "Too many codes were requested from your network. Try again later.",
                _retry_after(db, EmailCode.requested_ip == ip, now),
            )


def request_email_code(db: Session, *, email: str, ip: str = "", now: datetime | None = None) -> CodeRequested:
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
    return CodeRequested(email=email, outbound_email_id=outbound.id)


def verify_email_code(db: Session, *, email: str, code: str, now: datetime | None = None) -> Account:
    """Check a code; on success the Account (created on first sign-in). At most
    `email_code_max_attempts` tries per code; expired, used or replaced codes never work."""
    settings = get_settings()
    now = now or utcnow()
    email = normalize_email(email)
    code = "".join((code or "").split())
    if not (len(code) == 6 and code.isdigit()):
        raise InvalidInput("Enter the 6-digit code from the email.", field="code")
    pending = db.exec(
        select(EmailCode)
        .where(EmailCode.email == email, col(EmailCode.consumed_at).is_(None))
        .order_by(col(EmailCode.created_at).desc())
    ).first()
    if pending is None or pending.expires_at <= now or pending.attempts >= settings.email_code_max_attempts:
        raise InvalidInput(INVALID_CODE, field="code")
    if not hmac.compare_digest(pending.code_hash, code_digest(email, code)):
        pending.attempts += 1
        db.add(pending)
        db.flush()
        raise InvalidInput(INVALID_CODE, field="code")
    pending.consumed_at = now
    db.add(pending)
    return sign_in_identity(db, provider="email", subject=email, email=email, now=now)
