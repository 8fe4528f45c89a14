"""The `openai` runtime against the scripted OpenAI-compatible server.

The loop, tools, permissions, cancel and retries are one implementation over two APIs; the
tests marked `BOTH_STYLES` run over Chat Completions and the Responses API alike (what each
API puts on the wire is checked here for Chat Completions and in test_openai_responses.py)."""

from __future__ import annotations

import asyncio
import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from driver.backends import create_backend
from driver.backends.openai import OpenAIBackend
from driver.protocol import GatewayGrant
from tests.driver.conftest import GRANT, RecordingSink, command, make_spec, wait_for
from tests.support.openai_server import (
    ErrorTurn,
    RecordedRequest,
    ScriptedOpenAIServer,
    TextTurn,
    ToolCall,
    ToolCallsTurn,
)

TERMINAL = {"run.completed", "run.failed", "run.cancelled"}
BackendFactory = Callable[..., Any]
BOTH_STYLES = pytest.mark.parametrize("api_style", ["chat_completions", "responses"])


@pytest.fixture
def api_style() -> str:
    """Chat Completions unless a test runs over both (`BOTH_STYLES` overrides this)."""
    return "chat_completions"


def sent(model_server: ScriptedOpenAIServer, api_style: str) -> list[RecordedRequest]:
    """The model requests of the given API, in order."""
    return (
        model_server.chat_requests
        if api_style == "chat_completions"
        else model_server.responses_requests
    )


def conversation(request: RecordedRequest, api_style: str) -> list[dict[str, Any]]:
    return request.messages if api_style == "chat_completions" else request.input


def last_tool_result(request: RecordedRequest, api_style: str) -> tuple[str, str]:
    """(call id, output) of the tool result a request ends with, in either API's shape."""
    last = conversation(request, api_style)[-1]
    if api_style == "chat_completions":
        assert last["role"] == "tool"
        return last["tool_call_id"], last["content"]
    assert last["type"] == "function_call_output"
    return last["call_id"], last["output"]


@pytest.fixture
async def make_backend(
    workspace: Path, model_server: ScriptedOpenAIServer, api_style: str
) -> AsyncIterator[BackendFactory]:
    started: list[OpenAIBackend] = []

    async def factory(
        sink: RecordingSink,
        *,
        max_steps: int = 50,
        retry_initial_delay: float = 0.5,
        **spec_overrides: Any,
    ) -> OpenAIBackend:
        spec_overrides.setdefault("gateway", GatewayGrant(grant=GRANT, api_style=api_style))  # type: ignore[arg-type]
        spec = make_spec(workspace, **spec_overrides)
        backend = OpenAIBackend(
            spec,
            sink,
            model_base_url=model_server.base_url,
            max_steps=max_steps,
            max_retries=0,
            retry_initial_delay=retry_initial_delay,
        )
        await backend.start()
        started.append(backend)
        return backend

    yield factory
    for backend in started:
        await backend.close()


async def start_run(backend: OpenAIBackend, run_id: str, text: str, **extra: Any) -> str:
    cmd = command("input.start", {"run_id": run_id, "text": text, "attachments": [], **extra})
    await backend.handle_command(cmd)
    return cmd.command_id


async def finish(sink: RecordingSink, run_id: str, timeout: float = 10.0) -> str:
    await wait_for(
        lambda: any(k in TERMINAL for k in sink.kinds(run_id)), timeout, f"the end of {run_id}"
    )
    return next(k for k in sink.kinds(run_id) if k in TERMINAL)


@BOTH_STYLES
async def test_text_and_thinking_stream_as_ordered_deltas_then_complete(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer
) -> None:
    model_server.add(TextTurn(["Hel", "lo", " world"], reasoning=["Let me ", "think."]))
    sink = RecordingSink()
    backend = await make_backend(sink)
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
    assert sink.of_kind("message.completed")[0]["text"] == "Hello world"
    assert sink.of_kind("run.completed") == [{"final_text": "Hello world"}]
    message_ids = {p["message_id"] for p in sink.of_kind("message.delta")}
    assert message_ids == {sink.of_kind("message.started")[0]["message_id"]}
    assert sink.statuses(command_id) == ["accepted", "completed"]
    assert sink.last_update(command_id)["result"] == {"run_status": "completed"}


