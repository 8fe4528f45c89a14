"""`GET /threads/{id}/events/stream` against a real uvicorn server on loopback: resumable
with Last-Event-ID (no gap, no duplicate), keep-alive comments, ends when the client leaves."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import streams
from mosoo_core.sessions import driver_plane
from mosoo_core.sessions.driver_plane import NewEvent
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.sessions import SessionEvent
from tests.api.conftest import REDIS_DB, REDIS_URL, ApiOwner, LiveServer, live_server
from tests.support.processes import wait_for


@pytest.fixture
def server(api_env: Engine, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveServer]:
    monkeypatch.setenv("MOSOO_API_SSE_KEEPALIVE_SECONDS", "1")
    reset_settings_cache()
    with live_server() as running:
        yield running


def _new_thread(server: LiveServer, owner: ApiOwner) -> str:
    response = httpx.post(
        f"{server.base_url}/api/v1/agents/{owner.agent_id}/threads", headers=owner.headers, json={}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["thread"]["id"])


def _frames(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """Parse SSE lines into frames: {"id", "event", "data"} or {"comment"}."""
    frame: dict[str, Any] = {}
    for line in lines:
        if line == "":
            if frame:
                yield frame
            frame = {}
        elif line.startswith(":"):
            yield {"comment": line[1:].strip()}
        else:
            name, _, value = line.partition(":")
            frame[name] = value.removeprefix(" ")


class Producer(threading.Thread):
    """Appends events in small batches as a run would, publishing most batches to Redis (a
    skipped publish is what a Redis hiccup looks like: the stream must still be complete)."""

    def __init__(self, engine: Engine, thread_id: str, total: int) -> None:
        super().__init__(daemon=True)
        self.engine, self.thread_id, self.total = engine, thread_id, total
        self.error: BaseException | None = None
        self.random = random.Random(7)

    def run(self) -> None:
        try:
            written = 0
            while written < self.total:
                size = min(self.random.randint(1, 8), self.total - written)
                with Session(self.engine) as db:
                    stored = driver_plane.append_events(
                        db,
                        self.thread_id,
                        [
                            NewEvent("agent.message.delta", {"text": f"t{written + n} "})
                            for n in range(size)
                        ],
                    )
                    db.commit()
                if self.random.random() > 0.1:
                    streams.publish_events(stored)
                written += size
                time.sleep(self.random.uniform(0, 0.01))
        except BaseException as error:  # surfaced by the test
            self.error = error


def test_reconnecting_with_last_event_id_receives_the_log_exactly_once(
    server: LiveServer, owner: ApiOwner, api_env: Engine
) -> None:
    thread_id = _new_thread(server, owner)
    total = 600
    producer = Producer(api_env, thread_id, total)
    producer.start()
    chooser = random.Random(11)
    received: list[dict[str, Any]] = []
    last_id: str | None = None
    connections = 0
    deadline = time.monotonic() + 120
    while (not received or received[-1]["seq"] < total) and time.monotonic() < deadline:
        connections += 1
        stop_after = chooser.randint(1, 80)
        headers = {**owner.headers, **({"Last-Event-ID": last_id} if last_id else {})}
        with httpx.stream(
            "GET",
            f"{server.base_url}/api/v1/threads/{thread_id}/events/stream",
            headers=headers,
            timeout=30,
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            taken = 0
            for frame in _frames(response.iter_lines()):
                if "comment" in frame:
                    continue
                event = json.loads(frame["data"])
                assert frame["id"] == str(event["seq"]) and frame["event"] == event["type"]
                received.append(event)
                last_id = frame["id"]
                taken += 1
                if taken >= stop_after or event["seq"] >= total:
                    break  # leave mid-stream, at a random point
    producer.join(30)
    assert producer.error is None
    assert connections > 5
    with Session(api_env) as db:
        stored = db.exec(
            select(SessionEvent)
            .where(SessionEvent.session_id == thread_id)
            .order_by(SessionEvent.seq)
        ).all()
    assert [e["seq"] for e in received] == [row.seq for row in stored] == list(range(1, total + 1))
    assert [e["payload"] for e in received] == [row.payload for row in stored]


def test_after_seq_starts_later_and_live_events_follow(
    server: LiveServer, owner: ApiOwner, api_env: Engine
) -> None:
    thread_id = _new_thread(server, owner)
    with Session(api_env) as db:
        streams.publish_events(
            driver_plane.append_events(
                db, thread_id, [NewEvent("agent.message.delta", {"text": "a"}) for _ in range(3)]
            )
        )
        db.commit()
    seqs: list[int] = []
    with httpx.stream(
        "GET",
        f"{server.base_url}/api/v1/threads/{thread_id}/events/stream?after_seq=2",
        headers=owner.headers,
        timeout=30,
    ) as response:
        for frame in _frames(response.iter_lines()):
            if "comment" in frame:
                continue
            seqs.append(int(frame["id"]))
            if len(seqs) == 1:  # now append live
                with Session(api_env) as db:
                    stored = driver_plane.append_events(
                        db, thread_id, [NewEvent("run.completed", {})]
                    )
                    db.commit()
                streams.publish_events(stored)
            if len(seqs) == 2:
                break
    assert seqs == [3, 4]


def test_idle_streams_send_keep_alive_comments(server: LiveServer, owner: ApiOwner) -> None:
    thread_id = _new_thread(server, owner)
    started = time.monotonic()
    with httpx.stream(
        "GET",
        f"{server.base_url}/api/v1/threads/{thread_id}/events/stream",
        headers=owner.headers,
        timeout=30,
    ) as response:
        first = next(_frames(response.iter_lines()))
    assert first == {"comment": "keep-alive"}
    assert 0.9 <= time.monotonic() - started < 10


def _blocked_stream_readers() -> int:
    clients = redis.Redis.from_url(REDIS_URL).client_list()
    return sum(
        1
        for client in clients
        if client.get("cmd") == "xread" and client.get("db") == str(REDIS_DB)
    )


def test_the_stream_ends_when_the_client_goes_away(server: LiveServer, owner: ApiOwner) -> None:
    thread_id = _new_thread(server, owner)
    before = _blocked_stream_readers()
    with httpx.stream(
        "GET",
        f"{server.base_url}/api/v1/threads/{thread_id}/events/stream",
        headers=owner.headers,
        timeout=30,
    ) as response:
        frames = _frames(response.iter_lines())
        assert next(frames) == {"comment": "keep-alive"}
        wait_for(
            lambda: _blocked_stream_readers() == before + 1,
            15,
            "the server to follow the Redis stream",
        )
    wait_for(
        lambda: _blocked_stream_readers() == before,
        15,
        "the server to stop following after the client left",
    )


def test_stream_errors_are_json_before_the_stream_starts(
    server: LiveServer, owner: ApiOwner, other: ApiOwner
) -> None:
    thread_id = _new_thread(server, owner)
    url = f"{server.base_url}/api/v1/threads/{thread_id}/events/stream"
    foreign = httpx.get(url, headers=other.headers, timeout=10)
    assert foreign.status_code == 404 and foreign.json()["error"]["code"] == "not_found"
    bad = httpx.get(url, headers={**owner.headers, "Last-Event-ID": "abc"}, timeout=10)
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "Last-Event-ID"
    anonymous = httpx.get(url, timeout=10)
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "unauthenticated"
