"""A runtime's SDK is imported when the driver first needs it, not at boot: the real driver
process (`python -m driver.main`) against the control harness, watched with `-X importtime`
(the interpreter's own record of every import). A missing SDK still fails the start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from driver.main import BOOT_PAYLOAD_ENV, EXIT_BACKEND_FAILED
from tests.driver.test_main import stop, write_payload
from tests.support.control_harness import ControlHarness
from tests.support.openai_server import ScriptedOpenAIServer, TextTurn

ROOT = Path(__file__).resolve().parents[2]
# Runs driver.main as `python -m` does, with one package made unimportable first (None in
# sys.modules: `import` raises ModuleNotFoundError and find_spec finds nothing), as in a
# sandbox image built without it.
WITHOUT_PACKAGE = (
    "import runpy, sys; sys.modules[sys.argv.pop(1)] = None; "
    "runpy.run_module('driver.main', run_name='__main__', alter_sys=True)"
)


def start(argv: list[str], payload_file: Path, log_file: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOSOO_")}
    env[BOOT_PAYLOAD_ENV] = str(payload_file)
    return subprocess.Popen(
        [sys.executable, *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log_file.open("wb"),
        start_new_session=True,
    )


def payload(directory: Path, control_url: str, runtime: str, *, standby: bool) -> Path:
    """A boot payload with its run, or a standby one (no run: warm pool, cold Task start)."""
    path = write_payload(directory, control_url, directory / "ws", runtime=runtime)
    if standby:
        data = json.loads(path.read_text())
        del data["execution_spec"]
        path.write_text(json.dumps(data))
    return path


def imported(log_file: Path, package: str) -> set[str]:
    """The modules of `package` -X importtime reported so far (the package itself shows only
    when an `import` statement loaded it, not importlib: its submodules always do)."""
    return {
        name
        for line in log_file.read_text().splitlines()
        if line.startswith("import time:") and "self [us]" not in line
        for name in [line.rsplit("|", 1)[1].strip()]
        if name == package or name.startswith(f"{package}.")
    }


def driver_log(log_file: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log_file.read_text().splitlines() if line.startswith("{")]


@pytest.mark.parametrize("standby", [False, True], ids=["with-run", "standby"])
@pytest.mark.parametrize(("runtime", "sdk"), [("openai", "openai"), ("claude", "claude_agent_sdk")])
def test_an_idle_driver_has_not_imported_its_runtime_sdk(
    harness: ControlHarness, tmp_path: Path, runtime: str, sdk: str, standby: bool
) -> None:
    payload_file = payload(tmp_path, harness.control_url, runtime, standby=standby)
    log_file = tmp_path / "driver.log"
    process = start(["-X", "importtime", "-m", "driver.main"], payload_file, log_file)
    try:
        harness.wait_sync(lambda: harness.of_type("ready") != [], timeout=30, what="ready")
        # The record is there, up to the runtime's module (which imports mcp_tools).
        assert "driver.backends.mcp_tools" in imported(log_file, "driver")
        assert not imported(log_file, sdk)
        assert not imported(log_file, "bs4") | imported(log_file, "markdownify")  # web_fetch's
    finally:
        stop(process)


def test_the_openai_sdk_is_imported_by_the_first_run_which_then_answers(
    harness: ControlHarness, model_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    payload_file = write_payload(tmp_path, harness.control_url, tmp_path / "ws")
    model_server.add(TextTurn("Hello after a lazy import."))
    log_file = tmp_path / "driver.log"
    process = start(["-X", "importtime", "-m", "driver.main"], payload_file, log_file)
    try:
        harness.wait_sync(lambda: harness.of_type("ready") != [], timeout=30, what="ready")
        assert not imported(log_file, "openai")
        harness.send_command("input.start", {"run_id": "run-1", "text": "hi", "attachments": []})
        harness.wait_sync(
            lambda: "run.completed" in harness.event_kinds("run-1"), timeout=30, what="the run"
        )
        assert "openai._client" in imported(log_file, "openai")
        completed = [e for e in harness.events if e["kind"] == "run.completed"]
        assert completed[0]["payload"]["final_text"] == "Hello after a lazy import."
    finally:
        stop(process)


@pytest.mark.parametrize("standby", [False, True], ids=["with-run", "standby"])
@pytest.mark.parametrize(
    ("runtime", "sdk"),
    [("openai", "openai"), ("claude", "claude_agent_sdk"), ("acp", "acp")],
)
def test_a_runtime_without_its_package_fails_at_start_not_in_a_run(
    harness: ControlHarness, tmp_path: Path, runtime: str, sdk: str, standby: bool
) -> None:
    payload_file = payload(tmp_path, harness.control_url, runtime, standby=standby)
    log_file = tmp_path / "driver.log"
    process = start(["-c", WITHOUT_PACKAGE, sdk], payload_file, log_file)
    try:
        assert process.wait(30) == EXIT_BACKEND_FAILED
    finally:
        stop(process)
    assert harness.of_type("hello") and not harness.of_type("ready")
    told = [line["message"] for frame in harness.of_type("logs") for line in frame["lines"]]
    assert any(f"needs the Python package(s) {sdk}" in message for message in told), told
    failed = [line for line in driver_log(log_file) if line["event"] == "backend_failed"]
    assert failed and sdk in str(failed[0]["error"])
