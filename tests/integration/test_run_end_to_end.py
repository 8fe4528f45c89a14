"""A message in a thread, end to end: real control, worker, Redis, Docker sandbox and driver,
with the model replaced at its network boundary by the scripted OpenAI-compatible server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import docker
import pytest
import redis
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import sessions
from mosoo_core.clock import utcnow
from mosoo_core.files import get_store
from mosoo_core.runtime.runs import STUCK_BOOT_AFTER, checkpoint_key, sweep_stuck_boots
from mosoo_core.runtime.sandbox import LABEL_SUBJECT, SANDBOX_GID, SANDBOX_UID
from mosoo_core.sessions import diagnostics, driver_plane
from mosoo_core.tables.sessions import RunMark, SessionRun
from tests.support.openai_server import TextTurn, ToolCall, ToolCallsTurn
from tests.support.processes import wait_for
from tests.support.redis_db import db_number, streamed_seqs
from tests.support.stack import (
    RuntimeStack,
    bind_unserved_control_socket,
    kill_worker_once_sandbox_created,
    labelled_containers,
    make_agent,
    new_thread,
    runtime_stack,
    send,
    wait_run,
)

pytestmark = [pytest.mark.integration, pytest.mark.every_database]  # the core path, on SQLite too
REDIS_DB = db_number(11)
PROVIDER_KEY = "sk-e2e-TOPSECRET-9f8e7d6c5b4a"


@pytest.fixture
def stack(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RuntimeStack]:
    with runtime_stack(engine, database_url, tmp_path, monkeypatch, redis_db=REDIS_DB) as stack:
        yield stack


def _containers(label: str) -> list[object]:
    return labelled_containers(label)


def _torn_down_at(engine: Engine, run_id: str, timeout: float = 60) -> tuple[datetime, datetime]:
    """When the worker marked the run's teardown, and when the test first saw that mark
    (looked at every 20 ms, once the run was seen completed: possibly much later)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with Session(engine) as db:
            mark = db.exec(
                select(RunMark).where(RunMark.run_id == run_id, RunMark.name == "teardown")
            ).first()
            if mark is not None:
                return mark.at, utcnow()
        time.sleep(0.02)
    raise TimeoutError(f"run {run_id} was never torn down")


def test_message_streams_text_and_a_bash_tool_call_in_a_docker_sandbox(stack: RuntimeStack) -> None:
    stack.model.add(
        ToolCallsTurn([ToolCall("bash", {"command": "pwd"}, id="call_pwd")]),
        TextTurn(
            "You are in /workspace, an empty working directory.",
            usage={"prompt_tokens": 20, "completion_tokens": 9},
        ),
    )
    owner = make_agent(stack.engine, stack.model.base_url, PROVIDER_KEY)
    thread_id = new_thread(stack.engine, owner)
    started = time.monotonic()
    sent_at = utcnow()
    run = wait_run(
        stack.engine,
        send(stack.engine, owner.account_id, thread_id, "run pwd and tell me what you see"),
    )
    assert run.status == "completed", (run.error_code, run.error_message)
    print(f"message to completed run: {time.monotonic() - started:.2f}s")
    torn_down, seen_torn_down = _torn_down_at(stack.engine, run.id)

    # Diagnostics: every phase, in the order a run passes them, timed by the worker and
    # control as they happened, covering the run from the message to its teardown.
    with Session(stack.engine) as db:
        found = diagnostics.run_diagnostics(db, owner.account_id, run.id)
    assert [p.name for p in found.phases] == [
        "dispatch",
        "sandbox",
        "driver_start",
        "hello",
        "ready",
        "input",
        "first_token",
        "last_event",
        "outputs",
        "checkpoint",
        "teardown",
    ]
    assert all(p.seconds >= 0 for p in found.phases)
    assert found.phases[1].label == "Sandbox create" and found.sandbox["image"]
    print("phases:", ", ".join(f"{p.label} {p.seconds * 1000:.0f} ms" for p in found.phases))
    # From the message (sent after sent_at) to the teardown: no longer than the test watched,
    # and within 5% of the span from the send to the worker's teardown mark.
    assert found.seconds <= (seen_torn_down - sent_at).total_seconds()
    wall = (torn_down - sent_at).total_seconds()
    assert abs(found.seconds - wall) <= 0.05 * wall, (found.seconds, wall)
    assert found.driver is not None and found.driver.version and found.driver.reconnects == 0
    assert "text_stream" in found.driver.capabilities

    with Session(stack.engine) as db:
        events = driver_plane.read_events(db, thread_id, limit=1000)
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "seq order with no gap"
    types = [e.type for e in events]
    assert types[0] == "user.message" and "run.started" in types and "run.completed" in types
    tool_done = next(e for e in events if e.type == "tool.use.completed")
    assert (
        tool_done.payload["output"].strip().startswith("/workspace")
        and tool_done.payload["is_error"] is False
    )
    text = "".join(e.payload["text"] for e in events if e.type == "agent.message.delta")
    assert text == "You are in /workspace, an empty working directory."
    assert any(e.type == "usage.updated" for e in events)

    # The key reached the provider, and only through the gateway.
    assert {r.headers["authorization"] for r in stack.model.chat_requests} == {
        f"Bearer {PROVIDER_KEY}"
    }
    # Redis carries the same events in the same order.
    assert streamed_seqs(redis.Redis(db=REDIS_DB), thread_id) == [e.seq for e in events]
    # Cattle: the sandbox is gone once the run is over.
    wait_for(
        lambda: not _containers(f"{LABEL_SUBJECT}=session:{thread_id}"),
        60,
        "the Cattle sandbox to be removed",
    )


