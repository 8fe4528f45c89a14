"""The `claude` runtime end to end: real control, worker, Redis and a Docker sandbox under
network `none`, the real driver running the real Claude Code binary from the Claude Agent
SDK's wheel, with the provider replaced at its network boundary by the scripted Anthropic
Messages server (reached only through control's gateway, which holds the key).

One Pet Agent, so one sandbox serves the three messages of one thread: a bash call under an
Ask policy (the prompt, then Allow once) with streamed text and the provider's usage numbers
in the ledger, the key checked nowhere in the live sandbox; a second message that continues
the conversation; a third whose long answer is stopped, after which no Claude Code process
is left in the sandbox.

Another Pet Agent, bound to a skill and to the test MCP server, in one run: a bash call it
asks for is rejected (it does not run, and the model is told), the model request lists the
skill and Read returns its SKILL.md, and an MCP tool is called through control's proxy."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core.sessions import actions
from mosoo_core.tables.usage import UsageEvent
from tests.support.anthropic_server import (
    MessageTurn,
    RecordedRequest,
    ScriptedAnthropicServer,
    TextBlock,
    ToolUseBlock,
)
from tests.support.mcp_server import ALLOW_PRIVATE_NETWORKS
from tests.support.processes import wait_for
from tests.support.redis_db import db_number
from tests.support.runtime_e2e import (
    REJECTED_COMMAND,
    REJECTED_FILE,
    SKILL_DESCRIPTION,
    SKILL_MD,
    SKILL_NAME,
    SKILL_PATH,
    answer_prompt,
    assert_mcp_echo_went_through_the_proxy,
    assert_secret_nowhere,
    in_container,
    pet_asking_for_bash,
    pet_sandbox,
    pet_with_skill_and_mcp,
    processes,
    run_events,
    thread_events,
)
from tests.support.stack import RuntimeStack, new_thread, runtime_stack, send, wait_run

pytestmark = pytest.mark.integration
REDIS_DB = db_number(11)
PROVIDER_KEY = "sk-ant-e2e-TOPSECRET-5e6f7a8b9c"
CLAUDE_CLI = "claude_agent_sdk/_bundled/claude"


@pytest.fixture
def stack(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RuntimeStack]:
    with runtime_stack(
        engine,
        database_url,
        tmp_path,
        monkeypatch,
        redis_db=REDIS_DB,
        anthropic_key=PROVIDER_KEY,
        extra_env=ALLOW_PRIVATE_NETWORKS,  # the test MCP server listens on 127.0.0.1
    ) as stack:
        yield stack


def _tool_results(request: RecordedRequest) -> dict[str, dict[str, Any]]:
    """The `tool_result` blocks of a Messages request, by tool_use_id."""
    return {
        str(block["tool_use_id"]): block
        for message in request.messages
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    }


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
    owner = pet_asking_for_bash(stack.engine, anthropic.base_url, PROVIDER_KEY, "claude")
    thread_id = new_thread(stack.engine, owner)
    started = time.monotonic()
    first_id = send(stack.engine, owner.account_id, thread_id, "run pwd and tell me where I am")
    request = answer_prompt(stack.engine, owner, thread_id, first_id, "allow_once")
    print(f"message to permission prompt: {time.monotonic() - started:.2f}s")
    assert (request["name"], request["input"]["command"], request["tool_call_id"]) == (
        "Bash",
        "pwd",
        "toolu_pwd",
    )
    first = wait_run(stack.engine, first_id)
    assert first.status == "completed", (first.error_code, first.error_message)

    events = run_events(stack.engine, thread_id, first_id)
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
    container = pet_sandbox(owner)
    assert container.attrs["HostConfig"]["NetworkMode"] == "none"
    assert PROVIDER_KEY not in str(container.attrs)
    assert_secret_nowhere(container, PROVIDER_KEY)

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
            for t, r, _ in thread_events(stack.engine, thread_id)
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
        lambda: CLAUDE_CLI.encode() not in processes(container),
        20,
        "no Claude Code process left in the sandbox",
    )


def test_a_claude_code_agent_is_refused_a_tool_sees_its_skill_and_calls_an_mcp_tool(
    stack: RuntimeStack,
) -> None:
    anthropic = stack.anthropic
    assert isinstance(anthropic, ScriptedAnthropicServer)
    anthropic.add(
        MessageTurn([ToolUseBlock("Bash", {"command": REJECTED_COMMAND}, id="toolu_touch")]),
        MessageTurn([ToolUseBlock("Read", {"file_path": SKILL_PATH}, id="toolu_skill")]),
        MessageTurn([ToolUseBlock("mcp__tools__echo", {"text": "Oslo: clear"}, id="toolu_echo")]),
        MessageTurn([TextBlock("Oslo: clear, and I did not touch the file.")]),
    )
    with pet_with_skill_and_mcp(stack.engine, anthropic.base_url, PROVIDER_KEY, "claude") as pet:
        owner, server, server_id, thread_id = pet.owner, pet.server, pet.server_id, pet.thread_id
        run_id = send(stack.engine, owner.account_id, thread_id, "Report the weather in Oslo")
        request = answer_prompt(stack.engine, owner, thread_id, run_id, "reject_once")
        assert (request["name"], request["input"]["command"]) == ("Bash", REJECTED_COMMAND)
        run = wait_run(stack.engine, run_id)
        assert run.status == "completed", (run.error_code, run.error_message)

        # Rejected: the command did not run, the run went on, and the model was told.
        in_container(pet_sandbox(owner), f"test ! -e {REJECTED_FILE}")
        events = run_events(stack.engine, thread_id, run_id)
        done = {p["tool_call_id"]: p for t, p in events if t == "tool.use.completed"}
        assert done["toolu_touch"]["is_error"] is True
        assert "rejected by the user" in done["toolu_touch"]["output"]
        requests = anthropic.message_requests
        assert len(requests) == 4
        refusal = _tool_results(requests[1])["toolu_touch"]
        assert refusal.get("is_error") is True and "rejected by the user" in json.dumps(refusal)

        # The skill: Claude Code lists it for its Skill tool as the plugin's `mosoo:<name>`
        # with its description (not its body), and Read returns its SKILL.md from the mount.
        assert "Skill" in {tool["name"] for tool in requests[0].body["tools"]}
        offered = json.dumps(requests[0].messages)
        assert json.dumps(f"- mosoo:{SKILL_NAME}: {SKILL_DESCRIPTION}")[1:-1] in offered
        assert "then echo the one-line summary" not in json.dumps(requests[0].body)
        assert done["toolu_skill"]["is_error"] is False
        read = done["toolu_skill"]["output"]
        assert all(line in read for line in SKILL_MD.splitlines() if line), read
        assert "# Weather report" in json.dumps(_tool_results(requests[2])["toolu_skill"])

        # The MCP tool: Claude Code's `mcp__tools__echo` is our `tools__echo`, called through
        # control's proxy with the vaulted token, and its answer went back to the model.
        assert (done["toolu_echo"]["output"], done["toolu_echo"]["is_error"]) == (
            "echo: Oslo: clear",
            False,
        )
        started = {p["tool_call_id"]: p for t, p in events if t == "tool.use.started"}
        assert started["toolu_echo"]["name"] == "tools__echo"
        assert "echo: Oslo: clear" in json.dumps(_tool_results(requests[3])["toolu_echo"])
        assert_mcp_echo_went_through_the_proxy(stack.engine, thread_id, run_id, server, server_id)
        assert [(t, p["status"]) for t, p in events if t == "mcp.server.status"] == [
            ("mcp.server.status", "connected")
        ]
