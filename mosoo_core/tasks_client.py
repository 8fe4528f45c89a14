"""How front doors hand work to the worker without importing Celery at module level."""

from __future__ import annotations

from mosoo_core.logs import get_logger
from mosoo_core.settings import get_settings

log = get_logger(__name__)


def enqueue_email_delivery(email_id: str) -> None:
    """Ask the worker to send a queued email now; the beat sweep retries if Redis is down."""
    if not get_settings().smtp_enabled:
        return
    from mosoo_core.tasks import deliver_email

    try:
        deliver_email.delay(email_id)
    except Exception as error:  # the outbox row stays pending and the sweep picks it up
        log.warning("email.enqueue_failed", email_id=email_id, error=type(error).__name__)


def _send(task_name: str, *args: str) -> None:
    from mosoo_core.tasks import app

    try:
        app.send_task(task_name, args=args)
    except Exception as error:
        log.warning("task.enqueue_failed", task=task_name, error=type(error).__name__)
        raise


def enqueue_run_dispatch(run_id: str) -> None:
    """Ask the worker to boot a sandbox for a queued run."""
    _send("mosoo.dispatch_run", run_id)


def enqueue_run_finish(run_id: str) -> None:
    """Ask the worker to checkpoint and tear down after a run ended."""
    _send("mosoo.finish_run", run_id)
