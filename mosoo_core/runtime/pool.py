"""The warm pool: Task (Cattle) sandboxes started ahead of their runs, each with its driver
connected to control and standing by, so a run takes one instead of starting its own.

A member belongs to a key (`PoolKey`): what its sandbox was made with and cannot change
once made (the image, the runtime its driver warmed up, the App's environment revision with
its network policy and built layer, the skill versions it mounts), and a host (the Docker
engine it runs on). It holds no run's identity until a run claims it: the run's spec, grants,
attachments and workspace then reach it at claim time over the control connection
(`assign`, PROTOCOL.md v2), never at creation. Nothing here assumes the local Unix socket:
a member dials the control URL every run's driver dials.

- A run that finds no member of its key (a miss) starts cold, and its key is then kept warm:
  `refill_pool` makes members up to the key's size (settings `pool_size`, `pool_sizes`) while the
  host's members stay within `pool_max_memory_mb`.
- `claim` takes a member with one conditional UPDATE: two runs never get one member, and a
  claimed member never goes back (its sandbox goes with its run, as any Task sandbox).
- `maintain` (the beat) replaces members whose driver died or never stood by, recycles
  those too old (`pool_member_ttl_minutes`) or of another image, drops keys no run wanted for
  `pool_key_idle_minutes`, and refills the rest.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

import sqlalchemy as sa
from sqlmodel import Session, col, select

from driver.protocol import MISSED_HEARTBEATS_BEFORE_DISCONNECT, BootPayload
from mosoo_core import environments, skills
from mosoo_core.clock import utcnow
from mosoo_core.db import insert_unless_raced, session_scope
from mosoo_core.environments import builds as environment_builds
from mosoo_core.ids import new_id
from mosoo_core.logs import get_logger
from mosoo_core.runtime import builds
from mosoo_core.runtime import skills as skill_files
from mosoo_core.runtime.labels import LABEL_ENV_LAYER, installation_label
from mosoo_core.runtime.sandbox import (
    CONTROL_URL,
    LABEL_DRIVER_INSTANCE,
    SandboxBackend,
    SandboxError,
    SandboxRef,
    SandboxSpec,
    get_backend,
)
from mosoo_core.runtime.setup import run_setup
from mosoo_core.sessions import driver_plane
from mosoo_core.settings import get_settings
from mosoo_core.tables.environments import EnvironmentRevision
from mosoo_core.tables.pool import PoolKey, PoolMember
from mosoo_core.tables.sessions import DriverInstance

log = get_logger(__name__)

SUBJECT_PREFIX = "pool:"  # the subject label of a member's sandbox: pool:<member id>
# A member whose driver has not stood by this long after it was made is replaced.
STARTING_GRACE = timedelta(minutes=2)
# How many members one refill makes at most (each is a few hundred ms of a worker's time).
REFILL_BATCH = 4


@dataclass(frozen=True)
class KeySpec:
    """What a run needs its sandbox to have been made with (the pool's key), on one host."""

    host: str
    app_id: str
    runtime: str
    image: str
    revision_id: str
    network_policy: str
    layer: str  # the built layer it mounts ("<hash>/<attempt>"), "" for none
    skill_versions: tuple[str, ...]

    @property
    def digest(self) -> str:
        fields = [
            self.app_id,
            self.runtime,
            self.image,
            self.revision_id,
            self.network_policy,
            self.layer,
            *self.skill_versions,
        ]
        return hashlib.sha256(json.dumps(fields).encode()).hexdigest()


@dataclass(frozen=True)
class Claimed:
    """The member a run took: its driver (now the run's) and its sandbox."""

    member_id: str
    instance_id: str
    sandbox_id: str
    sandbox_name: str

    def sandbox(self, backend: SandboxBackend) -> SandboxRef:
        return SandboxRef(
            backend=backend.name,
            id=self.sandbox_id,
            name=self.sandbox_name,
            labels={LABEL_DRIVER_INSTANCE: self.instance_id},
        )


@dataclass(frozen=True)
class PoolFigures:
    """One key's pool on one host, for `mosoo doctor` and the Sandbox panel."""

    key_id: str
    host: str
    app_id: str
    runtime: str
    network_policy: str
    revision_id: str
    target: int
    standing_by: int  # claimable now
    starting: int
    hits: int
    misses: int
    last_wanted_at: datetime

    @property
    def hit_rate(self) -> float | None:
        """The share of this key's runs that took a member (None before its first run)."""
        runs = self.hits + self.misses
        return self.hits / runs if runs else None


def target_size(runtime: str, network_policy: str) -> int:
    """How many members a key of this kind keeps (settings; 0 when the pool is off)."""
    settings = get_settings()
    sizes = settings.pool_sizes
    return sizes.get(f"{runtime}/{network_policy}", sizes.get(runtime, settings.pool_size))


def _silent_since(now: datetime) -> datetime:
    """A driver with no heartbeat since then is taken for gone: control may have died without
    recording the disconnect (its heartbeat sweep died with it)."""
    interval = get_settings().driver_heartbeat_interval_ms / 1000
    return now - timedelta(seconds=interval * MISSED_HEARTBEATS_BEFORE_DISCONNECT)


def _key_row(db: Session, key: KeySpec, now: datetime) -> PoolKey:
    def existing() -> PoolKey | None:
        return db.exec(
            select(PoolKey).where(PoolKey.host == key.host, PoolKey.digest == key.digest)
        ).first()

    row = existing()
    if row is None:  # the kind's first run, or two first runs at once: one row for both
        made = PoolKey(
            host=key.host,
            digest=key.digest,
            app_id=key.app_id,
            runtime=key.runtime,
            image=key.image,
            revision_id=key.revision_id,
            network_policy=key.network_policy,
            skill_versions=list(key.skill_versions),
            layer=key.layer,
            created_at=now,
        )
        row = insert_unless_raced(db, made, existing)
    row.last_wanted_at = now
    db.add(row)
    db.flush()
    return row


def claim(db: Session, key: KeySpec, run_id: str, session_id: str) -> Claimed | None:
    """Take a member of `key` standing by for the run `run_id` of thread `session_id`, and
    count the hit (None: a miss, counted too). Its driver becomes the thread's. The UPDATE
    takes a member only while it is still `waiting`: of two runs after one member, the second
    finds it claimed and tries the next. A key no run wanted before starts being kept warm."""
    now = utcnow()
    row = _key_row(db, key, now)
    if target_size(key.runtime, key.network_policy) > 0:
        candidates = db.exec(
            select(PoolMember)
            .join(DriverInstance, col(DriverInstance.id) == col(PoolMember.driver_instance_id))
            .where(
                PoolMember.key_id == row.id,
                PoolMember.status == "waiting",
                DriverInstance.status == "connected",
                col(DriverInstance.standby_at).is_not(None),
                col(DriverInstance.last_heartbeat_at) >= _silent_since(now),
            )
            .order_by(col(PoolMember.created_at))
            .limit(8)
        ).all()
        for member in candidates:
            taken = db.execute(
                sa.update(PoolMember)
                .where(col(PoolMember.id) == member.id, col(PoolMember.status) == "waiting")
                .values(status="claimed", run_id=run_id, claimed_at=now)
            )
            if int(getattr(taken, "rowcount", 0)) != 1:
                continue  # another run took it first
            instance = db.get(DriverInstance, member.driver_instance_id)
            assert instance is not None
            instance.session_id = session_id
            instance.subject = f"session:{session_id}"
            db.add(instance)
            _count(db, row, "hits")
            return Claimed(
                member_id=member.id,
                instance_id=member.driver_instance_id,
                sandbox_id=member.sandbox_id,
                sandbox_name=member.sandbox_name,
            )
    _count(db, row, "misses")
    return None


def _count(db: Session, row: PoolKey, counter: Literal["hits", "misses"]) -> None:
    """One more hit or miss, added by the database: runs claiming at once each read the row
    before the others committed, and `row.hits += 1` wrote back what one of them read (20 runs
    at once against 5 members counted 3 hits on PostgreSQL)."""
    column = col(getattr(PoolKey, counter))
    db.execute(sa.update(PoolKey).where(col(PoolKey.id) == row.id).values({column: column + 1}))
    db.expire(row, [counter])


def forget_member(db: Session, instance_id: str) -> None:
    """The member's sandbox is gone (its run's teardown, or a retirement): so is its row."""
    db.execute(sa.delete(PoolMember).where(col(PoolMember.driver_instance_id) == instance_id))


def sandbox_needed(db: Session, member_id: str, *, now: datetime | None = None) -> bool | None:
    """For the sandbox sweep: a member's sandbox is needed while its member waits (True),
    is not when its row is gone (False); a claimed one is judged as its run's (None)."""
    member = db.get(PoolMember, member_id)
    if member is None:
        # Made this instant by a refill that has not written its row yet? Rows are written
        # before the sandbox, so no: gone means retired or never recorded.
        return False
    if member.status == "waiting" or member.status == "starting":
        return True
    return None


# --- keeping the pool full -------------------------------------------------------------------


def _host() -> str:
    return get_settings().sandbox_host


def members_memory_mb(db: Session, host: str) -> int:
    """What the members of `host` may use together (each counted at the sandbox memory limit,
    as the cap `pool_max_memory_mb` counts them)."""
    waiting = db.exec(
        select(sa.func.count())
        .select_from(PoolMember)
        .where(PoolMember.host == host, col(PoolMember.status).in_(["starting", "waiting"]))
    ).one()
    return int(waiting) * get_settings().sandbox_memory_mb


def _wanted(db: Session, host: str, now: datetime) -> list[tuple[PoolKey, int]]:
    """Keys of this host still wanted, with how many members each lacks."""
    idle_before = now - timedelta(minutes=get_settings().pool_key_idle_minutes)
    wanted = []
    for key in db.exec(
        select(PoolKey)
        .where(PoolKey.host == host, PoolKey.last_wanted_at >= idle_before)
        .order_by(col(PoolKey.last_wanted_at).desc())
    ).all():
        have = db.exec(
            select(sa.func.count())
            .select_from(PoolMember)
            .where(
                PoolMember.key_id == key.id,
                col(PoolMember.status).in_(["starting", "waiting"]),
            )
        ).one()
        lacking = target_size(key.runtime, key.network_policy) - int(have)
        if lacking > 0:
            wanted.append((key, lacking))
    return wanted


def refill_pool(backend: SandboxBackend | None = None, *, limit: int = REFILL_BATCH) -> int:
    """Make members for the wanted keys of this host that lack some, at most `limit`, and
    never past the memory cap. Returns how many were made."""
    host = _host()
    settings = get_settings()
    made = 0
    while made < limit:
        with session_scope() as db:
            if (
                members_memory_mb(db, host) + settings.sandbox_memory_mb
                > settings.pool_max_memory_mb
            ):
                break
            wanted = _wanted(db, host, utcnow())
        if not wanted:
            break
        backend = backend or get_backend()
        key, _lacking = wanted[0]
        if not _make_member(backend, key.id):
            break  # it failed and said why; the next refill tries again
        made += 1
    return made


def _make_member(backend: SandboxBackend, key_id: str) -> bool:
    settings = get_settings()
    with session_scope() as db:
        key = db.get(PoolKey, key_id)
        revision = db.get(EnvironmentRevision, key.revision_id) if key is not None else None
        if key is None or revision is None:
            return False
        if revision.setup_script and revision.network_policy == "limited":
            # Its setup script reaches the allowed hosts with a run's grant; a member has no run.
            return False
        layer_path = None
        if key.layer:
            build = environment_builds.get_build(db, key.layer.split("/")[0])
            layer_path = environment_builds.layer_path(build) if build is not None else None
            if layer_path is None or build is None or build.layer != key.layer:
                return False  # rebuilt since: runs want another key now
        bound = skills.bound_versions(db, key.app_id, key.skill_versions)
        setup_script = revision.setup_script
        variables = environments.run_variables(db, revision.id) if setup_script else []
        member_id = new_id()
        driver = driver_plane.register_driver(
            db, app_id=key.app_id, subject=f"{SUBJECT_PREFIX}{member_id}", runtime=key.runtime
        )
        instance_id = driver.instance_id
        # Written before the sandbox exists: a sandbox of the pool without its row is swept.
        db.add(
            PoolMember(
                id=member_id,
                key_id=key.id,
                host=key.host,
                driver_instance_id=instance_id,
                image=key.image,
                status="starting",
            )
        )
        labels = installation_label() | skill_files.skills_label(bound)
        mounts = skill_files.skill_mounts(bound)
        if layer_path is not None:
            labels[LABEL_ENV_LAYER] = key.layer
            mounts = (builds.layer_mount(layer_path), *mounts)
        spec = SandboxSpec(
            subject=f"{SUBJECT_PREFIX}{member_id}",
            app_id=key.app_id,
            driver_instance_id=instance_id,
            control_socket=settings.resolved_control_socket,
            labels=labels,
            mounts=mounts,
            network="full" if key.network_policy == "full" else "none",
        )
        payload = BootPayload(
            control_url=CONTROL_URL,
            driver_instance_id=instance_id,
            boot_token=driver.boot_token,
            runtime=key.runtime,
        ).model_dump_json()
    try:
        ref = backend.create_with_driver(spec, payload.encode())
    except SandboxError as error:
        log.warning("pool.member_failed", key_id=key_id, error=str(error)[:300])
        _retire(backend, member_id, instance_id)
        return False
    if setup_script:
        result = run_setup(
            backend,
            ref,
            setup_script,
            {v.name: v.value for v in variables},
            tuple(v.value for v in variables if v.secret),
        )
        if not result.ok:
            log.warning("pool.member_setup_failed", key_id=key_id, error=result.message[:300])
            _retire(backend, member_id, instance_id, ref)
            return False
    with session_scope() as db:
        member_row = db.get(PoolMember, member_id)
        if member_row is None:  # retired meanwhile (its key went)
            gone = True
        else:
            gone = False
            member_row.sandbox_id, member_row.sandbox_name = ref.id, ref.name
            member_row.status = "waiting"
            db.add(member_row)
    if gone:
        backend.remove(ref)
        return False
    log.info("pool.member_made", key_id=key_id, member_id=member_id, sandbox=ref.name)
    return True


def _retire(
    backend: SandboxBackend, member_id: str, instance_id: str, ref: SandboxRef | None = None
) -> None:
    """Remove a member's sandbox (found by its driver's label when `ref` is not known), stop
    its driver's record and forget it."""
    refs = [ref] if ref is not None else backend.list_by_label({LABEL_DRIVER_INSTANCE: instance_id})
    for found in refs:
        try:
            backend.remove(found)
        except SandboxError as error:
            log.warning("pool.remove_failed", member_id=member_id, error=str(error)[:300])
            return  # the row stays: the next maintenance tries again
    with session_scope() as db:
        driver_plane.mark_stopped(db, instance_id)
        db.execute(sa.delete(PoolMember).where(col(PoolMember.id) == member_id))


def maintain(
    backend: SandboxBackend | None = None, *, now: datetime | None = None, refill: bool = True
) -> int:
    """Retire the members of this host that cannot serve (driver gone or silent, never stood
    by, too old, another image, key no longer wanted), forget unwanted keys, then refill
    (unless `refill` is False). Returns how many members were retired."""
    settings = get_settings()
    host = _host()
    now = now or utcnow()
    idle_before = now - timedelta(minutes=settings.pool_key_idle_minutes)
    too_old = now - timedelta(minutes=settings.pool_member_ttl_minutes)
    with session_scope() as db:
        rows = db.exec(
            select(PoolMember, DriverInstance, PoolKey)
            .join(DriverInstance, col(DriverInstance.id) == col(PoolMember.driver_instance_id))
            .join(PoolKey, col(PoolKey.id) == col(PoolMember.key_id))
            .where(PoolMember.host == host, col(PoolMember.status).in_(["starting", "waiting"]))
        ).all()
        if not rows and not db.exec(select(PoolKey.id).where(PoolKey.host == host)).first():
            return 0  # no pool on this host: no backend to start
    backend = backend or get_backend()
    image = backend.image_name()
    retired = 0
    for member, instance, key in rows:
        reason = _retirement_reason(
            member, instance, key, image=image, now=now, idle_before=idle_before, too_old=too_old
        )
        if reason:
            log.info("pool.member_retired", member_id=member.id, reason=reason)
            _retire(backend, member.id, instance.id)
            retired += 1
    with session_scope() as db:
        # A key no run wanted for a while and with no member left goes.
        for key in db.exec(
            select(PoolKey).where(PoolKey.host == host, PoolKey.last_wanted_at < idle_before)
        ).all():
            if not db.exec(select(PoolMember.id).where(PoolMember.key_id == key.id)).first():
                db.delete(key)
    if refill:
        refill_pool(backend)
    return retired


def _retirement_reason(
    member: PoolMember,
    instance: DriverInstance,
    key: PoolKey,
    *,
    image: str,
    now: datetime,
    idle_before: datetime,
    too_old: datetime,
) -> str:
    if key.last_wanted_at < idle_before or target_size(key.runtime, key.network_policy) == 0:
        return "unwanted"
    if member.image != image:
        return "image changed"
    if member.created_at < too_old:
        return "too old"
    if instance.status in ("stopped", "lost", "disconnected"):
        return f"driver {instance.status}"
    heard = instance.last_heartbeat_at
    if instance.standby_at is not None and (heard is None or heard < _silent_since(now)):
        return "driver silent"
    if member.created_at < now - STARTING_GRACE and (
        instance.standby_at is None or member.status == "starting"
    ):
        return "never stood by"  # or its maker died before it was done
    return ""


def figures(
    db: Session, *, app_id: str | None = None, host: str | None = None
) -> list[PoolFigures]:
    """Each key's pool (of one App, or every App), with its members and its hits and misses."""
    query = select(PoolKey).order_by(col(PoolKey.last_wanted_at).desc())
    if app_id is not None:
        query = query.where(PoolKey.app_id == app_id)
    if host is not None:
        query = query.where(PoolKey.host == host)
    result = []
    silent_since = _silent_since(utcnow())
    for key in db.exec(query).all():
        members = db.exec(
            select(PoolMember, DriverInstance)
            .join(DriverInstance, col(DriverInstance.id) == col(PoolMember.driver_instance_id))
            .where(PoolMember.key_id == key.id, col(PoolMember.status).in_(["starting", "waiting"]))
        ).all()
        standing_by = sum(
            1
            for member, instance in members
            if member.status == "waiting"
            and instance.status == "connected"
            and instance.standby_at is not None
            # As `claim` takes them: a driver silent for a while is taken for gone.
            and instance.last_heartbeat_at is not None
            and instance.last_heartbeat_at >= silent_since
        )
        result.append(
            PoolFigures(
                key_id=key.id,
                host=key.host,
                app_id=key.app_id,
                runtime=key.runtime,
                network_policy=key.network_policy,
                revision_id=key.revision_id,
                target=target_size(key.runtime, key.network_policy),
                standing_by=standing_by,
                starting=len(members) - standing_by,
                hits=key.hits,
                misses=key.misses,
                last_wanted_at=key.last_wanted_at,
            )
        )
    return result
