"""A Task (Cattle) Agent's warm pool as its owner sees it (Preview's Warm pool panel, the API's
`GET /agents/{id}/sandbox`): the pool keys of this host its next run would take a member
from, with their members and hits and misses (`pool.figures`).

Its next run takes the Agent's current profile (its runtime) and the current revision of its
environment (with that revision's network policy): the App's keys made with both are the ones
that serve it. A key of an older revision still serves the threads that froze it, until
nothing wants it; it is not this Agent's pool any more.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import Session

from mosoo_core import environments
from mosoo_core.ownership import account_agent
from mosoo_core.runtime import pool
from mosoo_core.settings import get_settings


@dataclass(frozen=True)
class AgentPool:
    """What a Task Agent's next run would find. `target` is how many members a key of its
    kind keeps (0: the pool is off for it, every run starts cold); `keys` is empty until its
    first run on this host (a run's miss starts the pool)."""

    agent_id: str
    runtime: str
    network_policy: str
    revision_id: str
    target: int
    keys: list[pool.PoolFigures]

    @property
    def enabled(self) -> bool:
        return self.target > 0


def agent_pool(db: Session, account_id: str, agent_id: str) -> AgentPool | None:
    """The warm pool the Agent's next run would use, on this host. None for an Assistant
    (Pet): its sandbox is its own (`pet_operations.sandbox_status`). NotFound for another
    owner's Agent."""
    agent = account_agent(db, account_id, agent_id)
    if agent.kind == "pet":
        return None
    revision = environments.revision_for_thread(db, agent.app_id, agent.environment_id)
    keys = [
        key
        for key in pool.figures(db, app_id=agent.app_id, host=get_settings().sandbox_host)
        if key.runtime == agent.runtime and key.revision_id == revision.id
    ]
    return AgentPool(
        agent_id=agent.id,
        runtime=agent.runtime,
        network_policy=revision.network_policy,
        revision_id=revision.id,
        target=pool.target_size(agent.runtime, revision.network_policy),
        keys=keys,
    )
