"""A thread's next run, handed to the worker once the run before it is over.

A message sent while its thread's run was still starting waits as a `pending` run; when that
run ends, its end makes the oldest pending run `queued` (`sessions._queue`). The worker
dispatches it here, after the ended run's sandbox was released: a Task thread's next run then
restores the `/workspace` the ended run checkpointed, and an Assistant's finds the ended run's
outputs recorded and its attachments gone. Should this hand-off be lost, the beat's lost-run
sweep sends the run again (`runtime.lost_runs`)."""

from __future__ import annotations

from mosoo_core import sessions, tasks_client
from mosoo_core.db import session_scope
from mosoo_core.logs import get_logger
from mosoo_core.tables.sessions import ACTIVE_RUN_STATUSES, SessionRun

log = get_logger(__name__)


def dispatch_next_run(run_id: str) -> str | None:
    """After run `run_id` ended (and its sandbox was released): send its thread's next run,
    one sent before it ended, to the worker. Its id, or None when there is none (the run is
    still active or gone, nothing waited behind it, or the next one is already past `queued`).
    Safe to call twice: a run is claimed once."""
    with session_scope() as db:
        ended = db.get(SessionRun, run_id)
        if ended is None or ended.finished_at is None or ended.status in ACTIVE_RUN_STATUSES:
            return None
        upcoming = sessions.active_run(db, ended.session_id)
        # A message sent after the run ended went to the worker from its front door.
        if (
            upcoming is None
            or upcoming.status != "queued"
            or upcoming.created_at >= ended.finished_at
        ):
            return None
        next_id = upcoming.id
    tasks_client.enqueue_run_dispatch(next_id)
    log.info("run.next_dispatched", run_id=next_id, after_run_id=run_id)
    return next_id
