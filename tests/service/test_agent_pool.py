"""A Task Agent's warm pool as its owner sees it (`agent_pool.agent_pool`), and the lines
`mosoo doctor` prints for this host's pool: the keys its next run would use (its runtime, its
environment's current revision) with their members standing by, hits and misses; "off" when
its kind's size is 0; nothing before its first run; another owner's Agent not found. The
pool itself, on real Docker: tests/integration/test_warm_pool.py."""

from __future__ import annotations

import re

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import agents, environments
from mosoo_core.doctor import POOL_COLUMNS, warm_pool_lines
from mosoo_core.errors import NotFound
from mosoo_core.identity import list_apps, sign_in_identity
from mosoo_core.ids import new_id
from mosoo_core.runtime import agent_pool, pet_operations, pool
from mosoo_core.settings import get_settings, reset_settings_cache
from mosoo_core.tables.agents import Agent
from tests.service.test_pool import _member


@pytest.fixture(autouse=True)
def pool_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOSOO_POOL_SIZE", "2")
    monkeypatch.setenv("MOSOO_POOL_SIZES", '{"claude": 0}')
    reset_settings_cache()


def _owner(
    engine: Engine, email: str, kind: str = "cattle", runtime: str = "openai"
) -> tuple[str, Agent]:
    """(account id, Agent named "Worker") of a new account."""
    with Session(engine) as db:
        account = sign_in_identity(db, provider="email", subject=email, email=email)
        app_id = list_apps(db, account.id)[0].id
        view = agents.create_agent(db, account.id, app_id, name="Worker", kind=kind)
        agent = db.get(Agent, view.id)
        assert agent is not None
        agent.runtime = runtime
        db.add(agent)
        db.commit()
        db.refresh(agent)
        db.expunge(agent)
        return account.id, agent


def _key(db: Session, agent: Agent, *, runtime: str | None = None) -> pool.KeySpec:
    """The key a run of `agent` wants now (its environment's current revision)."""
    revision = environments.revision_for_thread(db, agent.app_id, agent.environment_id)
    return pool.KeySpec(
        host=get_settings().sandbox_host,
        app_id=agent.app_id,
        runtime=runtime or agent.runtime,
        image="mosoo-sandbox:test",
        revision_id=revision.id,
        network_policy=revision.network_policy,
        layer="",
        skill_versions=(),
    )


def test_before_its_first_run_a_task_agents_pool_is_on_with_no_key(engine: Engine) -> None:
    account_id, agent = _owner(engine, "first@example.com")
    with Session(engine) as db:
        shown = agent_pool.agent_pool(db, account_id, agent.id)
    assert shown is not None
    assert (shown.enabled, shown.target, shown.runtime, shown.keys) == (True, 2, "openai", [])
    assert shown.network_policy == "none"


def test_a_task_agents_pool_counts_its_misses_hits_and_members_standing_by(
    engine: Engine,
) -> None:
    account_id, agent = _owner(engine, "counts@example.com")
    with Session(engine) as db:
        key = _key(db, agent)
        assert pool.claim(db, key, new_id(), new_id()) is None  # the first run: a miss
        _member(db, key)
        _member(db, key)
        assert pool.claim(db, key, new_id(), new_id()) is not None  # the second: a hit
        _member(db, key, heard_seconds_ago=3600)  # its driver fell silent: not claimable
        db.commit()
    with Session(engine) as db:
        shown = agent_pool.agent_pool(db, account_id, agent.id)
    assert shown is not None
    [figures] = shown.keys
    assert (figures.target, figures.standing_by, figures.starting) == (2, 1, 1)
    assert (figures.hits, figures.misses, figures.hit_rate) == (1, 1, 0.5)
    assert (figures.runtime, figures.revision_id) == ("openai", key.revision_id)


