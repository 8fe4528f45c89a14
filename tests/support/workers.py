"""Which pytest-xdist worker this process is, and what is its own.

`scripts/test.sh` and `scripts/check.sh` run the suite in parallel workers (gw0, gw1, ...).
Each worker takes its own Redis databases (`redis_db`), its own PostgreSQL database
(`postgres_database`) and, through them, its own sandbox label (the installation label is
the database URL's digest), so workers never see each other's state. Data dirs and ports
were already a test's own (tmp_path, free_port).
"""

from __future__ import annotations

import os

import sqlalchemy as sa

# xdist sets it in each worker before pytest reads any conftest; absent without xdist.
NAME = os.environ.get("PYTEST_XDIST_WORKER", "")
INDEX = int(NAME.removeprefix("gw")) if NAME.startswith("gw") else 0


def postgres_database(url: str) -> str:
    """`url` itself without xdist; in a worker, the database `<name>_<worker>` on the same
    server, created (empty) the first time. The role needs CREATEDB (scripts/setup.sh)."""
    if not NAME:
        return url
    base = sa.make_url(url)
    name = f"{base.database}_{NAME}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            exists = connection.execute(
                sa.text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": name}
            ).scalar()
            if not exists:
                if not connection.execute(
                    sa.text(
                        "SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user"
                    )
                ).scalar():
                    raise RuntimeError(
                        f"parallel tests need their own PostgreSQL database {name!r}, and role "
                        f"{base.username!r} may not create databases: run scripts/setup.sh test "
                        f"(it grants CREATEDB) or run pytest without -n"
                    )
                # template0: nobody is ever connected to it, so two workers can copy it at once.
                connection.execute(sa.text(f'CREATE DATABASE "{name}" TEMPLATE template0'))
    finally:
        admin.dispose()
    return base.set(database=name).render_as_string(hide_password=False)
