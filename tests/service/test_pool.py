"""The warm pool's rules at the service (mosoo_core/runtime/pool.py), on both databases: who
may be claimed, by whom, once; sizes from settings; the memory cap; what maintenance retires.
The pool with real sandboxes and drivers is tests/integration/test_warm_pool.py."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import identity
from mosoo_core.clock import utcnow
from mosoo_core.runtime import pool
from mosoo_core.sessions import driver_plane
from mosoo_core.settings import Settings, reset_settings_cache
from mosoo_core.tables.pool import PoolKey, PoolMember
from mosoo_core.tables.sessions import DriverInstance


def _app(db: Session, email: str = "pool@example.com") -> str:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    return identity.list_apps(db, account.id)[0].id


def _key(app_id: str, **changes: str) -> pool.KeySpec:
    values = {
        "host": "host-a",
        "app_id": app_id,
        "runtime": "openai",
        "image": "mosoo-sandbox:1",
        "revision_id": "rev1",
        "network_policy": "none",
        "layer": "",
    }
    values.update(changes)
    return pool.KeySpec(**values, skill_versions=())  # type: ignore[arg-type]


def _member(
    db: Session,
    key: pool.KeySpec,
    *,
    standing_by: bool = True,
    status: str = "waiting",
    heard_seconds_ago: float = 0,
    driver_status: str = "connected",
) -> PoolMember:
    """A member row and its driver instance as a refill and the driver's hello leave them."""
    row = db.exec(select(PoolKey).where(PoolKey.digest == key.digest)).first()
    if row is None:
        pool.claim(db, key, "run-that-makes-the-key", "thread")  # a miss registers the key
        row = db.exec(select(PoolKey).where(PoolKey.digest == key.digest)).one()
    driver = driver_plane.register_driver(db, app_id=key.app_id, subject="pool:m", runtime="openai")
    instance = db.get(DriverInstance, driver.instance_id)
    assert instance is not None
    now = utcnow()
    instance.status = driver_status
    instance.last_heartbeat_at = now - timedelta(seconds=heard_seconds_ago)
    instance.standby_at = now if standing_by else None
    member = PoolMember(
        key_id=row.id,
        host=key.host,
        driver_instance_id=driver.instance_id,
        image=key.image,
        status=status,
        sandbox_id="c1",
        sandbox_name="mosoo-c1",
    )
    db.add_all([instance, member])
    db.flush()
    return member