def test_the_next_run_of_a_cattle_thread_continues_in_its_checkpointed_workspace(
    stack: RuntimeStack,
) -> None:
    stack.model.add(
        ToolCallsTurn([ToolCall("bash", {"command": "echo remembered > notes.txt"})]),
        TextTurn("Written."),
        ToolCallsTurn([ToolCall("bash", {"command": "cat notes.txt"})]),
        TextTurn("It says remembered."),
    )
    owner = make_agent(stack.engine, stack.model.base_url, PROVIDER_KEY)
    thread_id = new_thread(stack.engine, owner)
    first = wait_run(stack.engine, send(stack.engine, owner.account_id, thread_id, "write a note"))
    assert first.status == "completed", (first.error_code, first.error_message)
    wait_for(
        lambda: not _containers(f"{LABEL_SUBJECT}=session:{thread_id}"),
        60,
        "the first sandbox to be removed",
    )
    assert get_store().exists(checkpoint_key(owner.app_id, thread_id))

    second = wait_run(stack.engine, send(stack.engine, owner.account_id, thread_id, "read it back"))
    assert second.status == "completed", (second.error_code, second.error_message)
    with Session(stack.engine) as db:
        outputs = [
            e.payload["output"]
            for e in driver_plane.read_events(db, thread_id, limit=1000)
            if e.type == "tool.use.completed"
        ]
    assert outputs[-1].strip() == "remembered"
    # A fresh sandbox per run, and the model saw the first exchange in the second request.
    assert stack.logs.joinpath("worker.log").read_bytes().count(b"sandbox.created") == 2
    assert any(m.get("content") == "write a note" for m in stack.model.chat_requests[-1].messages)


# Where a run can put or hold the key (the image is built without it): each path the shell
# gets ("file:" a single file, "tree:" a folder, recursively), every writable tmpfs (/tmp,
# /dev/shm, the boot dir: read from the sandbox's own mount table), and every process's
# environment and command line. Regular files only: a socket or FIFO would block grep.
_KEY_PROBE = r"""
pattern=$1; shift
{
  for path; do
    case $path in
      file:*) find "${path#file:}" -maxdepth 0 -type f -print0 ;;
      tree:*) find "${path#tree:}" -type f -print0 ;;
    esac
  done
  awk '$3 == "tmpfs" && $4 ~ /^rw/ && $2 !~ /^\/(proc|sys)(\/|$)/ { print $2 }' /proc/self/mounts |
    while read -r mount; do find "$mount" -type f -print0; done
  printf '%s\0' /proc/[0-9]*/environ /proc/[0-9]*/cmdline
} 2>/dev/null | xargs -0 -r grep -l -e "$pattern" 2>/dev/null
exit 0
"""
# As the user every sandbox process runs as: with all capabilities dropped, root there cannot
# read another user's /proc/<pid>/environ (nor its 0600 files), so it would skip them unseen.
_SANDBOX_USER = f"{SANDBOX_UID}:{SANDBOX_GID}"


def _key_pattern(key: str) -> str:
    """A grep pattern for the key's first 12 characters that does not match itself, so the
    probe's own command line (in /proc) is no false hit: `sk-e2e-TOPS[E]`."""
    head = key[:12]
    assert head.replace("-", "").isalnum(), "no regex metacharacters in the needle"
    return f"{head[:-1]}[{head[-1]}]"


