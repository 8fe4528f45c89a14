"""How the control connection batches events: one batch awaits its ack at a time, and what
the backend emits meanwhile goes in the next batch, together."""

from __future__ import annotations

import asyncio
from pathlib import Path

from driver.connection import ControlConnection
from tests.driver.conftest import wait_for
from tests.support.control_harness import ControlHarness


async def test_events_emitted_while_a_batch_awaits_its_ack_go_together_in_the_next(
    socket_dir: Path,
) -> None:
    with ControlHarness(socket_dir / "control.sock", auto_ack=False) as harness:
        connection = ControlConnection(
            control_url=harness.control_url,
            driver_instance_id="drv_1",
            boot_token=harness.boot_token,
            runtime="openai",
            initial_backoff=0.02,
            max_backoff=0.2,
        )
        task = asyncio.create_task(connection.run())
        try:
            await asyncio.wait_for(connection.connected.wait(), 5)
            first = connection.emit("run-1", "message.delta", {"text": "a"})
            await harness.wait(lambda: len(harness.of_type("events")) == 1, what="a batch")
            later = []
            for index in range(10):
                later.append(connection.emit("run-1", "message.delta", {"text": str(index)}))
                # A backend's tokens come apart in time: the send loop runs between them.
                await asyncio.sleep(0.005)
            assert len(harness.of_type("events")) == 1  # nothing more before the ack
            harness.ack([first])
            await harness.wait(lambda: len(harness.of_type("events")) == 2, what="the next")
            second = harness.of_type("events")[1]["events"]
            assert [event["source_event_id"] for event in second] == later
            harness.ack(later)
            await wait_for(lambda: connection.unacked_count == 0, what="every event acked")
        finally:
            connection.stop()
            await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), timeout=10)
