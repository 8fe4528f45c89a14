"""Shared fixtures: a migrated database per backend, settings isolated per test."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session
from xdist.remote import Producer

from mosoo_core import db as db_module
from mosoo_core import migrations
from mosoo_core.settings import reset_settings_cache
from tests.support import scheduling, workers
from tests.support.redis_db import OFFSET as REDIS_DB_OFFSET
from tests.support.redis_db import PER_WORKER, redis_url

# `make test` sets MOSOO_TEST_DATABASES=sqlite,postgresql; a bare `pytest` uses SQLite only.
BACKENDS = [
    b.strip() for b in os.environ.get("MOSOO_TEST_DATABASES", "sqlite").split(",") if b.strip()
]
POSTGRES_URL = os.environ.get(
    "MOSOO_TEST_POSTGRES_URL", "postgresql+psycopg://mosoo:mosoo@127.0.0.1:5432/mosoo_test"
)


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Each test gets its own data dir and no SMTP / Google unless it asks."""
    for key in list(os.environ):
        if key.startswith("MOSOO_") and not key.startswith("MOSOO_TEST_"):
            monkeypatch.delenv(key, raising=False)
    data_dir = tmp_path / "data"
    if (
        REDIS_DB_OFFSET
    ):  # the default database too is this run's own (see tests/support/redis_db.py)
        monkeypatch.setenv("MOSOO_REDIS_URL", redis_url(0))
    monkeypatch.setenv("MOSOO_DATA_DIR", str(data_dir))
    monkeypatch.setenv("MOSOO_SECRET_KEY", "test-secret-key")
    monkeypatch.setenv("MOSOO_LOG_JSON", "false")
    # The scripted model servers listen on loopback (a test of the refusal turns this off).
    monkeypatch.setenv("MOSOO_PROVIDER_ALLOW_PRIVATE_NETWORKS", "true")
    # No warm pool unless a test asks: members would be sandboxes a test did not make.
    monkeypatch.setenv("MOSOO_POOL_SIZE", "0")
    monkeypatch.chdir(tmp_path)
    reset_settings_cache()
    yield data_dir
    reset_settings_cache()


def _reset_postgres(url: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        connection.execute(sa.text("DROP SCHEMA IF EXISTS public CASCADE"))
        connection.execute(sa.text("CREATE SCHEMA public"))
    engine.dispose()


# Each backend's database is created and migrated once per process (per xdist worker): pytest
# sets `database_url` up again whenever the tests switch backend, and every test that uses
# the database empties it first (`engine`).
_MIGRATED: dict[str, str] = {}


def _migrated_database(backend: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'mosoo.db'}"
    elif backend == "postgresql":
        url = workers.postgres_database(POSTGRES_URL)
        _reset_postgres(url)
    else:
        raise ValueError(f"unknown test database backend {backend!r}")
    migrations.upgrade(url)
    return url


@pytest.fixture(scope="session", params=BACKENDS)
def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A freshly migrated database for the whole run, once per backend."""
    backend = str(request.param)
    if backend not in _MIGRATED:
        _MIGRATED[backend] = _migrated_database(backend, tmp_path_factory)
    yield _MIGRATED[backend]
    db_module.dispose_engines()


# Rows a test removes from a table that is not emptied whole: the global model prices the
# migration seeds (mosoo_core.migrations) stay, as in every installation (the real-stack
# journeys price their calls from them); an App's own prices go.
_REMOVED_ONLY = {"model_price": "app_id IS NOT NULL"}


def _truncate_all(engine: Engine) -> None:
    """Empty every table, children first, back to the database as migrated. One query finds
    the tables that have rows (a test fills a few of the ~40): a DELETE for each table took
    10-20 ms a test, this 1-2."""
    from mosoo_core.tables import metadata

    tables = list(reversed(metadata.sorted_tables))
    quote = engine.dialect.identifier_preparer.quote

    def where(table: sa.Table) -> str:
        removed = _REMOVED_ONLY.get(table.name)
        return f" WHERE {removed}" if removed else ""

    filled = sa.text(
        " UNION ALL ".join(
            f"SELECT {index} FROM (SELECT 1 FROM {quote(table.name)}{where(table)} LIMIT 1)"
            f" AS t{index}"
            for index, table in enumerate(tables)
        )
    )
    with engine.begin() as connection:
        for index in sorted(row[0] for row in connection.execute(filled)):
            table = tables[index]
            connection.execute(sa.text(f"DELETE FROM {quote(table.name)}{where(table)}"))


@pytest.fixture
def engine(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    """The migrated engine, emptied before each test, and the default for `get_engine()`."""
    monkeypatch.setenv("MOSOO_DATABASE_URL", database_url)
    reset_settings_cache()
    engine = db_module.get_engine(database_url)
    _truncate_all(engine)
    yield engine


@pytest.fixture
def db(engine: Engine) -> Iterator[Session]:
    with Session(engine, expire_on_commit=False) as session:
        yield session
        session.rollback()


# Folders whose every test needs the real stack (processes, Docker, Chromium); a test elsewhere
# that does carries the marker itself (e.g. tests/api/test_end_to_end.py).
_FOLDER_MARKERS = {"integration": "integration", "security": "integration", "browser": "browser"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by its folder, and run the real-stack journeys once: on PostgreSQL
    when both databases are configured (the database behaviour itself is covered on both by
    the service, API and control tests). A journey marked `every_database` runs on both:
    the multi-process path on SQLite's file locking must stay tested too."""
    tests_root = Path(__file__).parent
    for item in items:
        parts = Path(str(item.fspath)).relative_to(tests_root).parts
        marker = _FOLDER_MARKERS.get(parts[0]) if len(parts) > 1 else None
        if marker:
            item.add_marker(getattr(pytest.mark, marker))
    if len(BACKENDS) < 2:
        return
    once, kept = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        real_stack = item.get_closest_marker("integration") or item.get_closest_marker("browser")
        on_sqlite = callspec is not None and callspec.params.get("database_url") == "sqlite"
        if real_stack and on_sqlite and not item.get_closest_marker("every_database"):
            once.append(item)
        else:
            kept.append(item)
    if once:
        config.hook.pytest_deselected(items=once)
        items[:] = kept


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(
    config: pytest.Config, log: Producer
) -> scheduling.SuiteScheduling | None:
    """`--dist loadscope` hands out the units of tests/support/scheduling.py."""
    return (
        scheduling.SuiteScheduling(config, log) if config.getvalue("dist") == "loadscope" else None
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    """A worker whose Redis databases do not exist stops at once, saying why."""
    if not workers.NAME:
        return
    needed = REDIS_DB_OFFSET + PER_WORKER
    with contextlib.suppress(redis.RedisError):  # no Redis: the tests that need it say so
        databases = int(redis.Redis().config_get("databases")["databases"])
        if databases < needed:
            raise pytest.UsageError(
                f"worker {workers.NAME} needs Redis databases up to {needed - 1}, and Redis has "
                f"{databases}: run fewer workers (-n), or start Redis with --databases 64 "
                f"(scripts/setup.sh does)"
            )


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist sends this worker's collection
def pytest_collection_finish(session: pytest.Session) -> None:
    if workers.NAME:
        scheduling.order_units(session.items)