def _paths_holding_key(container: Any) -> set[str]:
    """Every file and /proc entry in the live sandbox that holds the provider key."""
    container.reload()
    # The files the container added or changed over its image (Kind 2 is a deletion); not
    # its folders: /usr is "changed" when anything under it is.
    changed = [f"file:{c['Path']}" for c in container.diff() or [] if c["Kind"] != 2]
    mounted = [f"tree:{m['Destination']}" for m in container.attrs["Mounts"]]
    found = container.exec_run(
        [
            "sh",
            "-c",
            _KEY_PROBE,
            "probe",
            _key_pattern(PROVIDER_KEY),
            *changed,
            *mounted,
            "tree:/tmp",
        ],
        user=_SANDBOX_USER,
    )
    assert found.exit_code == 0, found.output
    return set(found.output.decode().splitlines())


def _plant_key(container: Any) -> list[str]:
    """Leave the key where a run could: new files off the workspace and a live process's
    environment. Returns the files."""
    files = ["/tmp/planted/deeper/key.txt", "/dev/shm/key.txt"]
    for path in files:
        planted = container.exec_run(
            ["sh", "-c", 'mkdir -p "${1%/*}" && printf %s "$KEY" > "$1"', "plant", path],
            environment={"KEY": PROVIDER_KEY},
            user=_SANDBOX_USER,
        )
        assert planted.exit_code == 0, planted.output
    container.exec_run(
        ["sleep", "600"], environment={"PLANTED": PROVIDER_KEY}, user=_SANDBOX_USER, detach=True
    )
    return files


def test_provider_key_is_nowhere_in_the_sandbox(stack: RuntimeStack) -> None:
    stack.model.add(TextTurn("Hello."))
    owner = make_agent(stack.engine, stack.model.base_url, PROVIDER_KEY, kind="pet")
    thread_id = new_thread(stack.engine, owner)
    run = wait_run(stack.engine, send(stack.engine, owner.account_id, thread_id, "hi"))
    assert run.status == "completed", (run.error_code, run.error_message)
    client = docker.from_env()
    [container] = client.containers.list(
        filters={"label": f"{LABEL_SUBJECT}=agent:{owner.agent_id}"}
    )
    # The Pet sandbox (and its driver) are still alive: look everywhere a key could hide.
    assert PROVIDER_KEY not in json.dumps(container.attrs)
    processes = container.exec_run(
        ["sh", "-c", "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'"], user=_SANDBOX_USER
    )
    assert b"mosoo" in processes.output.lower(), "the driver is running"
    assert _paths_holding_key(container) == set()
    # The probe would see it: the key left where a run could leave it is found.
    planted = _plant_key(container)
    found = _paths_holding_key(container)
    assert set(planted) <= found, found
    assert any(path.endswith("/environ") for path in found), found


def test_worker_killed_while_booting_leaves_a_clear_failure_and_no_container(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No control process: a socket nobody serves, so the driver cannot report ready and the
    # worker stays in the boot long enough to be killed there.
    with runtime_stack(
        engine, database_url, tmp_path, monkeypatch, redis_db=REDIS_DB, start_control=False
    ) as stack:
        dead_socket = bind_unserved_control_socket(stack)
        owner = make_agent(engine, stack.model.base_url, PROVIDER_KEY)
        thread_id = new_thread(engine, owner)
        run_id = send(engine, owner.account_id, thread_id, "hello")
        kill_worker_once_sandbox_created(stack)
        dead_socket.close()
        label = f"{LABEL_SUBJECT}=session:{thread_id}"
        assert _containers(label), "the dead worker left its sandbox"
        with Session(engine) as db:
            assert db.get(SessionRun, run_id).status == "booting"  # type: ignore[union-attr]
        # The beat sweep finds the stuck boot.
        assert sweep_stuck_boots(now=utcnow() + STUCK_BOOT_AFTER + timedelta(seconds=1)) == 1
        run = wait_run(engine, run_id, timeout=5)
        assert (run.status, run.error_code, run.error_retryable) == (
            "failed",
            "dispatch_interrupted",
            True,
        )
        assert "Send the message again" in (run.error_message or "")
        assert _containers(label) == []
        with Session(engine) as db:
            assert sessions.get_session(db, owner.account_id, thread_id).status == "idle"
