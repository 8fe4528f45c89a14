"""Fixtures for the driver tests: a recording event sink, execution specs, the scripted
OpenAI server, and a bounded wait-for-condition."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from driver.protocol import Command, ExecutionSpec, GatewayGrant
from tests.support.control_harness import ControlHarness
from tests.support.openai_server import ScriptedOpenAIServer

GRANT = "grant-secret-value"
BOOT_TOKEN = "boot-token-do-not-log"


@dataclass
class RecordingSink:
    """Stands in for the control connection: keeps events and command updates in order."""

    events: list[dict[str, Any]] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)

    def emit(self, run_id: str, kind: str, payload: dict[str, Any] | None = None) -> str:
        source_event_id = uuid.uuid4().hex
        self.events.append(
            {
                "source_event_id": source_event_id,
                "run_id": run_id,
                "kind": kind,
                "payload": payload or {},
            }
        )
        return source_event_id

    def command_update(
        self,
        command_id: str,
        status: str,
        result: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        self.updates.append(
            {"command_id": command_id, "status": status, "result": result, "error": error}
        )

    def kinds(self, run_id: str | None = None) -> list[str]:
        return [e["kind"] for e in self.events if run_id is None or e["run_id"] == run_id]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [e["payload"] for e in self.events if e["kind"] == kind]

    def statuses(self, command_id: str) -> list[str]:
        return [u["status"] for u in self.updates if u["command_id"] == command_id]

    def last_update(self, command_id: str) -> dict[str, Any]:
        return [u for u in self.updates if u["command_id"] == command_id][-1]


def make_spec(workspace: Path, **overrides: Any) -> ExecutionSpec:
    values: dict[str, Any] = {
        "app_id": "app_1",
        "agent_id": "agt_1",
        "session_id": "ses_1",
        "runtime": "openai",
        "model": "test-model",
        "system_prompt": "You are a careful test agent.",
        "gateway": GatewayGrant(grant=GRANT),
        "workspace": str(workspace),
    }
    values.update(overrides)
    return ExecutionSpec(**values)


def command(kind: str, payload: dict[str, Any], command_id: str | None = None) -> Command:
    return Command(
        command_id=command_id or f"cmd_{uuid.uuid4().hex[:10]}", seq=1, kind=kind, payload=payload
    )


async def wait_for(
    condition: Callable[[], bool], timeout: float = 10.0, what: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def model_server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as server:
        yield server


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A short directory for Unix sockets (their paths are limited to about 100 bytes)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="mosoo-drv-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def harness(socket_dir: Path, model_server: ScriptedOpenAIServer) -> Iterator[ControlHarness]:
    """The control harness on a Unix socket, taking BOOT_TOKEN, its gateway relaying to
    the scripted model server with GRANT."""
    with ControlHarness(
        socket_dir / "control.sock",
        boot_token=BOOT_TOKEN,
        gateway_upstream=model_server.origin,
        gateway_grant=GRANT,
    ) as running:
        yield running
