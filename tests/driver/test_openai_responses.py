"""The `openai` runtime over the Responses API (`api_style="responses"`), against the scripted
server's `/v1/responses`. The loop, tools, permissions, cancel, retry and the saved
conversation are the Chat Completions ones; these tests cover what the API changes."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from driver.backends.openai import OpenAIBackend
from driver.protocol import GatewayGrant
from tests.driver.conftest import GRANT, RecordingSink, command, make_spec, wait_for
from tests.support.openai_server import (
    ErrorTurn,
    FailedTurn,
    ScriptedOpenAIServer,
    TextTurn,
    ToolCall,
    ToolCallsTurn,
)

TERMINAL = {"run.completed", "run.failed", "run.cancelled"}
BackendFactory = Callable[..., Any]


@pytest.fixture
async def make_backend(workspace: Path, model_server: ScriptedOpenAIServer) -> AsyncIterator[BackendFactory]:
    started: list[OpenAIBackend] = []

    async def factory(sink: RecordingSink, *, api_style: str = "responses", **spec_overrides: Any) -> OpenAIBackend:
        spec = make_spec(workspace, gateway=GatewayGrant(grant=GRANT, api_style=api_style), **spec_overrides)  # type: ignore[arg-type]
        backend = OpenAIBackend(spec, sink, model_base_url=model_server.base_url, max_retries=0, retry_initial_delay=0.05)
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
    await wait_for(lambda: any(k in TERMINAL for k in sink.kinds(run_id)), timeout, f"the end of {run_id}")
    return next(k for k in sink.kinds(run_id) if k in TERMINAL)


def saved_messages(workspace: Path) -> list[dict[str, Any]]:
    return list(json.loads((workspace / ".mosoo/sessions/ses_1.json").read_text())["messages"])


async def test_text_and_reasoning_summary_stream_as_deltas(make_backend: BackendFactory, model_server: ScriptedOpenAIServer) -> None:
    model_server.add(TextTurn(["Hel", "lo", " world"], reasoning=["Let me ", "think."]))
    sink = RecordingSink()
    options = {"temperature": 0.2, "max_tokens": 300, "reasoning_effort": "low", "seed": 7, "stop": ["x"]}
    backend = await make_backend(sink, provider_options=options)
    command_id = await start_run(backend, "run-1", "Say hello")
    assert await finish(sink, "run-1") == "run.completed"

    assert sink.kinds() == [
        "run.started",
        "thought.delta",
        "thought.delta",
        "message.started",
        "message.delta",
        "message.delta",
        "message.delta",
        "usage.updated",
        "message.completed",
        "run.completed",
    ]
    assert [p["text"] for p in sink.of_kind("thought.delta")] == ["Let me ", "think."]
    assert [p["text"] for p in sink.of_kind("message.delta")] == ["Hel", "lo", " world"]
    assert {p["message_id"] for p in sink.of_kind("message.delta")} == {sink.of_kind("message.started")[0]["message_id"]}
    assert sink.of_kind("message.completed")[0]["text"] == "Hello world"
    assert sink.of_kind("run.completed") == [{"final_text": "Hello world"}]
    assert sink.last_update(command_id)["result"] == {"run_status": "completed"}

    assert model_server.chat_requests == []
    (request,) = model_server.responses_requests
    assert request.headers["authorization"] == f"Bearer {GRANT}"
    body = request.body
    assert (body["model"], body["stream"], body["store"]) == ("test-model", True, False)
    assert body["instructions"].startswith("You are a careful test agent.")
    assert body["input"] == [{"role": "user", "content": "Say hello"}]
    # Chat Completions names are translated; what the Responses API lacks is not sent.
    assert (body["temperature"], body["max_output_tokens"], body["reasoning"]) == (0.2, 300, {"effort": "low"})
    assert not {"messages", "stream_options", "max_tokens", "reasoning_effort", "seed", "stop", "tools"} & set(body)


async def test_usage_comes_from_response_completed(make_backend: BackendFactory, model_server: ScriptedOpenAIServer) -> None:
    model_server.add(TextTurn("ok", usage={"prompt_tokens": 1234, "completion_tokens": 56, "cached_tokens": 1000, "reasoning_tokens": 7}))
    sink = RecordingSink()
    backend = await make_backend(sink)
    await start_run(backend, "run-u", "hi")
    assert await finish(sink, "run-u") == "run.completed"
    assert sink.of_kind("usage.updated") == [
        {"input_tokens": 1234, "output_tokens": 56, "cached_input_tokens": 1000, "reasoning_tokens": 7, "model": "test-model"}
    ]


async def test_a_bash_call_round_trips_as_function_call_and_function_call_output(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer, workspace: Path
) -> None:
    model_server.add(ToolCallsTurn([ToolCall("bash", {"command": "pwd"}, id="call_pwd")]), TextTurn("In the workspace."))
    sink = RecordingSink()
    backend = await make_backend(sink, tools={"bash": "allow", "read": "allow"})
    await start_run(backend, "run-2", "Where are you?")
    assert await finish(sink, "run-2") == "run.completed"

    assert sink.kinds() == [
        "run.started",
        "usage.updated",
        "tool.call.started",
        "tool.call.completed",
        "message.started",
        "message.delta",
        "message.delta",
        "message.delta",
        "usage.updated",
        "message.completed",
        "run.completed",
    ]
    assert sink.of_kind("tool.call.started") == [{"tool_call_id": "call_pwd", "name": "bash", "input": {"command": "pwd"}}]
    completed = sink.of_kind("tool.call.completed")[0]
    assert (completed["tool_call_id"], completed["output"], completed["is_error"]) == ("call_pwd", str(workspace), False)

    first, second = model_server.responses_requests
    tools = {tool["name"]: tool for tool in first.body["tools"]}
    assert sorted(tools) == ["bash", "read"]
    assert tools["bash"]["type"] == "function" and tools["bash"]["strict"] is False
    assert tools["bash"]["parameters"]["properties"]["command"]["type"] == "string"
    assert second.input == [
        {"role": "user", "content": "Where are you?"},
        {"type": "function_call", "call_id": "call_pwd", "name": "bash", "arguments": json.dumps({"command": "pwd"})},
        {"type": "function_call_output", "call_id": "call_pwd", "output": str(workspace)},
    ]


async def test_an_ask_tool_runs_once_allowed(make_backend: BackendFactory, model_server: ScriptedOpenAIServer, workspace: Path) -> None:
    model_server.add(
        ToolCallsTurn([ToolCall("write", {"path": "outputs/hello.txt", "content": "hi"}, id="call_w")]),
        TextTurn("Written."),
    )
    sink = RecordingSink()
    backend = await make_backend(sink, tools={"write": "ask"})
    await start_run(backend, "run-3", "Write a file")
    await wait_for(lambda: "permission.requested" in sink.kinds(), what="the permission request")
    request = sink.of_kind("permission.requested")[0]
    assert (request["tool_call_id"], request["name"]) == ("call_w", "write")
    assert request["input"] == {"path": "outputs/hello.txt", "content": "hi"}
    await asyncio.sleep(0.2)  # nothing runs while the question is open
    assert not (workspace / "outputs/hello.txt").exists()

    await backend.handle_command(command("permission.resolve", {"request_id": request["request_id"], "decision": "allow_once"}))
    assert await finish(sink, "run-3") == "run.completed"
    assert (workspace / "outputs/hello.txt").read_text() == "hi"
    assert sink.of_kind("permission.resolved") == [{"request_id": request["request_id"], "decision": "allow_once"}]
    assert sink.of_kind("file.changed") == [{"path": "outputs/hello.txt", "change": "created"}]
    assert model_server.responses_requests[1].input[-1]["call_id"] == "call_w"


async def test_a_rejected_call_goes_back_as_an_error_output(make_backend: BackendFactory, model_server: ScriptedOpenAIServer, workspace: Path) -> None:
    model_server.add(ToolCallsTurn([ToolCall("bash", {"command": "touch forbidden"}, id="call_b")]), TextTurn("Understood."))
    sink = RecordingSink()
    backend = await make_backend(sink, tools={"bash": "ask"})
    await start_run(backend, "run-4", "Touch it")
    await wait_for(lambda: "permission.requested" in sink.kinds())
    request_id = sink.of_kind("permission.requested")[0]["request_id"]
    await backend.handle_command(command("permission.resolve", {"request_id": request_id, "decision": "reject_once"}))
    assert await finish(sink, "run-4") == "run.completed"

    assert not (workspace / "forbidden").exists()
    completed = sink.of_kind("tool.call.completed")[0]
    assert (completed["output"], completed["is_error"]) == ("rejected by the user", True)
    assert model_server.responses_requests[1].input[-1] == {"type": "function_call_output", "call_id": "call_b", "output": "rejected by the user"}


async def test_cancel_mid_stream_closes_the_stream_and_keeps_what_was_seen(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer, workspace: Path
) -> None:
    model_server.add(TextTurn([f"word{i} " for i in range(100)], delay=0.05))
    sink = RecordingSink()
    backend = await make_backend(sink)
    await start_run(backend, "run-5", "Talk for a long time")
    await wait_for(lambda: "message.delta" in sink.kinds(), what="the first delta")
    started = time.monotonic()
    cancel = command("turn.cancel", {"run_id": "run-5", "reason": "stopped by the user"})
    await backend.handle_command(cancel)
    assert await finish(sink, "run-5") == "run.cancelled"
    assert time.monotonic() - started < 2
    assert sink.of_kind("run.cancelled") == [{"reason": "stopped by the user"}]
    assert sink.last_update(cancel.command_id)["result"] == {"cancelled": True}
    await wait_for(lambda: model_server.streams_aborted == 1, what="the server to see the stream closed")
    delta_count = len(sink.of_kind("message.delta"))
    await asyncio.sleep(0.2)
    assert len(sink.of_kind("message.delta")) == delta_count < 100
    saved = saved_messages(workspace)
    assert saved[-1]["role"] == "assistant" and saved[-1]["content"].startswith("word0")


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
    assert [m["role"] for m in saved_messages(workspace)] == ["user", "assistant", "tool", "assistant"]

    second_sink = RecordingSink()
    second = await make_backend(second_sink, tools={"bash": "allow"})  # a new container on the restored workspace
    await start_run(second, "run-b", "What did I ask?")
    assert await finish(second_sink, "run-b") == "run.completed"
    assert model_server.responses_requests[2].input == [
        {"role": "user", "content": "What is the answer?"},
        {"type": "function_call", "call_id": "call_echo", "name": "bash", "arguments": json.dumps({"command": "echo 42"})},
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
        (FailedTurn("the model fell over", code="server_error", text=["Half an ", "answer"]), True, "the model fell over (server_error)"),
        (FailedTurn("bad prompt", code="invalid_prompt", event="error"), False, "bad prompt (invalid_prompt)"),
    ],
    ids=["response.failed", "error"],
)
async def test_a_failed_response_fails_the_run_with_model_error(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer, workspace: Path, turn: FailedTurn, retryable: bool, detail: str
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


async def test_an_http_error_before_the_stream_fails_the_run(make_backend: BackendFactory, model_server: ScriptedOpenAIServer) -> None:
    model_server.add(ErrorTurn(400, "unsupported parameter"))
    sink = RecordingSink()
    backend = await make_backend(sink)
    await start_run(backend, "run-e", "hi")
    assert await finish(sink, "run-e") == "run.failed"
    (failure,) = sink.of_kind("run.failed")
    assert failure["code"] == "model_error" and failure["retryable"] is False and "400" in failure["message"]


async def test_a_stream_cut_mid_answer_is_retried(make_backend: BackendFactory, model_server: ScriptedOpenAIServer, workspace: Path) -> None:
    model_server.add(TextTurn(["Hel", "lo", " wor", "ld"], drop_after=2), TextTurn(["Hello", " world"]))
    sink = RecordingSink()
    backend = await make_backend(sink)
    await start_run(backend, "run-r", "Say hello")
    assert await finish(sink, "run-r") == "run.completed"
    interrupted, completed = sink.of_kind("message.completed")
    assert interrupted["interrupted"] is True and interrupted["text"] == "Hello"
    assert completed["text"] == "Hello world" and "interrupted" not in completed
    first, second = model_server.responses_requests
    assert second.input == first.input
    assert saved_messages(workspace) == [{"role": "user", "content": "Say hello"}, {"role": "assistant", "content": "Hello world"}]
