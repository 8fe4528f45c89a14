"""Queue, deliver and (in development) show outgoing email."""

from __future__ import annotations

import smtplib
import ssl
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.message import EmailMessage

from sqlmodel import Session, col, select

from mosoo_core.clock import utcnow
from mosoo_core.logs import get_logger
from mosoo_core.settings import Settings, get_settings
from mosoo_core.tables.mail import OutboundEmail

log = get_logger(__name__)
MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class MailboxMessage:
    id: str
    to_address: str
    subject: str
    body: str
    created_at: datetime


def queue_email(
    db: Session, *, to_address: str, subject: str, body: str, now: datetime | None = None
) -> OutboundEmail:
    """Store a message for delivery. Without SMTP it goes to the log and the dev mailbox."""
    settings = get_settings()
    row = OutboundEmail(
        to_address=to_address,
        subject=subject,
        body=body,
        status="pending" if settings.smtp_enabled else "dev_mailbox",
        created_at=now or utcnow(),
    )
    db.add(row)
    db.flush()
    if not settings.smtp_enabled:
        # No SMTP server: the embedded default prints the message for the operator.
        log.info("email.dev_mailbox", email_id=row.id, to=to_address, subject=subject, body=body)
    return row


def _send_smtp(settings: Settings, row: OutboundEmail) -> None:
    message = EmailMessage()
    message["From"] = settings.smtp_from
    message["To"] = row.to_address
    message["Subject"] = row.subject
    message.set_content(row.body)
    timeout = settings.smtp_timeout_seconds
    if settings.smtp_ssl:
        client: smtplib.SMTP = smtplib.SMTP_SSL(
            settings.smtp_host,
            settings.smtp_port,
            timeout=timeout,
            context=ssl.create_default_context(),
        )
    else:
        client = smtplib.SMTP(settings.smtp_host, settings.smtp_port, timeout=timeout)
    with client:
        if settings.smtp_starttls and not settings.smtp_ssl:
            client.starttls(context=ssl.create_default_context())
        if settings.smtp_username:
            client.login(settings.smtp_username, settings.smtp_password)
        client.send_message(message)


def deliver_email(db: Session, email_id: str, *, now: datetime | None = None) -> str:
    """Send one queued message by SMTP; safe to run twice. Returns the resulting status."""
    settings = get_settings()
    row = db.get(OutboundEmail, email_id)
    if row is None:
        return "missing"
    if row.status != "pending":
        return row.status
    if not settings.smtp_enabled:
        return row.status
    row.attempts += 1
    try:
        _send_smtp(settings, row)
    except (OSError, smtplib.SMTPException) as error:
        row.last_error = f"{type(error).__name__}: {error}"[:500]
        if row.attempts >= MAX_ATTEMPTS:
            row.status = "failed"
            row.body = ""
        db.add(row)
        db.flush()
        log.warning(
            "email.delivery_failed", email_id=row.id, attempts=row.attempts, error=row.last_error
        )
        return row.status
    row.status = "sent"
    row.sent_at = now or utcnow()
    row.body = ""
    db.add(row)
    db.flush()
    log.info("email.sent", email_id=row.id)
    return row.status


def pending_email_ids(
    db: Session, *, older_than: timedelta = timedelta(0), now: datetime | None = None
) -> list[str]:
    """Messages still waiting for delivery (the beat sweep retries them)."""
    cutoff = (now or utcnow()) - older_than
    rows = db.exec(
        select(OutboundEmail.id).where(
            OutboundEmail.status == "pending", OutboundEmail.created_at <= cutoff
        )
    ).all()
    return list(rows)


def list_dev_mailbox(db: Session, *, limit: int = 50) -> list[MailboxMessage]:
    """Newest messages kept for the development mailbox page."""
    rows = db.exec(
        select(OutboundEmail)
        .where(OutboundEmail.status == "dev_mailbox")
        .order_by(col(OutboundEmail.created_at).desc(), col(OutboundEmail.id).desc())
        .limit(limit)
    ).all()
    return [MailboxMessage(r.id, r.to_address, r.subject, r.body, r.created_at) for r in rows]


def purge_dev_mailbox(
    db: Session, *, older_than: timedelta = timedelta(days=1), now: datetime | None = None
) -> int:
    cutoff = (now or utcnow()) - older_than
    rows = db.exec(
        select(OutboundEmail).where(
            OutboundEmail.status == "dev_mailbox", OutboundEmail.created_at < cutoff
        )
    ).all()
    for row in rows:
        db.delete(row)
    return len(rows)
