"""The `acp` runtime with the real OpenCode binary (the image's pinned build, unpacked on the
host) against the scripted OpenAI-compatible server and the test MCP server, all on loopback.

Each OpenCode start costs a few seconds, so each test starts it once or twice and checks a
whole story: a run streamed and its tool asked for, the thread continued in the same agent
and after a restart; Stop during a permission prompt and during a command, then a Reject;
MCP, skills and provider options. Last, another ACP agent (tests/support/acp_agent.py)
chosen by its command line, which cannot load sessions and so gets the thread replayed."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from driver.backends import create_backend
from driver.backends.acp import AcpBackend, _process_tree
from driver.protocol import McpBinding, SkillBinding
from mosoo_core.runtime.sandbox import image
from tests.driver.conftest import GRANT, RecordingSink, command, make_spec, wait_for
from tests.support.mcp_server import MCPTestServer
from tests.support.openai_server import ScriptedOpenAIServer, TextTurn, ToolCall, ToolCallsTurn

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[2]
TERMINAL = {"run.completed", "run.failed", "run.cancelled"}
SYSTEM_PROMPT = "You are the ACP test agent. Answer in one line."
SLEEP = "sleep 317"  # a command line no other test runs
Factory = Callable[..., AcpBackend]


@pytest.fixture(scope="module")
def opencode_bin() -> Path:
    """The pinned OpenCode and rg, unpacked once (the packages come from the downloads cache
    the sandbox image build fills, so a prepared machine downloads nothing here)."""
    if image.opencode_package() is None:
        pytest.skip(f"no OpenCode is pinned for {image.node_arch()}")
    dest = ROOT / "data" / "test-tools" / f"opencode-{image.OPENCODE_VERSION}"
    if not (dest / "opencode" / "bin" / "rg").exists():  # written last
        image.install_opencode(dest, downloads_dir=ROOT / "data" / "sandbox-downloads")
    return dest / "opencode" / "bin"


@pytest.fixture(autouse=True)
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The driver's temporary folder (the sandbox's /tmp), which the agents would inherit."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


@pytest.fixture
def model_server() -> Any:
    # The grant is the only key the server takes: what OpenCode sends must be it.
    with ScriptedOpenAIServer(api_key=GRANT) as server:
        yield server


@pytest.fixture
async def make_backend(
    workspace: Path, model_server: ScriptedOpenAIServer, opencode_bin: Path
) -> AsyncIterator[Factory]:
    started: list[AcpBackend] = []

    def factory(sink: RecordingSink, **overrides: Any) -> AcpBackend:
        overrides.setdefault("tools", {"bash": "ask"})
        spec = make_spec(
            workspace,
            runtime="acp",
            system_prompt=SYSTEM_PROMPT,
            environment={"PATH": f"{opencode_bin}:{os.environ['PATH']}"},
            **overrides,
        )
        backend = create_backend("acp", spec, sink, gateway_url="http://unused")
        assert isinstance(backend, AcpBackend)
        backend.model_base_url = model_server.base_url
        started.append(backend)
        return backend

    yield factory
    for backend in started:
        await backend.close()


async def run(backend: AcpBackend, sink: RecordingSink, run_id: str, text: str) -> str:
    """Start a run; returns the input.start command id."""
    start = command("input.start", {"run_id": run_id, "text": text})
    await backend.handle_command(start)
    return start.command_id


async def finished(sink: RecordingSink, run_id: str, timeout: float = 60) -> str:
    await wait_for(lambda: bool(TERMINAL & set(sink.kinds(run_id))), timeout, f"{run_id} to end")
    return next(k for k in sink.kinds(run_id) if k in TERMINAL)


async def permission(sink: RecordingSink, run_id: str) -> dict[str, Any]:
    def asked() -> bool:
        return any(
            e["kind"] == "permission.requested" and e["run_id"] == run_id for e in sink.events
        )

    await wait_for(asked, 60, "the permission prompt")
    return next(
        e["payload"]
        for e in sink.events
        if e["kind"] == "permission.requested" and e["run_id"] == run_id
    )


def payloads(sink: RecordingSink, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e["payload"] for e in sink.events if e["run_id"] == run_id and e["kind"] == kind]


async def test_opencode_streams_asks_for_bash_and_continues_the_thread_after_a_restart(
    make_backend: Factory, model_server: ScriptedOpenAIServer, workspace: Path, temp_root: Path
) -> None:
    model_server.add(
        ToolCallsTurn([ToolCall("bash", {"command": "pwd", "description": "Where am I"})]),
        TextTurn("You are in the workspace.", reasoning=["Looking ", "around."]),
        TextTurn("Still here."),
        TextTurn("We spoke about the workspace."),
    )
    sink = RecordingSink()
    backend = make_backend(sink)
    started = time.monotonic()
    await backend.start()

    await run(backend, sink, "run-1", "run pwd")
    asked = await permission(sink, "run-1")
    assert asked["name"] == "bash" and asked["input"]["command"] == "pwd"
    # The agent's temporary files go to a folder of its own ...
    [scratch] = temp_root.iterdir()
    assert backend.agent is not None and backend.agent.scratch == scratch
    await backend.handle_command(
        command("permission.resolve", {"request_id": asked["request_id"], "decision": "allow_once"})
    )
    assert await finished(sink, "run-1") == "run.completed", sink.events[-3:]
    # ... which ends with it (with its run): OpenCode never deletes the native library it
    # unpacks there, and a sandbox's /tmp is a tmpfs that counts against its memory.
    await wait_for(lambda: not any(temp_root.iterdir()), 10, "the agent's temporary folder to go")
    print(f"first run, agent start included: {time.monotonic() - started:.2f}s")

    kinds = sink.kinds("run-1")
    assert kinds.index("tool.call.started") < kinds.index("permission.requested")
    assert kinds.index("permission.resolved") < kinds.index("tool.call.completed")
    [tool_started] = payloads(sink, "run-1", "tool.call.started")
    [tool_done] = payloads(sink, "run-1", "tool.call.completed")
    assert tool_started["name"] == "bash" and tool_started["input"]["command"] == "pwd"
    assert tool_done["tool_call_id"] == tool_started["tool_call_id"] == asked["tool_call_id"]
    assert tool_done["output"].strip() == str(workspace) and tool_done["is_error"] is False
    text = "".join(p["text"] for p in payloads(sink, "run-1", "message.delta"))
    assert text == "You are in the workspace."
    assert "".join(p["text"] for p in payloads(sink, "run-1", "thought.delta")) == "Looking around."
    assert payloads(sink, "run-1", "run.completed") == [{"final_text": text}]
    usage = payloads(sink, "run-1", "usage.updated")
    assert usage and usage[-1]["input_tokens"] > 0 and usage[-1]["model"] == "test-model"

    # Only the Agent's model calls (no title or summary call), with the grant, the model as
    # it is named, the system prompt, and only the tools the Agent turned on.
    requests = model_server.chat_requests
    assert len(requests) == 2
    assert {r.headers["authorization"] for r in requests} == {f"Bearer {GRANT}"}
    assert {r.body["model"] for r in requests} == {"test-model"}
    system = requests[0].messages[0]
    assert system["role"] == "system" and SYSTEM_PROMPT in str(system["content"])
    offered = {t["function"]["name"] for t in requests[0].body["tools"]}
    assert "bash" in offered and not offered & {"edit", "write", "webfetch", "task", "glob"}

    # A second message in the same agent continues the session.
    await run(backend, sink, "run-2", "still there?")
    assert await finished(sink, "run-2") == "run.completed"
    assert any(m.get("content") == "run pwd" for m in model_server.chat_requests[-1].messages)

    # A new driver (a new container restored from the checkpoint): the session is loaded.
    await backend.close()
    assert backend.agent is None
    again = make_backend(sink)
    await again.start()
    await run(again, sink, "run-3", "what did we talk about?")
    assert await finished(sink, "run-3") == "run.completed"
    history = [str(m.get("content")) for m in model_server.chat_requests[-1].messages]
    assert "run pwd" in history and "still there?" in history
    assert payloads(sink, "run-3", "run.completed") == [
        {"final_text": "We spoke about the workspace."}
    ]
    # OpenCode's files are the run's state, in the workspace; nothing was installed by npm.
    state = workspace / ".mosoo" / "acp" / "ses_1"
    assert (state / "xdg" / "data" / "opencode" / "opencode.db").exists()
    assert not (workspace / ".npm").exists()
    assert GRANT not in (state / "opencode.json").read_text()


async def test_stop_answers_a_pending_permission_kills_a_running_command_and_reject_refuses(
    make_backend: Factory, model_server: ScriptedOpenAIServer, workspace: Path
) -> None:
    sleep = {"command": SLEEP, "description": "Wait"}
    model_server.add(
        ToolCallsTurn([ToolCall("bash", sleep)]), ToolCallsTurn([ToolCall("bash", sleep)])
    )
    sink = RecordingSink()
    backend = make_backend(sink)
    await backend.start()

    # Stop while the permission prompt is open: the agent is told `cancelled`.
    await run(backend, sink, "run-1", "wait")
    await permission(sink, "run-1")
    cancel = command("turn.cancel", {"run_id": "run-1", "reason": "stopped"})
    await backend.handle_command(cancel)
    assert await finished(sink, "run-1", timeout=20) == "run.cancelled"
    [done] = payloads(sink, "run-1", "tool.call.completed")
    assert done["is_error"] is True
    assert sink.last_update(cancel.command_id)["result"] == {"cancelled": True}

    # Stop while the command runs: the agent and everything under it are gone right after.
    await run(backend, sink, "run-2", "wait again")
    asked = await permission(sink, "run-2")
    await backend.handle_command(
        command("permission.resolve", {"request_id": asked["request_id"], "decision": "allow_once"})
    )
    agent = backend.agent
    assert agent is not None
    await wait_for(
        lambda: any(_cmdline(pid) == SLEEP for pid in _process_tree(agent.process.pid)),
        30,
        "the command to run",
    )
    tree = _process_tree(agent.process.pid) | {agent.process.pid}
    await backend.handle_command(command("turn.cancel", {"run_id": "run-2"}))
    assert await finished(sink, "run-2", timeout=20) == "run.cancelled"
    assert backend.agent is None and agent.process.returncode is not None
    await wait_for(lambda: not any(_alive(pid) for pid in tree), 10, "the process tree to end")

    # Reject: the call fails with OpenCode's refusal, the command never runs, and OpenCode
    # ends the turn there (it asks the model nothing more).
    model_server.add(
        ToolCallsTurn([ToolCall("bash", {"command": "touch rejected", "description": "Touch"})])
    )
    await run(backend, sink, "run-3", "touch a file")
    asked = await permission(sink, "run-3")
    await backend.handle_command(
        command(
            "permission.resolve", {"request_id": asked["request_id"], "decision": "reject_once"}
        )
    )
    assert await finished(sink, "run-3") == "run.completed"
    [refused] = payloads(sink, "run-3", "tool.call.completed")
    assert refused["is_error"] is True and "rejected" in refused["output"]
    assert not (workspace / "rejected").exists()

    # Each run's agent ends with its run; the next one loaded the thread's session again.
    assert backend.agent is None
    assert "wait again" in str(model_server.chat_requests[-1].messages)


async def test_mcp_tools_go_through_the_proxy_url_and_skills_and_options_reach_the_model(
    make_backend: Factory, model_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    skill_dir = tmp_path / "skills" / "haiku"
    skill_dir.mkdir(parents=True)
    (skill_dir / "SKILL.md").write_text(
        "---\nname: haiku\ndescription: Writes a haiku about anything.\n---\nThree lines.\n"
    )
    with MCPTestServer(bearer="mcp-grant-1") as mcp:
        model_server.add(
            ToolCallsTurn(
                [
                    ToolCall("test-mcp_echo", {"text": "hi"}, id="call_echo"),
                    ToolCall("test-mcp_whoami", {}, id="call_who"),
                ]
            ),
            TextTurn("Done."),
        )
        sink = RecordingSink()
        binding = McpBinding(
            ref="mcp",
            name="test-mcp",
            grant="mcp-grant-1",
            default_policy="ask",
            tool_policies={"echo": "allow", "broken": "off"},
        )
        skill = SkillBinding(
            id="01SKILL",
            name="haiku",
            description="Writes a haiku about anything.",
            version=1,
            path=str(skill_dir / "SKILL.md"),
        )
        backend = make_backend(
            sink,
            tools={},
            mcp_servers=[binding],
            skills=[skill],
            provider_options={"max_tokens": 1000, "temperature": 0.3},
        )
        backend.mcp_base_url = mcp.origin
        await backend.start()
        await run(backend, sink, "run-1", "use the tools")
        asked = await permission(sink, "run-1")  # whoami asks, echo is allowed
        assert asked["name"] == "test-mcp__whoami"
        await backend.handle_command(
            command(
                "permission.resolve", {"request_id": asked["request_id"], "decision": "allow_once"}
            )
        )
        assert await finished(sink, "run-1") == "run.completed", sink.events[-3:]

    outputs = {
        p["tool_call_id"]: p["output"] for p in payloads(sink, "run-1", "tool.call.completed")
    }
    assert outputs == {"call_echo": "echo: hi", "call_who": "authorization=Bearer mcp-grant-1"}
    names = {p["name"] for p in payloads(sink, "run-1", "tool.call.started")}
    assert names == {"test-mcp__echo", "test-mcp__whoami"}
    first = model_server.chat_requests[0].body
    offered = {t["function"]["name"] for t in first["tools"]}
    assert {"test-mcp_echo", "test-mcp_whoami", "skill"} <= offered
    assert "test-mcp_broken" not in offered and "bash" not in offered
    assert "Writes a haiku about anything." in str(first["messages"])
    assert (first["max_tokens"], first["temperature"]) == (1000, 0.3)  # the provider options


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


async def test_another_acp_agent_runs_by_its_command_line_and_gets_the_thread_replayed(
    workspace: Path,
) -> None:
    """An agent that cannot load sessions, with the gateway in its environment: each run's
    agent gets a new session whose prompt carries the thread's earlier exchanges."""
    sink = RecordingSink()
    spec = make_spec(
        workspace,
        runtime="acp",
        provider_options={"acp_command": [sys.executable, "-m", "tests.support.acp_agent"]},
        environment={"PYTHONPATH": str(ROOT)},
    )
    backend = create_backend("acp", spec, sink, gateway_url="http://127.0.0.1:9/gateway")
    assert isinstance(backend, AcpBackend)
    await backend.start()
    try:
        await run(backend, sink, "run-1", "env")
        assert await finished(sink, "run-1") == "run.completed", sink.events[-2:]
        [done] = payloads(sink, "run-1", "run.completed")
        state = workspace / ".mosoo" / "acp" / "ses_1" / "xdg"
        assert json.loads(done["final_text"]) == {
            "MOSOO_MODEL": "test-model",
            "MOSOO_MODEL_BASE_URL": "http://127.0.0.1:9/gateway/openai/v1",
            "MOSOO_GATEWAY_GRANT": GRANT,
            "OPENAI_BASE_URL": "http://127.0.0.1:9/gateway/openai/v1",
            "OPENAI_API_KEY": GRANT,
            "XDG_CONFIG_HOME": str(state / "config"),
            "XDG_DATA_HOME": str(state / "data"),
        }
        await run(backend, sink, "run-2", "hello")
        assert await finished(sink, "run-2") == "run.completed"
        [done] = payloads(sink, "run-2", "run.completed")
        assert done["final_text"].startswith("echo: <conversation_so_far>\nUser: env\n")
        assert done["final_text"].endswith("</conversation_so_far>\n\nhello")

        # An agent that dies fails its run with what it said last; the next run starts another.
        await run(backend, sink, "run-3", "die")
        assert await finished(sink, "run-3") == "run.failed"
        [failure] = payloads(sink, "run-3", "run.failed")
        assert (failure["code"], failure["retryable"]) == ("agent_exited", True)
        assert "exited with 3" in failure["message"] and "dying on request" in failure["message"]
        await run(backend, sink, "run-4", "back?")
        assert await finished(sink, "run-4") == "run.completed"
        [done] = payloads(sink, "run-4", "run.completed")
        assert "User: hello\n" in done["final_text"] and done["final_text"].endswith("back?")
    finally:
        await backend.close()


