"""Outgoing email: a transactional outbox delivered by the worker over SMTP."""

from mosoo_core.mail._service import (
    MailboxMessage,
    deliver_email,
    list_dev_mailbox,
    pending_email_ids,
    purge_dev_mailbox,
    queue_email,
)

__all__ = [
    "MailboxMessage",
    "deliver_email",
    "list_dev_mailbox",
    "pending_email_ids",
    "purge_dev_mailbox",
    "queue_email",
]
