"""Migration 0012 (model prices, priced usage records) upgrades and downgrades with the
records already there, and `mosoo migrate` seeds the global prices."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command

from mosoo_core import migrations

INSERT = (
    "INSERT INTO usage_event (id, app_id, purpose, provider, model, input_tokens, "
    "cached_input_tokens, cache_creation_input_tokens, output_tokens, reasoning_tokens, "
    "cost_usd_micros, cost_known, created_at) VALUES "
    "(:id, 'app1', 'preview', 'openai', 'm', 10, 4, 0, 2, 0, :cost, :known, "
    "'2026-12-01 10:00:00.000000')"
)


def _columns(engine: sa.Engine, table: str) -> set[str]:
    return {column["name"] for column in sa.inspect(engine).get_columns(table)}


def test_old_records_become_unpriced_unless_known_and_come_back_on_downgrade(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'pricing.db'}"
    migrations.upgrade(url, "0011")
    engine = sa.create_engine(url)
    with engine.begin() as db:
        db.execute(sa.text(INSERT), {"id": "u1", "cost": 0, "known": False})
        db.execute(sa.text(INSERT), {"id": "u2", "cost": 7, "known": True})
    migrations.upgrade(url, "0012")
    assert "cost_known" not in _columns(engine, "usage_event")
    with engine.connect() as db:
        rows = db.execute(
            sa.text("SELECT id, cost_usd_micros, unpriced FROM usage_event ORDER BY id")
        ).all()
        assert [tuple(row) for row in rows] == [("u1", 0, True), ("u2", 7, False)]
        assert db.execute(sa.text("SELECT count(*) FROM model_price")).scalar() == 0
    command.downgrade(migrations.alembic_config(url), "0011")
    assert "model_price" not in sa.inspect(engine).get_table_names()
    assert "unpriced" not in _columns(engine, "usage_event")
    with engine.connect() as db:
        rows = db.execute(sa.text("SELECT id, cost_known FROM usage_event ORDER BY id")).all()
    assert [tuple(row) for row in rows] == [("u1", False), ("u2", True)]
    engine.dispose()


def test_migrating_to_head_seeds_the_global_prices_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'seeded.db'}"
    migrations.upgrade(url)
    engine = sa.create_engine(url)
    count = "SELECT count(*) FROM model_price WHERE app_id IS NULL"
    with engine.connect() as db:
        seeded = db.execute(sa.text(count)).scalar()
    migrations.upgrade(url)
    with engine.connect() as db:
        assert db.execute(sa.text(count)).scalar() == seeded
    engine.dispose()
    assert seeded and seeded > 40
