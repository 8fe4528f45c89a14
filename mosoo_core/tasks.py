"""Thin task wrappers that call services (safe to run twice), registered on the Celery app
(`mosoo_core.celery_app`, re-exported here for `celery -A mosoo_core.tasks`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery.signals import setup_logging, worker_ready, worker_shutdown

from mosoo_core import files, idempotency, identity, mail, tasks_client, tracing, usage
from mosoo_core.celery_app import app
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.logs import configure_logging, get_logger
from mosoo_core.runtime import builds, pet_idle, pool
from mosoo_core.runtime import skills as skill_files
from mosoo_core.runtime.lost_runs import resend_lost_runs
from mosoo_core.runtime.run_queue import dispatch_next_run
from mosoo_core.runtime.runs import DISPATCHING_MARK_SECONDS, finish_run_sandbox, sweep_stuck_boots
from mosoo_core.runtime.runs import dispatch_run as dispatch
from mosoo_core.runtime.runs import sweep_sandboxes as sweep
from mosoo_core.settings import get_settings

log = get_logger(__name__)


@setup_logging.connect
def _setup_logging(**_: Any) -> None:
    configure_logging("worker", get_settings().log_level, get_settings().log_json)


@worker_ready.connect
def _ready(**_: Any) -> None:
    log.info("worker.ready", broker=_redacted_broker())


@worker_shutdown.connect
def _shutdown(**_: Any) -> None:
    log.info("worker.stopped")


def _redacted_broker() -> str:
    url = get_settings().redis_url
    return url.split("@", 1)[-1] if "@" in url else url


@app.task(name="mosoo.deliver_email", bind=True, max_retries=4)
def deliver_email(self: Any, email_id: str) -> str:
    with session_scope() as db:
        status = mail.deliver_email(db, email_id)
    if status == "pending":
        raise self.retry(countdown=min(300, 15 * 2**self.request.retries))
    return status


@app.task(name="mosoo.sweep_pending_email")
def sweep_pending_email() -> int:
    with session_scope() as db:
        ids = mail.pending_email_ids(db, older_than=timedelta(minutes=2))
    for email_id in ids:
        deliver_email.delay(email_id)
    return len(ids)


@app.task(name="mosoo.purge_sign_in_records")
def purge_sign_in_records() -> int:
    with session_scope() as db:
        removed = identity.purge_expired_sign_in_records(db)
        removed += mail.purge_dev_mailbox(db)
        removed += idempotency.purge_expired_idempotency_records(db)  # API answers kept 24 h
    log.info("identity.purged", removed=removed)
    return removed


@app.task(name="mosoo.dispatch_run", bind=True)
def dispatch_run(self: Any, run_id: str) -> str:
    if not tracing.enabled():
        status = dispatch(run_id)
    else:
        # The run's trace goes on from the enqueuing request (its `traceparent` message header).
        parent = tracing.context_from(self.request.get("traceparent") or "")
        with tracing.tracer().start_as_current_span(
            "run.dispatch", context=parent, attributes={"mosoo.run_id": run_id}
        ):
            status = dispatch(run_id)
    dispatch_next_run(run_id)  # a boot that failed (or was stopped) ended the run here
    return status


@app.task(name="mosoo.finish_run", bind=True, max_retries=40)
def finish_run(self: Any, run_id: str) -> str:
    status = finish_run_sandbox(run_id)
    if (
        status == "deferred"
    ):  # its dispatcher releases the sandbox; look again in case it dies first
        raise self.retry(countdown=DISPATCHING_MARK_SECONDS)
    dispatch_next_run(run_id)  # the thread's next message, once this run's sandbox is released
    return status


@app.task(name="mosoo.sweep_sandboxes")
def sweep_sandboxes() -> int:
    return sweep_stuck_boots() + sweep() + resend_lost_runs()


@app.task(name="mosoo.sweep_files")
def sweep_files() -> int:
    with session_scope() as db:
        return files.sweep_files(db)


@app.task(name="mosoo.build_environment")
def build_environment(packages_hash: str) -> str:
    return builds.build_packages(packages_hash)


@app.task(name="mosoo.sweep_environment_builds")
def sweep_environment_builds() -> int:
    """Queued builds nobody started (Redis was down when they were queued) are built; layers
    nothing needs are collected."""
    for packages_hash in builds.queued_builds(older_than=timedelta(seconds=30)):
        builds.build_packages(packages_hash)
    return builds.collect_layers()


@app.task(name="mosoo.collect_skill_files")
def collect_skill_files() -> int:
    """Extracted skill versions no sandbox mounts and no run used lately are removed."""
    return skill_files.collect_skill_files()


@app.task(name="mosoo.pool_refill")
def pool_refill() -> int:
    """Warm pool members for the keys of this host that lack some (after a run took one), a
    few at a time: a task that made a full batch asks for the next, so runs queued meanwhile
    are not held behind one long task."""
    made = pool.refill_pool()
    if made >= pool.REFILL_BATCH:
        tasks_client.enqueue_pool_refill()
    return made


@app.task(name="mosoo.pool_maintain")
def pool_maintain() -> int:
    """The warm pool's members that cannot serve are replaced, unwanted keys dropped."""
    return pool.maintain()


@app.task(name="mosoo.hibernate_idle_pets")
def hibernate_idle_pets() -> int:
    """Assistants without a run for MOSOO_PET_IDLE_MINUTES are hibernated (workspace saved)."""
    return pet_idle.hibernate_idle_pets()


@app.task(name="mosoo.roll_up_usage")
def roll_up_usage() -> int:
    """The daily usage rollup caught up (every day since the last complete one, and today),
    then raw records and rollups past retention pruned. Safe to run twice."""
    settings = get_settings()
    with session_scope() as db:
        rolled, pruned = usage.maintain(
            db,
            now=utcnow(),
            raw_retention_days=settings.usage_raw_retention_days,
            rollup_retention_days=settings.usage_rollup_retention_days,
        )
    log.info(
        "usage.rolled_up",
        days=len(rolled.days),
        rows=rolled.rows,
        raw_records_pruned=pruned.raw_records,
        rollup_rows_pruned=pruned.rollup_rows,
    )
    return rolled.rows


__all__ = ["app"]
