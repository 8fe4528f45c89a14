"""Package builds: the database side (rows, states, grants, what may be collected).

A revision with packages needs the build of its `packages_hash`; revisions with the same
packages (and indexes) share one build. A build is `queued` until a worker claims it,
`building` while a build sandbox installs the packages, then `ready` (its layer directory
exists) or `failed` (its log says why). Claiming is one conditional UPDATE, so of the workers
that race for a build (the build task, a run that needs it) exactly one builds; the others
wait for its outcome. `runtime.builds` does the building.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlmodel import Session, col, select

from mosoo_core.clock import utcnow
from mosoo_core.db import insert_unless_raced
from mosoo_core.errors import Conflict
from mosoo_core.settings import get_settings
from mosoo_core.tables.environments import Environment, EnvironmentBuild, EnvironmentRevision

BUILD_GRANT_PREFIX = "mbg_"
LOG_CHARS = 64 * 1024  # the end of a build's log is kept with it
ERROR_TAIL_CHARS = 1500  # quoted in the error of a run that waited for a failed build


@dataclass(frozen=True)
class BuildView:
    packages_hash: str
    status: str  # queued, building, ready, failed
    log: str
    error: str
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None


def build_view(row: EnvironmentBuild) -> BuildView:
    return BuildView(
        packages_hash=row.packages_hash,
        status=row.status,
        log=row.log,
        error=row.error,
        attempts=row.attempts,
        started_at=row.started_at,
        finished_at=row.finished_at,
    )


def layers_root() -> Path:
    """Where ready layers live on the host: one directory per packages hash, one below it
    per build attempt."""
    return (get_settings().data_dir / "environments").resolve()


def layer_path(row: EnvironmentBuild) -> Path | None:
    """The ready layer's directory, or None when it is not ready or its files are gone."""
    if row.status != "ready" or not row.layer:
        return None
    path = layers_root() / row.layer
    return path if path.is_dir() else None


def get_build(db: Session, packages_hash: str) -> EnvironmentBuild | None:
    if not packages_hash:
        return None
    return db.exec(
        select(EnvironmentBuild).where(EnvironmentBuild.packages_hash == packages_hash)
    ).first()


def ensure_build(db: Session, revision: EnvironmentRevision) -> EnvironmentBuild | None:
    """The build a revision needs (None without packages), queued when there is none yet or
    when a ready one lost its files (collected, or a new data directory). The caller enqueues
    the build task once this is committed (`needs_worker`)."""
    if not revision.packages_hash:
        return None
    return ensure_build_for(db, revision.packages_hash, dict(revision.packages or {}))


def ensure_build_for(
    db: Session, packages_hash: str, packages: dict[str, list[str]]
) -> EnvironmentBuild:
    row = get_build(db, packages_hash)
    if row is None:
        # Another save may queue the same packages at once: then that build is this one.
        row = insert_unless_raced(
            db,
            EnvironmentBuild(packages_hash=packages_hash, packages=packages),
            lambda: get_build(db, packages_hash),
        )
    elif row.status == "ready" and layer_path(row) is None:
        _requeue(row)
        db.add(row)
        db.flush()
    return row


def queued_hashes(db: Session, *, before: datetime) -> list[str]:
    """Builds queued before `before` (created or requeued then) that nobody took."""
    return list(
        db.exec(
            select(EnvironmentBuild.packages_hash).where(
                EnvironmentBuild.status == "queued", col(EnvironmentBuild.created_at) < before
            )
        ).all()
    )


def all_builds(db: Session) -> list[EnvironmentBuild]:
    return list(db.exec(select(EnvironmentBuild)).all())


def needs_worker(row: EnvironmentBuild | None) -> bool:
    return row is not None and row.status == "queued"


def _requeue(row: EnvironmentBuild) -> None:
    row.status = "queued"
    row.error = ""
    row.grant_hash = ""
    row.started_at = None
    row.finished_at = None


def current_build(db: Session, environment: Environment) -> EnvironmentBuild | None:
    revision = db.exec(
        select(EnvironmentRevision).where(
            EnvironmentRevision.environment_id == environment.id,
            EnvironmentRevision.number == environment.current_revision,
        )
    ).one()
    return get_build(db, revision.packages_hash)


def request_rebuild(db: Session, revision: EnvironmentRevision) -> EnvironmentBuild:
    """Queue the revision's packages to be built again (the owner's Rebuild). Refused while
    a build of them runs, and for a revision without packages. The ready layer stays in use
    until the new one is ready."""
    row = ensure_build(db, revision)
    if row is None:
        raise Conflict("This environment has no packages to build.")
    if row.status == "building":
        raise Conflict("A build of these packages is in progress; wait for it to finish.")
    if row.status != "queued":
        _requeue(row)
    row.log = ""  # also when ensure_build requeued it (its layer was gone)
    db.add(row)
    db.flush()
    return row


