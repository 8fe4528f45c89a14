"""Runs as tests put them: a run moved to a status (as a worker or driver would move it), and
the runs the worker's Celery queue holds for dispatch."""

from __future__ import annotations

import json

import redis
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core.tables.sessions import SessionRun


def set_run_status(engine: Engine, run_id: str, status: str) -> None:
    """Move a run to `status` and commit (e.g. `booting`, as a worker's claim does)."""
    with Session(engine) as db:
        run = db.get(SessionRun, run_id)
        assert run is not None, run_id
        run.status = status
        db.add(run)
        db.commit()


def dispatch_tasks(client: redis.Redis) -> list[str]:
    """The run ids of the `mosoo.dispatch_run` tasks waiting in the worker's queue, oldest
    first (Celery pushes new tasks on the left)."""
    found = []
    for raw in reversed(client.lrange("celery", 0, -1)):
        headers = json.loads(raw)["headers"]
        if headers["task"] == "mosoo.dispatch_run":
            found.append(headers["argsrepr"].strip("(),' "))
    return found
