"""The `openai` runtime over the Responses API (`api_style="responses"`), against the scripted
server's `/v1/responses`: what this API puts on the wire (tools, function calls and their
outputs, reasoning, failures) and the saved conversation across both APIs. The behaviour the
two APIs share runs over both in test_openai_backend.py (`BOTH_STYLES`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from driver.backends.openai import OpenAIBackend
from driver.protocol import GatewayGrant
from tests.driver.conftest import GRANT, RecordingSink, command, make_spec, wait_for
from tests.support.openai_server import (
    FailedTurn,
    ScriptedOpenAIServer,
    TextTurn,
    ToolCall,
    ToolCallsTurn,
)

TERMINAL = {"run.completed", "run.failed", "run.cancelled"}
BackendFactory = Callable[..., Any]


@pytest.fixture
async def make_backend(
    workspace: Path, model_server: ScriptedOpenAIServer
) -> AsyncIterator[BackendFactory]:
    started: list[OpenAIBackend] = []

    async def factory(
        sink: RecordingSink, *, api_style: str = "responses", **spec_overrides: Any
    ) -> OpenAIBackend:
        spec = make_spec(
            workspace, gateway=GatewayGrant(grant=GRANT, api_style=api_style), **spec_overrides
        )  # type: ignore[arg-type]
        backend = OpenAIBackend(
            spec,
            sink,
            model_base_url=model_server.base_url,
            max_retries=0,
            retry_initial_delay=0.05,
        )
        await backend.start()
        started.append(backend)
        return backend

    yield factory
    for backend in started:
        await backend.close()


async def start_run(backend: OpenAIBackend, run_id: str, text: str) -> str:
    cmd = command("input.start", {"run_id": run_id, "text": text, "attachments": []})
    await backend.handle_command(cmd)
    return cmd.command_id


async def finish(sink: RecordingSink, run_id: str, timeout: float = 10.0) -> str:
    await wait_for(
        lambda: any(k in TERMINAL for k in sink.kinds(run_id)), timeout, f"the end of {run_id}"
    )
    return next(k for k in sink.kinds(run_id) if k in TERMINAL)


def saved_messages(workspace: Path) -> list[dict[str, Any]]:
    return list(json.loads((workspace / ".mosoo/sessions/ses_1.json").read_text())["messages"])


async def test_the_request_carries_instructions_input_and_translated_options(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer
) -> None:
    model_server.add(TextTurn(["Hel", "lo", " world"], reasoning=["Let me ", "think."]))
    sink = RecordingSink()
    options = {
        "temperature": 0.2,
        "max_tokens": 300,
        "reasoning_effort": "low",
        "seed": 7,
        "stop": ["x"],
    }
    backend = await make_backend(sink, provider_options=options)
    await start_run(backend, "run-1", "Say hello")
    assert await finish(sink, "run-1") == "run.completed"
    assert model_server.chat_requests == []
    (request,) = model_server.responses_requests
    assert request.headers["authorization"] == f"Bearer {GRANT}"
    body = request.body
    assert (body["model"], body["stream"], body["store"]) == ("test-model", True, False)
    assert body["instructions"].startswith("You are a careful test agent.")
    assert body["input"] == [{"role": "user", "content": "Say hello"}]
    # Chat Completions names are translated; what the Responses API lacks is not sent.
    assert (body["temperature"], body["max_output_tokens"], body["reasoning"]) == (
        0.2,
        300,
        {"effort": "low"},
    )
    assert not {
        "messages",
        "stream_options",
        "max_tokens",
        "reasoning_effort",
        "seed",
        "stop",
        "tools",
    } & set(body)


async def test_a_bash_call_round_trips_as_function_call_and_function_call_output(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer, workspace: Path
) -> None:
    model_server.add(
        ToolCallsTurn([ToolCall("bash", {"command": "pwd"}, id="call_pwd")]),
        TextTurn("In the workspace."),
    )
    sink = RecordingSink()
    backend = await make_backend(sink, tools={"bash": "allow", "read": "allow"})
    await start_run(backend, "run-2", "Where are you?")
    assert await finish(sink, "run-2") == "run.completed"
    first, second = model_server.responses_requests
    tools = {tool["name"]: tool for tool in first.body["tools"]}
    assert sorted(tools) == ["bash", "read"]
    assert tools["bash"]["type"] == "function" and tools["bash"]["strict"] is False
    assert tools["bash"]["parameters"]["properties"]["command"]["type"] == "string"
    assert second.input == [
        {"role": "user", "content": "Where are you?"},
        {
            "type": "function_call",
            "call_id": "call_pwd",
            "name": "bash",
            "arguments": json.dumps({"command": "pwd"}),
        },
        {"type": "function_call_output", "call_id": "call_pwd", "output": str(workspace)},
    ]


async def test_the_conversation_persists_and_continues_as_input_items(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer, workspace: Path
) -> None:
    model_server.add(
        ToolCallsTurn([ToolCall("bash", {"command": "echo 42"}, id="call_echo")]),
        TextTurn("The answer is 42."),
        TextTurn("You asked about the answer."),
    )
    first_sink = RecordingSink()
    first = await make_backend(first_sink, tools={"bash": "allow"})
    await start_run(first, "run-a", "What is the answer?")
    assert await finish(first_sink, "run-a") == "run.completed"
    await first.close()
    # Saved in the one format both APIs share (Chat Completions messages).
    assert [m["role"] for m in saved_messages(workspace)] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]

    second_sink = RecordingSink()
    second = await make_backend(
        second_sink, tools={"bash": "allow"}
    )  # a new container on the restored workspace
    await start_run(second, "run-b", "What did I ask?")
    assert await finish(second_sink, "run-b") == "run.completed"
    assert model_server.responses_requests[2].input == [
        {"role": "user", "content": "What is the answer?"},
        {
            "type": "function_call",
            "call_id": "call_echo",
            "name": "bash",
            "arguments": json.dumps({"command": "echo 42"}),
        },
        {"type": "function_call_output", "call_id": "call_echo", "output": "42"},
        {"role": "assistant", "content": "The answer is 42."},
        {"role": "user", "content": "What did I ask?"},
    ]


async def test_a_chat_completions_conversation_continues_over_the_responses_api(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer
) -> None:
    model_server.add(TextTurn("Noted."), TextTurn("You said hello."))
    chat_sink = RecordingSink()
    chat = await make_backend(chat_sink, api_style="chat_completions")
    await start_run(chat, "run-c1", "hello")
    await finish(chat_sink, "run-c1")
    await chat.close()

    sink = RecordingSink()
    backend = await make_backend(sink)
    await start_run(backend, "run-c2", "What did I say?")
    assert await finish(sink, "run-c2") == "run.completed"
    assert len(model_server.chat_requests) == len(model_server.responses_requests) == 1
    assert model_server.responses_requests[0].input == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "What did I say?"},
    ]


@pytest.mark.parametrize(
    ("turn", "retryable", "detail"),
    [
        (
            FailedTurn("the model fell over", code="server_error", text=["Half an ", "answer"]),
            True,
            "the model fell over (server_error)",
        ),
        (
            FailedTurn("bad prompt", code="invalid_prompt", event="error"),
            False,
            "bad prompt (invalid_prompt)",
        ),
    ],
    ids=["response.failed", "error"],
)
async def test_a_failed_response_fails_the_run_with_model_error(
    make_backend: BackendFactory,
    model_server: ScriptedOpenAIServer,
    workspace: Path,
    turn: FailedTurn,
    retryable: bool,
    detail: str,
) -> None:
    model_server.add(turn)
    sink = RecordingSink()
    backend = await make_backend(sink)
    command_id = await start_run(backend, "run-f", "hi")
    assert await finish(sink, "run-f") == "run.failed"
    (failure,) = sink.of_kind("run.failed")
    assert failure["code"] == "model_error" and failure["retryable"] is retryable
    assert detail in failure["message"]
    assert sink.last_update(command_id)["result"] == {"run_status": "failed"}
    assert len(model_server.responses_requests) == 1  # a model failure is not retried in place
    if turn.text:  # what was streamed is closed as interrupted and kept out of the conversation
        assert sink.of_kind("message.completed")[0]["interrupted"] is True
    assert saved_messages(workspace) == [{"role": "user", "content": "hi"}]
