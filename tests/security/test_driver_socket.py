"""Boot tokens at the driver socket of a real `mosoo control` (its Unix socket), played by a
scripted driver speaking `driver/protocol.py`; `driver_instance` is read after each refusal."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
import websockets
from sqlalchemy.engine import Engine
from sqlmodel import Session

from driver.protocol import MAX_FRAME_BYTES, PROTOCOL_VERSION
from mosoo_core.clock import utcnow
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.sessions import DriverInstance
from tests.security.conftest import Control, queued_run, run_row, update

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Booting:
    instance_id: str
    boot_token: str


def _booting(engine: Engine, email: str, runtime: str = "openai") -> Booting:
    """A queued run handed to a freshly registered driver, as the worker does before boot."""
    with Session(engine) as db:
        queued = queued_run(db, email)
        driver = driver_plane.register_driver(
            db,
            app_id=queued.app_id,
            subject=f"session:{queued.session_id}",
            runtime=runtime,
            session_id=queued.session_id,
        )
        run = run_row(db, queued.run_id)
        run.driver_instance_id, run.status = driver.instance_id, "booting"
        db.add(run)
        db.commit()
        return Booting(driver.instance_id, driver.boot_token)


def _hello(instance_id: str, boot_token: str, runtime: str = "openai") -> str:
    return json.dumps(
        {
            "type": "hello",
            "driver_instance_id": instance_id,
            "boot_token": boot_token,
            "protocol_version": PROTOCOL_VERSION,
            "driver_version": "security-test",
            "runtime": runtime,
            "capabilities": [],
            "pid": 1,
        }
    )


async def _say_hello(control: Control, frame: str) -> dict[str, Any]:
    """Connect, send one frame, return control's answer (welcome or close) and hang up."""
    async with websockets.unix_connect(
        str(control.socket_path), uri="ws://control/driver/socket", max_size=None
    ) as ws:
        await ws.send(frame)
        return dict(json.loads(await asyncio.wait_for(ws.recv(), 20)))


def hello(
    control: Control, instance_id: str, boot_token: str, runtime: str = "openai"
) -> dict[str, Any]:
    return asyncio.run(_say_hello(control, _hello(instance_id, boot_token, runtime)))


def _instance(engine: Engine, instance_id: str) -> DriverInstance:
    with Session(engine) as db:
        row = db.get(DriverInstance, instance_id)
        assert row is not None
        return row


def _used_at(engine: Engine, instance_id: str) -> datetime | None:
    return _instance(engine, instance_id).boot_token_used_at


def test_a_boot_token_works_once(control: Control, engine: Engine) -> None:
    """ARCHITECTURE §6: "Driver boot tokens are single-use"; PROTOCOL: "A boot token is refused
    the second time"."""
    booting = _booting(engine, "once@example.com")
    welcome = hello(control, booting.instance_id, booting.boot_token)
    assert welcome["type"] == "welcome", welcome
    first = _instance(engine, booting.instance_id)
    assert first.boot_token_used_at is not None and first.connection_id is not None
    replayed = hello(control, booting.instance_id, booting.boot_token)
    assert replayed == {
        "type": "close",
        "code": "token_replayed",
        "reason": "boot token was already used",
    }
    again = _instance(engine, booting.instance_id)
    assert again.boot_token_used_at == first.boot_token_used_at  # burned exactly once
    assert again.connection_id == first.connection_id  # no second connection recorded
    assert again.resume_token_hash == first.resume_token_hash


def test_an_expired_boot_token_is_refused(control: Control, engine: Engine) -> None:
    """ARCHITECTURE §6: driver boot tokens "expire in 60 s"."""
    booting = _booting(engine, "expired@example.com")
    created = _instance(engine, booting.instance_id)
    assert created.boot_token_expires_at - created.created_at == timedelta(seconds=60)
    update(
        engine,
        DriverInstance,
        DriverInstance.id == booting.instance_id,
        boot_token_expires_at=utcnow() - timedelta(seconds=1),
    )
    refused = hello(control, booting.instance_id, booting.boot_token)
    assert refused["type"] == "close" and refused["code"] == "token_expired"
    row = _instance(engine, booting.instance_id)
    assert row.connection_id is None and row.resume_token_hash is None and row.status == "booting"


def test_a_boot_token_of_another_instance_is_refused(control: Control, engine: Engine) -> None:
    """ARCHITECTURE §6: driver boot tokens "are bound to one driver instance"."""
    mine, theirs = _booting(engine, "mine@example.com"), _booting(engine, "theirs@example.com")
    refused = hello(control, theirs.instance_id, mine.boot_token)
    assert refused["type"] == "close" and refused["code"] == "bad_token"
    for instance_id in (mine.instance_id, theirs.instance_id):
        row = _instance(engine, instance_id)
        assert (
            row.boot_token_used_at is None and row.connection_id is None and row.status == "booting"
        )
    # Both tokens still work for their own instance: the refusal spent neither.
    assert hello(control, mine.instance_id, mine.boot_token)["type"] == "welcome"
    assert hello(control, theirs.instance_id, theirs.boot_token)["type"] == "welcome"


def test_a_boot_token_refused_after_it_was_accepted_is_burned_all_the_same(
    control: Control, engine: Engine
) -> None:
    """PROTOCOL: "A boot token is refused the second time" — also when the first hello was
    refused for another reason once the token had been accepted (`runtime_mismatch`)."""
    booting = _booting(engine, "mismatch@example.com", runtime="openai")
    mismatch = hello(control, booting.instance_id, booting.boot_token, runtime="claude")
    assert mismatch["type"] == "close" and mismatch["code"] == "runtime_mismatch"
    burned = _used_at(engine, booting.instance_id)
    assert burned is not None  # committed despite the refusal
    retry = hello(control, booting.instance_id, booting.boot_token, runtime="openai")
    assert retry["type"] == "close" and retry["code"] == "token_replayed", retry
    row = _instance(engine, booting.instance_id)
    assert (
        row.boot_token_used_at == burned
        and row.connection_id is None
        and row.resume_token_hash is None
    )


def test_a_frame_over_1_mib_is_refused_and_control_keeps_serving(
    control: Control, engine: Engine
) -> None:
    """PROTOCOL: "Bad frames (not JSON, unknown type, missing fields, over 1 MiB) close the
    connection with a reason; they never crash control or affect other drivers"."""
    booting = _booting(engine, "big-frame@example.com")
    oversized = json.dumps({"type": "hello", "padding": "x" * MAX_FRAME_BYTES})
    refused = asyncio.run(_say_hello(control, oversized))
    assert refused["type"] == "close" and refused["code"] == "frame_too_large"
    assert _instance(engine, booting.instance_id).boot_token_used_at is None
    assert hello(control, booting.instance_id, booting.boot_token)["type"] == "welcome"
