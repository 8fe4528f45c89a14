"""Migration 0011 (usage records count cache writes) upgrades and downgrades with the
records already there."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command

from mosoo_core import migrations

INSERT = (
    "INSERT INTO usage_event (id, app_id, purpose, provider, model, input_tokens, "
    "cached_input_tokens, output_tokens, reasoning_tokens, cost_usd_micros, cost_known, "
    "created_at) VALUES ('u1', 'app1', 'preview', 'openai', 'm', 10, 4, 2, 0, 0, 0, "
    "'2026-12-01 10:00:00.000000')"
)


def _columns(engine: sa.Engine) -> set[str]:
    return {column["name"] for column in sa.inspect(engine).get_columns("usage_event")}


def test_usage_records_get_a_zero_cache_creation_count_and_keep_it_off_on_downgrade(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'usage.db'}"
    migrations.upgrade(url, "0010")
    engine = sa.create_engine(url)
    with engine.begin() as db:
        db.execute(sa.text(INSERT))
    migrations.upgrade(url, "0011")
    with engine.connect() as db:
        row = db.execute(
            sa.text("SELECT input_tokens, cache_creation_input_tokens FROM usage_event")
        ).one()
    assert tuple(row) == (10, 0)
    command.downgrade(migrations.alembic_config(url), "0010")
    assert "cache_creation_input_tokens" not in _columns(engine)
    with engine.connect() as db:
        assert db.execute(sa.text("SELECT id, input_tokens FROM usage_event")).all() == [("u1", 10)]
    engine.dispose()
