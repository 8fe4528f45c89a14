"""Control's egress proxy: the only way out of a sandbox whose network policy is `limited`.

It listens on a Unix socket beside the control socket (the directory sandboxes mount). The
driver's loopback listener opens each connection with `MOSOO-EGRESS <grant>`; the grant names
the run, and the run's snapshot holds the allowlist frozen with its environment revision, so
the policy comes from the database and never from the sandbox. Every decision becomes a
`network.request` event in the thread's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mosoo_core import streams
from mosoo_core.db import session_scope
from mosoo_core.environments import builds
from mosoo_core.logs import get_logger
from mosoo_core.network import (
    REFUSAL_REASONS,
    EgressContext,
    EgressPolicy,
    EgressProxy,
    NetworkDecision,
)
from mosoo_core.sessions import driver_plane
from mosoo_core.settings import get_settings
from mosoo_core.tables.sessions import SessionRun

log = get_logger(__name__)

EGRESS_SOCKET_NAME = "egress.sock"  # driver.egress dials this name beside control.sock
PYPI_FILES_HOST = "files.pythonhosted.org"  # where pypi.org's simple pages point


def egress_socket_path() -> Path:
    return get_settings().resolved_control_socket.parent / EGRESS_SOCKET_NAME


def package_index_hosts() -> list[str]:
    """The hosts of the configured package indexes, for `allow package indexes`."""
    settings = get_settings()
    hosts: list[str] = []
    for url in (settings.pip_index_url, settings.npm_registry):
        parts = urlsplit(url)
        if parts.hostname:
            default = 443 if parts.scheme == "https" else 80
            hosts.append(
                parts.hostname
                if parts.port in (None, default)
                else f"{parts.hostname}:{parts.port}"
            )
            if parts.hostname == "pypi.org":
                hosts.append(PYPI_FILES_HOST)
    return hosts


def _index_policy() -> EgressPolicy:
    return EgressPolicy.from_entries(
        package_index_hosts(), allow_loopback=get_settings().egress_allow_loopback
    )


def egress_context(token: str) -> EgressContext | None:
    """The frozen policy of the live run behind a grant; None (connection closed) for an
    unknown or expired grant, a finished run, or a run whose policy is not `limited`. A
    build's grant (a package build in progress) reaches the package indexes only."""
    with session_scope() as db:
        build = builds.resolve_build_grant(db, token)
        if build is not None:
            return EgressContext(policy=_index_policy(), run_id="", thread_id="")
        grant = driver_plane.resolve_model_grant(db, token)
        if grant is None:
            return None
        run = db.get(SessionRun, grant.run_id)
        environment: dict[str, Any] = (run.snapshot if run else {}).get("environment") or {}
    if environment.get("network_policy") != "limited":
        return None
    entries = list(environment.get("allowed_hosts") or [])
    if environment.get("allow_package_indexes"):
        entries += package_index_hosts()
    policy = EgressPolicy.from_entries(entries, allow_loopback=get_settings().egress_allow_loopback)
    return EgressContext(policy=policy, run_id=grant.run_id, thread_id=grant.session_id)


def decision_payload(decision: NetworkDecision) -> dict[str, Any]:
    outcome = (
        "allowed"
        if decision.allowed
        else ("refused" if decision.reason in REFUSAL_REASONS else "failed")
    )
    return {
        "host": decision.host,
        "port": decision.port,
        "method": decision.method,
        "outcome": outcome,
        "reason": decision.reason,
        "status": decision.status,
        "bytes_sent": decision.bytes_sent,
        "bytes_received": decision.bytes_received,
        "duration_ms": decision.duration_ms,
    }


def record_decision(decision: NetworkDecision) -> None:
    if not decision.thread_id:  # a build's request: its log shows what pip or npm made of it
        log.info("egress.build_request", **decision_payload(decision))
        return
    with session_scope() as db:
        stored = driver_plane.append_events(
            db,
            decision.thread_id,
            [
                driver_plane.NewEvent(
                    type="network.request",
                    payload=decision_payload(decision),
                    run_id=decision.run_id,
                )
            ],
        )
    streams.publish_events(stored)


async def _authenticate(token: str) -> EgressContext | None:
    return await asyncio.to_thread(egress_context, token)


async def _record(decision: NetworkDecision) -> None:
    try:
        await asyncio.to_thread(record_decision, decision)
    except Exception as error:  # the decision stands; only its event is lost
        log.warning("egress.record_failed", run_id=decision.run_id, error=type(error).__name__)


@contextlib.asynccontextmanager
async def serving_egress(path: Path) -> Any:
    """The proxy on `path` (mode 0666: the sandbox user dials it) while the block runs."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    proxy = EgressProxy(_authenticate, _record)
    server = await proxy.serve_unix(str(path))
    os.chmod(path, 0o666)
    log.info("egress.ready", socket=str(path))
    try:
        yield proxy
    finally:
        server.close()
        await proxy.close()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
