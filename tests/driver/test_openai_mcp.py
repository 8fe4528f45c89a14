"""The `openai` runtime with bound MCP servers (the SDK-based test server, reached by the
driver's own MCP client): tools offered as `<server>__<tool>` with their policies (off is
not offered, ask prompts with the arguments), text, image and structured results to the
model and the tool card, and a server that cannot be reached: reported, and fatal only when
it is required (`mcp_unavailable`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.backends.mcp_tools import model_tool_name
from driver.backends.openai import OpenAIBackend
from driver.protocol import McpBinding
from tests.driver.conftest import RecordingSink, command, make_spec, wait_for
from tests.support.mcp_server import MCPTestServer
from tests.support.openai_server import ScriptedOpenAIServer, TextTurn, ToolCall, ToolCallsTurn

TERMINAL = {"run.completed", "run.failed", "run.cancelled"}


@pytest.fixture
def mcp_server() -> Iterator[MCPTestServer]:
    with MCPTestServer() as server:
        yield server


def _backend(
    workspace: Path,
    model_server: ScriptedOpenAIServer,
    mcp_server: MCPTestServer,
    sink: RecordingSink,
    *bindings: McpBinding,
) -> OpenAIBackend:
    # The test server's endpoint is `<origin>/mcp`: base URL the origin, ref "mcp".
    return OpenAIBackend(
        make_spec(workspace, tools={"read": "allow"}, mcp_servers=list(bindings)),
        sink,
        model_base_url=model_server.base_url,
        mcp_base_url=mcp_server.origin,
        max_retries=0,
    )


async def _run(backend: OpenAIBackend, sink: RecordingSink, run_id: str = "run-1") -> str:
    await backend.start()
    await backend.handle_command(
        command("input.start", {"run_id": run_id, "text": "go", "attachments": []})
    )
    await wait_for(lambda: any(k in TERMINAL for k in sink.kinds(run_id)), 20, "the run's end")
    return next(k for k in sink.kinds(run_id) if k in TERMINAL)


async def test_tools_are_offered_with_their_policies_and_results_reach_model_and_card(
    workspace: Path, model_server: ScriptedOpenAIServer, mcp_server: MCPTestServer
) -> None:
    model_server.add(
        ToolCallsTurn(
            [
                ToolCall("test__echo", {"text": "hi"}, id="c1"),
                ToolCall("test__picture", {}, id="c2"),
                ToolCall("test__forecast", {"city": "Oslo"}, id="c3"),
            ]
        ),
        ToolCallsTurn([ToolCall("test__slow", {"seconds": 0.1}, id="c4")]),
        TextTurn("Done."),
    )
    sink = RecordingSink()
    binding = McpBinding(
        ref="mcp",
        name="test",
        grant="mcg_test",
        default_policy="allow",
        tool_policies={"broken": "off", "slow": "ask", "whoami": "off"},
    )
    backend = _backend(workspace, model_server, mcp_server, sink, binding)
    try:
        await backend.start()
        await backend.handle_command(
            command("input.start", {"run_id": "run-1", "text": "go", "attachments": []})
        )
        await wait_for(lambda: "permission.requested" in sink.kinds(), 20, "the Ask prompt")
        [asked] = sink.of_kind("permission.requested")
        assert (asked["name"], asked["input"]) == ("test__slow", {"seconds": 0.1})
        await backend.handle_command(
            command(
                "permission.resolve", {"request_id": asked["request_id"], "decision": "allow_once"}
            )
        )
        await wait_for(lambda: "run.completed" in sink.kinds("run-1"), 20, "the run's end")
    finally:
        await backend.close()

    [status] = sink.of_kind("mcp.server.status")
    assert (status["server"], status["status"], status["tools"]) == ("test", "connected", 4)
    first = model_server.chat_requests[0].body
    offered = {tool["function"]["name"] for tool in first["tools"]}
    assert offered == {"read", "test__echo", "test__picture", "test__forecast", "test__slow"}
    echo = next(t for t in first["tools"] if t["function"]["name"] == "test__echo")
    assert echo["function"]["parameters"]["properties"]["text"]["type"] == "string"

    done = {e["tool_call_id"]: e for e in sink.of_kind("tool.call.completed")}
    assert done["c1"]["output"] == "echo: hi" and done["c1"]["is_error"] is False
    assert done["c1"]["mcp"] == {"server": "test", "tool": "echo"}
    image = next(b for b in done["c2"]["content"] if b["type"] == "image")
    assert image["mime_type"] == "image/png" and image["path"].startswith("outputs/mcp/")
    assert (workspace / image["path"]).read_bytes()[:4] == b"\x89PNG"
    assert {"path": image["path"], "change": "created"} in sink.of_kind("file.changed")
    assert done["c3"]["structured_content"] == {
        "city": "Oslo",
        "temperature_c": 21.5,
        "sky": "clear",
    }
    assert done["c4"]["output"] == "slept 0.1"

    second = model_server.chat_requests[1].messages
    results = {m["tool_call_id"]: m["content"] for m in second if m["role"] == "tool"}
    assert results["c1"] == "echo: hi"
    assert "saved to outputs/mcp/" in results["c2"]
    assert json.loads(results["c3"]) == {"city": "Oslo", "temperature_c": 21.5, "sky": "clear"}
    # The image follows the step, as a user message the model can see.
    shown = second[-1]
    assert shown["role"] == "user"
    assert shown["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")


async def test_an_erroring_tool_is_an_error_result(
    workspace: Path, model_server: ScriptedOpenAIServer, mcp_server: MCPTestServer
) -> None:
    model_server.add(ToolCallsTurn([ToolCall("test__broken", {}, id="b1")]), TextTurn("Oh."))
    sink = RecordingSink()
    backend = _backend(
        workspace,
        model_server,
        mcp_server,
        sink,
        McpBinding(ref="mcp", name="test", grant="g", default_policy="allow"),
    )
    try:
        assert await _run(backend, sink) == "run.completed"
    finally:
        await backend.close()
    [done] = sink.of_kind("tool.call.completed")
    assert done["is_error"] is True and "broken" in done["output"]


async def test_a_down_optional_server_is_reported_and_the_run_goes_on(
    workspace: Path, model_server: ScriptedOpenAIServer, mcp_server: MCPTestServer
) -> None:
    model_server.add(TextTurn("Without it."))
    sink = RecordingSink()
    backend = _backend(
        workspace,
        model_server,
        mcp_server,
        sink,
        McpBinding(ref="gone", name="gone", grant="g"),
        McpBinding(ref="mcp", name="test", grant="g", default_policy="allow"),
    )
    try:
        assert await _run(backend, sink) == "run.completed"
    finally:
        await backend.close()
    statuses = {s["server"]: s for s in sink.of_kind("mcp.server.status")}
    assert statuses["gone"]["status"] == "failed" and "404" in statuses["gone"]["reason"]
    assert statuses["test"]["status"] == "connected"
    offered = {t["function"]["name"] for t in model_server.chat_requests[0].body["tools"]}
    assert "test__echo" in offered and not any(name.startswith("gone__") for name in offered)


async def test_a_down_required_server_fails_the_run_with_mcp_unavailable(
    workspace: Path, model_server: ScriptedOpenAIServer, mcp_server: MCPTestServer
) -> None:
    sink = RecordingSink()
    backend = _backend(
        workspace,
        model_server,
        mcp_server,
        sink,
        McpBinding(ref="gone", name="gone", grant="g", required=True),
    )
    try:
        assert await _run(backend, sink) == "run.failed"
    finally:
        await backend.close()
    [failed] = sink.of_kind("run.failed")
    assert failed["code"] == "mcp_unavailable" and "gone" in failed["message"]
    assert model_server.chat_requests == []  # the model was never called


def test_tool_names_fit_a_function_name() -> None:
    assert model_tool_name("github", "create_issue") == "github__create_issue"
    assert model_tool_name("fs", "read.file v2") == "fs__read_file_v2"
    long = model_tool_name("server", "x" * 100)
    assert len(long) == 64 and long.startswith("server__x")
    assert long != model_tool_name("server", "x" * 101)


async def test_a_cancelled_call_stops_waiting(
    workspace: Path, model_server: ScriptedOpenAIServer, mcp_server: MCPTestServer
) -> None:
    model_server.add(ToolCallsTurn([ToolCall("test__slow", {"seconds": 30}, id="s1")]))
    sink = RecordingSink()
    backend = _backend(
        workspace,
        model_server,
        mcp_server,
        sink,
        McpBinding(ref="mcp", name="test", grant="g", default_policy="allow"),
    )
    try:
        await backend.start()
        await backend.handle_command(
            command("input.start", {"run_id": "run-c", "text": "go", "attachments": []})
        )
        await wait_for(lambda: "tool.call.started" in sink.kinds(), 20, "the slow call")
        await asyncio.sleep(0.3)
        await backend.handle_command(command("turn.cancel", {"run_id": "run-c"}))
        await wait_for(lambda: "run.cancelled" in sink.kinds("run-c"), 10, "the cancel")
    finally:
        await backend.close()
