"""Runs whose hand-off to the worker was lost: `queued` in the database, but no task will
ever pick them up. Redis runs without persistence here, so a Redis restart drops every task
waiting in the queue; without this, such a run would stay queued and its thread would refuse
new messages until someone pressed Stop.

The beat's sandbox sweep sends each run queued longer than `LOST_AFTER` to the worker again,
at most once per `RESEND_EVERY` (a Redis key remembers it), so a worker that is merely busy
gets one spare task per run, not one a minute. Sending again is safe: `plan_boot` claims a run
with one conditional UPDATE, so whichever task comes first boots it and the other skips. A
message that waited its turn (`pending`) is never sent: it is not `queued` until the run
before it ends, and it counts as queued from that end (its dispatch waits for the ended run's
sandbox to be released: see `runtime.run_queue`)."""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import aliased
from sqlmodel import col, select

from mosoo_core import streams, tasks_client
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.logs import get_logger
from mosoo_core.tables.sessions import SessionRun

log = get_logger(__name__)

LOST_AFTER = timedelta(minutes=2)
RESEND_EVERY = timedelta(minutes=5)
BATCH = 200  # runs looked at per sweep, oldest first; the next sweep takes the rest
_RESENT_KEY = "mosoo:run:resent:{}"


def resend_lost_runs(*, now: datetime | None = None) -> int:
    """Hand runs queued since before `now - LOST_AFTER` to the worker again; how many were
    sent. Redis down: nothing can be sent, and nothing is lost by trying next time."""
    now = now or utcnow()
    earlier = aliased(SessionRun)
    # A message that waited its turn is queued since the run before it ended, not since sent.
    just_ended = (
        select(earlier.id)
        .where(
            earlier.session_id == SessionRun.session_id,
            col(earlier.finished_at) >= now - LOST_AFTER,
        )
        .exists()
    )
    with session_scope() as db:
        run_ids = db.exec(
            select(SessionRun.id)
            .where(
                SessionRun.status == "queued",
                col(SessionRun.created_at) < now - LOST_AFTER,
                sa.not_(just_ended),
            )
            .order_by(col(SessionRun.created_at))
            .limit(BATCH)
        ).all()
    if not run_ids:
        return 0
    client = streams.sync_client()
    resent = 0
    for run_id in run_ids:
        seconds = int(RESEND_EVERY.total_seconds())
        if not client.set(_RESENT_KEY.format(run_id), "1", nx=True, ex=seconds):
            continue  # sent again less than RESEND_EVERY ago: its task may still be waiting
        try:
            tasks_client.enqueue_run_dispatch(run_id)
        except Exception:  # logged by tasks_client; forget the mark so the next sweep tries
            client.delete(_RESENT_KEY.format(run_id))
            break
        resent += 1
    if resent:
        log.warning("run.dispatch_resent", runs=resent)
    return resent
