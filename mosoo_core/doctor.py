"""`mosoo doctor`: each thing Mosoo needs, whether it is there, and how to fix it."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mosoo_core.db import check_database
from mosoo_core.settings import get_settings


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
    _binary("chromium", "apt-get install -y chromium (browser tests only)", "/usr/bin/chromium"),
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
    return problems
