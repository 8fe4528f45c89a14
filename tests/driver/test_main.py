"""The real driver process (`python -m driver.main`) against the control harness, the
forwarder and the scripted model server: boot, a run end to end, stop, refusals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from driver.main import BOOT_PAYLOAD_ENV, read_boot_payload
from tests.driver.conftest import BOOT_TOKEN, GRANT, make_spec
from tests.support.control_harness import ControlHarness
from tests.support.openai_server import ScriptedOpenAIServer, TextTurn, ToolCall, ToolCallsTurn

ROOT = Path(__file__).resolve().parents[2]


def write_payload(
    directory: Path, control_url: str, workspace: Path, runtime: str = "openai", **spec: Any
) -> Path:
    payload = {
        "control_url": control_url,
        "driver_instance_id": "drv_main_1",
        "boot_token": BOOT_TOKEN,
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "runtime": runtime,
        "execution_spec": make_spec(workspace, runtime=runtime, **spec).model_dump(mode="json"),
    }
    path = directory / "payload.json"
    path.write_text(json.dumps(payload))
    path.chmod(0o600)
    return path


def start_driver(payload_file: Path | None, log_file: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOSOO_")}
    if payload_file is not None:
        env[BOOT_PAYLOAD_ENV] = str(payload_file)
    return subprocess.Popen(
        [sys.executable, "-m", "driver.main"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log_file.open("wb"),
        start_new_session=True,
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)


def log_lines(log_file: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log_file.read_text().splitlines() if line.strip()]


def assert_no_secret_in(log_file: Path, harness: ControlHarness | None = None) -> None:
    text = log_file.read_text()
    assert BOOT_TOKEN not in text
    assert GRANT not in text
    for token in harness.issued_resume_tokens if harness else []:
        assert token not in text


def test_read_boot_payload_deletes_the_file_even_when_it_is_invalid(tmp_path: Path) -> None:
    path = tmp_path / "payload.json"
    path.write_text('{"not": "a payload", "boot_token": "x"}')
    with pytest.raises(ValueError):
        read_boot_payload(path)
    assert not path.exists()


def test_a_run_end_to_end_through_the_real_driver_process(
    harness: ControlHarness, model_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    payload_file = write_payload(tmp_path, harness.control_url, workspace, tools={"bash": "allow"})
    model_server.add(
        ToolCallsTurn([ToolCall("bash", {"command": "echo made > outputs.txt; cat outputs.txt"})]),
        TextTurn("All done."),
    )
    log_file = tmp_path / "driver.log"
    process = start_driver(payload_file, log_file)
    try:
        harness.wait_sync(lambda: harness.of_type("ready") != [], timeout=20, what="ready")
        assert not payload_file.exists()
        hello = harness.of_type("hello")[0]
        assert (
            hello["boot_token"] == BOOT_TOKEN
            and hello["runtime"] == "openai"
            and hello["pid"] == process.pid
        )
        assert "permission_requests" in hello["capabilities"]

        command_id = harness.send_command(
            "input.start", {"run_id": "run-e2e", "text": "Make a file", "attachments": []}
        )
        harness.wait_sync(
            lambda: "run.completed" in harness.event_kinds("run-e2e"),
            timeout=20,
            what="run.completed",
        )
        kinds = harness.event_kinds("run-e2e")
        assert kinds[0] == "run.started" and kinds[-1] == "run.completed"
        assert "tool.call.completed" in kinds and "message.delta" in kinds
        tool_result = next(e for e in harness.events if e["kind"] == "tool.call.completed")[
            "payload"
        ]
        assert tool_result["output"] == "made"
        assert (workspace / "outputs.txt").read_text() == "made\n"
        harness.wait_sync(
            lambda: harness.command_updates(command_id) == ["accepted", "completed"],
            what="the command completed",
        )
        # The model calls went through the forwarder and control's gateway, with the grant.
        assert len(harness.gateway_requests) == 2
        assert all(
            r["headers"]["authorization"] == f"Bearer {GRANT}" for r in harness.gateway_requests
        )

        stop_id = harness.send_command("session.stop", {"reason": "done"})
        assert process.wait(15) == 0
        assert harness.command_updates(stop_id) == ["accepted", "completed"]
    finally:
        stop(process)
    lines = log_lines(log_file)
    assert {"driver_starting", "control_welcome", "run_started", "driver_exit"} <= {
        line["event"] for line in lines
    }
    assert all(
        line["driver_instance_id"] == "drv_main_1" and line["traceparent"].startswith("00-")
        for line in lines
    )
    assert_no_secret_in(log_file, harness)


def test_sigterm_mid_run_fails_the_run_as_retryable_and_exits_cleanly(
    harness: ControlHarness, model_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    payload_file = write_payload(tmp_path, harness.control_url, tmp_path / "workspace")
    model_server.add(TextTurn([f"w{i} " for i in range(200)], delay=0.05))
    log_file = tmp_path / "driver.log"
    process = start_driver(payload_file, log_file)
    try:
        harness.wait_sync(lambda: harness.of_type("ready") != [], timeout=20, what="ready")
        harness.send_command("input.start", {"run_id": "run-t", "text": "talk", "attachments": []})
        harness.wait_sync(
            lambda: "message.delta" in harness.event_kinds("run-t"), timeout=20, what="a delta"
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
    finally:
        stop(process)
    failed = [e["payload"] for e in harness.events if e["kind"] == "run.failed"]
    assert failed == [
        {
            "code": "driver_stopped",
            "message": "the driver was stopped during the run",
            "retryable": True,
        }
    ]


def test_a_refused_boot_token_exits_non_zero_with_the_reason_logged(
    harness: ControlHarness, tmp_path: Path
) -> None:
    harness.reject_next_hello = ("boot_token_expired", "the boot token expired")
    payload_file = write_payload(tmp_path, harness.control_url, tmp_path / "workspace")
    log_file = tmp_path / "driver.log"
    process = start_driver(payload_file, log_file)
    try:
        assert process.wait(20) == 1
    finally:
        stop(process)
    assert not payload_file.exists()
    rejected = [line for line in log_lines(log_file) if line["event"] == "driver_rejected"]
    assert (
        rejected
        and rejected[0]["code"] == "boot_token_expired"
        and rejected[0]["reason"] == "the boot token expired"
    )
    assert_no_secret_in(log_file)


def test_an_unsupported_runtime_connects_and_fails_each_run_clearly(
    harness: ControlHarness, tmp_path: Path
) -> None:
    payload_file = write_payload(
        tmp_path, harness.control_url, tmp_path / "workspace", runtime="gemini"
    )
    log_file = tmp_path / "driver.log"
    process = start_driver(payload_file, log_file)
    try:
        harness.wait_sync(lambda: harness.of_type("ready") != [], timeout=20, what="ready")
        assert harness.of_type("hello")[0]["capabilities"] == []
        command_id = harness.send_command(
            "input.start", {"run_id": "run-gemini", "text": "hi", "attachments": []}
        )
        harness.wait_sync(
            lambda: harness.command_updates(command_id) == ["failed"], what="the refusal"
        )
        assert harness.event_kinds("run-gemini") == ["run.failed"]
        assert harness.events[-1]["payload"]["code"] == "runtime_unsupported"
    finally:
        stop(process)


@pytest.mark.parametrize("content", [None, "{broken json", '{"control_url": "unix:///x"}'])
def test_a_missing_or_invalid_payload_exits_2_and_the_file_is_gone(
    tmp_path: Path, content: str | None
) -> None:
    payload_file = tmp_path / "payload.json"
    if content is not None:
        payload_file.write_text(content)
    log_file = tmp_path / "driver.log"
    process = start_driver(payload_file if content is not None else None, log_file)
    try:
        assert process.wait(20) == 2
    finally:
        stop(process)
    assert not payload_file.exists()
    events = {line["event"] for line in log_lines(log_file)}
    assert events & {"boot_payload_missing", "boot_payload_invalid"}


def test_the_payload_file_is_deleted_before_control_answers(
    tmp_path: Path, socket_dir: Path
) -> None:
    payload_file = write_payload(
        tmp_path, f"unix://{socket_dir}/nobody-listens.sock", tmp_path / "workspace"
    )
    log_file = tmp_path / "driver.log"
    process = start_driver(payload_file, log_file)
    try:
        deadline = time.monotonic() + 20
        while payload_file.exists():
            assert time.monotonic() < deadline, "the payload file was not deleted"
            time.sleep(0.02)
        assert process.poll() is None  # still trying to reach control
    finally:
        stop(process)
    assert_no_secret_in(log_file)