@pytest.fixture
def sized(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOSOO_POOL_SIZE", "2")
    monkeypatch.setenv("MOSOO_DRIVER_HEARTBEAT_INTERVAL_MS", "1000")
    reset_settings_cache()


def test_a_claim_takes_a_standing_member_once_makes_it_the_threads_and_counts_it(
    db: Session, sized: None
) -> None:
    app_id = _app(db)
    key = _key(app_id)
    member = _member(db, key)
    claimed = pool.claim(db, key, "run-1", "thread-1")
    assert claimed is not None and claimed.member_id == member.id
    instance = db.get(DriverInstance, member.driver_instance_id)
    assert instance is not None
    assert (instance.session_id, instance.subject) == ("thread-1", "session:thread-1")
    assert pool.claim(db, key, "run-2", "thread-2") is None  # never twice
    db.refresh(member)
    assert (member.status, member.run_id) == ("claimed", "run-1")
    row = db.exec(select(PoolKey)).one()
    # The key's first miss (the helper's) and run-2's, and run-1's hit.
    assert (row.hits, row.misses) == (1, 2)


def test_a_member_that_cannot_serve_is_never_claimed(db: Session, sized: None) -> None:
    app_id = _app(db)
    key = _key(app_id)
    _member(db, key, standing_by=False)  # its driver has not warmed up yet
    _member(db, key, heard_seconds_ago=10)  # silent for 3 heartbeats: control may be gone
    _member(db, key, driver_status="disconnected")
    _member(db, key, status="starting")  # its maker has not finished
    assert pool.claim(db, key, "run-1", "thread-1") is None


def test_another_key_never_gets_the_member(db: Session, sized: None) -> None:
    app_id = _app(db)
    _member(db, _key(app_id))
    for other in (
        _key(app_id, revision_id="rev2"),  # the environment changed
        _key(app_id, image="mosoo-sandbox:2"),  # the image was rebuilt
        _key(app_id, runtime="claude"),
        _key(app_id, network_policy="full"),
        _key(app_id, layer="hash/2"),  # the packages were rebuilt
        _key(app_id, host="host-b"),  # a member belongs to its host
        _key(_app(db, "other@example.com")),  # another App
    ):
        assert pool.claim(db, other, "run-x", "thread-x") is None


def _claim_at_once(engine: Engine, key: pool.KeySpec) -> dict[str, pool.Claimed | None]:
    """Two dispatchers, each in its own transaction: `a` claims and holds its transaction
    open while `b` claims; what each got."""
    first_claimed = threading.Event()
    results: dict[str, pool.Claimed | None] = {}

    def dispatcher(name: str, hold: bool) -> None:
        with Session(engine) as db:
            results[name] = pool.claim(db, key, f"run-{name}", f"thread-{name}")
            if hold:
                first_claimed.set()
                threading.Event().wait(0.5)  # the other claims while this one is uncommitted
            db.commit()

    holder = threading.Thread(target=dispatcher, args=("a", True))
    holder.start()
    first_claimed.wait(10)
    dispatcher("b", False)
    holder.join(10)
    return results


def test_two_claims_at_once_never_share_a_member(engine: Engine, sized: None) -> None:
    """Two dispatchers after the same single member: one gets it, the other finds it taken
    (PostgreSQL: the row lock; SQLite: the write lock)."""
    with Session(engine) as db:
        key = _key(_app(db))
        _member(db, key)
        db.commit()
    results = _claim_at_once(engine, key)
    taken = [name for name in ("a", "b") if results[name] is not None]
    assert taken == ["a"]


@pytest.mark.parametrize("members", [0, 2], ids=["two misses", "two hits"])
def test_claims_at_once_are_each_counted(engine: Engine, sized: None, members: int) -> None:
    """Each claim reads the key's counters before the other committed: both counts land (they
    were written back as read plus one, and CI's 20 runs against 5 members counted 3 hits).
    Without members, the two are the kind's first runs: both make its row, one row is kept."""
    with Session(engine) as db:
        key = _key(_app(db))
        for _ in range(members):
            _member(db, key)
        db.commit()  # with members, the helper's claim registered the key with one miss
    results = _claim_at_once(engine, key)
    assert [results[name] is not None for name in ("a", "b")] == [bool(members)] * 2
    with Session(engine) as db:
        row = db.exec(select(PoolKey)).one()
        assert (row.hits, row.misses) == ((2, 1) if members else (0, 2))


def test_sizes_come_from_settings_the_more_specific_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MOSOO_POOL_SIZE", "3")
    monkeypatch.setenv("MOSOO_POOL_SIZES", '{"claude": 1, "openai/limited": 0}')
    reset_settings_cache()
    assert pool.target_size("openai", "none") == 3
    assert pool.target_size("openai", "limited") == 0
    assert pool.target_size("claude", "full") == 1
    for bad in ('{"open ai": 1}', '{"openai/wide": 1}', '{"openai": 99}'):
        monkeypatch.setenv("MOSOO_POOL_SIZES", bad)
        with pytest.raises(ValueError, match="MOSOO_POOL_SIZES"):
            Settings()


def test_a_refill_never_goes_past_the_memory_cap(
    db: Session, sized: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOSOO_POOL_MAX_MEMORY_MB", "1500")  # one member at 1024 MB, not two
    monkeypatch.setenv("MOSOO_SANDBOX_HOST", "host-a")
    reset_settings_cache()
    key = _key(_app(db))
    _member(db, key)
    db.commit()
    # One member stands by already; the key lacks one but the cap leaves no room for it (no
    # sandbox backend is even asked).
    assert pool.refill_pool() == 0


def test_maintenance_retires_what_cannot_serve_and_keeps_the_rest(db: Session, sized: None) -> None:
    app_id = _app(db)
    key = _key(app_id)
    good = _member(db, key)
    row = db.exec(select(PoolKey)).one()
    now = utcnow()
    idle_before = now - timedelta(minutes=30)
    too_old = now - timedelta(minutes=60)

    def reason(member: PoolMember, **context: object) -> str:
        instance = db.get(DriverInstance, member.driver_instance_id)
        assert instance is not None
        values = {
            "image": "mosoo-sandbox:1",
            "now": now,
            "idle_before": idle_before,
            "too_old": too_old,
        } | context
        return pool._retirement_reason(member, instance, row, **values)  # type: ignore[arg-type]

    assert reason(good) == ""
    assert reason(good, image="mosoo-sandbox:2") == "image changed"
    assert reason(good, too_old=now + timedelta(seconds=1)) == "too old"
    assert reason(_member(db, key, driver_status="disconnected")) == "driver disconnected"
    assert reason(_member(db, key, heard_seconds_ago=10)) == "driver silent"
    late = now + pool.STARTING_GRACE + timedelta(seconds=1)
    assert reason(_member(db, key, standing_by=False)) == ""
    assert reason(_member(db, key, standing_by=False), now=late) == "never stood by"
    # Stood by and heard from lately, but its maker died before marking it done.
    heard_lately = -pool.STARTING_GRACE.total_seconds()
    unfinished = _member(db, key, status="starting", heard_seconds_ago=heard_lately)
    assert reason(unfinished, now=late) == "never stood by"
    row.last_wanted_at = idle_before - timedelta(seconds=1)
    assert reason(good) == "unwanted"