async def test_stop_while_the_agent_starts_cancels_the_run_and_leaves_no_agent(
    workspace: Path, temp_root: Path
) -> None:
    sink = RecordingSink()
    silent = [sys.executable, "-c", "import time; time.sleep(120)"]  # never answers initialize
    backend = await _started_with_command(workspace, sink, silent)
    try:
        await run(backend, sink, "run-1", "hi")
        await wait_for(lambda: _children_running(silent[-1]), 10, "the agent to start")
        await backend.handle_command(command("turn.cancel", {"run_id": "run-1"}))
        assert await finished(sink, "run-1", timeout=20) == "run.cancelled"
        assert backend.agent is None and not _children_running(silent[-1])
        assert list(temp_root.iterdir()) == []  # nor its temporary folder
    finally:
        await backend.close()


async def test_an_agent_that_cannot_be_started_fails_the_run_and_leaves_no_folder(
    workspace: Path, temp_root: Path
) -> None:
    sink = RecordingSink()
    backend = await _started_with_command(workspace, sink, ["/nonexistent/acp-agent", "--acp"])
    try:
        await run(backend, sink, "run-1", "hi")
        assert await finished(sink, "run-1") == "run.failed"
        [failed] = payloads(sink, "run-1", "run.failed")
        assert failed["code"] == "agent_unavailable"
        assert "/nonexistent/acp-agent" in failed["message"]
        assert list(temp_root.iterdir()) == []
    finally:
        await backend.close()


async def _started_with_command(
    workspace: Path, sink: RecordingSink, agent_command: list[str]
) -> AcpBackend:
    """An `acp` backend whose Agent names `agent_command` as its ACP agent, started (no
    model behind it: these agents never get as far as asking one)."""
    spec = make_spec(workspace, runtime="acp", provider_options={"acp_command": agent_command})
    backend = create_backend("acp", spec, sink, gateway_url="http://127.0.0.1:9/gateway")
    assert isinstance(backend, AcpBackend)
    await backend.start()
    return backend


def _children_running(marker: str) -> bool:
    """Whether a live child of this process runs a command line holding `marker`."""
    return any(marker in _cmdline(pid) and _alive(pid) for pid in _process_tree(os.getpid()))
