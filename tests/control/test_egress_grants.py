"""Whose connection the egress proxy lets out, decided by control's grant lookup
(`control.egress.egress_context`) from the database alone: a live `limited` run gets its
frozen allowlist (plus the package indexes only when the revision allowed them); a finished
run, a run under `none` or `full`, an unknown token and a finished build get nothing; a
build in progress reaches the package indexes and nothing else."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core.control.egress import egress_context
from mosoo_core.environments import builds
from mosoo_core.network.policy import EgressPolicy
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.environments import EnvironmentBuild
from tests.security.conftest import issue_run_grant, queued_run, run_row

PIP_INDEX = "https://pypi.mirror.example/simple"
NPM_REGISTRY = "https://npm.mirror.example:8443/"


@pytest.fixture(autouse=True)
def _indexes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOSOO_PIP_INDEX_URL", PIP_INDEX)
    monkeypatch.setenv("MOSOO_NPM_REGISTRY", NPM_REGISTRY)
    reset_settings_cache()


def _run_grant(engine: Engine, email: str, environment: dict[str, object]) -> tuple[str, str]:
    """A queued run whose frozen snapshot holds `environment` (as `plan_boot` writes it), and
    the run grant its driver would carry."""
    with Session(engine) as db:
        queued = queued_run(db, email)
        run = run_row(db, queued.run_id)
        run.snapshot = {"environment": environment}
        db.add(run)
        grant = issue_run_grant(db, queued, "https://models.example/v1", "sk-egress-test")
        db.commit()
        return grant, queued.run_id


def _allows(policy: EgressPolicy, host: str, port: int = 443) -> bool:
    return policy.check_target(host, port) is None


def _limited(hosts: list[str], *, indexes: bool) -> dict[str, object]:
    return {
        "network_policy": "limited",
        "allowed_hosts": hosts,
        "allow_package_indexes": indexes,
    }


def test_a_live_limited_run_gets_its_frozen_list_and_no_index_unless_allowed(
    engine: Engine,
) -> None:
    grant, run_id = _run_grant(
        engine, "limited@example.com", _limited(["api.example.com"], indexes=False)
    )
    context = egress_context(grant)
    assert context is not None and context.run_id == run_id
    assert _allows(context.policy, "api.example.com")
    assert not _allows(context.policy, "pypi.mirror.example")
    assert not _allows(context.policy, "npm.mirror.example", 8443)


def test_allow_package_indexes_adds_the_configured_index_hosts_and_ports(engine: Engine) -> None:
    grant, _ = _run_grant(
        engine, "indexes@example.com", _limited(["api.example.com"], indexes=True)
    )
    context = egress_context(grant)
    assert context is not None
    assert _allows(context.policy, "api.example.com")
    assert _allows(context.policy, "pypi.mirror.example")
    assert _allows(context.policy, "npm.mirror.example", 8443)
    assert not _allows(context.policy, "npm.mirror.example", 443)  # only the registry's port
    assert not _allows(context.policy, "pypi.org")  # the configured mirror, not the public index


@pytest.mark.parametrize("policy", ["none", "full"])
def test_a_run_whose_policy_is_not_limited_gets_no_tunnel(engine: Engine, policy: str) -> None:
    grant, _ = _run_grant(engine, f"{policy}@example.com", {"network_policy": policy})
    assert egress_context(grant) is None


def test_a_finished_run_or_an_unknown_token_gets_no_tunnel(engine: Engine) -> None:
    grant, run_id = _run_grant(
        engine, "finished@example.com", _limited(["api.example.com"], indexes=True)
    )
    assert egress_context(grant) is not None
    with Session(engine) as db:
        run = run_row(db, run_id)
        run.status = "completed"
        db.add(run)
        db.commit()
    assert egress_context(grant) is None
    assert egress_context("") is None
    assert egress_context("not-a-grant") is None
    assert egress_context(grant + "x") is None


def test_a_build_in_progress_reaches_the_indexes_only_and_nothing_once_finished(
    engine: Engine,
) -> None:
    with Session(engine) as db:
        db.add(EnvironmentBuild(packages_hash="h" * 64, packages={"pip": ["six==1.16.0"]}))
        db.commit()
        grant = builds.claim_build(db, "h" * 64, stale_after=600)
        db.commit()
    assert grant is not None
    context = egress_context(grant)
    assert context is not None and context.run_id == ""
    assert _allows(context.policy, "pypi.mirror.example")
    assert _allows(context.policy, "npm.mirror.example", 8443)
    assert not _allows(context.policy, "api.example.com")
    assert not _allows(context.policy, "pypi.org")
    with Session(engine) as db:
        assert builds.finish_build(db, "h" * 64, grant, layer="", log="", error="failed")
        db.commit()
    assert egress_context(grant) is None
