"""Control's group commit: batches of many driver connections stored in one transaction,
each answered (and so acknowledged) only with what was committed, one batch's refusal
costing no other batch anything. Played against a real database and Redis, and through
the driver socket with many drivers at once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from driver.protocol import PROTOCOL_VERSION, DriverEvent, Hello
from mosoo_core.control._event_writer import EventWriter
from mosoo_core.sessions import driver_plane
from mosoo_core.streams import StoredEvent
from mosoo_core.tables.sessions import DriverInstance, RunMark, SessionEvent
from tests.control.conftest import (
    TEST_REDIS_DB,
    Booted,
    ControlServer,
    boot_fixture,
    event,
    hello,
    recv_json,
)
from tests.support.redis_db import streamed_seqs


@pytest.fixture
def stream_redis(monkeypatch: pytest.MonkeyPatch) -> Iterator[redis.Redis]:
    monkeypatch.setenv("MOSOO_REDIS_URL", f"redis://127.0.0.1:6379/{TEST_REDIS_DB}")
    client = redis.Redis(db=TEST_REDIS_DB)
    client.flushdb()
    yield client
    client.flushdb()


def _connected(engine: Engine, count: int) -> list[tuple[Booted, str]]:
    """Threads with a run each and its driver said hello: (booted, connection id)."""
    out = []
    with Session(engine) as db:
        for index in range(count):
            booted = boot_fixture(db, f"writer{index}@example.com")
            welcome = driver_plane.accept_hello(
                db,
                Hello(
                    driver_instance_id=booted.instance_id,
                    boot_token=booted.boot_token,
                    protocol_version=PROTOCOL_VERSION,
                    driver_version="test",
                    runtime="openai",
                    pid=1,
                ),
            )
            db.commit()
            out.append((booted, welcome.connection_id))
    return out


def _deltas(run_id: str, prefix: str, count: int) -> list[DriverEvent]:
    return [
        DriverEvent.model_validate(event(run_id, f"{prefix}-{i}", "message.delta", text=f"t{i}"))
        for i in range(count)
    ]


def _stored_rows(engine: Engine, session_id: str) -> list[SessionEvent]:
    with Session(engine) as db:
        return list(
            db.exec(
                select(SessionEvent)
                .where(SessionEvent.session_id == session_id)
                .order_by(col(SessionEvent.seq))
            ).all()
        )


async def _store_together(
    batches: list[tuple[str, str, list[DriverEvent]]],
) -> list[list[StoredEvent] | BaseException]:
    """The batches handed to one writer in the same moment, as connections' frames arriving
    while the writer is busy are: they wait for the same transaction."""
    client = aioredis.Redis(db=TEST_REDIS_DB)
    writer = EventWriter(client)
    try:
        return await asyncio.gather(
            *(
                writer.store(instance, connection, events)
                for instance, connection, events in batches
            ),
            return_exceptions=True,
        )
    finally:
        await writer.close()
        await client.aclose()


async def _send_batches(
    control: ControlServer, booted: Booted, batches: list[list[str]]
) -> list[dict[str, Any]]:
    """A driver's hello, then each batch of deltas (named by source_event_id) sent once the
    one before it is acknowledged; the acks."""
    async with control.connect() as ws:
        await ws.send(hello(booted.instance_id, boot_token=booted.boot_token))
        assert (await recv_json(ws))["type"] == "welcome"
        acks = []
        for batch in batches:
            events = [event(booted.run_id, source, "message.delta", text="x") for source in batch]
            await ws.send(json.dumps({"type": "events", "events": events}))
            reply = await recv_json(ws)
            while reply["type"] != "ack":
                reply = await recv_json(ws)
            acks.append(reply)
        return acks


def test_batches_arriving_together_are_committed_once_and_each_answered_with_its_seqs(
    engine: Engine, stream_redis: redis.Redis
) -> None:
    threads = _connected(engine, 4)
    commits: list[Any] = []

    def count(connection: Any) -> None:
        commits.append(connection)

    sa.event.listen(engine, "commit", count)
    try:
        answers = asyncio.run(
            _store_together(
                [
                    (booted.instance_id, connection, _deltas(booted.run_id, booted.session_id, 10))
                    for booted, connection in threads
                ]
            )
        )
    finally:
        sa.event.remove(engine, "commit", count)
    assert len(commits) == 1
    for (booted, _), answer in zip(threads, answers, strict=True):
        assert isinstance(answer, list)
        rows = _stored_rows(engine, booted.session_id)
        deltas = [row for row in rows if row.type == "agent.message.delta"]
        assert [row.source_event_id for row in deltas] == [
            f"{booted.session_id}-{i}" for i in range(10)
        ]
        assert [row.seq for row in rows] == list(range(1, len(rows) + 1))
        assert [stored.seq for stored in answer] == [row.seq for row in deltas]
        assert streamed_seqs(stream_redis, booted.session_id) == [row.seq for row in deltas]


def test_a_refused_batch_neither_loses_nor_refuses_the_batches_committed_with_it(
    engine: Engine, stream_redis: redis.Redis
) -> None:
    (first, first_conn), (rogue, rogue_conn), (stale, _), (last, last_conn) = _connected(engine, 4)
    answers = asyncio.run(
        _store_together(
            [
                (first.instance_id, first_conn, _deltas(first.run_id, "first", 3)),
                # Names the first thread's run: not this driver's.
                (rogue.instance_id, rogue_conn, _deltas(first.run_id, "rogue", 3)),
                # A connection a newer hello replaced.
                (stale.instance_id, "01STALECONNECTION000000000", _deltas(stale.run_id, "s", 3)),
                (last.instance_id, last_conn, _deltas(last.run_id, "last", 3)),
            ]
        )
    )
    first_answer, rogue_answer, stale_answer, last_answer = answers
    assert isinstance(rogue_answer, driver_plane.DriverRefused)
    assert rogue_answer.code == "foreign_run"
    assert isinstance(stale_answer, driver_plane.DriverRefused)
    assert stale_answer.code == "superseded"
    for booted, prefix, answer in ((first, "first", first_answer), (last, "last", last_answer)):
        assert isinstance(answer, list) and len(answer) == 3
        rows = _stored_rows(engine, booted.session_id)
        assert [row.seq for row in rows] == list(range(1, len(rows) + 1))
        assert [r.source_event_id for r in rows if r.source_event_id] == [
            f"{prefix}-{i}" for i in range(3)
        ]
    for booted in (rogue, stale):
        assert all(row.source_event_id is None for row in _stored_rows(engine, booted.session_id))


def test_a_rolled_back_transaction_does_not_cost_a_run_its_first_token_mark(
    engine: Engine,
) -> None:
    """When a group's transaction rolls back, its batches are stored again one by one: the
    first token seen in the rolled-back attempt must still be marked."""
    ((booted, _),) = _connected(engine, 1)
    with Session(engine) as db:
        instance = db.get(DriverInstance, booted.instance_id)
        assert instance is not None
        driver_plane.ingest_driver_events(db, instance, _deltas(booted.run_id, "tok", 1))
        db.rollback()
    with Session(engine) as db:
        instance = db.get(DriverInstance, booted.instance_id)
        assert instance is not None
        driver_plane.ingest_driver_events(db, instance, _deltas(booted.run_id, "tok", 1))
        db.commit()
        marks = db.exec(select(RunMark.name).where(RunMark.run_id == booted.run_id)).all()
    assert "first_token" in marks


def test_a_batch_sent_again_in_the_same_transaction_is_stored_once(
    engine: Engine, stream_redis: redis.Redis
) -> None:
    ((booted, connection),) = _connected(engine, 1)
    batch = _deltas(booted.run_id, "again", 5)
    first, again = asyncio.run(
        _store_together(
            [(booted.instance_id, connection, batch), (booted.instance_id, connection, batch)]
        )
    )
    assert isinstance(first, list) and isinstance(again, list)
    assert [s.seq for s in again] == [s.seq for s in first]
    assert all(s.duplicate for s in again) and not any(s.duplicate for s in first)
    rows = _stored_rows(engine, booted.session_id)
    assert [row.seq for row in rows] == list(range(1, len(rows) + 1))
    assert sum(1 for row in rows if row.source_event_id) == 5
    assert len(streamed_seqs(stream_redis, booted.session_id)) == 5


def test_many_drivers_at_once_get_every_event_stored_once_in_order_and_a_rogue_is_refused(
    control: ControlServer, engine: Engine
) -> None:
    drivers = 8
    with Session(engine) as db:
        threads = [boot_fixture(db, f"many{i}@example.com") for i in range(drivers)]

    async def play(booted: Booted) -> list[dict[str, Any]]:
        batches = [[f"{booted.run_id}-{b}-{i}" for i in range(20)] for b in range(5)]
        return await _send_batches(control, booted, batches)

    async def rogue(booted: Booted, victim: Booted) -> dict[str, Any]:
        async with control.connect() as ws:
            await ws.send(hello(booted.instance_id, boot_token=booted.boot_token))
            assert (await recv_json(ws))["type"] == "welcome"
            await ws.send(
                json.dumps(
                    {
                        "type": "events",
                        "events": [event(victim.run_id, "rogue-1", "message.delta", text="x")],
                    }
                )
            )
            reply = await recv_json(ws)
            while reply["type"] != "close":
                reply = await recv_json(ws)
            return reply

    async def scenario() -> tuple[list[list[dict[str, Any]]], dict[str, Any]]:
        with Session(engine) as db:
            attacker = boot_fixture(db, "rogue@example.com")
        played = asyncio.gather(*(play(booted) for booted in threads))
        refused = rogue(attacker, threads[0])
        acks, close = await asyncio.gather(played, refused)
        return acks, close

    acks, close = asyncio.run(scenario())
    assert close["code"] == "foreign_run"
    for booted, driver_acks in zip(threads, acks, strict=True):
        rows = _stored_rows(engine, booted.session_id)
        assert [row.seq for row in rows] == list(range(1, len(rows) + 1))
        sources = [row.source_event_id for row in rows if row.source_event_id]
        assert sources == [f"{booted.run_id}-{b}-{i}" for b in range(5) for i in range(20)]
        by_source = {row.source_event_id: row.seq for row in rows}
        for ack in driver_acks:
            assert ack["seqs"] == [by_source[source] for source in ack["source_event_ids"]]
    with Session(engine) as db:
        assert not db.exec(
            select(SessionEvent).where(SessionEvent.source_event_id == "rogue-1")
        ).first()


def test_an_event_sent_again_after_batches_that_repeated_nothing_is_still_stored_once(
    control: ControlServer, engine: Engine
) -> None:
    """Once a connection's batch repeats nothing, control stops looking its events up: a
    driver that sends an old one again all the same (through the socket, as a rogue or
    broken driver would) has it refused by the unique index, and the batch is stored again
    with the lookup: the old event answered with its seq, the new ones stored once."""
    with Session(engine) as db:
        booted = boot_fixture(db, "again@example.com")

    batches = [["a1", "a2"], ["b1"], ["a1", "c1", "c2"]]
    first, _, again = asyncio.run(_send_batches(control, booted, batches))
    rows = _stored_rows(engine, booted.session_id)
    assert [row.seq for row in rows] == list(range(1, len(rows) + 1))
    sources = [row.source_event_id for row in rows if row.source_event_id]
    assert sources == ["a1", "a2", "b1", "c1", "c2"]
    by_source = {row.source_event_id: row.seq for row in rows}
    assert again["source_event_ids"] == ["a1", "c1", "c2"]
    assert again["seqs"] == [by_source["a1"], by_source["c1"], by_source["c2"]]
    assert again["seqs"][0] == first["seqs"][0]