def test_only_the_keys_its_next_run_would_use_are_the_agents(engine: Engine) -> None:
    account_id, agent = _owner(engine, "keys@example.com")
    with Session(engine) as db:
        old = _key(db, agent)
        pool.claim(db, old, new_id(), new_id())
        pool.claim(db, _key(db, agent, runtime="acp"), new_id(), new_id())  # another runtime's
        # A new revision of its environment: its next run wants a key of that one.
        environment = environments.default_environment(db, agent.app_id)
        environments.update_environment(
            db,
            account_id,
            agent.app_id,
            environment.id,
            environments.EnvironmentChanges(network_policy="full"),
        )
        new = _key(db, agent)
        assert new.revision_id != old.revision_id
        db.commit()
    with Session(engine) as db:
        assert agent_pool.agent_pool(db, account_id, agent.id) == agent_pool.AgentPool(
            agent_id=agent.id,
            runtime="openai",
            network_policy="full",
            revision_id=new.revision_id,
            target=2,
            keys=[],
        )
        pool.claim(db, new, new_id(), new_id())
        db.commit()
    with Session(engine) as db:
        shown = agent_pool.agent_pool(db, account_id, agent.id)
    assert shown is not None
    assert [(k.revision_id, k.network_policy, k.misses) for k in shown.keys] == [
        (new.revision_id, "full", 1)
    ]


def test_the_pool_is_off_for_a_runtime_whose_size_is_zero(engine: Engine) -> None:
    account_id, agent = _owner(engine, "off@example.com", runtime="claude")
    with Session(engine) as db:
        shown = agent_pool.agent_pool(db, account_id, agent.id)
    assert shown is not None
    assert (shown.enabled, shown.target) == (False, 0)


def test_an_assistant_has_no_pool(engine: Engine) -> None:
    account_id, agent = _owner(engine, "pet@example.com", kind="pet")
    with Session(engine) as db:
        assert agent_pool.agent_pool(db, account_id, agent.id) is None


def test_another_owners_agent_reads_as_an_unknown_one(engine: Engine) -> None:
    _, task = _owner(engine, "mine@example.com")
    _, pet = _owner(engine, "mine-too@example.com", kind="pet")
    intruder, _ = _owner(engine, "theirs@example.com")
    with Session(engine) as db:
        for agent_id in (task.id, pet.id, new_id(), ""):
            with pytest.raises(NotFound) as refused:
                agent_pool.agent_pool(db, intruder, agent_id)
            assert refused.value.message == "Agent not found."
            with pytest.raises(NotFound) as refused:
                pet_operations.sandbox_status(db, intruder, agent_id)
            assert refused.value.message == "Agent not found."


def test_doctor_says_when_no_task_run_kept_a_key_warm(engine: Engine) -> None:
    with Session(engine) as db:
        lines = warm_pool_lines(db)
    host = get_settings().sandbox_host
    assert lines[0] == f"Warm pool on host {host}: on"
    assert (
        lines[1] == '  size 2 per key (MOSOO_POOL_SIZE); by kind {"claude": 0} (MOSOO_POOL_SIZES)'
    )
    assert lines[2].startswith("  memory: members hold 0 MiB of the 4096 MiB cap")
    assert lines[-1] == "  no Task run yet on this host: no key is kept warm"


def test_doctor_lists_each_key_of_this_host_with_its_members_hits_and_misses(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, agent = _owner(engine, "doctor@example.com")
    with Session(engine) as db:
        key = _key(db, agent)
        for _ in range(3):
            pool.claim(db, key, new_id(), new_id())
        _member(db, key)
        pool.claim(db, key, new_id(), new_id())
        _member(db, key)
        # Another host's key is that host's doctor's.
        pool.claim(db, pool.KeySpec(**{**key.__dict__, "host": "elsewhere"}), new_id(), new_id())
        db.commit()
    monkeypatch.setenv("MOSOO_POOL_SIZE", "0")
    monkeypatch.setenv("MOSOO_POOL_SIZES", '{"openai/none": 3}')
    reset_settings_cache()
    with Session(engine) as db:
        lines = warm_pool_lines(db)
    memory_mb = get_settings().sandbox_memory_mb
    assert lines[0].endswith(": on")  # on for one kind
    assert f"members hold {memory_mb} MiB" in lines[2]
    # Columns are two spaces apart at least.
    assert [re.split(r"\s{2,}", line.strip()) for line in lines[3:]] == [
        list(POOL_COLUMNS),
        ["Default App", "openai", "none", "Default #1", "1/3", "0", "1", "3", "25%"],
    ]


def test_doctor_says_off_when_every_size_is_zero(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOSOO_POOL_SIZE", "0")
    monkeypatch.delenv("MOSOO_POOL_SIZES")
    reset_settings_cache()
    with Session(engine) as db:
        lines = warm_pool_lines(db)
    assert lines[0].endswith(": off")
    assert lines[1] == "  size 0 per key (MOSOO_POOL_SIZE)"
