"""The `acp` runtime end to end: real control, worker, Redis and a Docker sandbox under
network `none`, the real driver running the image's OpenCode (`opencode acp`) as its ACP
agent, with the provider replaced at its network boundary by the scripted OpenAI-compatible
server (reached only through control's gateway, which holds the key).

One Pet Agent, so one sandbox serves the three messages of one thread (each with its own
driver and OpenCode, which end with the run): a bash call under an Ask policy (the prompt,
then Allow once) with streamed text, thinking and the provider's usage numbers in the ledger;
a second message that continues the conversation (OpenCode loads the thread's session); a
third whose command runs while the key is looked for everywhere in the live sandbox, then is
stopped, after which neither the command nor OpenCode is left.

Another Pet Agent, bound to a skill and to the test MCP server: a bash call it asks for is
rejected (it does not run; OpenCode ends the turn, and the next model request carries the
refusal); then OpenCode offers the skill, loads it with its skill tool, and calls an MCP tool
through control's proxy."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core.sessions import actions
from mosoo_core.tables.usage import UsageEvent
from tests.support.mcp_server import ALLOW_PRIVATE_NETWORKS
from tests.support.openai_server import RecordedRequest, TextTurn, ToolCall, ToolCallsTurn
from tests.support.processes import wait_for
from tests.support.redis_db import db_number
from tests.support.runtime_e2e import (
    REJECTED_COMMAND,
    REJECTED_FILE,
    SKILL_DESCRIPTION,
    SKILL_NAME,
    answer_prompt,
    assert_mcp_echo_went_through_the_proxy,
    assert_secret_nowhere,
    in_container,
    pet_asking_for_bash,
    pet_sandbox,
    pet_with_skill_and_mcp,
    processes,
    run_events,
)
from tests.support.stack import RuntimeStack, new_thread, runtime_stack, send, wait_run

pytestmark = pytest.mark.integration
REDIS_DB = db_number(11)
PROVIDER_KEY = "sk-acp-e2e-TOPSECRET-1a2b3c4d5e"
SLEEP = "sleep 300"


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
        extra_env=ALLOW_PRIVATE_NETWORKS,  # the test MCP server listens on 127.0.0.1
    ) as stack:
        yield stack


def _tool_messages(request: RecordedRequest) -> dict[str, str]:
    """The tool results of a chat request, by tool_call_id."""
    return {
        str(m["tool_call_id"]): json.dumps(m["content"])
        for m in request.messages
        if m.get("role") == "tool"
    }


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
    owner = pet_asking_for_bash(stack.engine, stack.model.base_url, PROVIDER_KEY, "acp")
    thread_id = new_thread(stack.engine, owner)
    started = time.monotonic()
    first_id = send(stack.engine, owner.account_id, thread_id, "run pwd and tell me where I am")
    request = answer_prompt(stack.engine, owner, thread_id, first_id, "allow_once")
    print(f"message to permission prompt: {time.monotonic() - started:.2f}s")
    assert (request["name"], request["input"]["command"], request["tool_call_id"]) == (
        "bash",
        "pwd",
        "call_pwd",
    )
    first = wait_run(stack.engine, first_id)
    assert first.status == "completed", (first.error_code, first.error_message)
    print(f"message to completed run: {time.monotonic() - started:.2f}s")

    events = run_events(stack.engine, thread_id, first_id)
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
    # The driver's numbers are the sum over the prompt's model calls (OpenCode's own answer
    # reports only the last call's).
    [usage] = [p for t, p in events if t == "usage.updated"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (900 + 950, 12 + 7)

    # The key reached the provider, only through the gateway; OpenCode ended with its run.
    assert {r.headers["authorization"] for r in stack.model.chat_requests} == {
        f"Bearer {PROVIDER_KEY}"
    }
    container = pet_sandbox(owner)
    assert container.attrs["HostConfig"]["NetworkMode"] == "none"
    assert PROVIDER_KEY not in str(container.attrs)
    assert b"opencode" not in processes(container)

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
    answer_prompt(stack.engine, owner, thread_id, third_id, "allow_once")
    wait_for(lambda: SLEEP.encode() in processes(container), 60, "the command to run")
    assert b"opencode acp" in processes(container)
    assert_secret_nowhere(container, PROVIDER_KEY)
    stopped_at = time.monotonic()
    actions.stop_run(owner.account_id, thread_id)
    third = wait_run(stack.engine, third_id, timeout=60)
    assert third.status == "cancelled", (third.error_code, third.error_message)
    print(f"stop to cancelled: {time.monotonic() - stopped_at:.2f}s")

    def gone() -> bool:
        left = processes(container)
        return SLEEP.encode() not in left and b"opencode" not in left

    wait_for(gone, 20, "the stopped command and OpenCode to be gone")


def test_an_opencode_agent_is_refused_a_tool_sees_its_skill_and_calls_an_mcp_tool(
    stack: RuntimeStack,
) -> None:
    stack.model.add(
        ToolCallsTurn(
            [
                ToolCall(
                    "bash", {"command": REJECTED_COMMAND, "description": "Touch"}, id="call_touch"
                )
            ]
        )
    )
    with pet_with_skill_and_mcp(stack.engine, stack.model.base_url, PROVIDER_KEY, "acp") as pet:
        owner, server, server_id, thread_id = pet.owner, pet.server, pet.server_id, pet.thread_id
        first_id = send(stack.engine, owner.account_id, thread_id, "touch the file")
        request = answer_prompt(stack.engine, owner, thread_id, first_id, "reject_once")
        assert (request["name"], request["input"]["command"]) == ("bash", REJECTED_COMMAND)
        first = wait_run(stack.engine, first_id)
        assert first.status == "completed", (first.error_code, first.error_message)

        # Rejected: the command did not run, and OpenCode ended its turn on the refusal.
        in_container(pet_sandbox(owner), f"test ! -e {REJECTED_FILE}")
        [refused] = [
            p for t, p in run_events(stack.engine, thread_id, first_id) if t == "tool.use.completed"
        ]
        assert refused["is_error"] is True and "rejected" in refused["output"]
        assert len(stack.model.chat_requests) == 1

        # The next message: the skill (OpenCode's skill tool) and the MCP tool (OpenCode's
        # `tools_echo`, our `tools__echo`), then the answer.
        stack.model.add(
            ToolCallsTurn([ToolCall("skill", {"name": SKILL_NAME}, id="call_skill")]),
            ToolCallsTurn([ToolCall("tools_echo", {"text": "Oslo: clear"}, id="call_echo")]),
            TextTurn("Oslo: clear."),
        )
        second_id = send(stack.engine, owner.account_id, thread_id, "Report the weather in Oslo")
        second = wait_run(stack.engine, second_id)
        assert second.status == "completed", (second.error_code, second.error_message)
        requests = stack.model.chat_requests
        assert len(requests) == 4
        # The model saw the refusal: the next request it got carries it as the call's result.
        assert "rejected" in _tool_messages(requests[1])["call_touch"]

        # The skill: offered (its name and description, not its body) and loaded whole.
        offered = json.dumps(requests[1].body)
        assert "skill" in {t["function"]["name"] for t in requests[1].body["tools"]}
        assert SKILL_NAME in offered and SKILL_DESCRIPTION in offered
        assert "then echo the one-line summary" not in offered
        events = run_events(stack.engine, thread_id, second_id)
        done = {p["tool_call_id"]: p for t, p in events if t == "tool.use.completed"}
        assert done["call_skill"]["is_error"] is False
        loaded = done["call_skill"]["output"]
        assert "# Weather report" in loaded and "then echo the one-line summary" in loaded
        assert "then echo the one-line summary" in _tool_messages(requests[2])["call_skill"]

        # The MCP tool, called through control's proxy with the vaulted token; its answer
        # went back to the model.
        assert (done["call_echo"]["output"], done["call_echo"]["is_error"]) == (
            "echo: Oslo: clear",
            False,
        )
        started = {p["tool_call_id"]: p for t, p in events if t == "tool.use.started"}
        assert started["call_echo"]["name"] == "tools__echo"
        assert "echo: Oslo: clear" in _tool_messages(requests[3])["call_echo"]
        assert_mcp_echo_went_through_the_proxy(
            stack.engine, thread_id, second_id, server, server_id
        )
