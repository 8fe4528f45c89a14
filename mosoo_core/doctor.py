"""`mosoo doctor`: each thing Mosoo needs, whether it is there, and how to fix it; then the
warm pool of this host (its settings, and each key's members, hits and misses)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlmodel import Session

from mosoo_core.db import check_database, session_scope
from mosoo_core.runtime import pool
from mosoo_core.settings import get_settings
from mosoo_core.tables.environments import Environment, EnvironmentRevision
from mosoo_core.tables.identity import App


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str


def _database() -> Check:
    try:
        check_database()
        return Check("database", True, get_settings().resolved_database_url.split("@")[-1], "")
    except Exception as error:
        return Check(
            "database", False, str(error)[:200], "Set MOSOO_DATABASE_URL or run `mosoo migrate`."
        )


def _redis() -> Check:
    import redis

    url = get_settings().redis_url
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
        return Check("redis", True, url.split("@")[-1], "")
    except Exception as error:
        return Check(
            "redis",
            False,
            type(error).__name__,
            "apt-get install -y redis-server && redis-server --daemonize yes --save '' --appendonly no",
        )


def _docker() -> Check:
    try:
        import docker

        client = docker.from_env(timeout=5)
        version = client.version().get("Version", "?")
        client.close()
        return Check("docker", True, f"engine {version}", "")
    except Exception as error:
        return Check(
            "docker",
            False,
            type(error).__name__,
            "apt-get install -y docker.io && (dockerd > /var/log/dockerd.log 2>&1 &)",
        )


def _object_store() -> Check:
    settings = get_settings()
    folder = settings.resolved_object_dir
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".doctor"
        probe.write_text("ok")
        probe.unlink()
        return Check("object store", True, str(folder), "")
    except OSError as error:
        return Check(
            "object store", False, str(error), f"Make {folder} writable or set MOSOO_OBJECT_DIR."
        )


def _binary(name: str, fix: str, path: str | None = None) -> Callable[[], Check]:
    def check() -> Check:
        found = path if path and Path(path).exists() else shutil.which(name)
        if not found:
            return Check(name, False, "not found", fix)
        try:
            out = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=20)
            version = (
                (out.stdout or out.stderr).strip().splitlines()[0]
                if (out.stdout or out.stderr)
                else found
            )
        except (OSError, subprocess.TimeoutExpired):
            version = found
        return Check(name, True, version, "")

    return check


CHECKS: list[Callable[[], Check]] = [
    _database,
    _redis,
    _object_store,
    _docker,
    _binary("bwrap", "apt-get install -y bubblewrap"),
    _binary("bun", "npm install -g bun (the console build uses it)"),
    # The browser tests' Chromium: the headless shell, lighter than the full browser's headless
    # mode (tests/support/chromium.py).
    _binary(
        "chromium",
        "apt-get install -y chromium-headless-shell (browser tests only)",
        "/usr/bin/chromium-headless-shell",
    ),
]


def run_checks(echo: Callable[[str], None]) -> list[Check]:
    problems = []
    for make_check in CHECKS:
        check = make_check()
        mark = "ok  " if check.ok else "MISS"
        echo(f"[{mark}] {check.name:<13} {check.detail}")
        if not check.ok:
            echo(f"       fix: {check.fix}")
            problems.append(check)
    echo("")
    if any(check.name == "database" for check in problems):
        echo("Warm pool: not shown without the database.")
    else:
        with session_scope() as db:
            for line in warm_pool_lines(db):
                echo(line)
    return problems


POOL_COLUMNS = (
    "App",
    "Runtime",
    "Network",
    "Revision",
    "Standing by",
    "Starting",
    "Hits",
    "Misses",
    "Hit rate",
)


def warm_pool_lines(db: Session) -> list[str]:
    """The warm pool of this host: on or off, the settings that shape it, the memory its
    members hold against the cap, then one row per key (an App's kind of Task sandbox)."""
    settings = get_settings()
    host = settings.sandbox_host
    sizes = settings.pool_sizes
    enabled = settings.pool_size > 0 or any(size > 0 for size in sizes.values())
    lines = [f"Warm pool on host {host}: {'on' if enabled else 'off'}"]
    by_kind = f"; by kind {json.dumps(sizes, sort_keys=True)} (MOSOO_POOL_SIZES)" if sizes else ""
    lines.append(f"  size {settings.pool_size} per key (MOSOO_POOL_SIZE){by_kind}")
    lines.append(
        f"  memory: members hold {pool.members_memory_mb(db, host)} MiB of the "
        f"{settings.pool_max_memory_mb} MiB cap (MOSOO_POOL_MAX_MEMORY_MB); members are "
        f"replaced after {settings.pool_member_ttl_minutes:g} min, keys dropped "
        f"{settings.pool_key_idle_minutes:g} min after their last run"
    )
    keys = pool.figures(db, host=host)
    if not keys:
        lines.append("  no Task run yet on this host: no key is kept warm")
        return lines
    rows = [POOL_COLUMNS] + [_pool_row(db, key) for key in keys]
    widths = [max(len(row[i]) for row in rows) for i in range(len(POOL_COLUMNS))]
    lines += [
        "  " + "  ".join(f"{c:<{w}}" for c, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    return lines


def _pool_row(db: Session, key: pool.PoolFigures) -> tuple[str, ...]:
    app = db.get(App, key.app_id)
    revision = db.get(EnvironmentRevision, key.revision_id)
    environment = db.get(Environment, revision.environment_id) if revision else None
    label = (
        f"{environment.name} #{revision.number}"
        if revision is not None and environment is not None
        else key.revision_id[-8:]  # gone since: the end of its id, which is random
    )
    return (
        app.name if app is not None else key.app_id,
        key.runtime,
        key.network_policy,
        label,
        f"{key.standing_by}/{key.target}",
        str(key.starting),
        str(key.hits),
        str(key.misses),
        "-" if key.hit_rate is None else f"{key.hit_rate:.0%}",
    )
