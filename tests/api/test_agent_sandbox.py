"""`GET /api/v1/agents/{id}/sandbox` for a Task (Cattle) Agent: its warm pool on this host
(the keys its next run would use, members standing by against the target, hits, misses);
off when its kind's size is 0. Another owner's Agent, Task or Assistant, answers exactly as an
unknown id does, on the sandbox's every route. An Assistant's sandbox itself:
tests/integration/test_pet_operations.py."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import agents, environments
from mosoo_core.ids import new_id
from mosoo_core.runtime import pool
from mosoo_core.settings import get_settings, reset_settings_cache
from mosoo_core.tables.agents import Agent
from tests.api.conftest import ApiOwner

NOT_FOUND = {"error": {"code": "not_found", "message": "Agent not found."}}


def _miss(engine: Engine, agent_id: str) -> str:
    """A run of the Agent that found no member (what the worker counts); the key's id."""
    with Session(engine) as db:
        agent = db.get(Agent, agent_id)
        assert agent is not None
        revision = environments.revision_for_thread(db, agent.app_id, agent.environment_id)
        key = pool.KeySpec(
            host=get_settings().sandbox_host,
            app_id=agent.app_id,
            runtime=agent.runtime,
            image="mosoo-sandbox:test",
            revision_id=revision.id,
            network_policy=revision.network_policy,
            layer="",
            skill_versions=(),
        )
        assert pool.claim(db, key, new_id(), new_id()) is None
        db.commit()
        [figures] = pool.figures(db, app_id=agent.app_id)
        return figures.key_id


def test_a_task_agents_sandbox_is_its_warm_pool(
    client: TestClient, api_env: Engine, owner: ApiOwner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOSOO_POOL_SIZE", "2")
    reset_settings_cache()
    url = f"/api/v1/agents/{owner.agent_id}/sandbox"
    before = client.get(url, headers=owner.headers)
    assert before.status_code == 200, before.text
    body = before.json()
    assert {k: body[k] for k in ("kind", "enabled", "runtime", "network_policy", "target")} == {
        "kind": "cattle",
        "enabled": True,
        "runtime": "openai",
        "network_policy": "none",
        "target": 2,
    }
    assert body["keys"] == []  # no run yet

    key_id = _miss(api_env, owner.agent_id)
    [key] = client.get(url, headers=owner.headers).json()["keys"]
    assert key["key_id"] == key_id and key["revision_id"] == body["revision_id"]
    assert {k: key[k] for k in ("target", "standing_by", "starting", "hits", "misses")} == {
        "target": 2,
        "standing_by": 0,
        "starting": 0,
        "hits": 0,
        "misses": 1,
    }
    assert key["hit_rate"] == 0.0


def test_a_task_agents_pool_reads_off_when_its_size_is_zero(
    client: TestClient, owner: ApiOwner
) -> None:
    # The tests' default: MOSOO_POOL_SIZE=0.
    body = client.get(f"/api/v1/agents/{owner.agent_id}/sandbox", headers=owner.headers).json()
    assert (body["kind"], body["enabled"], body["target"], body["keys"]) == ("cattle", False, 0, [])


def test_another_owners_agent_answers_as_an_unknown_id_does(
    client: TestClient, api_env: Engine, owner: ApiOwner, other: ApiOwner
) -> None:
    _miss(api_env, owner.agent_id)  # the Task has a pool to hide
    with Session(api_env) as db:
        pet = agents.create_agent(db, owner.account_id, owner.app_id, name="Keeper", kind="pet")
        db.commit()
    for agent_id in (owner.agent_id, pet.id, new_id()):
        sandbox = f"/api/v1/agents/{agent_id}/sandbox"
        answers = [
            client.get(sandbox, headers=other.headers),
            client.post(f"{sandbox}/hibernate", headers=other.headers),
            client.post(f"{sandbox}/reset", headers=other.headers, json={"confirm_name": "Keeper"}),
        ]
        assert [(a.status_code, a.json()) for a in answers] == [(404, NOT_FOUND)] * 3, agent_id
    # The owner's own Assistant still answers with its sandbox.
    mine = client.get(f"/api/v1/agents/{pet.id}/sandbox", headers=owner.headers).json()
    assert (mine["kind"], mine["state"]) == ("pet", "none")


def test_every_agent_route_answers_another_owners_agent_as_an_unknown_id(
    client: TestClient, api_env: Engine, owner: ApiOwner, other: ApiOwner
) -> None:
    """Not only the sandbox's: reading, checking, changing and publishing an Agent by id say
    "Agent not found." alike (they said "App not found." for another owner's, which told a
    caller the id exists)."""
    for agent_id in (owner.agent_id, new_id()):
        base = f"/api/v1/agents/{agent_id}"
        answers = [
            client.get(base, headers=other.headers),
            client.get(f"{base}/readiness", headers=other.headers),
            client.patch(base, headers=other.headers, json={"name": "Taken"}),
            client.post(f"{base}/publish", headers=other.headers, json={}),
        ]
        assert [(a.status_code, a.json()) for a in answers] == [(404, NOT_FOUND)] * 4, agent_id
    with Session(api_env) as db:
        agent = db.get(Agent, owner.agent_id)
        assert agent is not None and agent.name != "Taken"