async def test_a_chat_completions_request_carries_the_prompt_and_known_options(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer
) -> None:
    model_server.add(TextTurn(["Hel", "lo", " world"], reasoning=["Let me ", "think."]))
    sink = RecordingSink()
    backend = await make_backend(
        sink,
        provider_options={
            "temperature": 0.2,
            "max_tokens": 300,
            "reasoning_effort": "low",
            "unknown": 1,
        },
    )
    await start_run(backend, "run-1", "Say hello")
    assert await finish(sink, "run-1") == "run.completed"
    (request,) = model_server.chat_requests
    assert request.headers["authorization"] == f"Bearer {GRANT}"
    body = request.body
    assert body["model"] == "test-model"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert (body["temperature"], body["max_tokens"], body["reasoning_effort"]) == (0.2, 300, "low")
    assert "unknown" not in body and "tools" not in body
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][0]["content"].startswith("You are a careful test agent.")
    assert body["messages"][1:] == [{"role": "user", "content": "Say hello"}]


@BOTH_STYLES
async def test_usage_comes_from_the_providers_own_numbers(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer
) -> None:
    model_server.add(
        TextTurn(
            "ok",
            usage={
                "prompt_tokens": 1234,
                "completion_tokens": 56,
                "cached_tokens": 1000,
                "reasoning_tokens": 7,
            },
        )
    )
    sink = RecordingSink()
    backend = await make_backend(sink)
    await start_run(backend, "run-u", "hi")
    await finish(sink, "run-u")
    assert sink.of_kind("usage.updated") == [
        {
            "input_tokens": 1234,
            "output_tokens": 56,
            "cached_input_tokens": 1000,
            "reasoning_tokens": 7,
            "model": "test-model",
        }
    ]


@BOTH_STYLES
async def test_a_bash_tool_call_runs_in_the_workspace_and_its_output_goes_back_to_the_model(
    make_backend: BackendFactory,
    model_server: ScriptedOpenAIServer,
    workspace: Path,
    api_style: str,
) -> None:
    model_server.add(
        ToolCallsTurn([ToolCall("bash", {"command": "pwd"}, id="call_pwd")]),
        TextTurn("In the workspace."),
    )
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
    assert sink.of_kind("tool.call.started") == [
        {"tool_call_id": "call_pwd", "name": "bash", "input": {"command": "pwd"}}
    ]
    completed = sink.of_kind("tool.call.completed")[0]
    assert completed["tool_call_id"] == "call_pwd"
    assert completed["output"] == str(workspace)
    assert completed["is_error"] is False
    assert isinstance(completed["duration_ms"], int) and completed["duration_ms"] >= 0
    _first, second = sent(model_server, api_style)
    assert last_tool_result(second, api_style) == ("call_pwd", str(workspace))


