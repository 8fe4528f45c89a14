"""The warm pool of Task sandboxes, end to end: real control and worker processes, Docker
sandboxes whose drivers stand by, and runs that take them (mosoo_core/runtime/pool.py)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import docker
import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from mosoo_core import environments
from mosoo_core.clock import utcnow
from mosoo_core.ids import new_id
from mosoo_core.runtime import pool
from mosoo_core.runtime.labels import installation_label
from mosoo_core.runtime.runs import sweep_sandboxes
from mosoo_core.runtime.sandbox import (
    LABEL_DRIVER_INSTANCE,
    LABEL_SUBJECT,
    SandboxSpec,
    get_backend,
)
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.environments import EnvironmentRevision
from mosoo_core.tables.pool import PoolKey, PoolMember
from mosoo_core.tables.sessions import DriverInstance, RunMark, SessionRun
from tests.support.openai_server import TextTurn
from tests.support.processes import stop_group, wait_for
from tests.support.redis_db import db_number
from tests.support.stack import (
    Owner,
    RuntimeStack,
    make_agent,
    new_thread,
    runtime_stack,
    send,
    wait_run,
)

pytestmark = pytest.mark.integration
REDIS_DB = db_number(5)
PROVIDER_KEY = "sk-pool-0123456789"
POOL_SIZE = 5


@pytest.fixture
def stack(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RuntimeStack]:
    pool_env = {"MOSOO_POOL_SIZE": str(POOL_SIZE), "MOSOO_POOL_MAX_MEMORY_MB": "65536"}
    with runtime_stack(
        engine, database_url, tmp_path, monkeypatch, redis_db=REDIS_DB, extra_env=pool_env
    ) as stack:
        yield stack


def _standing_by(engine: Engine) -> list[PoolMember]:
    with Session(engine) as db:
        return list(
            db.exec(
                select(PoolMember)
                .join(DriverInstance, col(DriverInstance.id) == col(PoolMember.driver_instance_id))
                .where(
                    PoolMember.status == "waiting",
                    DriverInstance.status == "connected",
                    col(DriverInstance.standby_at).is_not(None),
                )
            ).all()
        )


def _wait_standing_by(engine: Engine, count: int, timeout: float = 120) -> list[PoolMember]:
    wait_for(lambda: len(_standing_by(engine)) >= count, timeout, f"{count} members standing by")
    return _standing_by(engine)


def _pool_containers() -> list[object]:
    labels = [f"{k}={v}" for k, v in installation_label().items()]
    return [
        c
        for c in docker.from_env().containers.list(all=True, filters={"label": labels})
        if c.labels.get(LABEL_SUBJECT, "").startswith(pool.SUBJECT_PREFIX)
    ]


def _sandbox_mark(engine: Engine, run_id: str) -> dict[str, object]:
    with Session(engine) as db:
        mark = db.exec(
            select(RunMark).where(RunMark.run_id == run_id, RunMark.name == "sandbox")
        ).one()
        return dict(mark.detail)


def _member_whose_maker_died(engine: Engine, key: PoolKey) -> str:
    """What a worker killed while making a member leaves: its row, still `starting`, and a
    sandbox labelled as the pool's whose driver never came up."""
    member_id = new_id()
    with Session(engine) as db:
        driver = driver_plane.register_driver(
            db, app_id=key.app_id, subject=f"{pool.SUBJECT_PREFIX}{member_id}", runtime="openai"
        )
        db.add(
            PoolMember(
                id=member_id,
                key_id=key.id,
                host=key.host,
                driver_instance_id=driver.instance_id,
                image=key.image,
                status="starting",
            )
        )
        db.commit()
    get_backend().create(
        SandboxSpec(
            subject=f"{pool.SUBJECT_PREFIX}{member_id}",
            app_id=key.app_id,
            driver_instance_id=driver.instance_id,
            labels=installation_label(),
        )
    )
    return member_id


def _answered(stack: RuntimeStack, owner: Owner, text: str = "pooled") -> str:
    """One message in a new thread, answered; its run id."""
    stack.model.add(TextTurn(text))
    thread_id = new_thread(stack.engine, owner)
    run_id = send(stack.engine, owner.account_id, thread_id, "hello")
    run = wait_run(stack.engine, run_id)
    assert run.status == "completed", (run.error_code, run.error_message)
    return run_id


def test_twenty_runs_at_once_against_a_pool_of_five_never_share_a_sandbox_and_all_complete(
    stack: RuntimeStack,
) -> None:
    owner = make_agent(stack.engine, stack.model.base_url, PROVIDER_KEY)
    first = _answered(stack, owner)  # the key's first run misses, and its pool starts
    assert _sandbox_mark(stack.engine, first)["pool"] == "miss"
    members = _wait_standing_by(stack.engine, POOL_SIZE)
    pooled_instances = {member.driver_instance_id for member in members}

    threads = [new_thread(stack.engine, owner) for _ in range(20)]
    for _ in threads:
        stack.model.add(TextTurn("together"))
    with ThreadPoolExecutor(max_workers=20) as sending:
        run_ids = list(
            sending.map(lambda t: send(stack.engine, owner.account_id, t, "at once"), threads)
        )
    runs = [wait_run(stack.engine, run_id, timeout=300) for run_id in run_ids]
    assert [run.status for run in runs] == ["completed"] * 20, [
        (run.error_code, run.error_message) for run in runs
    ]
    instances = [run.driver_instance_id for run in runs]
    assert len(set(instances)) == 20  # no two runs on one driver, so none on one sandbox
    hits = [run_id for run_id in run_ids if _sandbox_mark(stack.engine, run_id)["pool"] == "hit"]
    assert len(hits) >= POOL_SIZE  # every member standing by was taken, once
    assert pooled_instances <= set(instances)
    sandboxes = [_sandbox_mark(stack.engine, run_id)["sandbox"] for run_id in run_ids]
    assert len(set(sandboxes)) == 20

    # A claimed member never stands by again: its sandbox went with its run, its row too.
    wait_for(
        lambda: not (pooled_instances & {m.driver_instance_id for m in _standing_by(stack.engine)}),
        30,
        "claimed members gone from the pool",
    )
    with Session(stack.engine) as db:
        claimed = db.exec(
            select(PoolMember).where(col(PoolMember.driver_instance_id).in_(instances))
        ).all()
        assert all(member.status == "claimed" for member in claimed)
        key = db.exec(select(PoolKey)).one()
        assert key.hits == len(hits) and key.misses == 21 - len(hits)
    for instance_id in pooled_instances:
        wait_for(
            lambda i=instance_id: (
                not docker.from_env().containers.list(
                    all=True, filters={"label": f"{LABEL_DRIVER_INSTANCE}={i}"}
                )
            ),
            60,
            "a claimed member's sandbox removed after its run",
        )
    # The pool fills again for the next runs.
    _wait_standing_by(stack.engine, POOL_SIZE)