# --- the worker's side ---------------------------------------------------------------------


def _rowcount(result: object) -> int:
    return int(getattr(result, "rowcount", 0))  # a CursorResult; Session.execute says Result


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def claim_build(db: Session, packages_hash: str, *, stale_after: float) -> str | None:
    """Take a queued build (or one whose builder stopped answering `stale_after` seconds
    ago) for this worker: returns the build's egress grant, or None when it is not ours to
    build. One UPDATE decides, so two workers never build the same packages at once."""
    now = utcnow()
    grant = BUILD_GRANT_PREFIX + secrets.token_urlsafe(32)
    stale = now - timedelta(seconds=stale_after)
    claimable = sa.or_(
        col(EnvironmentBuild.status) == "queued",
        sa.and_(
            col(EnvironmentBuild.status) == "building",
            col(EnvironmentBuild.heartbeat_at) < stale,
        ),
    )
    result = db.execute(
        sa.update(EnvironmentBuild)
        .where(col(EnvironmentBuild.packages_hash) == packages_hash, claimable)
        .values(
            status="building",
            grant_hash=_digest(grant),
            started_at=now,
            heartbeat_at=now,
            finished_at=None,
            error="",
            log="",
            attempts=EnvironmentBuild.attempts + 1,
        )
    )
    db.flush()
    return grant if _rowcount(result) == 1 else None


def resolve_build_grant(db: Session, token: str) -> EnvironmentBuild | None:
    """The build in progress that a grant belongs to (the egress proxy's lookup)."""
    if not token.startswith(BUILD_GRANT_PREFIX) or len(token) > 200:
        return None
    return db.exec(
        select(EnvironmentBuild).where(
            EnvironmentBuild.grant_hash == _digest(token), EnvironmentBuild.status == "building"
        )
    ).first()


def record_log(db: Session, packages_hash: str, grant: str, log: str) -> bool:
    """Keep the growing log of the build this grant runs; False once the build is no longer
    this builder's (taken over as stale, or finished)."""
    result = db.execute(
        sa.update(EnvironmentBuild)
        .where(
            col(EnvironmentBuild.packages_hash) == packages_hash,
            col(EnvironmentBuild.grant_hash) == _digest(grant),
            col(EnvironmentBuild.status) == "building",
        )
        .values(log=log[-LOG_CHARS:], heartbeat_at=utcnow())
    )
    db.flush()
    return _rowcount(result) == 1


def finish_build(
    db: Session, packages_hash: str, grant: str, *, layer: str, log: str, error: str
) -> bool:
    """Record the outcome (ready with its layer when `error` is empty, else failed); the
    grant stops working. False when the build was no longer this builder's."""
    values: dict[str, object] = {
        "status": "failed" if error else "ready",
        "log": log[-LOG_CHARS:],
        "error": error[:500],
        "grant_hash": "",
        "finished_at": utcnow(),
    }
    if not error:
        values["layer"] = layer
        values["last_used_at"] = utcnow()
    result = db.execute(
        sa.update(EnvironmentBuild)
        .where(
            col(EnvironmentBuild.packages_hash) == packages_hash,
            col(EnvironmentBuild.grant_hash) == _digest(grant),
        )
        .values(**values)
    )
    db.flush()
    return _rowcount(result) == 1


def failure_message(row: EnvironmentBuild) -> str:
    """Why a run that needed this build fails: the error and the end of the log."""
    tail = row.log[-ERROR_TAIL_CHARS:].strip()
    reason = row.error or "The environment's packages could not be built."
    return f"{reason}\n{tail}" if tail else reason


def mark_used(db: Session, packages_hash: str) -> None:
    db.execute(
        sa.update(EnvironmentBuild)
        .where(col(EnvironmentBuild.packages_hash) == packages_hash)
        .values(last_used_at=utcnow())
    )


def collectable_builds(db: Session, *, unused_for: timedelta) -> list[EnvironmentBuild]:
    """Builds no live environment's current revision needs and no run used for `unused_for`
    (a thread that froze an older revision gets its packages built again if it runs later)."""
    wanted = (
        select(EnvironmentRevision.packages_hash)
        .join(Environment, col(Environment.id) == col(EnvironmentRevision.environment_id))
        .where(
            col(Environment.deleted_at).is_(None),
            col(EnvironmentRevision.number) == col(Environment.current_revision),
            col(EnvironmentRevision.packages_hash) != "",
        )
    )
    cutoff = utcnow() - unused_for
    return list(
        db.exec(
            select(EnvironmentBuild).where(
                col(EnvironmentBuild.packages_hash).not_in(wanted),
                col(EnvironmentBuild.status) != "building",
                col(EnvironmentBuild.last_used_at) < cutoff,
            )
        ).all()
    )
