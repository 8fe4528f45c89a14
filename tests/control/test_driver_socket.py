"""The driver endpoint against a real control server, played by a scripted driver."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import sessions
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.sessions import AgentSession, DriverCommand, DriverInstance, SessionRun
from tests.control.conftest import (
    TEST_REDIS_DB,
    ControlServer,
    boot_fixture,
    event,
    hello,
    recv_json,
)
from tests.support.redis_db import streamed_seqs


async def _welcomed(control: ControlServer, instance_id: str, **tokens: str):  # type: ignore[no-untyped-def]
    ws = await control.connect().__aenter__()
    await ws.send(hello(instance_id, **tokens))
    welcome = await recv_json(ws)
    assert welcome["type"] == "welcome", welcome
    return ws, welcome


def test_events_are_stored_in_seq_order_acked_and_streamed(
    control: ControlServer, engine: Engine
) -> None:
    with Session(engine) as db:
        booted = boot_fixture(db)

    async def scenario() -> dict:
        ws, _ = await _welcomed(control, booted.instance_id, boot_token=booted.boot_token)
        await ws.send(json.dumps({"type": "ready", "at": "now"}))
        batch = [
            event(booted.run_id, "e1", "run.started"),
            event(booted.run_id, "e2", "message.delta", text="Hel"),
            event(booted.run_id, "e3", "message.delta", text="lo"),
        ]
        await ws.send(json.dumps({"type": "events", "events": batch}))
        ack = await recv_json(ws)
        # The same batch again (a re-send after reconnect) is acknowledged but not stored twice.
        await ws.send(json.dumps({"type": "events", "events": batch}))
        again = await recv_json(ws)
        await ws.send(
            json.dumps(
                {
                    "type": "events",
                    "events": [event(booted.run_id, "e4", "run.completed", final_text="Hello")],
                }
            )
        )
        await recv_json(ws)
        await ws.close()
        return {"ack": ack, "again": again}

    result = asyncio.run(scenario())
    assert result["ack"]["source_event_ids"] == ["e1", "e2", "e3"]
    assert result["again"]["seqs"] == result["ack"]["seqs"]
    with Session(engine) as db:
        events = driver_plane.read_events(db, booted.session_id)
        types = [e.type for e in events]
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert types[:2] == ["user.message", "session.status"]
        assert types.count("agent.message.delta") == 2
        assert "run.completed" in types and types[-1] == "session.status"
        run = db.get(SessionRun, booted.run_id)
        assert run is not None and run.status == "completed"
        thread = db.get(AgentSession, booted.session_id)
        assert thread is not None and thread.status == "idle"
    seqs = streamed_seqs(redis.Redis(db=TEST_REDIS_DB), booted.session_id)
    assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))
    assert redis.Redis(db=TEST_REDIS_DB).get(f"driver:{booted.instance_id}:ready") == b"1"


def test_the_capabilities_a_driver_reports_in_hello_are_kept_for_the_console(
    control: ControlServer, engine: Engine
) -> None:
    with Session(engine) as db:
        booted = boot_fixture(db)
    reported = ["text_stream", "cancel", "skills", "mcp"]

    def live() -> list[str] | None:
        with Session(engine) as db:
            return sessions.live_capabilities(db, booted.account_id, thread_id=booted.session_id)

    def ready() -> bool:
        with Session(engine) as db:
            instance = db.get(DriverInstance, booted.instance_id)
            return instance is not None and instance.ready_at is not None

    async def scenario() -> tuple[list[str] | None, list[str] | None]:
        async with control.connect() as ws:
            await ws.send(
                hello(booted.instance_id, boot_token=booted.boot_token, capabilities=reported)
            )
            assert (await recv_json(ws))["type"] == "welcome"
            before_ready = live()  # booting its backend: the console keeps to the catalog
            await ws.send(json.dumps({"type": "ready", "at": "now"}))
            for _ in range(200):
                if ready():
                    break
                await asyncio.sleep(0.05)
            return before_ready, live()

    before_ready, running = asyncio.run(scenario())
    assert before_ready is None
    assert running == reported
    with Session(engine) as db:
        instance = db.get(DriverInstance, booted.instance_id)
        assert instance is not None and instance.capabilities == reported
        driver_plane.mark_stopped(db, booted.instance_id)
        db.commit()
    assert live() is None  # nothing runs for the thread any more


def test_a_hello_with_an_unknown_capability_is_refused(
    control: ControlServer, engine: Engine
) -> None:
    with Session(engine) as db:
        booted = boot_fixture(db)

    async def scenario() -> dict:
        async with control.connect() as ws:
            await ws.send(
                hello(
                    booted.instance_id,
                    boot_token=booted.boot_token,
                    capabilities=["text_stream", "teleport"],
                )
            )
            return await recv_json(ws)

    refused = asyncio.run(scenario())
    assert refused["type"] == "close" and refused["code"] == "invalid_message"
    assert "teleport" in refused["reason"]
    with Session(engine) as db:
        instance = db.get(DriverInstance, booted.instance_id)
        assert instance is not None and instance.connection_id is None
        assert instance.capabilities == []


def test_replayed_boot_token_is_refused(control: ControlServer, engine: Engine) -> None:
    with Session(engine) as db:
        booted = boot_fixture(db)

    async def scenario() -> dict:
        ws, _ = await _welcomed(control, booted.instance_id, boot_token=booted.boot_token)
        await ws.close()
        async with control.connect() as second:
            await second.send(hello(booted.instance_id, boot_token=booted.boot_token))
            return await recv_json(second)

    refused = asyncio.run(scenario())
    assert refused == {
        "type": "close",
        "code": "token_replayed",
        "reason": "boot token was already used",
    }


def test_a_boot_token_refused_for_its_runtime_is_burned_all_the_same(
    control: ControlServer, engine: Engine
) -> None:
    """Record, then refuse: the token was presented, so a retry with it is a replay."""
    with Session(engine) as db:
        booted = boot_fixture(db)

    async def scenario() -> tuple[dict, dict]:
        async with control.connect() as ws:
            await ws.send(hello(booted.instance_id, boot_token=booted.boot_token, runtime="claude"))
            first = await recv_json(ws)
        async with control.connect() as ws:
            await ws.send(hello(booted.instance_id, boot_token=booted.boot_token))
            return first, await recv_json(ws)

    first, retry = asyncio.run(scenario())
    assert first["code"] == "runtime_mismatch"
    assert retry["code"] == "token_replayed"
    with Session(engine) as db:
        instance = db.get(DriverInstance, booted.instance_id)
        assert (
            instance is not None
            and instance.boot_token_used_at is not None
            and instance.connection_id is None
        )


def test_boot_token_of_another_instance_is_refused(control: ControlServer, engine: Engine) -> None:
    with Session(engine) as db:
        first = boot_fixture(db, "one@example.com")
        second = boot_fixture(db, "two@example.com")

    async def scenario() -> dict:
        async with control.connect() as ws:
            await ws.send(hello(second.instance_id, boot_token=first.boot_token))
            return await recv_json(ws)

    assert asyncio.run(scenario())["code"] == "bad_token"


def test_resume_token_rotates_and_old_one_is_refused(
    control: ControlServer, engine: Engine
) -> None:
    with Session(engine) as db:
        booted = boot_fixture(db)

    async def scenario() -> tuple[dict, dict]:
        ws, welcome = await _welcomed(control, booted.instance_id, boot_token=booted.boot_token)
        await ws.close()
        ws2, welcome2 = await _welcomed(
            control, booted.instance_id, resume_token=welcome["resume_token"]
        )
        await ws2.close()
        async with control.connect() as ws3:
            await ws3.send(hello(booted.instance_id, resume_token=welcome["resume_token"]))
            stale = await recv_json(ws3)
        return welcome2, stale

    welcome2, stale = asyncio.run(scenario())
    assert welcome2["type"] == "welcome"
    assert stale["code"] == "bad_token"


def test_events_for_another_threads_run_are_refused(control: ControlServer, engine: Engine) -> None:
    with Session(engine) as db:
        mine = boot_fixture(db, "mine@example.com")
        theirs = boot_fixture(db, "theirs@example.com")

    async def scenario() -> dict:
        ws, _ = await _welcomed(control, mine.instance_id, boot_token=mine.boot_token)
        await ws.send(
            json.dumps(
                {
                    "type": "events",
                    "events": [event(theirs.run_id, "x1", "message.delta", text="pwned")],
                }
            )
        )
        return await recv_json(ws)

    assert asyncio.run(scenario())["code"] == "foreign_run"
    with Session(engine) as db:
        assert all(
            e.type != "agent.message.delta" for e in driver_plane.read_events(db, theirs.session_id)
        )


def test_command_update_for_another_drivers_command_is_refused(
    control: ControlServer, engine: Engine
) -> None:
    with Session(engine) as db:
        mine = boot_fixture(db, "mine@example.com")
        theirs = boot_fixture(db, "theirs@example.com")
        command = driver_plane.enqueue_command(
            db, theirs.instance_id, "turn.cancel", {"run_id": theirs.run_id, "reason": "x"}
        )
        db.commit()
        command_id = command.id

    async def scenario() -> dict:
        ws, _ = await _welcomed(control, mine.instance_id, boot_token=mine.boot_token)
        await ws.send(
            json.dumps({"type": "command_update", "command_id": command_id, "status": "completed"})
        )
        return await recv_json(ws)

    assert asyncio.run(scenario())["code"] == "unknown_command"
    with Session(engine) as db:
        row = db.get(DriverCommand, command_id)
        assert row is not None and row.status == "pending"


def test_commands_are_delivered_in_order_and_redelivered_after_reconnect(
    control: ControlServer, engine: Engine
) -> None:
    with Session(engine) as db:
        booted = boot_fixture(db)
        first = driver_plane.enqueue_command(
            db,
            booted.instance_id,
            "input.start",
            {"run_id": booted.run_id, "text": "hi", "attachments": []},
        )
        db.commit()
        first_id = first.id

    async def scenario() -> tuple[list, list]:
        ws, welcome = await _welcomed(control, booted.instance_id, boot_token=booted.boot_token)
        got = [await recv_json(ws)]
        with Session(engine) as db:
            driver_plane.enqueue_command(
                db, booted.instance_id, "turn.cancel", {"run_id": booted.run_id, "reason": "user"}
            )
            db.commit()
        from mosoo_core import streams

        streams.notify_driver(booted.instance_id, redis.Redis(db=TEST_REDIS_DB))
        got.append(await recv_json(ws, timeout=5))
        await ws.send(
            json.dumps({"type": "command_update", "command_id": first_id, "status": "completed"})
        )

        def first_completed() -> bool:
            with Session(engine) as db:
                row = db.get(DriverCommand, first_id)
                return row is not None and row.status == "completed"

        # The update is stored before the driver comes back (a real driver would also just
        # ignore a re-delivered command id it has finished).
        for _ in range(200):
            if first_completed():
                break
            await asyncio.sleep(0.02)
        await ws.close()
        ws2, _ = await _welcomed(control, booted.instance_id, resume_token=welcome["resume_token"])
        redelivered = [await recv_json(ws2)]
        await ws2.close()
        return got, redelivered

    got, redelivered = asyncio.run(scenario())
    assert [c["kind"] for c in got] == ["input.start", "turn.cancel"]
    assert [c["seq"] for c in got] == [1, 2]
    # Only the unfinished command comes again.
    assert [c["kind"] for c in redelivered] == ["turn.cancel"]


@pytest.mark.parametrize("count", [1000])
def test_a_thousand_bad_frames_are_refused_and_control_keeps_serving(
    control: ControlServer, engine: Engine, count: int
) -> None:
    with Session(engine) as db:
        booted = boot_fixture(db)
    bad_frames = [
        "not json",
        "{}",
        '{"type": "nope"}',
        '{"type": "hello"}',
        "[1,2,3]",
        '{"type": "events", "events": []}',
        '{"type":"heartbeat","at":"now"}',
        "\x00\x01",
        '{"type": "ready", "at": 5}',
        "x" * (1024 * 1024 + 10),
    ]

    async def scenario() -> tuple[set, dict]:
        reasons: set[str] = set()
        for i in range(count):
            async with control.connect() as ws:
                await ws.send(bad_frames[i % len(bad_frames)])
                try:
                    reply = await recv_json(ws)
                    reasons.add(reply["code"])
                except Exception:  # closed by the websocket layer (over the size limit)
                    reasons.add("closed")
        ws, welcome = await _welcomed(control, booted.instance_id, boot_token=booted.boot_token)
        await ws.send(
            json.dumps({"type": "events", "events": [event(booted.run_id, "ok1", "run.started")]})
        )
        ack = await recv_json(ws)
        # A bad frame after a good hello closes only that connection, with a reason.
        await ws.send("garbage")
        closing = await recv_json(ws)
        return reasons, {"ack": ack, "closing": closing, "welcome": welcome}

    reasons, result = asyncio.run(scenario())
    assert {"invalid_json", "unknown_type", "invalid_message", "expected_hello"} <= reasons
    assert result["ack"]["source_event_ids"] == ["ok1"]
    assert result["closing"]["code"] == "invalid_json"


def test_missed_heartbeats_reschedule_then_fail_with_driver_lost(engine: Engine) -> None:
    from datetime import timedelta

    from mosoo_core.clock import utcnow

    with Session(engine) as db:
        booted = boot_fixture(db)
        instance = db.get(DriverInstance, booted.instance_id)
        assert instance is not None
        start = utcnow()
        instance.status, instance.last_heartbeat_at = "connected", start
        db.add(instance)
        db.commit()
        interval = timedelta(seconds=10)
        assert (
            driver_plane.sweep_lost_drivers(
                db, heartbeat_interval=interval, now=start + timedelta(seconds=25)
            )
            == []
        )
        db.commit()
        stored = driver_plane.sweep_lost_drivers(
            db, heartbeat_interval=interval, now=start + timedelta(seconds=31)
        )
        db.commit()
        assert [e.payload["status"] for e in stored if e.type == "session.status"] == [
            "rescheduling"
        ]
        thread = db.get(AgentSession, booted.session_id)
        assert thread is not None and thread.status == "rescheduling"
        stored = driver_plane.sweep_lost_drivers(
            db, heartbeat_interval=interval, now=start + timedelta(seconds=160)
        )
        db.commit()
        run = db.get(SessionRun, booted.run_id)
        assert (
            run is not None
            and run.status == "failed"
            and run.error_code == "driver_lost"
            and run.error_retryable
        )
        assert [e.type for e in stored] == ["run.failed", "session.status"]
        db.refresh(thread)
        assert thread.status == "idle"
        assert (
            db.exec(select(DriverInstance).where(DriverInstance.id == booted.instance_id))
            .one()
            .status
            == "lost"
        )