def test_a_changed_environment_revision_never_gets_a_member_of_the_old_one(
    stack: RuntimeStack,
) -> None:
    owner = make_agent(
        stack.engine,
        stack.model.base_url,
        PROVIDER_KEY,
        environment=environments.EnvironmentChanges(variables=[]),
    )
    _answered(stack, owner)
    old_members = {m.driver_instance_id for m in _wait_standing_by(stack.engine, POOL_SIZE)}
    with Session(stack.engine) as db:
        environment_id = db.exec(select(PoolKey.revision_id)).one()
        revision = db.get(EnvironmentRevision, environment_id)
        assert revision is not None
        environments.update_environment(
            db,
            owner.account_id,
            owner.app_id,
            revision.environment_id,
            environments.EnvironmentChanges(
                variables=[environments.VariableInput("NEW_REVISION", "yes")]
            ),
        )
        db.commit()
    run_id = _answered(stack, owner, "on the new revision")
    with Session(stack.engine) as db:
        run = db.get(SessionRun, run_id)
        assert run is not None and run.driver_instance_id not in old_members
        assert run.snapshot["environment"]["revision_id"] != environment_id
    assert _sandbox_mark(stack.engine, run_id)["pool"] == "miss"
    assert {m.driver_instance_id for m in _standing_by(stack.engine)} >= old_members


def test_a_member_whose_driver_dies_is_replaced(stack: RuntimeStack) -> None:
    owner = make_agent(stack.engine, stack.model.base_url, PROVIDER_KEY)
    _answered(stack, owner)
    members = _wait_standing_by(stack.engine, POOL_SIZE)
    victim = members[0]
    container = docker.from_env().containers.get(victim.sandbox_name)
    # The driver is the process whose command line names driver.main (the image has no
    # pkill); end it as a crash would.
    script = (
        'for p in /proc/[0-9]*; do pid="${p#/proc/}"; [ "$pid" = "$$" ] && continue; '
        'tr "\\0" " " < "$p/cmdline" 2>/dev/null | grep -q "[d]river[.]main" '
        '&& kill -9 "$pid"; done; true'
    )
    killed = container.exec_run(["sh", "-c", script], user="10001")
    assert killed.exit_code == 0, killed.output
    wait_for(
        lambda: victim.id not in {m.id for m in _standing_by(stack.engine)},
        30,
        "the dead member to stop standing by",
    )
    pool.maintain(get_backend())
    assert not docker.from_env().containers.list(
        all=True, filters={"name": f"^/{victim.sandbox_name}$"}
    )
    members_now = _wait_standing_by(stack.engine, POOL_SIZE)
    assert victim.id not in {m.id for m in members_now}


def test_killing_control_or_the_worker_while_members_stand_by_leaks_nothing(
    stack: RuntimeStack,
) -> None:
    owner = make_agent(stack.engine, stack.model.base_url, PROVIDER_KEY)
    _answered(stack, owner)
    members = _wait_standing_by(stack.engine, POOL_SIZE)

    # The worker dies in the middle of making members: what it left is swept.
    os.killpg(stack.started["worker"].pid, signal.SIGKILL)
    stop_group(stack.started["worker"])
    with Session(stack.engine) as db:
        key = db.exec(select(PoolKey)).one()
    starting_id = _member_whose_maker_died(stack.engine, key)
    later = utcnow() + pool.STARTING_GRACE + timedelta(seconds=1)

    # Control dies: the members' drivers fall silent, and the sweep retires every one.
    os.killpg(stack.started["control"].pid, signal.SIGKILL)
    stop_group(stack.started["control"])
    time.sleep(3.5)  # three missed heartbeats at the test's 1 s interval
    retired = pool.maintain(get_backend(), now=later, refill=False)
    assert retired == POOL_SIZE + 1
    sweep_sandboxes(get_backend())
    for member in members:
        assert not docker.from_env().containers.list(
            all=True, filters={"name": f"^/{member.sandbox_name}$"}
        )
    assert _pool_containers() == []
    with Session(stack.engine) as db:
        assert db.get(PoolMember, starting_id) is None
        assert db.exec(select(PoolMember)).all() == []

    # With control and a worker back, the pool is made again.
    stack.start_together(("control", "control"), ("worker", "worker", "--concurrency", "2"))
    _answered(stack, owner, "after the restart")
    _wait_standing_by(stack.engine, POOL_SIZE)
