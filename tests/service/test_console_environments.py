"""The Environments pages' calls (`mosoo_web.pages.environments.services`): what the editor
and the list show of a package build, Rebuild, and the worker being asked to build whenever
a save, fork or rebuild leaves a build queued."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import environments, identity
from mosoo_core.environments import EnvironmentChanges, builds
from mosoo_core.errors import Conflict, NotFound
from mosoo_web.pages.environments import services
from tests.support.redis_db import own_redis_database, redis_url

# Shared with tests/integration/test_environment_setup.py; each flushes it first.
REDIS_URL = redis_url(2)
BUILD_TASK = "mosoo.build_environment"


@dataclass(frozen=True)
class Owner:
    account_id: str
    app_id: str


@pytest.fixture
def queue(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> Iterator[redis.Redis]:
    """The Redis database the Celery client sends to (no worker takes from it)."""
    yield from own_redis_database(monkeypatch, REDIS_URL)


def _owner(engine: Engine, email: str = "console-env@example.com") -> Owner:
    with Session(engine) as db:
        account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
        owner = Owner(account.id, identity.list_apps(db, account.id)[0].id)
        db.commit()
    return owner


def _build_requests(queue: redis.Redis) -> list[str]:
    """The packages hashes the worker has been asked to build, oldest first."""
    hashes = []
    listed = queue.lrange("celery", 0, -1)
    assert isinstance(listed, list)  # a sync client (redis types it for both)
    for raw in reversed(listed):  # LPUSHed: newest first
        message = json.loads(raw)
        if message["headers"]["task"] != BUILD_TASK:
            continue
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        hashes.append(args[0])
    return hashes


def _hash_of(engine: Engine, owner: Owner, environment_id: str) -> str:
    with Session(engine) as db:
        view = environments.get_environment(db, owner.account_id, owner.app_id, environment_id)
    assert view.build is not None
    return view.build.packages_hash


def _create(owner: Owner, name: str = "Data", **changes: object) -> services.Saved:
    return services.save(
        owner.account_id,
        owner.app_id,
        "",
        name,
        EnvironmentChanges(**changes),  # type: ignore[arg-type]
    )


def test_saving_packages_queues_a_build_and_asks_the_worker_for_it(
    engine: Engine, queue: redis.Redis
) -> None:
    owner = _owner(engine)
    saved = _create(owner, pip=["rich==13.9.4"], npm=["lodash@4.17.21"])

    content = saved.content
    assert (content.build_status, content.build_log, content.build_error) == ("queued", "", "")
    assert content.build_finished == ""
    packages_hash = _hash_of(engine, owner, content.id)
    assert _build_requests(queue) == [packages_hash]
    rows = {row.name: row for row in services.list_rows(owner.account_id, owner.app_id)}
    assert rows["Data"].packages_label == "2 packages · Queued"
    assert rows["Default"].packages_label == "No packages"

    # Saved again without them: no build to show, and nothing more asked of the worker.
    bare = services.save(
        owner.account_id, owner.app_id, content.id, "", EnvironmentChanges(pip=[], npm=[])
    )
    assert bare.changed and bare.content.build_status == ""
    assert _build_requests(queue) == [packages_hash]
    assert services.build_status(owner.account_id, owner.app_id, content.id).status == ""


def test_build_status_follows_the_build_as_it_runs_and_finishes(
    engine: Engine, queue: redis.Redis
) -> None:
    owner = _owner(engine)
    environment_id = _create(owner, pip=["rich==13.9.4"]).content.id
    packages_hash = _hash_of(engine, owner, environment_id)

    def status() -> services.BuildStatus:
        return services.build_status(owner.account_id, owner.app_id, environment_id)

    assert status().active and status().status == "queued"
    with Session(engine) as db:
        grant = builds.claim_build(db, packages_hash, stale_after=120)
        assert grant is not None
        builds.record_log(db, packages_hash, grant, "Collecting rich==13.9.4\n")
        db.commit()
    building = status()
    assert (building.status, building.log, building.active) == (
        "building",
        "Collecting rich==13.9.4\n",
        True,
    )
    assert building.finished == ""

    with Session(engine) as db:
        assert builds.finish_build(
            db,
            packages_hash,
            grant,
            layer=f"{packages_hash}/1",
            log="Collecting rich==13.9.4\nInstalled rich-13.9.4\n",
            error="",
        )
        db.commit()
    ready = status()
    assert (ready.status, ready.active, ready.error, ready.finished) == (
        "ready",
        False,
        "",
        "just now",
    )
    assert ready.log.endswith("Installed rich-13.9.4\n")
    editor = services.load_editor(owner.account_id, owner.app_id, environment_id)
    assert (editor.build_status, editor.build_finished) == ("ready", "just now")
    rows = services.list_rows(owner.account_id, owner.app_id)
    labels = {row.name: row.packages_label for row in rows}
    assert labels["Data"] == "1 package · Ready"

    stranger = _owner(engine, "stranger@example.com")
    with pytest.raises(NotFound):
        services.build_status(stranger.account_id, owner.app_id, environment_id)


def test_rebuild_queues_a_failed_build_again_and_is_refused_while_building(
    engine: Engine, queue: redis.Redis
) -> None:
    owner = _owner(engine)
    environment_id = _create(owner, pip=["rich==13.9.4"]).content.id
    packages_hash = _hash_of(engine, owner, environment_id)
    with Session(engine) as db:
        grant = builds.claim_build(db, packages_hash, stale_after=120)
        assert grant is not None
        db.commit()

    with pytest.raises(Conflict, match="in progress"):
        services.rebuild(owner.account_id, owner.app_id, environment_id)

    with Session(engine) as db:
        builds.finish_build(
            db,
            packages_hash,
            grant,
            layer="",
            log="ERROR: No matching distribution found for rich==13.9.4\n",
            error="Installing the pip packages failed.",
        )
        db.commit()
    failed = services.build_status(owner.account_id, owner.app_id, environment_id)
    assert (failed.status, failed.error) == ("failed", "Installing the pip packages failed.")
    assert "No matching distribution" in failed.log and failed.finished == "just now"

    again = services.rebuild(owner.account_id, owner.app_id, environment_id)
    assert (again.status, again.log, again.error, again.finished) == ("queued", "", "", "")
    assert _build_requests(queue) == [packages_hash, packages_hash]

    # Without packages there is nothing to rebuild.
    default = next(
        row for row in services.list_rows(owner.account_id, owner.app_id) if row.is_default
    )
    with pytest.raises(Conflict, match="no packages"):
        services.rebuild(owner.account_id, owner.app_id, default.id)
    assert _build_requests(queue) == [packages_hash, packages_hash]


def test_forking_an_environment_whose_build_is_queued_asks_the_worker_again(
    engine: Engine, queue: redis.Redis
) -> None:
    owner = _owner(engine)
    environment_id = _create(owner, npm=["lodash@4.17.21"]).content.id
    packages_hash = _hash_of(engine, owner, environment_id)

    name = services.fork(owner.account_id, owner.app_id, environment_id)

    assert name == "Data (copy)"
    assert _build_requests(queue) == [packages_hash, packages_hash]
    copy = next(
        row for row in services.list_rows(owner.account_id, owner.app_id) if row.name == name
    )
    assert copy.packages_label == "1 package · Queued"
