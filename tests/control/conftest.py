"""A real control app (uvicorn on a Unix socket) and helpers to play a driver against it."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import uvicorn
import websockets
from sqlalchemy.engine import Engine
from sqlmodel import Session

from driver.protocol import PROTOCOL_VERSION
from mosoo_core import identity, sessions
from mosoo_core.sessions import driver_plane
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import SessionRun
from tests.support.processes import wait_for
from tests.support.redis_db import db_number

TEST_REDIS_DB = db_number(12)


@dataclass
class ControlServer:
    socket_path: Path
    server: uvicorn.Server

    def connect(self) -> Any:
        return websockets.unix_connect(
            str(self.socket_path), uri="ws://control/driver/socket", max_size=None
        )


@pytest.fixture
def control(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ControlServer]:
    monkeypatch.setenv("MOSOO_REDIS_URL", f"redis://127.0.0.1:6379/{TEST_REDIS_DB}")
    monkeypatch.setenv("MOSOO_DRIVER_HEARTBEAT_INTERVAL_MS", "500")
    reset_settings_cache()
    redis.Redis(db=TEST_REDIS_DB).flushdb()
    from mosoo_core.control.server import build_app

    socket_path = tmp_path / "control.sock"
    config = uvicorn.Config(
        build_app(),
        uds=str(socket_path),
        log_level="warning",
        lifespan="on",
        ws_max_size=2 * 1024 * 1024,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 20, "the control server")
    yield ControlServer(socket_path=socket_path, server=server)
    server.should_exit = True
    thread.join(10)


@dataclass(frozen=True)
class Booted:
    account_id: str
    app_id: str
    agent_id: str
    session_id: str
    run_id: str
    instance_id: str
    boot_token: str


def boot_fixture(db: Session, email: str = "ctl@example.com") -> Booted:
    """An account, an agent, a thread with a run assigned to a freshly registered driver."""
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    app_id = identity.list_apps(db, account.id)[0].id
    agent = Agent(app_id=app_id, name="Tester", model="m")
    db.add(agent)
    db.flush()
    thread = sessions.create_session(db, account.id, app_id, agent.id)
    sent = sessions.send_message(db, account.id, thread.id, "hello")
    driver = driver_plane.register_driver(
        db, app_id=app_id, subject=f"session:{thread.id}", runtime="openai", session_id=thread.id
    )
    run = db.get(SessionRun, sent.run.id)
    assert run is not None
    run.driver_instance_id = driver.instance_id
    run.status = "booting"
    db.add(run)
    db.commit()
    return Booted(
        account.id, app_id, agent.id, thread.id, run.id, driver.instance_id, driver.boot_token
    )


def hello(
    instance_id: str,
    *,
    boot_token: str | None = None,
    resume_token: str | None = None,
    runtime: str = "openai",
    capabilities: list[str] | None = None,
) -> str:
    message: dict[str, Any] = {
        "type": "hello",
        "driver_instance_id": instance_id,
        "protocol_version": PROTOCOL_VERSION,
        "driver_version": "test",
        "runtime": runtime,
        "capabilities": capabilities or [],
        "pid": 1,
    }
    if boot_token:
        message["boot_token"] = boot_token
    if resume_token:
        message["resume_token"] = resume_token
    return json.dumps(message)


def event(run_id: str, source_event_id: str, kind: str, **payload: Any) -> dict[str, Any]:
    return {
        "source_event_id": source_event_id,
        "run_id": run_id,
        "kind": kind,
        "occurred_at": "2026-11-30T12:00:00+00:00",
        "payload": payload,
    }


async def recv_json(ws: Any, timeout: float = 10) -> dict[str, Any]:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))
