"""How the Warm pool panel writes a Task Agent's pool: off, empty before its first run, or a
row per key with its members against the target, hits, misses and the hit rate."""

from __future__ import annotations

from datetime import timedelta

from mosoo_core.clock import utcnow
from mosoo_core.runtime.agent_pool import AgentPool
from mosoo_core.runtime.pool import PoolFigures
from mosoo_web.pages.preview.pool_panel import PoolKeyRow, pool_shown


def _pool(target: int, *keys: PoolFigures) -> AgentPool:
    return AgentPool("agent", "openai", "full", "rev", target, list(keys))


def _key(standing_by: int, starting: int, hits: int, misses: int) -> PoolFigures:
    return PoolFigures(
        key_id="key",
        host="host",
        app_id="app",
        runtime="openai",
        network_policy="full",
        revision_id="rev",
        target=2,
        standing_by=standing_by,
        starting=starting,
        hits=hits,
        misses=misses,
        last_wanted_at=utcnow() - timedelta(minutes=3),
    )


def test_a_pool_of_size_zero_is_off_with_what_its_sandboxes_are() -> None:
    shown = pool_shown(_pool(0, _key(0, 0, 0, 4)))
    assert (shown.status, shown.kind) == ("off", "openai, network full")


def test_before_the_first_run_the_pool_is_empty() -> None:
    assert pool_shown(_pool(2)).status == "empty"


def test_each_key_shows_its_members_against_the_target_and_its_hit_rate() -> None:
    shown = pool_shown(_pool(2, _key(1, 1, 3, 1), _key(0, 0, 0, 0)))
    assert shown.status == "on"
    assert shown.rows == [
        PoolKeyRow("1 of 2", "1", "3", "1", "75%", "3 min ago"),
        PoolKeyRow("0 of 2", "0", "0", "0", "", "3 min ago"),
    ]
