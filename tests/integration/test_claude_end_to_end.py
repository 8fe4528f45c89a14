"""The `claude` runtime end to end: real control, worker, Redis and a Docker sandbox under
network `none`, the real driver running the real Claude Code binary from the Claude Agent
SDK's wheel, with the provider replaced at its network boundary by the scripted Anthropic
Messages server (reached only through control's gateway, which holds the key).

One Pet Agent, so one sandbox serves the three messages of one thread: a bash call under an
Ask policy (the prompt, then Allow once) with streamed text and the provider's usage numbers
in the ledger, the key checked nowhere in the live sandbox; a second message that continues
the conversation; a third whose long answer is stopped, after which no Claude Code process
is left in the sandbox."""

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
from mosoo_core.tables.usage import UsageEvent
from tests.support.anthropic_server import (
    MessageTurn,
    ScriptedAnthropicServer,
    TextBlock,
    ToolUseBlock,
)
from tests.support.processes import wait_for
from tests.support.redis_db import db_number
from tests.support.stack import RuntimeStack, make_agent, new_thread, runtime_stack, send, wait_run

pytestmark = pytest.mark.integration
REDIS_DB = db_number(11)
PROVIDER_KEY = "sk-ant-e2e-TOPSECRET-5e6f7a8b9c"
CLAUDE_CLI = "claude_agent_sdk/_bundled/claude"


@pytest.fixture
def stack(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RuntimeStack]:
    with runtime_stack(
        engine, database_url, tmp_path, monkeypatch, redis_db=REDIS_DB, anthropic_key=PROVIDER_KEY
    ) as stack:
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


def test_a_claude_code_agent_asks_runs_bash_resumes_and_stops_in_one_docker_sandbox(
    stack: RuntimeStack,
) -> None:
    anthropic = stack.anthropic
    assert isinstance(anthropic, ScriptedAnthropicServer)
    anthropic.add(
        MessageTurn(
            [TextBlock("Let me look."), ToolUseBlock("Bash", {"command": "pwd"}, id="toolu_pwd")],
            usage={"input_tokens": 900, "cache_read_input_tokens": 100, "output_tokens": 12},
        ),
        MessageTurn(
            [TextBlock("You are in /workspace.")],
            usage={"input_tokens": 950, "cache_creation_input_tokens": 50, "output_tokens": 7},
        ),
    )
    owner = make_agent(
        stack.engine,
        anthropic.base_url,
        PROVIDER_KEY,
        kind="pet",
        runtime="claude",
        tools={"bash": "ask", "read": "allow"},
    )
    thread_id = new_thread(stack.engine, owner)
    started = time.monotonic()
    first_id = send(stack.engine, owner.account_id, thread_id, "run pwd and tell me where I am")

    def asked() -> dict[str, Any] | None:
        return next(
            (
                p
                for t, r, p in _events(stack.engine, thread_id)
                if t == "tool.confirmation.required"
            ),
            None,
        )

    wait_for(lambda: asked() is not None, 180, "the Ask prompt for Bash")
    request = asked()
    assert request is not None
    print(f"message to permission prompt: {time.monotonic() - started:.2f}s")
    assert (request["name"], request["input"]["command"], request["tool_call_id"]) == (
        "Bash",
        "pwd",
        "toolu_pwd",
    )
    actions.answer_permission(owner.account_id, thread_id, str(request["request_id"]), "allow_once")
    first = wait_run(stack.engine, first_id)
    assert first.status == "completed", (first.error_code, first.error_message)

    events = [(t, p) for t, r, p in _events(stack.engine, thread_id) if r == first_id]
    types = [t for t, _ in events]
    assert types.index("tool.use.started") < types.index("tool.confirmation.required")
    assert types.index("tool.confirmation.resolved") < types.index("tool.use.completed")
    [done] = [p for t, p in events if t == "tool.use.completed"]
    assert done["output"].strip() == "/workspace" and done["is_error"] is False
    text = "".join(p["text"] for t, p in events if t == "agent.message.delta")
    assert text == "Let me look.You are in /workspace."
    assert [p["text"] for t, p in events if t == "agent.message.completed"] == [
        "Let me look.",
        "You are in /workspace.",
    ]
    # Usage: the driver's numbers and the gateway's ledger both are the provider's own.
    [usage] = [p for t, p in events if t == "usage.updated"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (1000 + 1000, 19)
    with Session(stack.engine) as db:
        rows = db.exec(select(UsageEvent).where(UsageEvent.run_id == first_id)).all()
    assert sorted(
        (r.input_tokens, r.cached_input_tokens, r.cache_creation_input_tokens, r.output_tokens)
        for r in rows
    ) == [(1000, 0, 50, 7), (1000, 100, 0, 12)]
    assert {(r.provider, r.model) for r in rows} == {("anthropic", "claude-test")}

    # The key reached the provider, only through the gateway, and is nowhere in the sandbox.
    assert {r.headers["x-api-key"] for r in anthropic.message_requests} == {PROVIDER_KEY}
    [container] = docker.from_env().containers.list(
        filters={"label": f"{LABEL_SUBJECT}=agent:{owner.agent_id}"}
    )
    assert container.attrs["HostConfig"]["NetworkMode"] == "none"
    assert PROVIDER_KEY not in str(container.attrs)
    needle = PROVIDER_KEY[:16]
    _in_container(container, f"printf '{needle}\\n' > /tmp/needle")
    found = _in_container(
        container,
        "cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'"
        " | grep -cF -f /tmp/needle; "
        "grep -rlF -f /tmp/needle / --exclude-dir=proc --exclude-dir=sys --exclude=needle"
        " 2>/dev/null; true",
    )
    assert found.strip() == b"0", found

    # A second message continues the conversation (the CLI resumes the thread's session).
    anthropic.add(MessageTurn([TextBlock("You asked me to run pwd.")]))
    second_id = send(stack.engine, owner.account_id, thread_id, "what did I ask you first?")
    second = wait_run(stack.engine, second_id)
    assert second.status == "completed", (second.error_code, second.error_message)
    resumed = str(anthropic.message_requests[-1].messages)
    assert "run pwd and tell me where I am" in resumed and "You are in /workspace." in resumed

    # A third, long answer is stopped mid-stream: the run is cancelled and Claude Code is gone.
    anthropic.add(MessageTurn([TextBlock("word " * 600)], delay=0.05))
    third_id = send(stack.engine, owner.account_id, thread_id, "tell me a long story")
    wait_for(
        lambda: any(
            t == "agent.message.delta" and r == third_id
            for t, r, _ in _events(stack.engine, thread_id)
        ),
        120,
        "the long answer to stream",
    )
    stopped_at = time.monotonic()
    actions.stop_run(owner.account_id, thread_id)
    third = wait_run(stack.engine, third_id, timeout=60)
    assert third.status == "cancelled", (third.error_code, third.error_message)
    print(f"stop to cancelled: {time.monotonic() - stopped_at:.2f}s")
    wait_for(
        lambda: (
            CLAUDE_CLI.encode()
            not in _in_container(container, "cat /proc/[0-9]*/cmdline 2>/dev/null; true")
        ),
        20,
        "no Claude Code process left in the sandbox",
    )
