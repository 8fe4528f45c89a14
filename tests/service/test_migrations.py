"""The one Alembic chain makes exactly the tables the models describe (on both databases),
and the environments migration gives every existing App its default environment."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Engine

from mosoo_core import migrations
from mosoo_core.tables import metadata


def test_the_migrated_schema_is_the_models_schema(engine: Engine) -> None:
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, metadata) == []


def test_existing_apps_get_a_default_environment(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrations.upgrade(url, "0006")
    engine = sa.create_engine(url)
    now = "2026-11-01 10:00:00.000000"
    with engine.begin() as db:
        db.execute(
            sa.text(
                "INSERT INTO account (id, email, name, created_at, updated_at) "
                "VALUES ('acc1', 'old@example.com', 'Old', :now, :now)"
            ),
            {"now": now},
        )
        db.execute(
            sa.text(
                "INSERT INTO organization (id, owner_account_id, name, created_at, updated_at) "
                "VALUES ('org1', 'acc1', 'Old Org', :now, :now)"
            ),
            {"now": now},
        )
        for app_id in ("app1", "app2"):
            db.execute(
                sa.text(
                    "INSERT INTO app (id, organization_id, name, created_at, updated_at) "
                    "VALUES (:id, 'org1', :id, :now, :now)"
                ),
                {"id": app_id, "now": now},
            )
    migrations.upgrade(url)
    with engine.connect() as db:
        rows = db.execute(
            sa.text(
                "SELECT e.app_id, e.name, e.is_default, e.current_revision, r.number, "
                "r.network_policy FROM environment e JOIN environment_revision r "
                "ON r.environment_id = e.id ORDER BY e.app_id"
            )
        ).all()
    engine.dispose()
    assert [tuple(row) for row in rows] == [
        ("app1", "Default", True, 1, 1, "none"),
        ("app2", "Default", True, 1, 1, "none"),
    ]
