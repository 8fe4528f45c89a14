"""A driver booted without a run (a warm pool member, or a cold Task start): the real driver
process stands by, takes its run as `assign` (PROTOCOL v2), restores the thread's workspace
from control, says ready with its capabilities and runs; what it refuses, and how it stops."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

from driver.protocol import PROTOCOL_VERSION, Assignment
from tests.driver.conftest import BOOT_TOKEN, GRANT, make_spec
from tests.driver.test_main import assert_no_secret_in, log_lines, start_driver, stop
from tests.support.control_harness import ControlHarness
from tests.support.openai_server import ScriptedOpenAIServer, TextTurn


def standby_payload(directory: Path, control_url: str, runtime: str = "openai") -> Path:
    path = directory / "standby.json"
    path.write_text(
        json.dumps(
            {
                "control_url": control_url,
                "driver_instance_id": "drv_standby_1",
                "boot_token": BOOT_TOKEN,
                "runtime": runtime,
            }
        )
    )
    path.chmod(0o600)
    return path


def assignment(workspace: Path, *, restore: bool = False, **spec: Any) -> dict[str, Any]:
    return Assignment(
        execution_spec=make_spec(workspace, **spec),
        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        restore_workspace=restore,
    ).model_dump(mode="json")


def _standing_by(harness: ControlHarness) -> bool:
    return any(frame.get("standby") for frame in harness.of_type("ready"))


def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_a_standby_driver_takes_its_run_restores_the_workspace_and_answers(
    harness: ControlHarness, model_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    harness.workspace_tar = _tar({"./notes/kept.txt": b"from the last run\n"})
    payload_file = standby_payload(tmp_path, harness.control_url)
    log_file = tmp_path / "driver.log"
    process = start_driver(payload_file, log_file)
    try:
        harness.wait_sync(lambda: _standing_by(harness), timeout=30, what="ready {standby}")
        assert not payload_file.exists()
        hello = harness.of_type("hello")[0]
        assert hello["protocol_version"] == PROTOCOL_VERSION
        assert hello["capabilities"] == []  # no backend yet: named with the ready after assign
        assert not (workspace / "notes").exists()

        # Nothing but a run (or a stop) is taken before there is a run.
        early = harness.send_command(
            "input.start", {"run_id": "run-early", "text": "hi", "attachments": []}
        )
        harness.wait_sync(lambda: harness.command_updates(early) == ["failed"], what="refused")

        assign_id = harness.send_command("assign", assignment(workspace, restore=True))
        harness.wait_sync(
            lambda: harness.command_updates(assign_id) == ["accepted", "completed"],
            timeout=30,
            what="the assignment taken",
        )
        harness.wait_sync(
            lambda: any(not f.get("standby") for f in harness.of_type("ready")),
            what="ready for the run",
        )
        ready = next(f for f in harness.of_type("ready") if not f.get("standby"))
        assert "permission_requests" in ready["capabilities"]
        # The checkpoint was there before the driver said ready.
        assert (workspace / "notes" / "kept.txt").read_text() == "from the last run\n"

        model_server.add(TextTurn("Taken from the pool."))
        command_id = harness.send_command(
            "input.start", {"run_id": "run-pool", "text": "hello", "attachments": []}
        )
        harness.wait_sync(
            lambda: "run.completed" in harness.event_kinds("run-pool"),
            timeout=30,
            what="run.completed",
        )
        # The command's own update follows the run's last event (driver/backends/base.py).
        harness.wait_sync(
            lambda: harness.command_updates(command_id) == ["accepted", "completed"],
            what="the input.start command completed",
        )
        assert all(
            r["headers"]["authorization"] == f"Bearer {GRANT}" for r in harness.gateway_requests
        )
        # A second assignment, or a redelivered one under a new id, is refused.
        again = harness.send_command("assign", assignment(workspace))
        harness.wait_sync(lambda: harness.command_updates(again) == ["failed"], what="refused")
        stop_id = harness.send_command("session.stop", {"reason": "done"})
        assert process.wait(15) == 0
        assert harness.command_updates(stop_id) == ["accepted", "completed"]
    finally:
        stop(process)
    events = {line["event"] for line in log_lines(log_file)}
    assert {"driver_starting", "assigned", "workspace_restored", "driver_exit"} <= events
    assert_no_secret_in(log_file, harness)


def test_an_assignment_it_cannot_take_is_refused_and_the_driver_keeps_standing_by(
    harness: ControlHarness, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    process = start_driver(standby_payload(tmp_path, harness.control_url), tmp_path / "d.log")
    try:
        harness.wait_sync(lambda: _standing_by(harness), timeout=30, what="ready {standby}")
        other = harness.send_command("assign", assignment(workspace, runtime="claude"))
        bad = harness.send_command("assign", {"execution_spec": {"gateway": {"grant": GRANT}}})
        harness.wait_sync(
            lambda: (
                harness.command_updates(other) == ["failed"]
                and harness.command_updates(bad) == ["failed"]
            ),
            what="both refused",
        )
        assert process.poll() is None
        assert [f for f in harness.of_type("ready") if not f.get("standby")] == []
        # A checkpoint that will not extract fails the assignment, with tar's reason.
        harness.workspace_tar = b"this is not a tar archive" * 100
        broken = harness.send_command("assign", assignment(workspace, restore=True))
        harness.wait_sync(
            lambda: harness.command_updates(broken) == ["accepted", "failed"],
            timeout=30,
            what="a broken checkpoint refused",
        )
        stop_id = harness.send_command("session.stop", {"reason": "retired"})
        assert process.wait(15) == 0
        assert harness.command_updates(stop_id) == ["completed"]
    finally:
        stop(process)
    assert_no_secret_in(tmp_path / "d.log", harness)


def test_a_checkpoint_cannot_write_outside_the_workspace(
    harness: ControlHarness, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    harness.workspace_tar = _tar(
        {"../escaped.txt": b"out\n", "/tmp/absolute-escape.txt": b"out\n", "inside.txt": b"in\n"}
    )
    process = start_driver(standby_payload(tmp_path, harness.control_url), tmp_path / "d.log")
    try:
        harness.wait_sync(lambda: _standing_by(harness), timeout=30, what="ready {standby}")
        assign_id = harness.send_command("assign", assignment(workspace, restore=True))
        harness.wait_sync(
            lambda: harness.command_updates(assign_id)[-1:] in (["completed"], ["failed"]),
            timeout=30,
            what="the assignment answered",
        )
    finally:
        stop(process)
    assert not (tmp_path / "escaped.txt").exists()
    assert not Path("/tmp/absolute-escape.txt").exists()
