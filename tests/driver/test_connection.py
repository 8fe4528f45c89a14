"""The control connection against a small control harness over a Unix socket."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from driver import __version__
from driver.connection import ControlConnection, ControlRejected, ControlUnreachable
from driver.protocol import MAX_FRAME_BYTES, PROTOCOL_VERSION, Command
from tests.driver.conftest import wait_for
from tests.support.control_harness import ControlHarness


class RecordingBackend:
    """Stands in for a backend: records when it started and which commands it got."""

    def __init__(self, harness: ControlHarness) -> None:
        self.harness = harness
        self.frames_when_started: int | None = None
        self.commands: list[Command] = []
        self.connection: ControlConnection | None = None

    async def start(self) -> None:
        self.frames_when_started = len(self.harness.frames)

    async def handle(self, command: Command) -> None:
        self.commands.append(command)
        assert self.connection is not None
        self.connection.command_update(
            command.command_id, "completed", result={"n": len(self.commands)}
        )


@pytest.fixture
def harness(socket_dir: Path) -> Iterator[ControlHarness]:
    with ControlHarness(socket_dir / "control.sock", heartbeat_interval_ms=50) as running_harness:
        yield running_harness


def make_connection(
    harness: ControlHarness, backend: RecordingBackend, **options: float
) -> ControlConnection:
    connection = ControlConnection(
        control_url=harness.control_url,
        driver_instance_id="drv_1",
        boot_token=harness.boot_token,
        runtime="openai",
        capabilities=["text_stream", "cancel"],
        on_command=backend.handle,
        on_first_welcome=backend.start,
        initial_backoff=options.get("initial_backoff", 0.02),
        max_backoff=options.get("max_backoff", 0.2),
        give_up_after=options.get("give_up_after", 30),
    )
    backend.connection = connection
    return connection


@asynccontextmanager
async def running(connection: ControlConnection) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(connection.run())
    try:
        yield task
    finally:
        connection.stop()
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), timeout=10)


async def test_hello_welcome_then_backend_start_then_ready_and_heartbeats(
    harness: ControlHarness,
) -> None:
    backend = RecordingBackend(harness)
    connection = make_connection(harness, backend)
    async with running(connection):
        await harness.wait(lambda: len(harness.of_type("heartbeat")) >= 3, what="three heartbeats")
    hello = harness.of_type("hello")[0]
    assert hello == {
        "type": "hello",
        "driver_instance_id": "drv_1",
        "boot_token": harness.boot_token,
        "protocol_version": PROTOCOL_VERSION,
        "driver_version": __version__,
        "runtime": "openai",
        "capabilities": ["text_stream", "cancel"],
        "pid": os.getpid(),
    }
    types = [f.type for f in harness.frames]
    assert types[:2] == ["hello", "ready"]
    assert backend.frames_when_started == 1  # started after welcome, before ready
    assert connection.resume_token == harness.issued_resume_tokens[-1]


async def test_events_go_in_batches_of_at_most_64_and_acks_drop_them(
    harness: ControlHarness,
) -> None:
    backend = RecordingBackend(harness)
    connection = make_connection(harness, backend)
    async with running(connection):
        await asyncio.wait_for(connection.connected.wait(), 5)
        ids = [connection.emit("run-1", "message.delta", {"text": f"t{i}"}) for i in range(150)]
        await harness.wait(lambda: len(harness.events) == 150, what="150 events")
        await wait_for(lambda: connection.unacked_count == 0, what="every event acknowledged")
    assert [e["source_event_id"] for e in harness.events] == ids
    assert [e["payload"]["text"] for e in harness.events] == [f"t{i}" for i in range(150)]
    batches = harness.of_type("events")
    assert all(1 <= len(b["events"]) <= 64 for b in batches)
    assert len(batches) >= 3
    event = harness.events[0]
    assert event["run_id"] == "run-1" and event["kind"] == "message.delta"
    assert event["occurred_at"].endswith("Z") and "T" in event["occurred_at"]
    assert len(set(ids)) == 150


async def test_unacked_events_are_resent_after_a_drop_with_the_rotated_resume_token(
    harness: ControlHarness,
) -> None:
    harness.auto_ack = False
    backend = RecordingBackend(harness)
    connection = make_connection(harness, backend)
    async with running(connection):
        await asyncio.wait_for(connection.connected.wait(), 5)
        ids = [connection.emit("run-1", "message.delta", {"text": str(i)}) for i in range(3)]
        await harness.wait(lambda: len(harness.events) == 3, what="the events")
        assert connection.unacked_count == 3

        harness.drop()
        await harness.wait(
            lambda: harness.connection_count == 2 and harness.of_type("events", 2),
            what="a reconnect",
        )
        resent = [
            e["source_event_id"] for batch in harness.of_type("events", 2) for e in batch["events"]
        ]
        assert resent == ids
        second_hello = harness.of_type("hello", 2)[0]
        assert second_hello["resume_token"] == harness.issued_resume_tokens[0]
        assert "boot_token" not in second_hello
        assert harness.of_type("ready", 2)

        harness.ack(ids)
        await wait_for(lambda: connection.unacked_count == 0, what="the ack")
        harness.drop()
        await harness.wait(
            lambda: harness.connection_count == 3 and harness.of_type("ready", 3),
            what="a second reconnect",
        )
        third_hello = harness.of_type("hello", 3)[0]
        assert third_hello["resume_token"] == harness.issued_resume_tokens[1]
        assert third_hello["last_acked_source_event_id"] == ids[-1]
        await asyncio.sleep(0.1)
        assert harness.of_type("events", 3) == []
    assert backend.frames_when_started == 1  # the backend starts once, not per connection


async def test_a_redelivered_command_is_handled_once_and_its_status_sent_again(
    harness: ControlHarness,
) -> None:
    backend = RecordingBackend(harness)
    connection = make_connection(harness, backend)
    async with running(connection):
        await asyncio.wait_for(connection.connected.wait(), 5)
        harness.send_command("input.start", {"run_id": "run-1", "text": "hi"}, command_id="cmd-1")
        harness.send_command("input.start", {"run_id": "run-1", "text": "hi"}, command_id="cmd-1")
        await harness.wait(lambda: len(harness.command_updates("cmd-1")) == 2, what="two updates")
    assert len(backend.commands) == 1
    updates = [m for m in harness.of_type("command_update") if m["command_id"] == "cmd-1"]
    assert (
        updates[0]
        == updates[1]
        == {
            "type": "command_update",
            "command_id": "cmd-1",
            "status": "completed",
            "result": {"n": 1},
        }
    )


async def test_bad_frames_from_control_are_ignored(harness: ControlHarness) -> None:
    backend = RecordingBackend(harness)
    connection = make_connection(harness, backend)
    async with running(connection):
        await asyncio.wait_for(connection.connected.wait(), 5)
        harness.send({"type": "bogus"})
        harness.send({"type": "command", "kind": "input.start"})
        harness.send_command("turn.cancel", {"run_id": "r"}, command_id="cmd-after")
        await harness.wait(
            lambda: harness.command_updates("cmd-after") == ["completed"],
            what="the command after bad frames",
        )
    assert harness.connection_count == 1


async def test_a_refused_hello_stops_the_connection_with_the_reason(
    harness: ControlHarness,
) -> None:
    harness.reject_next_hello = ("boot_token_invalid", "unknown boot token")
    backend = RecordingBackend(harness)
    connection = make_connection(harness, backend)
    with pytest.raises(ControlRejected) as rejected:
        await asyncio.wait_for(connection.run(), timeout=5)
    assert (rejected.value.code, rejected.value.reason) == (
        "boot_token_invalid",
        "unknown boot token",
    )
    assert backend.frames_when_started is None


async def test_close_with_a_reason_mid_connection_stops_the_driver(harness: ControlHarness) -> None:
    backend = RecordingBackend(harness)
    connection = make_connection(harness, backend)
    task = asyncio.create_task(connection.run())
    await asyncio.wait_for(connection.connected.wait(), 5)
    harness.close_driver("superseded", "another driver instance took over")
    with pytest.raises(ControlRejected) as rejected:
        await asyncio.wait_for(task, timeout=5)
    assert rejected.value.code == "superseded"
    assert harness.connection_count == 1


async def test_close_asking_to_reconnect_reconnects(harness: ControlHarness) -> None:
    backend = RecordingBackend(harness)
    connection = make_connection(harness, backend)
    async with running(connection):
        await asyncio.wait_for(connection.connected.wait(), 5)
        harness.close_driver("going_away", "control restarts")
        await harness.wait(lambda: harness.of_type("ready", 2) != [], what="a reconnect")


async def test_an_event_over_the_frame_limit_is_truncated_not_lost(harness: ControlHarness) -> None:
    backend = RecordingBackend(harness)
    connection = make_connection(harness, backend)
    async with running(connection):
        await asyncio.wait_for(connection.connected.wait(), 5)
        connection.emit(
            "run-1",
            "tool.call.completed",
            {
                "tool_call_id": "c",
                "output": "x" * (3 * MAX_FRAME_BYTES),
                "is_error": False,
                "duration_ms": 1,
            },
        )
        connection.emit("run-1", "run.completed", {"final_text": "done"})
        await harness.wait(lambda: len(harness.events) == 2, what="both events")
    big = harness.events[0]["payload"]
    assert big["truncated"] is True and big["tool_call_id"] == "c"
    assert "characters omitted" in big["output"]
    assert all(len(json.dumps(b)) < MAX_FRAME_BYTES for b in harness.of_type("events"))


async def test_log_lines_reach_control(harness: ControlHarness) -> None:
    backend = RecordingBackend(harness)
    connection = make_connection(harness, backend)
    async with running(connection):
        await asyncio.wait_for(connection.connected.wait(), 5)
        connection.log_line("warning", "something odd")
        await harness.wait(lambda: harness.of_type("logs") != [], what="a logs frame")
    line = harness.of_type("logs")[0]["lines"][0]
    assert (line["level"], line["message"]) == ("warning", "something odd")


async def test_stop_flushes_queued_events_before_closing(harness: ControlHarness) -> None:
    backend = RecordingBackend(harness)
    connection = make_connection(harness, backend)
    task = asyncio.create_task(connection.run())
    await asyncio.wait_for(connection.connected.wait(), 5)
    for i in range(10):
        connection.emit("run-1", "message.delta", {"text": str(i)})
    connection.stop()
    await asyncio.wait_for(task, timeout=10)
    assert len(harness.events) == 10
    assert connection.unacked_count == 0


async def test_gives_up_when_control_stays_unreachable(socket_dir: Path) -> None:
    connection = ControlConnection(
        control_url=f"unix://{socket_dir}/absent.sock",
        driver_instance_id="drv_1",
        boot_token="t",
        runtime="openai",
        initial_backoff=0.01,
        max_backoff=0.05,
        give_up_after=0.3,
    )
    with pytest.raises(ControlUnreachable):
        await asyncio.wait_for(connection.run(), timeout=5)


def test_the_control_url_must_be_unix_or_websocket() -> None:
    with pytest.raises(ValueError, match="control_url"):
        ControlConnection(
            control_url="http://control", driver_instance_id="d", boot_token="t", runtime="openai"
        )
