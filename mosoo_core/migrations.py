"""Run the Alembic chain from code (`mosoo migrate`, `mosoo up`, tests)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlmodel import Session

from mosoo_core.settings import get_settings
from mosoo_core.usage import seed_prices

ROOT = Path(__file__).resolve().parent.parent


def alembic_config(url: str | None = None) -> Config:
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "alembic"))
    config.set_main_option("sqlalchemy.url", url or get_settings().resolved_database_url)
    return config


def upgrade(url: str | None = None, revision: str = "head") -> None:
    """Upgrade the schema; at head, also store the seed file's global model prices that are
    not stored yet (a new price in the file arrives with the next `mosoo migrate` / `up`)."""
    config = alembic_config(url)
    command.upgrade(config, revision)
    if revision == "head":
        _seed_prices(config.get_main_option("sqlalchemy.url") or "")


def _seed_prices(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        with Session(engine) as db:
            seed_prices(db)
            db.commit()
    finally:
        engine.dispose()
