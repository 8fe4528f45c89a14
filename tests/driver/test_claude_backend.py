"""The `claude` runtime: the real Claude Code binary (from the Claude Agent SDK's wheel)
against the scripted Anthropic Messages server on loopback, in place of the gateway.

Each test starts the CLI once per run (about a second); the scripts are short so the CLI
makes exactly the calls they hold."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from driver.backends import create_backend
from driver.backends.claude import ClaudeBackend
from driver.protocol import GatewayGrant, McpBinding, SkillBinding
from tests.driver.conftest import GRANT, RecordingSink, command, make_spec, wait_for
from tests.support.anthropic_server import (
    ErrorTurn,
    MessageTurn,
    ScriptedAnthropicServer,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
)
from tests.support.mcp_server import MCPTestServer

TERMINAL = {"run.completed", "run.failed", "run.cancelled"}
BackendFactory = Callable[..., ClaudeBackend]
PROMPT = "You are a careful test agent."


@pytest.fixture
def anthropic() -> Iterator[ScriptedAnthropicServer]:
    with ScriptedAnthropicServer(models=["claude-test"], api_key=GRANT) as server:
        yield server


@pytest.fixture
async def make_backend(
    workspace: Path, anthropic: ScriptedAnthropicServer
) -> AsyncIterator[BackendFactory]:
    made: list[ClaudeBackend] = []

    def factory(sink: RecordingSink, *, mcp_base_url: str = "", **overrides: Any) -> ClaudeBackend:
        values: dict[str, Any] = {
            "runtime": "claude",
            "model": "claude-test",
            "system_prompt": PROMPT,
            "gateway": GatewayGrant(grant=GRANT, provider="anthropic"),
            "tools": {"bash": "allow"},
        }
        values.update(overrides)
        backend = ClaudeBackend(
            make_spec(workspace, **values),
            sink,
            model_base_url=anthropic.origin,
            mcp_base_url=mcp_base_url or "http://127.0.0.1:9",
        )
        made.append(backend)
        return backend

    yield factory
    for backend in made:
        await backend.close()


async def start_run(backend: ClaudeBackend, run_id: str, text: str) -> str:
    cmd = command("input.start", {"run_id": run_id, "text": text, "attachments": []})
    await backend.handle_command(cmd)
    return cmd.command_id


async def finish(sink: RecordingSink, run_id: str, timeout: float = 60.0) -> str:
    await wait_for(
        lambda: any(k in TERMINAL for k in sink.kinds(run_id)), timeout, f"the end of {run_id}"
    )
    return next(k for k in sink.kinds(run_id) if k in TERMINAL)


async def resolve(backend: ClaudeBackend, request_id: str, decision: str) -> None:
    await backend.handle_command(
        command("permission.resolve", {"request_id": request_id, "decision": decision})
    )


def offered_tools(request_body: dict[str, Any]) -> set[str]:
    # DeferredToolPlaceholder is Claude Code's own stand-in for tools it loads later.
    return {t["name"] for t in request_body.get("tools", [])} - {"DeferredToolPlaceholder"}


async def test_text_thinking_and_a_bash_call_stream_as_events_with_the_grant_kept_from_bash(
    make_backend: BackendFactory, anthropic: ScriptedAnthropicServer, workspace: Path
) -> None:
    anthropic.add(
        MessageTurn(
            [
                ThinkingBlock(["Let me ", "look."]),
                TextBlock("I will check."),
                ToolUseBlock(
                    "Bash",
                    {"command": "pwd; env | grep -c '^ANTHROPIC_API_KEY=' || true"},
                    id="toolu_pwd",
                ),
            ],
            usage={"input_tokens": 40, "cache_read_input_tokens": 8, "output_tokens": 12},
        ),
        MessageTurn(
            [TextBlock("You are in the workspace.")],
            usage={"input_tokens": 60, "cache_creation_input_tokens": 5, "output_tokens": 6},
        ),
    )
    sink = RecordingSink()
    backend = make_backend(sink, tools={"bash": "allow", "write": "ask"})
    await backend.start()
    command_id = await start_run(backend, "run-1", "where am I?")
    assert await finish(sink, "run-1") == "run.completed", sink.of_kind("run.failed")

    kinds = [k for k in sink.kinds("run-1") if k != "message.delta" and k != "thought.delta"]
    assert kinds == [
        "run.started",
        "message.started",
        "message.completed",
        "tool.call.started",
        "tool.call.completed",
        "message.started",
        "message.completed",
        "usage.updated",
        "run.completed",
    ]
    assert "".join(e["text"] for e in sink.of_kind("thought.delta")) == "Let me look."
    first, second = sink.of_kind("message.completed")
    assert (first["text"], second["text"]) == ("I will check.", "You are in the workspace.")
    deltas = [e["text"] for e in sink.of_kind("message.delta")]
    assert deltas[:3] == ["I", " will", " check."]  # token by token, as the server sent them
    [started] = sink.of_kind("tool.call.started")
    assert (started["tool_call_id"], started["name"]) == ("toolu_pwd", "Bash")
    [done] = sink.of_kind("tool.call.completed")
    assert done["tool_call_id"] == "toolu_pwd" and done["is_error"] is False
    # The command ran in the workspace, and its environment had no grant in it.
    assert done["output"].split() == [str(workspace), "0"]
    [usage] = sink.of_kind("usage.updated")
    assert usage == {
        "input_tokens": 40 + 8 + 60 + 5,
        "output_tokens": 12 + 6,
        "cached_input_tokens": 8,
        "cache_creation_input_tokens": 5,
        "model": "claude-test",
    }
    assert sink.of_kind("run.completed") == [{"final_text": "You are in the workspace."}]
    assert sink.last_update(command_id)["result"] == {"run_status": "completed"}

    # Only model calls, with the grant as the key; only the bound tools; our prompt appended.
    assert {r.path for r in anthropic.requests} == {"/v1/messages"}
    assert {r.headers["x-api-key"] for r in anthropic.requests} == {GRANT}
    body = anthropic.message_requests[0].body
    assert body["model"] == "claude-test" and body["stream"] is True
    assert offered_tools(body) == {"Bash", "Write"}
    system = "".join(part["text"] for part in body["system"])
    assert PROMPT in system
    # The CLI's own files are in the run's workspace state.
    state = workspace / ".mosoo" / "claude" / "ses_1"
    assert (state / "state.json").exists() and (state / "config" / "projects").is_dir()
    # None of them keeps the grant (the workspace is checkpointed to the object store).
    kept = [p for p in workspace.rglob("*") if p.is_file() and GRANT.encode() in p.read_bytes()]
    assert kept == []


async def test_an_ask_tool_prompts_and_allow_once_runs_it_and_reject_once_refuses_it(
    make_backend: BackendFactory, anthropic: ScriptedAnthropicServer, workspace: Path
) -> None:
    anthropic.add(
        MessageTurn(
            [ToolUseBlock("Write", {"file_path": "notes.txt", "content": "hi\n"}, id="toolu_w")]
        ),
        # Read-only as it is, yet asked: the Agent's policy for bash is Ask.
        MessageTurn([ToolUseBlock("Bash", {"command": "ls"}, id="toolu_ls")]),
        MessageTurn([TextBlock("Done.")]),
    )
    sink = RecordingSink()
    backend = make_backend(sink, tools={"bash": "ask", "write": "ask"})
    await backend.start()
    await start_run(backend, "run-1", "write a note")

    await wait_for(lambda: len(sink.of_kind("permission.requested")) == 1, 30, "the first ask")
    [asked] = sink.of_kind("permission.requested")
    assert (asked["tool_call_id"], asked["name"]) == ("toolu_w", "Write")
    assert asked["input"]["content"] == "hi\n"
    await resolve(backend, asked["request_id"], "allow_once")

    await wait_for(lambda: len(sink.of_kind("permission.requested")) == 2, 30, "the second ask")
    second = sink.of_kind("permission.requested")[1]
    assert (second["tool_call_id"], second["name"], second["input"]["command"]) == (
        "toolu_ls",
        "Bash",
        "ls",
    )
    await resolve(backend, second["request_id"], "reject_once")
    assert await finish(sink, "run-1") == "run.completed", sink.of_kind("run.failed")

    assert [e["decision"] for e in sink.of_kind("permission.resolved")] == [
        "allow_once",
        "reject_once",
    ]
    assert (workspace / "notes.txt").read_text() == "hi\n"
    assert sink.of_kind("file.changed") == [{"path": "notes.txt", "change": "created"}]
    done = {e["tool_call_id"]: e for e in sink.of_kind("tool.call.completed")}
    assert done["toolu_w"]["is_error"] is False
    assert (
        done["toolu_ls"]["is_error"] is True
        and "rejected by the user" in done["toolu_ls"]["output"]
    )
    # The card starts before its prompt.
    kinds = sink.kinds("run-1")
    assert kinds.index("tool.call.started") < kinds.index("permission.requested")
    # The model was told about the refusal.
    last = anthropic.message_requests[-1].messages[-1]
    assert "rejected by the user" in str(last["content"])


async def test_stop_kills_the_process_tree_and_the_next_backend_resumes_the_thread(
    make_backend: BackendFactory, anthropic: ScriptedAnthropicServer
) -> None:
    anthropic.add(
        MessageTurn(
            [
                TextBlock("Sleeping now."),
                ToolUseBlock("Bash", {"command": "(sleep 301 &) ; sleep 302"}, id="toolu_sleep"),
            ]
        )
    )
    sink = RecordingSink()
    backend = make_backend(sink)
    await backend.start()
    await start_run(backend, "run-1", "remember the word tangerine")
    await wait_for(lambda: len(_sleeping()) == 2, 30, "both sleeps to run")

    started = time.monotonic()
    await backend.handle_command(command("turn.cancel", {"run_id": "run-1"}))
    assert await finish(sink, "run-1", timeout=15) == "run.cancelled"
    print(f"turn.cancel to run.cancelled: {time.monotonic() - started:.2f}s")
    assert _sleeping() == [], "the sleeps outlived the Stop"
    assert not any(_claude_processes()), "the CLI outlived the Stop"

    # A new container restored from the workspace: a new backend resumes the conversation.
    anthropic.add(MessageTurn([TextBlock("You said tangerine.")]))
    sink2 = RecordingSink()
    again = make_backend(sink2)
    await again.start()
    await start_run(again, "run-2", "which word?")
    assert await finish(sink2, "run-2") == "run.completed", sink2.of_kind("run.failed")
    resumed = str(anthropic.message_requests[-1].messages)
    assert "remember the word tangerine" in resumed and "Sleeping now." in resumed
    assert "which word?" in resumed


async def test_stop_while_a_prompt_waits_cancels_the_run_at_once(
    make_backend: BackendFactory, anthropic: ScriptedAnthropicServer
) -> None:
    anthropic.add(MessageTurn([ToolUseBlock("Bash", {"command": "rm -rf build"}, id="toolu_rm")]))
    sink = RecordingSink()
    backend = make_backend(sink, tools={"bash": "ask"})
    await backend.start()
    await start_run(backend, "run-1", "clean up")
    await wait_for(lambda: bool(sink.of_kind("permission.requested")), 30, "the ask")
    started = time.monotonic()
    await backend.handle_command(command("turn.cancel", {"run_id": "run-1"}))
    assert await finish(sink, "run-1", timeout=15) == "run.cancelled"
    assert time.monotonic() - started < 8
    assert not any(_claude_processes())
    assert backend.active_run_id is None and not backend._permissions


async def test_bound_skills_and_mcp_tools_are_offered_and_mcp_calls_go_through_with_the_grant(
    make_backend: BackendFactory, anthropic: ScriptedAnthropicServer, tmp_path: Path
) -> None:
    skill_dir = tmp_path / "skills" / "changelog"
    skill_dir.mkdir(parents=True)
    (skill_dir / "SKILL.md").write_text(
        "---\nname: changelog\ndescription: Writes CHANGELOG entries.\n---\nKeep a Changelog.\n"
    )
    skill = SkillBinding(
        id="skl_1",
        name="changelog",
        description="Writes CHANGELOG entries.",
        version=1,
        path=str(skill_dir / "SKILL.md"),
    )
    binding = McpBinding(
        ref="mcp",
        name="test",
        grant="mcg_run_grant",
        default_policy="allow",
        tool_policies={"whoami": "off", "slow": "ask"},
    )
    anthropic.add(
        MessageTurn([ToolUseBlock("mcp__test__echo", {"text": "hi"}, id="toolu_echo")]),
        MessageTurn([TextBlock("Echoed.")]),
    )
    sink = RecordingSink()
    with MCPTestServer(bearer="mcg_run_grant") as mcp:
        backend = make_backend(sink, skills=[skill], mcp_servers=[binding], mcp_base_url=mcp.origin)
        await backend.start()
        await start_run(backend, "run-1", "echo hi")
        assert await finish(sink, "run-1") == "run.completed", sink.of_kind("run.failed")
        assert {r.authorization for r in mcp.mcp_requests()} == {"Bearer mcg_run_grant"}

    [status] = sink.of_kind("mcp.server.status")
    assert (status["server"], status["status"], status["tools"]) == ("test", "connected", 5)
    body = anthropic.message_requests[0].body
    offered = offered_tools(body)
    assert {"mcp__test__echo", "mcp__test__slow", "Skill"} <= offered
    assert "mcp__test__whoami" not in offered  # off: not offered at all
    # The skill is listed by name and description (Claude Code reads SKILL.md on use).
    assert "mosoo:changelog: Writes CHANGELOG entries." in str(body)
    [started] = sink.of_kind("tool.call.started")
    assert (started["name"], started["input"]) == ("test__echo", {"text": "hi"})
    [done] = sink.of_kind("tool.call.completed")
    assert done["output"] == "echo: hi" and done["is_error"] is False


async def test_a_down_required_mcp_server_fails_the_run_before_claude_code_starts(
    make_backend: BackendFactory, anthropic: ScriptedAnthropicServer
) -> None:
    sink = RecordingSink()
    backend = make_backend(
        sink, mcp_servers=[McpBinding(ref="gone", name="gone", grant="g", required=True)]
    )
    await backend.start()
    await start_run(backend, "run-1", "go")
    assert await finish(sink, "run-1") == "run.failed"
    [failed] = sink.of_kind("run.failed")
    assert failed["code"] == "mcp_unavailable" and "gone" in failed["message"]
    assert anthropic.requests == []


async def test_a_model_error_fails_the_run_with_the_providers_status(
    make_backend: BackendFactory, anthropic: ScriptedAnthropicServer
) -> None:
    # Claude Code tries a refused request again a few times (six in 2.1.332), with fewer beta
    # features each time: every try is refused the same way.
    anthropic.add(*[ErrorTurn(400, "invalid_request_error", "temperature: out of range")] * 12)
    sink = RecordingSink()
    backend = make_backend(sink)
    await backend.start()
    await start_run(backend, "run-1", "hello")
    assert await finish(sink, "run-1") == "run.failed"
    [failed] = sink.of_kind("run.failed")
    assert failed["code"] == "model_error" and failed["retryable"] is False
    assert "400" in failed["message"] and "temperature: out of range" in failed["message"]
    assert "message.started" not in sink.kinds()  # the CLI's error text is no answer
    assert not any(_claude_processes())


async def test_create_backend_picks_claude_with_the_forwarders_anthropic_route(
    workspace: Path,
) -> None:
    spec = make_spec(workspace, runtime="claude", gateway=GatewayGrant(grant=GRANT))
    backend = create_backend(
        "claude", spec, RecordingSink(), gateway_url="http://127.0.0.1:4000/gateway"
    )
    assert isinstance(backend, ClaudeBackend)
    assert backend.model_base_url == "http://127.0.0.1:4000/gateway/anthropic"
    assert backend.mcp_base_url == "http://127.0.0.1:4000/gateway/mcp"
    assert "permission_requests" in backend.capabilities and "resume" in backend.capabilities


def _cmdlines() -> dict[int, str]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                )
            except OSError:
                continue
    return found


def _sleeping() -> list[int]:
    return [pid for pid, line in _cmdlines().items() if line.strip() in ("sleep 301", "sleep 302")]


def _claude_processes() -> list[int]:
    """CLI processes whose parent is this test process (the backends' own)."""
    mine = []
    for pid in _cmdlines():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[1]) == os.getpid() and "claude" in stat:
            mine.append(pid)
    return mine


@pytest.fixture(autouse=True)
def _no_leftover_sleeps() -> Iterator[None]:
    yield
    for pid in _sleeping():  # a failed test must not leave its sleeps behind
        os.kill(pid, signal.SIGKILL)
