"""An environment's setup script and variables in real Docker sandboxes: the script runs
before the driver with every variable, the agent sees the exposed ones and never a setup-only
secret (not in any process's environment, not in `docker inspect`, not in the stored run), and
a failing script fails the run with `setup_failed` and its log's tail, leaving no sandbox."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core.environments import EnvironmentChanges, VariableInput
from mosoo_core.runtime.sandbox import LABEL_SUBJECT
from mosoo_core.sessions import diagnostics, driver_plane
from mosoo_core.tables.sessions import SessionRun
from tests.support.openai_server import TextTurn, ToolCall, ToolCallsTurn
from tests.support.processes import wait_for
from tests.support.redis_db import db_number
from tests.support.stack import (
    RuntimeStack,
    labelled_containers,
    make_agent,
    new_thread,
    runtime_stack,
    send,
    wait_run,
)

REDIS_DB = db_number(2)
PROVIDER_KEY = "sk-env-TOPSECRET-1a2b3c4d5e6f"
SETUP_SECRET = "ghp_SetupOnly7Hx2Kq9Vn4Lr8Tb3Wy6Zc1Pm5"
AGENT_SECRET = "sk-agent-visible-2Qw8Er4Ty6Ui0Op"

SETUP = """\
set -e
echo "setting up for $REGION"
test -n "$GH_TOKEN" && echo "token seen: $GH_TOKEN"
mkdir -p /workspace/tools
echo ready > /workspace/tools/marker
"""

PROBE = (
    "cat /workspace/tools/marker; echo REGION=$REGION; echo API=${API_KEY:-unset}; "
    "echo GH=${GH_TOKEN:-unset}; "
    "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c GH_TOKEN || true"
)


@pytest.fixture
def stack(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RuntimeStack]:
    with runtime_stack(engine, database_url, tmp_path, monkeypatch, redis_db=REDIS_DB) as stack:
        yield stack


def _environment(setup: str) -> EnvironmentChanges:
    return EnvironmentChanges(
        setup_script=setup,
        variables=[
            VariableInput("REGION", "eu-west-1"),
            VariableInput("API_KEY", AGENT_SECRET, secret=True),
            VariableInput("GH_TOKEN", SETUP_SECRET, secret=True, setup_only=True),
        ],
    )


def test_setup_runs_first_and_setup_only_secrets_never_reach_the_agent(
    stack: RuntimeStack,
) -> None:
    stack.model.add(
        ToolCallsTurn([ToolCall("bash", {"command": PROBE}, id="call_probe")]),
        TextTurn("Checked."),
    )
    owner = make_agent(
        stack.engine,
        stack.model.base_url,
        PROVIDER_KEY,
        kind="pet",
        environment=_environment(SETUP),
    )
    thread_id = new_thread(stack.engine, owner)
    run = wait_run(stack.engine, send(stack.engine, owner.account_id, thread_id, "probe"))
    assert run.status == "completed", (run.error_code, run.error_message)

    with Session(stack.engine) as db:
        events = driver_plane.read_events(db, thread_id, limit=1000)
        stored = db.get(SessionRun, run.id)
        assert stored is not None
    output = next(e for e in events if e.type == "tool.use.completed").payload["output"]
    lines = output.strip().splitlines()
    assert lines[0] == "ready"  # the setup script ran before the agent
    assert "REGION=eu-west-1" in lines
    # A secret that is not setup-only reaches the agent's processes (the model saw the
    # command's output), but the thread's events show it masked.
    assert "API=••••" in lines
    assert any(
        f"API={AGENT_SECRET}" in str(m.get("content"))
        for m in stack.model.chat_requests[-1].messages
    )
    assert "GH=unset" in lines and lines[-1] == "0"  # in no process's environment

    # The setup log is kept, its secrets masked; no value is in the stored run or its events.
    assert "setting up for eu-west-1" in stored.setup_log
    assert "token seen: ••••" in stored.setup_log
    assert SETUP_SECRET not in stored.setup_log
    stored_text = json.dumps(stored.snapshot) + json.dumps([e.payload for e in events])
    assert SETUP_SECRET not in stored_text and AGENT_SECRET not in stored_text

    # The Pet sandbox is still running: neither secret is in what Docker shows of it.
    [container] = labelled_containers(f"{LABEL_SUBJECT}=agent:{owner.agent_id}")
    inspected = json.dumps(docker.from_env().api.inspect_container(container.id))
    assert SETUP_SECRET not in inspected and AGENT_SECRET not in inspected

    # Nor in any process's log: the worker (which ran the setup and booted the driver) and
    # control (which streamed the events) wrote theirs all along.
    logs = [*stack.logs.glob("*.log"), *stack.data_dir.rglob("*.log")]
    assert {"worker.log", "control.log"} <= {log.name for log in logs}
    assert b"sandbox.created" in (stack.logs / "worker.log").read_bytes()
    for log in logs:
        written = log.read_bytes()
        assert SETUP_SECRET.encode() not in written, log
        assert AGENT_SECRET.encode() not in written, log


def test_a_failing_setup_script_fails_the_run_with_its_log_and_leaves_no_sandbox(
    stack: RuntimeStack,
) -> None:
    failing = 'echo "installing tools"\necho "token: $GH_TOKEN"\necho "no such tool" >&2\nexit 3\n'
    owner = make_agent(
        stack.engine,
        stack.model.base_url,
        PROVIDER_KEY,
        kind="pet",
        environment=_environment(failing),
    )
    thread_id = new_thread(stack.engine, owner)
    run = wait_run(stack.engine, send(stack.engine, owner.account_id, thread_id, "hello"))
    assert run.status == "failed"
    assert run.error_code == "setup_failed"
    assert run.error_message is not None
    assert "exited with status 3" in run.error_message
    assert "no such tool" in run.error_message and "token: ••••" in run.error_message
    assert SETUP_SECRET not in run.error_message
    assert stack.model.chat_requests == []  # the model was never called
    wait_for(
        lambda: not labelled_containers(f"{LABEL_SUBJECT}=agent:{owner.agent_id}"),
        30,
        "the Pet sandbox to be removed",
    )
    # Its diagnostics say where it stopped: the sandbox was made, the setup failed, no
    # driver started; the error and the setup log's tail are there, no secret.
    with Session(stack.engine) as db:
        found = diagnostics.run_diagnostics(db, owner.account_id, run.id)
    names = [p.name for p in found.phases]
    assert names[:3] == ["dispatch", "sandbox", "setup"] and "driver_start" not in names
    assert found.phases[2].detail == {"ok": False}
    assert found.error_code == "setup_failed" and "no such tool" in found.setup_log_tail
    assert [e["type"] for e in found.events_before_failure][-1] == "run.failed"
    assert SETUP_SECRET not in repr(found)


@pytest.mark.parametrize(("policy", "interfaces"), [("none", ["lo"]), ("full", ["eth0", "lo"])])
def test_the_network_policy_decides_the_sandbox_interfaces(
    stack: RuntimeStack, policy: str, interfaces: list[str]
) -> None:
    # Only looked at, never used: no test sends traffic off the machine.
    stack.model.add(
        ToolCallsTurn([ToolCall("bash", {"command": "ls /sys/class/net"}, id="call_net")]),
        TextTurn("Looked."),
    )
    owner = make_agent(
        stack.engine,
        stack.model.base_url,
        PROVIDER_KEY,
        email=f"net-{policy}@example.com",
        environment=EnvironmentChanges(network_policy=policy),
    )
    thread_id = new_thread(stack.engine, owner)
    run = wait_run(stack.engine, send(stack.engine, owner.account_id, thread_id, "look"))
    assert run.status == "completed", (run.error_code, run.error_message)
    with Session(stack.engine) as db:
        events = driver_plane.read_events(db, thread_id, limit=1000)
    output = next(e for e in events if e.type == "tool.use.completed").payload["output"]
    assert sorted(output.split()) == interfaces
    assert run.snapshot["environment"]["network_policy"] == policy
