"""The `acp` runtime end to end: real control, worker, Redis and a Docker sandbox under
network `none`, the real driver running the image's OpenCode (`opencode acp`) as its ACP
agent, with the provider replaced at its network boundary by the scripted OpenAI-compatible
server (reached only through control's gateway, which holds the key).

One Pet Agent, so one sandbox serves the three messages of one thread (each with its own
driver and OpenCode, which end with the run): a bash call under an Ask policy (the prompt,
then Allow once) with streamed text, thinking and the provider's usage numbers in the ledger;
a second message that continues the conversation (OpenCode loads the thread's session); a
third whose command runs while the key is looked for everywhere in the live sandbox, then is
stopped, after which neither the command nor OpenCode is left."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core.runtime.sandbox import LABEL_SUBJECT
from mosoo_core.sessions import actions, driver_plane
from mosoo_core.tables.sessions import SessionRun
from mosoo_core.tables.usage import UsageEvent
from tests.support.openai_server import TextTurn, ToolCall, ToolCallsTurn
from tests.support.processes import wait_for
from tests.support.redis_db import db_number
from tests.support.stack import (
    TERMINAL,
    RuntimeStack,
    make_agent,
    new_thread,
    runtime_stack,
    send,
    wait_run,
)

pytestmark = pytest.mark.integration
REDIS_DB = db_number(11)
PROVIDER_KEY = "sk-acp-e2e-TOPSECRET-1a2b3c4d5e"
SLEEP = "sleep 300"


@pytest.fixture
def stack(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RuntimeStack]:
    with runtime_stack(engine, database_url, tmp_path, monkeypatch, redis_db=REDIS_DB) as stack:
        yield stack


def _events(engine: Engine, thread_id: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    with Session(engine) as db:
        return [
            (e.type, e.run_id, e.payload)
            for e in driver_plane.read_events(db, thread_id, limit=2000)
        ]


def _in_container(container: Any, script: str) -> bytes:
    result = container.exec_run(["sh", "-c", script], user="0")
    assert result.exit_code == 0, result.output
    return bytes(result.output)


def _processes(container: Any) -> bytes:
    """Every process's command line in the sandbox, arguments joined by spaces."""
    return _in_container(container, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '; true")


def _asked(engine: Engine, thread_id: str, run_id: str) -> dict[str, Any] | None:
    return next(
        (
            p
            for t, r, p in _events(engine, thread_id)
            if t == "tool.confirmation.required" and r == run_id
        ),
        None,
    )


def _allow_once(stack: RuntimeStack, owner: Any, thread_id: str, run_id: str) -> dict[str, Any]:
    def asked_or_ended() -> bool:
        with Session(stack.engine) as db:
            run = db.get(SessionRun, run_id)
            assert run is not None and run.status not in TERMINAL, run and (
                run.status,
                run.error_code,
                run.error_message,
            )
        return _asked(stack.engine, thread_id, run_id) is not None

    wait_for(asked_or_ended, 180, "the Ask prompt for bash")
    request = _asked(stack.engine, thread_id, run_id)
    assert request is not None
    actions.answer_permission(owner.account_id, thread_id, str(request["request_id"]), "allow_once")
    return request


def test_an_opencode_agent_asks_runs_bash_resumes_and_stops_in_one_docker_sandbox(
    stack: RuntimeStack,
) -> None:
    stack.model.add(
        ToolCallsTurn(
            [ToolCall("bash", {"command": "pwd", "description": "Where am I"}, id="call_pwd")],
            usage={"prompt_tokens": 900, "completion_tokens": 12},
        ),
        TextTurn(
            "You are in /workspace.",
            reasoning=["The output ", "says so."],
            usage={"prompt_tokens": 950, "completion_tokens": 7},
        ),
    )
    owner = make_agent(
        stack.engine,
        stack.model.base_url,
        PROVIDER_KEY,
        kind="pet",
        runtime="acp",
        tools={"bash": "ask", "read": "allow"},
    )
    thread_id = new_thread(stack.engine, owner)
    started = time.monotonic()
    first_id = send(stack.engine, owner.account_id, thread_id, "run pwd and tell me where I am")
    request = _allow_once(stack, owner, thread_id, first_id)
    print(f"message to permission prompt: {time.monotonic() - started:.2f}s")
    assert (request["name"], request["input"]["command"], request["tool_call_id"]) == (
        "bash",
        "pwd",
        "call_pwd",
    )
    first = wait_run(stack.engine, first_id)
    assert first.status == "completed", (first.error_code, first.error_message)
    print(f"message to completed run: {time.monotonic() - started:.2f}s")

    events = [(t, p) for t, r, p in _events(stack.engine, thread_id) if r == first_id]
    types = [t for t, _ in events]
    assert types.index("tool.use.started") < types.index("tool.confirmation.required")
    assert types.index("tool.confirmation.resolved") < types.index("tool.use.completed")
    [done] = [p for t, p in events if t == "tool.use.completed"]
    assert done["output"].strip() == "/workspace" and done["is_error"] is False
    text = "".join(p["text"] for t, p in events if t == "agent.message.delta")
    assert text == "You are in /workspace."
    thinking = "".join(p["text"] for t, p in events if t == "agent.thinking.delta")
    assert thinking == "The output says so."
    # Usage: the gateway's ledger has the provider's own numbers, one record per model call.
    with Session(stack.engine) as db:
        rows = db.exec(select(UsageEvent).where(UsageEvent.run_id == first_id)).all()
    assert sorted((r.input_tokens, r.output_tokens) for r in rows) == [(900, 12), (950, 7)]
    # The driver passes on what OpenCode reports for the prompt: its last model call's.
    [usage] = [p for t, p in events if t == "usage.updated"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (950, 7)

    # The key reached the provider, only through the gateway; OpenCode ended with its run.
    assert {r.headers["authorization"] for r in stack.model.chat_requests} == {
        f"Bearer {PROVIDER_KEY}"
    }
    [container] = docker.from_env().containers.list(
        filters={"label": f"{LABEL_SUBJECT}=agent:{owner.agent_id}"}
    )
    assert container.attrs["HostConfig"]["NetworkMode"] == "none"
    assert PROVIDER_KEY not in str(container.attrs)
    assert b"opencode" not in _processes(container)

    # A second message (a new driver in the Pet's sandbox, a new OpenCode) continues the
    # conversation: the session is loaded from the thread's files.
    stack.model.add(TextTurn("You asked me to run pwd."))
    second_id = send(stack.engine, owner.account_id, thread_id, "what did I ask you first?")
    second = wait_run(stack.engine, second_id)
    assert second.status == "completed", (second.error_code, second.error_message)
    resumed = str(stack.model.chat_requests[-1].messages)
    assert "run pwd and tell me where I am" in resumed and "You are in /workspace." in resumed

    # A third runs a long command. While it runs, the key is in no process, file or argument
    # of the sandbox; then it is stopped: cancelled, and OpenCode and the command are gone.
    stack.model.add(ToolCallsTurn([ToolCall("bash", {"command": SLEEP, "description": "Wait"})]))
    third_id = send(stack.engine, owner.account_id, thread_id, "wait five minutes")
    _allow_once(stack, owner, thread_id, third_id)
    wait_for(lambda: SLEEP.encode() in _processes(container), 60, "the command to run")
    assert b"opencode acp" in _processes(container)
    _in_container(container, f"printf '{PROVIDER_KEY[:16]}\\n' > /tmp/needle")
    found = _in_container(
        container,
        "cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'"
        " | grep -cF -f /tmp/needle; "
        "grep -rlF -f /tmp/needle / --exclude-dir=proc --exclude-dir=sys --exclude=needle"
        " 2>/dev/null; true",
    )
    assert found.strip() == b"0", found
    stopped_at = time.monotonic()
    actions.stop_run(owner.account_id, thread_id)
    third = wait_run(stack.engine, third_id, timeout=60)
    assert third.status == "cancelled", (third.error_code, third.error_message)
    print(f"stop to cancelled: {time.monotonic() - stopped_at:.2f}s")

    def gone() -> bool:
        left = _processes(container)
        return SLEEP.encode() not in left and b"opencode" not in left

    wait_for(gone, 20, "the stopped command and OpenCode to be gone")
