"""How front doors hand work to the worker (by task name, without importing the tasks)."""

from __future__ import annotations

from mosoo_core import tracing
from mosoo_core.environments import BuildView
from mosoo_core.logs import get_logger
from mosoo_core.settings import get_settings

log = get_logger(__name__)


def enqueue_email_delivery(email_id: str) -> None:
    """Ask the worker to send a queued email now; the beat sweep retries if Redis is down."""
    if not get_settings().smtp_enabled:
        return
    try:
        _send("mosoo.deliver_email", email_id)
    except Exception:  # logged; the outbox row stays pending and the sweep picks it up
        log.warning("email.enqueue_failed", email_id=email_id)


def _send(task_name: str, *args: str, headers: dict[str, str] | None = None) -> None:
    # Imported here: Celery (and kombu) cost about 0.2 s to import, which a web process
    # that never sends a task, or `mosoo --help`, should not pay.
    from mosoo_core.celery_app import configured_app

    try:
        if headers:
            configured_app().send_task(task_name, args=args, headers=headers)
        else:
            configured_app().send_task(task_name, args=args)
    except Exception as error:
        log.warning("task.enqueue_failed", task=task_name, error=type(error).__name__)
        raise


def enqueue_run_dispatch(run_id: str) -> None:
    """Ask the worker to boot a sandbox for a queued run. Traced, span `run.enqueue` (a child
    of the web request's span, or a new trace's root) and its `traceparent` travels as a
    message header."""
    if not tracing.enabled():
        _send("mosoo.dispatch_run", run_id)
        return
    with tracing.tracer().start_as_current_span("run.enqueue", attributes={"mosoo.run_id": run_id}):
        _send("mosoo.dispatch_run", run_id, headers={"traceparent": tracing.traceparent()})


def enqueue_pool_refill() -> None:
    """Ask the worker to make warm pool members for the keys that lack some."""
    _send("mosoo.pool_refill")


def enqueue_run_finish(run_id: str) -> None:
    """Ask the worker to checkpoint and tear down after a run ended."""
    _send("mosoo.finish_run", run_id)


def enqueue_environment_build(build: BuildView | None) -> None:
    """Ask the worker to build an environment's packages when they are queued; if Redis is
    down the beat's sweep (or the first run that needs them) builds them instead."""
    if build is None or build.status != "queued":
        return
    try:
        _send("mosoo.build_environment", build.packages_hash)
    except Exception:  # logged by _send; the build stays queued
        return