async def test_chat_completions_carry_the_tools_and_the_call_before_its_result(
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
    first, second = model_server.chat_requests
    assert sorted(t["function"]["name"] for t in first.body["tools"]) == ["bash", "read"]
    assert second.messages[-2]["role"] == "assistant"
    assert second.messages[-2]["tool_calls"][0]["id"] == "call_pwd"
    assert second.messages[-1] == {
        "role": "tool",
        "tool_call_id": "call_pwd",
        "content": str(workspace),
    }


@BOTH_STYLES
async def test_an_ask_tool_waits_for_permission_and_runs_when_allowed(
    make_backend: BackendFactory,
    model_server: ScriptedOpenAIServer,
    workspace: Path,
    api_style: str,
) -> None:
    model_server.add(
        ToolCallsTurn(
            [ToolCall("write", {"path": "outputs/hello.txt", "content": "hi"}, id="call_w")]
        ),
        TextTurn("Written."),
    )
    sink = RecordingSink()
    backend = await make_backend(sink, tools={"write": "ask"})
    await start_run(backend, "run-3", "Write a file")
    await wait_for(lambda: "permission.requested" in sink.kinds(), what="the permission request")
    request = sink.of_kind("permission.requested")[0]
    assert request["tool_call_id"] == "call_w" and request["name"] == "write"
    assert request["input"] == {"path": "outputs/hello.txt", "content": "hi"}
    await asyncio.sleep(0.2)  # nothing runs while the question is open
    assert "tool.call.completed" not in sink.kinds()
    assert not (workspace / "outputs/hello.txt").exists()

    resolve = command(
        "permission.resolve", {"request_id": request["request_id"], "decision": "allow_once"}
    )
    await backend.handle_command(resolve)
    assert await finish(sink, "run-3") == "run.completed"
    assert sink.statuses(resolve.command_id) == ["completed"]
    assert sink.of_kind("permission.resolved") == [
        {"request_id": request["request_id"], "decision": "allow_once"}
    ]
    assert (workspace / "outputs/hello.txt").read_text() == "hi"
    assert sink.of_kind("tool.call.completed")[0]["is_error"] is False
    assert sink.of_kind("file.changed") == [{"path": "outputs/hello.txt", "change": "created"}]
    kinds = sink.kinds()
    assert (
        kinds.index("tool.call.started")
        < kinds.index("permission.requested")
        < kinds.index("permission.resolved")
        < kinds.index("tool.call.completed")
    )
    assert last_tool_result(sent(model_server, api_style)[1], api_style)[0] == "call_w"


@BOTH_STYLES
async def test_a_rejected_tool_call_is_an_error_result_for_the_model(
    make_backend: BackendFactory,
    model_server: ScriptedOpenAIServer,
    workspace: Path,
    api_style: str,
) -> None:
    model_server.add(
        ToolCallsTurn([ToolCall("bash", {"command": "touch forbidden"}, id="call_b")]),
        TextTurn("Understood."),
    )
    sink = RecordingSink()
    backend = await make_backend(sink, tools={"bash": "ask"})
    await start_run(backend, "run-4", "Touch it")
    await wait_for(lambda: "permission.requested" in sink.kinds())
    request_id = sink.of_kind("permission.requested")[0]["request_id"]
    await backend.handle_command(
        command("permission.resolve", {"request_id": request_id, "decision": "reject_once"})
    )
    assert await finish(sink, "run-4") == "run.completed"

    assert not (workspace / "forbidden").exists()
    completed = sink.of_kind("tool.call.completed")[0]
    assert (completed["output"], completed["is_error"]) == ("rejected by the user", True)
    assert last_tool_result(sent(model_server, api_style)[1], api_style) == (
        "call_b",
        "rejected by the user",
    )


async def test_permission_answers_for_unknown_requests_or_bad_decisions_fail(
    make_backend: BackendFactory,
) -> None:
    sink = RecordingSink()
    backend = await make_backend(sink)
    unknown = command("permission.resolve", {"request_id": "perm_nope", "decision": "allow_once"})
    await backend.handle_command(unknown)
    assert sink.statuses(unknown.command_id) == ["failed"]
    bad = command("permission.resolve", {"request_id": "perm_nope", "decision": "always"})
    await backend.handle_command(bad)
    assert sink.statuses(bad.command_id) == ["failed"]


@BOTH_STYLES
async def test_cancel_mid_stream_stops_the_model_stream(
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
    assert sink.statuses(cancel.command_id) == ["accepted", "completed"]
    assert sink.last_update(cancel.command_id)["result"] == {"cancelled": True}
    await wait_for(
        lambda: model_server.streams_aborted == 1, what="the server to see the stream closed"
    )
    delta_count = len(sink.of_kind("message.delta"))
    await asyncio.sleep(0.2)
    assert len(sink.of_kind("message.delta")) == delta_count < 100
    saved = json.loads((workspace / ".mosoo/sessions/ses_1.json").read_text())["messages"]
    assert saved[-1]["role"] == "assistant" and saved[-1]["content"].startswith("word0")


@BOTH_STYLES
async def test_cancel_mid_tool_kills_the_running_command(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer, workspace: Path
) -> None:
    model_server.add(
        ToolCallsTurn(
            [ToolCall("bash", {"command": "echo $$ > bash.pid; sleep 60"}, id="call_sleep")]
        )
    )
    sink = RecordingSink()
    backend = await make_backend(sink, tools={"bash": "allow"})
    await start_run(backend, "run-6", "Sleep")
    pid_file = workspace / "bash.pid"
    await wait_for(
        lambda: pid_file.exists() and pid_file.read_text().strip() != "",
        what="the command to start",
    )
    pid = int(pid_file.read_text())
    started = time.monotonic()
    await backend.handle_command(command("turn.cancel", {"run_id": "run-6"}))
    assert await finish(sink, "run-6") == "run.cancelled"
    assert time.monotonic() - started < 3
    await wait_for(lambda: not _alive(pid), timeout=5, what="the command to die")
    assert "tool.call.completed" not in sink.kinds()
    saved = json.loads((workspace / ".mosoo/sessions/ses_1.json").read_text())["messages"]
    assert saved[-1]["role"] == "tool" and saved[-1]["tool_call_id"] == "call_sleep"


@BOTH_STYLES
async def test_cancel_while_waiting_for_permission_ends_the_run_and_answers_the_tool_call(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer, workspace: Path
) -> None:
    model_server.add(ToolCallsTurn([ToolCall("bash", {"command": "touch never"}, id="call_ask")]))
    sink = RecordingSink()
    backend = await make_backend(sink, tools={"bash": "ask"})
    await start_run(backend, "run-p", "Touch it")
    await wait_for(lambda: "permission.requested" in sink.kinds())
    request_id = sink.of_kind("permission.requested")[0]["request_id"]
    await backend.handle_command(command("turn.cancel", {"run_id": "run-p"}))
    assert await finish(sink, "run-p") == "run.cancelled"
    assert not (workspace / "never").exists()
    late = command("permission.resolve", {"request_id": request_id, "decision": "allow_once"})
    await backend.handle_command(late)
    assert sink.statuses(late.command_id) == ["failed"]
    saved = json.loads((workspace / ".mosoo/sessions/ses_1.json").read_text())["messages"]
    assert saved[-1]["role"] == "tool" and saved[-1]["tool_call_id"] == "call_ask"


async def test_cancel_for_another_or_no_run_is_a_no_op(make_backend: BackendFactory) -> None:
    sink = RecordingSink()
    backend = await make_backend(sink)
    cancel = command("turn.cancel", {"run_id": "run-x"})
    await backend.handle_command(cancel)
    assert sink.statuses(cancel.command_id) == ["completed"]
    assert sink.last_update(cancel.command_id)["result"]["cancelled"] is False


async def test_the_conversation_persists_in_the_workspace_and_continues_in_a_new_container(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer, workspace: Path
) -> None:
    model_server.add(TextTurn("The answer is 42."), TextTurn("You asked about the answer."))
    first_sink = RecordingSink()
    first = await make_backend(first_sink)
    await start_run(first, "run-a", "What is the answer?")
    await finish(first_sink, "run-a")
    await first.close()
    saved = json.loads((workspace / ".mosoo/sessions/ses_1.json").read_text())
    assert saved["session_id"] == "ses_1"
    assert oct((workspace / ".mosoo/sessions/ses_1.json").stat().st_mode & 0o777) == "0o600"

    second_sink = RecordingSink()
    second = await make_backend(second_sink)  # a new backend on the restored workspace
    await start_run(second, "run-b", "What did I ask?")
    assert await finish(second_sink, "run-b") == "run.completed"
    assert model_server.chat_requests[1].messages[1:] == [
        {"role": "user", "content": "What is the answer?"},
        {"role": "assistant", "content": "The answer is 42."},
        {"role": "user", "content": "What did I ask?"},
    ]


async def test_a_conversation_of_another_session_is_not_reused(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer, workspace: Path
) -> None:
    (workspace / ".mosoo/sessions").mkdir(parents=True)
    (workspace / ".mosoo/sessions/ses_1.json").write_text(
        json.dumps(
            {
                "version": 1,
                "session_id": "ses_other",
                "messages": [{"role": "user", "content": "secret of another thread"}],
            }
        )
    )
    model_server.add(TextTurn("fresh"))
    sink = RecordingSink()
    backend = await make_backend(sink)
    await start_run(backend, "run-c", "hello")
    await finish(sink, "run-c")
    assert model_server.chat_requests[0].messages[1:] == [{"role": "user", "content": "hello"}]


async def test_the_loop_stops_at_the_step_limit(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer
) -> None:
    model_server.add(*[ToolCallsTurn([ToolCall("bash", {"command": "true"})]) for _ in range(3)])
    sink = RecordingSink()
    backend = await make_backend(sink, max_steps=2, tools={"bash": "allow"})
    command_id = await start_run(backend, "run-7", "Loop forever")
    assert await finish(sink, "run-7") == "run.failed"
    failure = sink.of_kind("run.failed")[0]
    assert failure["code"] == "tool_loop_limit" and failure["retryable"] is False
    assert len(model_server.chat_requests) == 2
    assert sink.last_update(command_id) == {
        "command_id": command_id,
        "status": "completed",
        "result": {"run_status": "failed"},
        "error": None,
    }


@BOTH_STYLES
@pytest.mark.parametrize(("status", "retryable"), [(400, False), (503, True)])
async def test_a_model_error_fails_the_run(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer, status: int, retryable: bool
) -> None:
    model_server.add(ErrorTurn(status, "the model refused"))
    sink = RecordingSink()
    backend = await make_backend(sink)
    await start_run(backend, "run-8", "hi")
    assert await finish(sink, "run-8") == "run.failed"
    failure = sink.of_kind("run.failed")[0]
    assert failure["code"] == "model_error"
    assert failure["retryable"] is retryable
    assert "the model refused" in failure["message"] and str(status) in failure["message"]


async def test_unknown_tools_and_broken_arguments_go_back_to_the_model_as_errors(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer
) -> None:
    model_server.add(
        ToolCallsTurn(
            [
                ToolCall("web_fetch", {"url": "https://example.com"}, id="c1"),
                ToolCall("bash", "{not json", id="c2"),
            ]
        ),
        TextTurn("Sorry."),
    )
    sink = RecordingSink()
    backend = await make_backend(sink, tools={"bash": "allow"})
    await start_run(backend, "run-9", "Try things")
    assert await finish(sink, "run-9") == "run.completed"
    first, second = sink.of_kind("tool.call.completed")
    assert first["is_error"] and "unknown tool 'web_fetch'" in first["output"]
    assert second["is_error"] and "not a valid JSON object" in second["output"]
    assert sink.of_kind("tool.call.started")[1]["input"] == {"raw_arguments": "{not json"}


async def test_a_second_input_while_a_run_is_active_is_refused(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer
) -> None:
    model_server.add(TextTurn([f"w{i} " for i in range(40)], delay=0.02))
    sink = RecordingSink()
    backend = await make_backend(sink)
    await start_run(backend, "run-10", "first")
    second = await start_run(backend, "run-11", "second")
    assert sink.statuses(second) == ["failed"]
    assert "still active" in sink.last_update(second)["error"]
    await finish(sink, "run-10")


async def test_attachments_are_named_in_the_user_message(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer
) -> None:
    model_server.add(TextTurn("Seen."))
    sink = RecordingSink()
    backend = await make_backend(sink)
    await start_run(
        backend,
        "run-12",
        "Look at this",
        attachments=[
            {"file_id": "file_1", "name": "data.csv", "mime_type": "text/csv", "size": 12}
        ],
    )
    await finish(sink, "run-12")
    content = model_server.chat_requests[0].messages[-1]["content"]
    assert content.startswith("Look at this")
    assert "/mnt/attachments/file_1/data.csv (text/csv, 12 bytes)" in content


async def test_an_unsupported_runtime_refuses_each_input_clearly(workspace: Path) -> None:
    sink = RecordingSink()
    backend = create_backend(
        "gemini",
        make_spec(workspace, runtime="gemini"),
        sink,
        gateway_url="http://127.0.0.1:9/gateway",
    )
    assert backend.capabilities == ()
    await backend.start()
    cmd = command("input.start", {"run_id": "run-13", "text": "hi"})
    await backend.handle_command(cmd)
    assert sink.kinds() == ["run.failed"]
    failure = sink.of_kind("run.failed")[0]
    assert (
        failure["code"] == "runtime_unsupported"
        and "'gemini'" in failure["message"]
        and failure["retryable"] is False
    )
    assert sink.statuses(cmd.command_id) == ["failed"]


async def test_session_stop_cancels_the_active_run_and_sets_stopped(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer
) -> None:
    model_server.add(TextTurn([f"w{i} " for i in range(100)], delay=0.05))
    sink = RecordingSink()
    backend = await make_backend(sink)
    await start_run(backend, "run-14", "long")
    await wait_for(lambda: "message.delta" in sink.kinds())
    stop = command("session.stop", {"reason": "thread archived"})
    await backend.handle_command(stop)
    await asyncio.wait_for(backend.stopped.wait(), timeout=5)
    assert sink.of_kind("run.cancelled") == [{"reason": "thread archived"}]
    assert sink.statuses(stop.command_id) == ["accepted", "completed"]


async def test_checkpoint_prepare_completes(make_backend: BackendFactory) -> None:
    sink = RecordingSink()
    backend = await make_backend(sink)
    prepare = command("checkpoint.prepare", {"paths": ["/workspace"]})
    await backend.handle_command(prepare)
    await wait_for(lambda: sink.statuses(prepare.command_id) == ["accepted", "completed"])
    assert sink.last_update(prepare.command_id)["result"] == {"synced": True, "run_active": False}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# --- transport failures: retried with backoff (a control restart under the forwarder) -------


@BOTH_STYLES
async def test_a_stream_cut_mid_answer_is_retried_as_a_new_message(
    make_backend: BackendFactory,
    model_server: ScriptedOpenAIServer,
    workspace: Path,
    api_style: str,
) -> None:
    model_server.add(
        TextTurn(["Hel", "lo", " wor", "ld"], drop_after=2), TextTurn(["Hello", " world"])
    )
    sink = RecordingSink()
    backend = await make_backend(sink, retry_initial_delay=0.05)
    command_id = await start_run(backend, "run-r1", "Say hello")
    assert await finish(sink, "run-r1") == "run.completed"

    assert sink.kinds() == [
        "run.started",
        "message.started",
        "message.delta",
        "message.delta",
        "message.completed",  # the cut attempt, closed as interrupted
        "message.started",
        "message.delta",
        "message.delta",
        "usage.updated",
        "message.completed",
        "run.completed",
    ]
    first, second = sink.of_kind("message.started")
    assert first["message_id"] != second["message_id"]
    interrupted, completed = sink.of_kind("message.completed")
    assert interrupted == {"message_id": first["message_id"], "text": "Hello", "interrupted": True}
    assert completed == {"message_id": second["message_id"], "text": "Hello world"}
    deltas = sink.of_kind("message.delta")
    assert [d["message_id"] for d in deltas] == [first["message_id"]] * 2 + [
        second["message_id"]
    ] * 2
    assert sink.of_kind("run.completed") == [{"final_text": "Hello world"}]
    assert sink.last_update(command_id)["result"] == {"run_status": "completed"}
    assert model_server.streams_aborted == 1

    # The retry asks the same question again, and only the final answer is kept.
    first_request, second_request = sent(model_server, api_style)
    assert conversation(second_request, api_style) == conversation(first_request, api_style)
    saved = json.loads((workspace / ".mosoo/sessions/ses_1.json").read_text())["messages"]
    assert saved == [
        {"role": "user", "content": "Say hello"},
        {"role": "assistant", "content": "Hello world"},
    ]


async def test_the_forwarders_502_while_control_is_down_is_retried(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer
) -> None:
    unreachable = ErrorTurn(502, "control is unreachable: ConnectError", code="forwarder_error")
    model_server.add(unreachable, unreachable, TextTurn("Back."))
    sink = RecordingSink()
    backend = await make_backend(sink, retry_initial_delay=0.05)
    await start_run(backend, "run-r2", "hi")
    assert await finish(sink, "run-r2") == "run.completed"
    assert len(model_server.chat_requests) == 3
    assert "message.completed" in sink.kinds()
    assert all(
        not p.get("interrupted") for p in sink.of_kind("message.completed")
    )  # nothing was streamed before


async def test_another_502_is_not_retried(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer
) -> None:
    model_server.add(ErrorTurn(502, "bad gateway upstream"), TextTurn("never"))
    sink = RecordingSink()
    backend = await make_backend(sink, retry_initial_delay=0.05)
    await start_run(backend, "run-r3", "hi")
    assert await finish(sink, "run-r3") == "run.failed"
    assert len(model_server.chat_requests) == 1


async def test_a_model_gateway_that_stays_unreachable_fails_the_run_after_the_budget(
    workspace: Path,
) -> None:
    sink = RecordingSink()
    backend = OpenAIBackend(
        make_spec(workspace),
        sink,
        model_base_url=f"http://127.0.0.1:{_closed_port()}/v1",
        max_retries=0,
        retry_budget=1.0,
        retry_initial_delay=0.05,
        retry_max_delay=0.2,
    )
    await backend.start()
    try:
        started = time.monotonic()
        command_id = await start_run(backend, "run-r4", "hi")
        assert await finish(sink, "run-r4") == "run.failed"
        elapsed = time.monotonic() - started
    finally:
        await backend.close()
    assert 0.7 < elapsed < 5
    (failure,) = sink.of_kind("run.failed")
    assert failure["code"] == "model_error" and failure["retryable"] is True
    assert "could not reach the model gateway for 1 s" in failure["message"]
    assert sink.kinds() == ["run.started", "run.failed"]
    assert sink.last_update(command_id)["result"] == {"run_status": "failed"}


async def test_cancel_interrupts_the_backoff_at_once(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer
) -> None:
    model_server.add(TextTurn(["partial ", "answer ", "never ", "finished"], drop_after=1))
    sink = RecordingSink()
    backend = await make_backend(sink, retry_initial_delay=30.0)  # the first wait is long
    await start_run(backend, "run-r5", "hi")
    await wait_for(lambda: "message.completed" in sink.kinds(), what="the cut attempt to be closed")
    await asyncio.sleep(0.1)  # now in the backoff wait
    started = time.monotonic()
    cancel = command("turn.cancel", {"run_id": "run-r5", "reason": "stopped by the user"})
    await backend.handle_command(cancel)
    assert await finish(sink, "run-r5") == "run.cancelled"
    assert time.monotonic() - started < 1
    assert sink.last_update(cancel.command_id)["result"] == {"cancelled": True}
    assert len(model_server.chat_requests) == 1  # no attempt after the cancel
    assert sink.of_kind("message.completed") == [
        {
            "message_id": sink.of_kind("message.started")[0]["message_id"],
            "text": "partial ",
            "interrupted": True,
        }
    ]


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class HalfImportedHttpx:
    """Another thread in the middle of `import httpx`, as Python leaves it while the module
    runs: the module's import lock held and a module without its names in `sys.modules`.
    `release()` puts the real module back and lets the lock go, as the import finishing."""

    def __init__(self) -> None:
        self.real = sys.modules["httpx"]
        self.holding = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._import, daemon=True)

    def _import(self) -> None:
        # importlib's own per-module lock: what an importing thread holds and others wait on.
        lock = importlib._bootstrap._get_module_lock("httpx")  # type: ignore[attr-defined]
        lock.acquire()
        spec = importlib.machinery.ModuleSpec("httpx", None)
        spec._initializing = True  # type: ignore[attr-defined]
        sys.modules["httpx"] = importlib.util.module_from_spec(spec)
        self.holding.set()
        self.done.wait(10)
        sys.modules["httpx"] = self.real
        lock.release()

    def __enter__(self) -> HalfImportedHttpx:
        self.thread.start()
        assert self.holding.wait(5)
        return self

    def release(self) -> None:
        self.done.set()

    def __exit__(self, *exc: object) -> None:
        self.release()
        self.thread.join(5)
        sys.modules["httpx"] = self.real


async def test_the_first_model_call_waits_for_an_httpx_import_another_thread_is_making(
    make_backend: BackendFactory, model_server: ScriptedOpenAIServer
) -> None:
    # The SDK reads sys.modules["httpx"] as it makes its client; CI saw runs fail with
    # "partially initialized module 'httpx' has no attribute 'Timeout'" when another thread
    # was importing httpx at that moment.
    model_server.add(TextTurn("hello"))
    sink = RecordingSink()
    backend = await make_backend(sink)
    importlib.import_module("openai")  # already imported, as in a driver that ran before
    with HalfImportedHttpx() as importing:
        # Released from a timer thread: the event loop's own thread may wait on the import.
        threading.Timer(0.3, importing.release).start()
        await start_run(backend, "run-httpx", "hi")
        assert await finish(sink, "run-httpx") == "run.completed", sink.of_kind("run.failed")
