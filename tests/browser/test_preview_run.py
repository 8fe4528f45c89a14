"""The Preview journey against the real stack: `mosoo web`, `mosoo control` and `mosoo worker`
with Redis and a Docker sandbox, the model replaced at its network boundary by the scripted
OpenAI-compatible server. The owner adds a provider key, creates an Agent, approves a bash
call, watches the answer stream, reloads mid-stream and presses Stop. The same Preview journey
runs with the `claude` runtime (real Claude Code, the scripted Anthropic Messages server) and
the `acp` runtime (real OpenCode), sharing this module's stack. Another journey follows two
runs with two priced models into the Usage page and the Agent's Logs, and approves a waiting
bash call from the Logs replay."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, WebSocket, expect
from sqlmodel import Session, col, create_engine, select

from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import SessionRun
from mosoo_core.tables.usage import UsageDaily, UsageEvent
from tests.browser.actions import choose
from tests.browser.test_console_journey import _sign_in
from tests.support.anthropic_server import (
    MessageTurn,
    ScriptedAnthropicServer,
    TextBlock,
    ToolUseBlock,
)
from tests.support.browser_stack import RunStack, browser_run_stack
from tests.support.mcp_server import ALLOW_PRIVATE_NETWORKS, TOOL_NAMES, MCPTestServer
from tests.support.openai_server import TextTurn, ToolCall, ToolCallsTurn
from tests.support.package_index import PyPIIndex
from tests.support.pages import LoopbackPage
from tests.support.processes import wait_for
from tests.support.redis_db import db_number

pytestmark = [pytest.mark.browser, pytest.mark.integration]

REDIS_DB = db_number(10)  # this module's own Redis database, flushed before the stack starts
PROVIDER_KEY = "sk-browser-SECRET-" + uuid.uuid4().hex
AGENT_URL = re.compile(r"/apps/([0-9A-Z]{26})/agents/([0-9A-Z]{26})$")
BOOT_TIMEOUT_MS = 90_000  # a fresh (Task) sandbox boots for every run; the first can be slow
FIRST_ANSWER = "You are in /workspace, an empty working directory."
LONG_CHUNKS = [f"part{i:03d} " for i in range(100)]  # 15 s at full length; Stop comes long before
LONG_CHUNK_DELAY = 0.15


@pytest.fixture(scope="module")
def indexes() -> Iterator[PyPIIndex]:
    """The package index the environment journey installs from (loopback)."""
    with PyPIIndex() as pypi:
        pypi.add_package(
            "journey-greeting",
            "1.0.0",
            {"journey_greeting.py": 'def greet(name):\n    return f"Greetings, {name}"\n'},
        )
        yield pypi


@pytest.fixture(scope="module")
def pages() -> Iterator[tuple[int, int]]:
    """Two loopback web pages: one the environment allows, one it does not."""
    with LoopbackPage("allowed page") as allowed, LoopbackPage("other page") as other:
        yield allowed.port, other.port


@pytest.fixture(scope="module")
def run_stack(
    database_url: str, tmp_path_factory: pytest.TempPathFactory, indexes: PyPIIndex
) -> Iterator[RunStack]:
    with browser_run_stack(
        database_url,
        tmp_path_factory.mktemp("preview-run"),
        REDIS_DB,
        extra_env={
            "MOSOO_EGRESS_ALLOW_LOOPBACK": "1",  # the index and the pages are on loopback
            "MOSOO_PIP_INDEX_URL": indexes.simple_url,
            **ALLOW_PRIVATE_NETWORKS,  # web tests, and control proxies to, a loopback MCP server
        },
    ) as stack:
        yield stack


def _parts_shown(text: str) -> int:
    """How many chunks of the long answer the text holds (the chunks are numbered)."""
    numbers = [int(n) for n in re.findall(r"part(\d{3})", text)]
    assert numbers == list(range(len(numbers))), (
        f"the chunks arrive in order and complete: {text!r}"
    )
    return len(numbers)


def _wait_for_more_parts(page: Page, than: int, timeout_ms: float = 30_000) -> int:
    """Wait until the streaming answer holds more than `than` chunks; how many it holds."""
    live = page.get_by_test_id("chat-assistant-live")
    expect(live).to_contain_text(f"part{than:03d}", timeout=timeout_ms)  # chunks count from 0
    return _parts_shown(live.inner_text())


def test_owner_approves_a_real_tool_call_then_reloads_mid_stream_and_stops_a_long_answer(
    page: Page, browser: Browser, run_stack: RunStack
) -> None:
    stack, model = run_stack, run_stack.model
    frames: list[str] = []

    def watch(socket: WebSocket) -> None:
        socket.on(
            "framereceived",
            lambda p: frames.append(p if isinstance(p, str) else p.decode(errors="replace")),
        )

    page.on("websocket", watch)
    started = time.monotonic()
    with stack.logs_on_failure():
        # The console has only just started: let its scripts load before typing into it.
        page.goto(f"{stack.web.url}/login", wait_until="networkidle")
        _sign_in(page, browser, stack.web, f"run-{uuid.uuid4().hex[:8]}@example.com")
        page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
        stack.app_ids.add(page.url.rsplit("/", 1)[-1])

        # Providers: an OpenAI-compatible key pointing at the scripted server.
        page.get_by_test_id("nav-providers").click()
        page.wait_for_url(re.compile(r"/providers$"))
        choose(page, page.get_by_test_id("provider-preset"), "OpenAI-compatible", exact=True)
        page.get_by_test_id("provider-name-input").fill("Scripted")
        page.get_by_test_id("provider-base-url-input").fill(model.base_url)
        page.get_by_test_id("provider-key-input").fill(PROVIDER_KEY)
        page.get_by_test_id("provider-models-input").fill("test-model")
        page.get_by_test_id("provider-add-submit").click()
        row = page.get_by_test_id("provider-row")
        expect(row.get_by_test_id("provider-masked-key")).to_have_text("••••" + PROVIDER_KEY[-4:])
        assert PROVIDER_KEY not in page.content()

        # Agents: a Task (cattle) agent.
        page.get_by_test_id("nav-agents").click()
        page.wait_for_url(re.compile(r"/agents$"))
        page.get_by_test_id("new-agent").click()
        page.get_by_test_id("new-agent-name").fill("Shell helper")
        page.get_by_test_id("kind-cattle").click()
        page.get_by_test_id("new-agent-submit").click()
        page.wait_for_url(AGENT_URL)

        # Preview: the provider key and its model, bash on Ask (each saved on its own) -> Ready.
        expect(page.get_by_test_id("preview-status")).to_have_text("Setup required")
        choose(page, page.get_by_test_id("agent-provider"), "Scripted (default)")
        expect(page.get_by_test_id("agent-model")).to_have_value("test-model")
        page.get_by_test_id("tool-bash").get_by_role("radio", name="Ask").click()
        expect(page.get_by_test_id("preview-status")).to_have_text("Ready")
        expect(page.get_by_test_id("readiness-blocker")).to_have_count(0)

        # A message: the model asks for `pwd`; the owner approves; the answer streams.
        model.add(
            ToolCallsTurn([ToolCall("bash", {"command": "pwd"}, id="call_pwd")]),
            TextTurn(FIRST_ANSWER, delay=0.05),
        )
        page.get_by_test_id("chat-input").fill("run pwd and tell me what you see")
        # Enter sends. (The "Scripted added." and "Saved." toasts sit over the Send button for
        # a few seconds; a click there can land on a toast instead.)
        page.get_by_test_id("chat-input").press("Enter")
        expect(page.get_by_test_id("chat-user-message")).to_have_text(
            "run pwd and tell me what you see"
        )
        expect(page).to_have_url(re.compile(r"\?thread=[0-9A-Z]{26}$"))
        prompt = page.get_by_test_id("chat-permission")
        expect(prompt.get_by_test_id("permission-allow")).to_be_visible(timeout=BOOT_TIMEOUT_MS)
        asked_after = time.monotonic() - started
        expect(prompt).to_contain_text("pwd")
        expect(page.get_by_test_id("preview-status")).to_have_text("Needs approval")
        tool = page.get_by_test_id("chat-tool-card")
        expect(tool).to_have_attribute("data-status", "waiting")
        prompt.get_by_test_id("permission-allow").click()
        expect(prompt).to_contain_text("Allowed once")
        expect(tool).to_have_attribute("data-status", "done")
        tool.locator("summary").click()
        expect(tool.get_by_test_id("tool-output")).to_contain_text("/workspace")
        expect(page.get_by_test_id("chat-assistant-message").last).to_have_text(FIRST_ANSWER)
        expect(page.get_by_test_id("preview-status")).to_have_text("Ready")
        expect(page.get_by_test_id("chat-send")).to_be_enabled()
        first_done_after = time.monotonic() - started

        # A long answer: reload while it streams; everything so far is there and it keeps growing.
        model.add(TextTurn(list(LONG_CHUNKS), delay=LONG_CHUNK_DELAY))
        page.get_by_test_id("chat-input").fill("now write something long")
        page.get_by_test_id("chat-send").click()
        expect(page.get_by_test_id("chat-user-message")).to_have_count(2)
        expect(page.get_by_test_id("preview-status")).to_have_text("Working")
        before_reload = _wait_for_more_parts(page, 2, BOOT_TIMEOUT_MS)
        page.reload()
        expect(page.get_by_test_id("chat-user-message")).to_have_count(2)
        expect(page.get_by_test_id("chat-tool-card")).to_have_attribute("data-status", "done")
        expect(page.get_by_test_id("chat-permission")).to_contain_text("Allowed once")
        expect(page.get_by_test_id("chat-assistant-message").first).to_have_text(FIRST_ANSWER)
        expect(page.get_by_test_id("preview-status")).to_have_text("Working")
        after_reload = _wait_for_more_parts(page, before_reload - 1)
        assert after_reload >= before_reload, "the reload shows the text streamed so far"
        growing = _wait_for_more_parts(page, after_reload)
        assert growing < len(LONG_CHUNKS), "the answer was still streaming when Stop was pressed"

        # Stop: the run ends as cancelled and the text stops where it was.
        page.get_by_test_id("chat-stop").click()
        expect(page.get_by_test_id("chat-run-stopped")).to_be_visible()
        expect(page.get_by_test_id("preview-status")).to_have_text("Stopped")
        expect(page.get_by_test_id("chat-stop")).to_have_count(0)
        expect(page.get_by_test_id("chat-assistant-live")).to_have_count(0)
        stopped_text = page.get_by_test_id("chat-assistant-message").last.inner_text()
        stopped_at = _parts_shown(stopped_text)
        assert growing <= stopped_at < len(LONG_CHUNKS)
        # Once the scripted stream is over (cut off or not), nothing more arrived.
        assert len(model.chat_requests) == 3
        wait_for(
            lambda: model.streams_completed + model.streams_aborted == 3,
            len(LONG_CHUNKS) * LONG_CHUNK_DELAY + 30,
            "the long answer's stream to end",
        )
        page.reload()
        expect(page.get_by_test_id("chat-run-stopped")).to_be_visible()
        expect(page.get_by_test_id("preview-status")).to_have_text("Stopped")
        expect(page.get_by_test_id("chat-assistant-message").last).to_have_text(stopped_text)
        expect(page.get_by_test_id("chat-send")).to_be_enabled()

        # The key went to the provider, and never back to the browser.
        assert {r.headers.get("authorization") for r in model.chat_requests} == {
            f"Bearer {PROVIDER_KEY}"
        }
        assert PROVIDER_KEY not in page.content()
        assert frames, "the page talks to the server over its websocket"
        assert not [frame for frame in frames if PROVIDER_KEY in frame]
    print(
        f"\npermission prompt after {asked_after:.1f}s, first answer after {first_done_after:.1f}s, "
        f"stopped at chunk {stopped_at}/{len(LONG_CHUNKS)}, journey {time.monotonic() - started:.1f}s "
        f"(streams completed={model.streams_completed} aborted={model.streams_aborted})"
    )


def test_owner_gives_an_agent_a_package_and_a_limited_network_from_the_console(
    page: Page, browser: Browser, run_stack: RunStack, pages: tuple[int, int]
) -> None:
    """Environments page: a pip package and `limited` to one host; the build reaches Ready
    live; Preview binds it; the agent imports the package and fetches the allowed host, and
    the refused one shows as refused in the chat."""
    stack, model = run_stack, run_stack.model
    allowed, other = pages
    with stack.logs_on_failure():
        page.goto(f"{stack.web.url}/login", wait_until="networkidle")
        _sign_in(page, browser, stack.web, f"env-run-{uuid.uuid4().hex[:8]}@example.com")
        page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
        stack.app_ids.add(page.url.rsplit("/", 1)[-1])
        _add_provider(page, model.base_url)

        page.get_by_test_id("nav-environments").click()
        page.wait_for_url(re.compile(r"/environments$"))
        page.get_by_test_id("new-environment").click()
        page.get_by_test_id("environment-name-input").fill("Greeter")
        page.get_by_test_id("environment-pip").fill("journey-greeting==1.0.0")
        page.get_by_test_id("network-limited").click()
        page.get_by_test_id("environment-allowed-hosts").fill(f"127.0.0.1:{allowed}")
        page.get_by_test_id("environment-save").click()
        expect(page.get_by_text("Saved revision 1: Created.")).to_be_visible()
        # The worker builds it; the page follows without a reload.
        expect(page.get_by_test_id("build-status")).to_have_text("Ready", timeout=120_000)
        expect(page.get_by_test_id("build-log")).to_contain_text(
            "Successfully installed journey-greeting-1.0.0"
        )

        page.get_by_test_id("nav-agents").click()
        page.wait_for_url(re.compile(r"/agents$"))
        page.get_by_test_id("new-agent").click()
        page.get_by_test_id("new-agent-name").fill("Greeter agent")
        page.get_by_test_id("kind-cattle").click()
        page.get_by_test_id("new-agent-submit").click()
        page.wait_for_url(AGENT_URL)
        choose(page, page.get_by_test_id("agent-provider"), "Scripted (default)")
        expect(page.get_by_test_id("agent-model")).to_have_value("test-model")
        choose(page, page.get_by_test_id("agent-environment"), "Greeter · Limited: 1 host")
        page.get_by_test_id("tool-bash").get_by_role("radio", name="Allow").click()
        page.get_by_test_id("tool-web_fetch").get_by_role("radio", name="Allow").click()
        expect(page.get_by_test_id("preview-status")).to_have_text("Ready")

        model.add(
            ToolCallsTurn(
                [
                    ToolCall(
                        "bash",
                        {
                            "command": "python3 -c \"import journey_greeting as g; print(g.greet('you'))\""
                        },
                        id="call_py",
                    )
                ]
            ),
            ToolCallsTurn(
                [ToolCall("web_fetch", {"url": f"http://127.0.0.1:{allowed}/"}, id="call_ok")]
            ),
            ToolCallsTurn(
                [ToolCall("web_fetch", {"url": f"http://127.0.0.1:{other}/"}, id="call_no")]
            ),
            TextTurn("Greeted, fetched one page; the other was refused."),
        )
        page.get_by_test_id("chat-input").fill("greet me and fetch both pages")
        page.get_by_test_id("chat-input").press("Enter")
        expect(page.get_by_test_id("chat-assistant-message").last).to_have_text(
            "Greeted, fetched one page; the other was refused.", timeout=BOOT_TIMEOUT_MS
        )
        tools = page.get_by_test_id("chat-tool-card")
        expect(tools).to_have_count(3)
        tools.nth(0).locator("summary").click()
        expect(tools.nth(0).get_by_test_id("tool-output")).to_contain_text("Greetings, you")
        tools.nth(1).locator("summary").click()
        expect(tools.nth(1).get_by_test_id("tool-output")).to_contain_text("allowed page")
        network = page.get_by_test_id("chat-network")
        refused = network.and_(page.locator("[data-status=refused]"))
        expect(refused).to_have_count(1)
        expect(refused).to_contain_text(f"127.0.0.1:{other}")
        expect(network.and_(page.locator("[data-status=allowed]")).first).to_be_visible()


SKILL_NAME = "deploy-steps"
SKILL_LINE = "Deploy on Tuesdays only, after the smoke tests pass."
SKILL_MD = f"""\
---
name: {SKILL_NAME}
description: How this team deploys. Use when asked how or when to deploy.
---
# Deploying

{SKILL_LINE}
"""


MCP_SERVER = "release"
MCP_TOKEN = "mcp-journey-VAULTED-" + uuid.uuid4().hex
MCP_TEXT = "smoke tests passed on build 412"
SKILL_ANSWER = f"The smoke tests passed and today is fine to deploy: {SKILL_LINE}"
SERVER_URL = re.compile(r"/apps/[0-9A-Z]{26}/mcp/[0-9A-Z]{26}$")


@pytest.fixture
def mcp_server() -> Iterator[MCPTestServer]:
    """A real MCP server (the SDK) on loopback that wants a bearer token."""
    with MCPTestServer(bearer=MCP_TOKEN) as running:
        yield running


def test_owner_uploads_a_skill_and_adds_an_mcp_server_binds_both_and_the_agent_uses_them(
    page: Page, browser: Browser, run_stack: RunStack, tmp_path: Path, mcp_server: MCPTestServer
) -> None:
    """Skills page: upload a SKILL.md. MCP page: add a server with a bearer token; Test
    connection lists its tools. Preview binds both (the server's tools on Ask, its default
    when bound); the prompt lists the skill (name and description only) and the agent reads it
    from /opt/mosoo/skills/<name>/ in its sandbox, then calls the MCP tool: the prompt shows its
    arguments, and once allowed its card (with the MCP badge) shows the call and the server's
    answer. The server saw the vaulted token, never the sandbox's grant, and the token never
    reached the page. (One journey on the shared stack: a second console stack costs ~20 s.)"""
    stack, model = run_stack, run_stack.model
    skill_file = tmp_path / "deploy.md"
    skill_file.write_text(SKILL_MD)
    with stack.logs_on_failure():
        page.goto(f"{stack.web.url}/login", wait_until="networkidle")
        _sign_in(page, browser, stack.web, f"skill-run-{uuid.uuid4().hex[:8]}@example.com")
        page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
        stack.app_ids.add(page.url.rsplit("/", 1)[-1])
        _add_provider(page, model.base_url)

        page.get_by_test_id("nav-skills").click()
        page.wait_for_url(re.compile(r"/skills$"))
        page.get_by_test_id("skill-upload-button-upload").locator(
            "input[type=file]"
        ).set_input_files(skill_file)
        page.wait_for_url(re.compile(r"/skills/[0-9A-Z]{26}$"))
        expect(page.get_by_test_id("skill-rendered")).to_contain_text(SKILL_LINE)

        # MCP page: a server on loopback with a bearer token; Test connection lists its tools.
        page.get_by_test_id("nav-mcp").click()
        page.wait_for_url(re.compile(r"/mcp$"))
        page.get_by_test_id("new-mcp-server").click()
        page.wait_for_url(re.compile(r"/mcp/new$"))
        page.get_by_test_id("mcp-name-input").fill(MCP_SERVER)
        page.get_by_test_id("mcp-url-input").fill(mcp_server.url)
        page.get_by_test_id("mcp-auth-bearer").click()
        page.get_by_test_id("mcp-bearer-token").fill(MCP_TOKEN)
        page.get_by_test_id("mcp-save").click()
        page.wait_for_url(SERVER_URL)
        expect(page.get_by_test_id("page-title")).to_have_text(MCP_SERVER)
        page.get_by_test_id("mcp-test").click()
        expect(page.get_by_test_id("mcp-test-status")).to_contain_text("Connected")
        expect(page.get_by_test_id("mcp-tool")).to_have_count(len(TOOL_NAMES))
        expect(
            page.get_by_test_id("mcp-tool-name").filter(has_text=re.compile("^echo$"))
        ).to_be_visible()

        page.get_by_test_id("nav-agents").click()
        page.wait_for_url(re.compile(r"/agents$"))
        page.get_by_test_id("new-agent").click()
        page.get_by_test_id("new-agent-name").fill("Deployer")
        page.get_by_test_id("kind-cattle").click()
        page.get_by_test_id("new-agent-submit").click()
        page.wait_for_url(AGENT_URL)
        expect(page.get_by_test_id("preview-status")).to_have_text("Setup required")
        choose(page, page.get_by_test_id("agent-provider"), "Scripted (default)")
        expect(page.get_by_test_id("agent-model")).to_have_value("test-model")
        choose(page, page.get_by_test_id("agent-skills-add"), SKILL_NAME)
        expect(page.get_by_test_id("agent-skill-name")).to_have_text(SKILL_NAME)
        choose(page, page.get_by_test_id("agent-mcp-servers-add"), MCP_SERVER, exact=True)
        bound = page.get_by_test_id("agent-mcp-servers-bound")
        expect(bound.get_by_test_id("agent-mcp-server-name")).to_have_text(MCP_SERVER)
        expect(
            bound.get_by_test_id("agent-mcp-default").get_by_role("radio", name="Ask")
        ).to_be_checked()
        expect(page.get_by_test_id("save-indicator")).to_have_text("Saved")
        expect(page.get_by_test_id("preview-status")).to_have_text("Ready")

        skill_path = f"/opt/mosoo/skills/{SKILL_NAME}/SKILL.md"
        mcp_tool = f"{MCP_SERVER}__echo"
        model.add(
            ToolCallsTurn([ToolCall("read", {"path": skill_path}, id="call_skill")]),
            ToolCallsTurn([ToolCall(mcp_tool, {"text": MCP_TEXT}, id="call_mcp")]),
            TextTurn(SKILL_ANSWER),
        )
        first_request = len(model.chat_requests)
        tested = len(mcp_server.mcp_requests())
        page.get_by_test_id("chat-input").fill("may I deploy build 412 today?")
        page.get_by_test_id("chat-input").press("Enter")

        # The MCP call waits on Ask: the prompt names the tool and shows its arguments.
        prompt = page.get_by_test_id("chat-permission")
        expect(prompt.get_by_test_id("permission-allow")).to_be_visible(timeout=BOOT_TIMEOUT_MS)
        expect(prompt).to_contain_text(mcp_tool)
        expect(prompt).to_contain_text(MCP_TEXT)
        prompt.get_by_test_id("permission-allow").click()
        expect(prompt).to_contain_text("Allowed once")
        expect(page.get_by_test_id("chat-assistant-message").last).to_have_text(
            SKILL_ANSWER, timeout=BOOT_TIMEOUT_MS
        )

        tools = page.get_by_test_id("chat-tool-card")
        expect(tools).to_have_count(2)
        skill_card, mcp_card = tools.nth(0), tools.nth(1)
        expect(skill_card).to_have_attribute("data-status", "done")
        expect(skill_card).to_contain_text(skill_path)
        expect(skill_card.get_by_test_id("tool-mcp")).to_have_count(0)
        skill_card.locator("summary").click()
        expect(skill_card.get_by_test_id("tool-output")).to_contain_text(SKILL_LINE)
        expect(skill_card.get_by_test_id("tool-output")).to_contain_text(f"name: {SKILL_NAME}")

        expect(mcp_card).to_have_attribute("data-status", "done")
        expect(mcp_card.get_by_test_id("tool-name")).to_have_text(mcp_tool)
        expect(mcp_card.get_by_test_id("tool-mcp")).to_have_text("MCP")
        expect(mcp_card.get_by_test_id("tool-mcp")).to_have_attribute(
            "title", f"Answered by the MCP server {MCP_SERVER}"
        )
        mcp_card.locator("summary").click()
        expect(mcp_card.get_by_test_id("tool-input")).to_contain_text(MCP_TEXT)
        expect(mcp_card.get_by_test_id("tool-output")).to_have_text(f"echo: {MCP_TEXT}")

        system = model.chat_requests[first_request].messages[0]
        assert system["role"] == "system"
        assert "<available_skills>" in system["content"]
        assert f"<name>{SKILL_NAME}</name>" in system["content"]
        assert f"<location>{skill_path}</location>" in system["content"]
        assert SKILL_LINE not in system["content"], "the skill's body is read, not prompted"
        offered = {t["function"]["name"] for t in model.chat_requests[first_request].body["tools"]}
        assert mcp_tool in offered

        # Test connection (web) and the call (control's proxy) both sent the vaulted token;
        # the sandbox's grant never left control. The token never reached the browser.
        seen = mcp_server.mcp_requests()
        assert tested and len(seen) > tested, "both the test and the run reached the server"
        assert {r.authorization for r in seen} == {f"Bearer {MCP_TOKEN}"}
        assert MCP_TOKEN not in page.content()


def _add_provider(
    page: Page,
    base_url: str,
    *,
    preset: str = "OpenAI-compatible",
    key: str = PROVIDER_KEY,
    model: str = "test-model",
) -> None:
    page.get_by_test_id("nav-providers").click()
    page.wait_for_url(re.compile(r"/providers$"))
    choose(page, page.get_by_test_id("provider-preset"), preset, exact=True)
    page.get_by_test_id("provider-name-input").fill("Scripted")
    page.get_by_test_id("provider-base-url-input").fill(base_url)
    page.get_by_test_id("provider-key-input").fill(key)
    page.get_by_test_id("provider-models-input").fill(model)
    page.get_by_test_id("provider-add-submit").click()
    expect(page.get_by_test_id("provider-row")).to_have_count(1)


ANTHROPIC_KEY = "sk-ant-browser-SECRET-" + uuid.uuid4().hex
OPENCODE_KEY = "sk-opencode-browser-SECRET-" + uuid.uuid4().hex
# Claude Code and OpenCode start anew for every run, even in a Pet's running sandbox (5-20 s
# here, up to a minute on a busy machine, when the chat also lags the stream by seconds): a
# longer answer (45 s at full length) keeps Stop inside it, and the waits allow for the starts.
RUNTIME_LONG_CHUNKS = [f"part{i:03d} " for i in range(300)]
RUNTIME_CHUNK_DELAY = LONG_CHUNK_DELAY
RUNTIME_TIMEOUT_MS = 180_000


@pytest.fixture(scope="module")
def anthropic() -> Iterator[ScriptedAnthropicServer]:
    """The scripted Anthropic Messages server a `claude` Agent's key points at (loopback;
    control's gateway calls it, never the sandbox)."""
    with ScriptedAnthropicServer(models=["claude-test"], api_key=ANTHROPIC_KEY) as server:
        yield server


def _runtime_agent(
    page: Page,
    browser: Browser,
    stack: RunStack,
    *,
    runtime: str,
    preset: str,
    base_url: str,
    key: str,
    model: str,
    more_models: tuple[str, ...] = (),
) -> str:
    """A new owner adds the key (its models: `model`, the default, then `more_models`),
    creates an Assistant (Pet: one sandbox for the thread's runs), then in Preview picks the
    runtime, the key and its model, and bash on Ask; the Agent's id."""
    page.goto(f"{stack.web.url}/login", wait_until="networkidle")
    _sign_in(page, browser, stack.web, f"runtime-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
    stack.app_ids.add(page.url.rsplit("/", 1)[-1])
    _add_provider(page, base_url, preset=preset, key=key, model=", ".join((model, *more_models)))

    page.get_by_test_id("nav-agents").click()
    page.wait_for_url(re.compile(r"/agents$"))
    page.get_by_test_id("new-agent").click()
    page.get_by_test_id("new-agent-name").fill(f"{runtime} helper")
    page.get_by_test_id("kind-pet").click()
    page.get_by_test_id("new-agent-submit").click()
    page.wait_for_url(AGENT_URL)
    found = AGENT_URL.search(page.url)
    assert found is not None

    # Once the page has loaded the Agent: a select opened before that is closed by the render.
    expect(page.get_by_test_id("preview-status")).to_have_text("Setup required")
    choose(page, page.get_by_test_id("agent-runtime"), runtime, exact=True)
    expect(page.get_by_test_id("agent-runtime")).to_have_text(runtime)
    choose(page, page.get_by_test_id("agent-provider"), "Scripted (default)")
    expect(page.get_by_test_id("agent-model")).to_have_value(model)
    page.get_by_test_id("tool-bash").get_by_role("radio", name="Ask").click()
    expect(page.get_by_test_id("save-indicator")).to_have_text("Saved")
    expect(page.get_by_test_id("preview-status")).to_have_text("Ready")
    return found.group(2)


def _print_latest_runs(database_url: str) -> None:
    """The newest runs with their errors (a failed journey's first clue)."""
    with Session(create_engine(database_url)) as db:
        runs = db.exec(select(SessionRun).order_by(col(SessionRun.created_at).desc()).limit(3))
        print([(r.input_text, r.status, r.error_code, r.error_message) for r in runs])


def _approve_pwd_then_stop_a_long_answer(page: Page, database_url: str, tool: str) -> str:
    """With the model's turns already scripted: a message whose `pwd` waits on Ask, Allow
    once, the answer streams; then a long answer, stopped mid-stream. The thread's id."""
    sent = time.monotonic()
    page.get_by_test_id("chat-input").fill("run pwd and tell me where I am")
    page.get_by_test_id("chat-input").press("Enter")
    expect(page.get_by_test_id("chat-user-message")).to_have_text("run pwd and tell me where I am")
    prompt = page.get_by_test_id("chat-permission")
    expect(prompt.get_by_test_id("permission-allow")).to_be_visible(timeout=RUNTIME_TIMEOUT_MS)
    expect(prompt).to_contain_text("pwd")
    expect(page.get_by_test_id("preview-status")).to_have_text("Needs approval")
    card = page.get_by_test_id("chat-tool-card")
    expect(card).to_have_attribute("data-status", "waiting")
    expect(card.get_by_test_id("tool-name")).to_have_text(tool)
    asked_after = time.monotonic() - sent
    prompt.get_by_test_id("permission-allow").click()
    expect(prompt).to_contain_text("Allowed once")
    expect(card).to_have_attribute("data-status", "done")
    card.locator("summary").click()
    expect(card.get_by_test_id("tool-output")).to_contain_text("/workspace")
    expect(page.get_by_test_id("chat-assistant-message").last).to_have_text(FIRST_ANSWER)
    expect(page.get_by_test_id("preview-status")).to_have_text("Ready")
    answered_after = time.monotonic() - sent
    # The provider's usage numbers reached the chat's footer.
    expect(page.get_by_text(re.compile(r"^This chat: "))).to_be_visible()
    found = re.search(r"\?thread=([0-9A-Z]{26})$", page.url)
    assert found is not None
    thread_id = found.group(1)

    page.get_by_test_id("chat-input").fill("now write something long")
    sent = time.monotonic()
    page.get_by_test_id("chat-input").press("Enter")
    expect(page.get_by_test_id("chat-user-message")).to_have_count(2)
    growing = _wait_for_more_parts(page, 2, RUNTIME_TIMEOUT_MS)
    streaming_after = time.monotonic() - sent
    page.get_by_test_id("chat-stop").click()
    stop_pressed = time.monotonic()
    expect(page.get_by_test_id("chat-run-stopped")).to_be_visible()
    stopped_after = time.monotonic() - stop_pressed
    expect(page.get_by_test_id("preview-status")).to_have_text("Stopped")
    expect(page.get_by_test_id("chat-assistant-live")).to_have_count(0)
    stopped_at = _parts_shown(page.get_by_test_id("chat-assistant-message").last.inner_text())
    assert growing <= stopped_at < len(RUNTIME_LONG_CHUNKS)
    expect(page.get_by_test_id("chat-send")).to_be_enabled()

    with Session(create_engine(database_url)) as db:
        runs = db.exec(
            select(SessionRun)
            .where(SessionRun.session_id == thread_id)
            .order_by(col(SessionRun.created_at))
        ).all()
    assert [(r.input_text, r.status) for r in runs] == [
        ("run pwd and tell me where I am", "completed"),
        ("now write something long", "cancelled"),
    ], [(r.status, r.error_code, r.error_message) for r in runs]
    print(
        f"\nprompt {asked_after:.1f}s and answer {answered_after:.1f}s after the first message;"
        f" the long answer streaming {streaming_after:.1f}s after the second,"
        f" shown stopped {stopped_after:.1f}s after Stop (at chunk {stopped_at})"
    )
    return thread_id


def test_owner_runs_a_claude_code_agent_in_preview_approves_bash_and_stops_it(
    page: Page, browser: Browser, run_stack: RunStack, anthropic: ScriptedAnthropicServer
) -> None:
    """Runtime `claude`: the real Claude Code in the sandbox, an Anthropic key (the scripted
    Messages server) reached only through control's gateway."""
    stack = run_stack
    started = time.monotonic()
    with stack.logs_on_failure():
        agent_id = _runtime_agent(
            page,
            browser,
            stack,
            runtime="Claude Agent SDK",
            preset="Anthropic",
            base_url=anthropic.base_url,
            key=ANTHROPIC_KEY,
            model="claude-test",
        )
        anthropic.add(
            MessageTurn(
                [TextBlock("Let me look."), ToolUseBlock("Bash", {"command": "pwd"}, id="toolu_1")]
            ),
            MessageTurn([TextBlock(FIRST_ANSWER)], delay=0.02),
            MessageTurn([TextBlock(list(RUNTIME_LONG_CHUNKS))], delay=RUNTIME_CHUNK_DELAY),
        )
        try:
            _approve_pwd_then_stop_a_long_answer(page, stack.web.database_url, "Bash")
        except Exception:
            print(f"model calls: {[(r.path, r.body) for r in anthropic.requests]}")
            _print_latest_runs(stack.web.database_url)
            raise
        # The text Claude Code streamed before its tool call shows too.
        expect(page.get_by_test_id("chat-assistant-message").first).to_have_text("Let me look.")

        with Session(create_engine(stack.web.database_url)) as db:
            agent = db.get(Agent, agent_id)
            assert agent is not None and agent.runtime == "claude"
        asked = anthropic.message_requests
        assert len(asked) == 3, [r.messages for r in asked]
        assert {r.headers.get("x-api-key") for r in asked} == {ANTHROPIC_KEY}
        assert {r.body["model"] for r in asked} == {"claude-test"}
        assert ANTHROPIC_KEY not in page.content()
    print(f"\nclaude journey {time.monotonic() - started:.1f}s")


def test_owner_runs_an_opencode_agent_in_preview_approves_bash_and_stops_it(
    page: Page, browser: Browser, run_stack: RunStack
) -> None:
    """Runtime `acp`: the real OpenCode in the sandbox, an OpenAI-compatible key (the
    scripted server) reached only through control's gateway."""
    stack, model = run_stack, run_stack.model
    started = time.monotonic()
    with stack.logs_on_failure():
        agent_id = _runtime_agent(
            page,
            browser,
            stack,
            runtime="ACP agent (OpenCode)",
            preset="OpenAI-compatible",
            base_url=model.base_url,
            key=OPENCODE_KEY,
            model="test-model",
        )
        first_request = len(model.chat_requests)
        model.add(
            ToolCallsTurn(
                [ToolCall("bash", {"command": "pwd", "description": "Where am I"}, id="call_1")]
            ),
            TextTurn(FIRST_ANSWER, delay=0.02),
            TextTurn(list(RUNTIME_LONG_CHUNKS), delay=RUNTIME_CHUNK_DELAY),
        )
        try:
            _approve_pwd_then_stop_a_long_answer(page, stack.web.database_url, "bash")
        except Exception:
            print(f"model calls: {[r.body for r in model.chat_requests[first_request:]]}")
            _print_latest_runs(stack.web.database_url)
            raise

        with Session(create_engine(stack.web.database_url)) as db:
            agent = db.get(Agent, agent_id)
            assert agent is not None and agent.runtime == "acp"
        asked = model.chat_requests[first_request:]
        assert len(asked) == 3, [r.messages for r in asked]
        assert {r.headers.get("authorization") for r in asked} == {f"Bearer {OPENCODE_KEY}"}
        assert OPENCODE_KEY not in page.content()
    print(f"\nacp journey {time.monotonic() - started:.1f}s")


# Two models the seeded price table (mosoo_core/usage/prices.toml) prices for the `openai`
# provider: the gateway prices a call by its key's provider and the model it names, so the
# key is an OpenAI one whose base URL is the scripted server (an `openai_compatible` key has
# no seeded prices, and the console offers no price form: App prices are a service only).
CHEAP_MODEL, DEAR_MODEL = "gpt-4o-mini", "gpt-4.1"
USAGE_KEY = "sk-usage-browser-SECRET-" + uuid.uuid4().hex
# The tokens each scripted answer reports, and their cost at the seeded prices (USD per
# million tokens): gpt-4o-mini $0.15 in, $0.60 out: 200k * 0.15 + 100k * 0.60 = $0.09;
# gpt-4.1 $2.00 in, $8.00 out: 10k * 2.00 + 5k * 8.00 = $0.06.
CHEAP_USAGE = {"prompt_tokens": 200_000, "completion_tokens": 100_000}
DEAR_USAGE = {"prompt_tokens": 10_000, "completion_tokens": 5_000}
CHEAP_COST, DEAR_COST = 90_000, 60_000  # USD micros
PHASE_TIME = re.compile(r"^(\d+ ms|\d+\.\d\d s)$")


def _send_and_wait(page: Page, text: str, answer: str) -> None:
    """Send `text` from the chat; its answer is the last message and the Agent is Ready."""
    page.get_by_test_id("chat-input").fill(text)
    page.get_by_test_id("chat-input").press("Enter")
    expect(page.get_by_test_id("chat-assistant-message").last).to_have_text(
        answer, timeout=BOOT_TIMEOUT_MS
    )
    expect(page.get_by_test_id("preview-status")).to_have_text("Ready")


def _is_in_order(wanted: list[str], seen: list[str]) -> bool:
    """Whether `seen` holds every one of `wanted` in that order (other names between)."""
    remaining = iter(seen)
    return all(name in remaining for name in wanted)


def test_owner_sees_two_models_usage_in_usage_and_logs_then_approves_a_call_from_the_logs(
    page: Page, browser: Browser, run_stack: RunStack
) -> None:
    """Usage and Logs on the real stack: two runs with two priced models; the Usage page's
    by-model table and totals show their cost at once (no rollup has run: today's calls are
    read from the raw records); the Logs tab lists both runs with their model and cost, one
    replays beside its Diagnostics. Then a bash call waiting on Ask is approved from the Logs
    replay, not the chat, and the run completes."""
    stack, model = run_stack, run_stack.model
    started = time.monotonic()
    engine = create_engine(stack.web.database_url)
    with stack.logs_on_failure():
        agent_id = _runtime_agent(
            page,
            browser,
            stack,
            runtime="OpenAI-compatible tool loop",
            preset="OpenAI",
            base_url=model.base_url,
            key=USAGE_KEY,
            model=CHEAP_MODEL,
            more_models=(DEAR_MODEL,),
        )
        found = AGENT_URL.search(page.url)
        assert found is not None
        app_id = found.group(1)
        first_request = len(model.requests)

        # Two runs in one thread, the model switched between them.
        model.add(TextTurn("Cheap answer.", usage=CHEAP_USAGE))
        _send_and_wait(page, "answer with the cheap model", "Cheap answer.")
        thread_url = page.url
        page.get_by_test_id("agent-model-choice").filter(has_text=DEAR_MODEL).click()
        expect(page.get_by_test_id("agent-model")).to_have_value(DEAR_MODEL)

        def saved_model() -> str:
            with Session(engine) as db:
                agent = db.get(Agent, agent_id)
                return agent.model if agent is not None else ""

        wait_for(lambda: saved_model() == DEAR_MODEL, 10, "the model to be saved")
        model.add(TextTurn("Dear answer.", usage=DEAR_USAGE))
        _send_and_wait(page, "now the dear model", "Dear answer.")
        expect(page.get_by_test_id("chat-assistant-message")).to_have_count(2)
        asked = [r.body["model"] for r in model.requests[first_request:] if r.method == "POST"]
        assert asked == [CHEAP_MODEL, DEAR_MODEL]
        two_runs_after = time.monotonic() - started

        # The gateway's records, priced when written; no rollup has run for this App yet.
        with Session(engine) as db:
            records = db.exec(
                select(UsageEvent)
                .where(UsageEvent.app_id == app_id)
                .order_by(col(UsageEvent.created_at))
            ).all()
            rolled_up = db.exec(select(UsageDaily).where(UsageDaily.app_id == app_id)).all()
        assert [
            (r.provider, r.model, r.input_tokens, r.output_tokens, r.cost_usd_micros, r.unpriced)
            for r in records
        ] == [
            ("openai", CHEAP_MODEL, 200_000, 100_000, CHEAP_COST, False),
            ("openai", DEAR_MODEL, 10_000, 5_000, DEAR_COST, False),
        ]
        assert {r.agent_id for r in records} == {agent_id}
        assert rolled_up == []

        # Usage: both models, costliest first, and the totals, straight away.
        page.get_by_test_id("nav-usage").click()
        page.wait_for_url(re.compile(r"/usage$"))
        by_model = page.get_by_test_id("usage-by-model")
        rows = by_model.get_by_test_id("usage-by-model-row")
        expect(rows.get_by_test_id("usage-by-model-name")).to_have_text([CHEAP_MODEL, DEAR_MODEL])
        expect(rows.get_by_test_id("usage-by-model-cost")).to_have_text(["$0.09", "$0.06"])
        expect(rows.nth(0)).to_contain_text("200,000")
        expect(rows.nth(1)).to_contain_text("10,000")
        expect(by_model.get_by_test_id("usage-by-model-total-cost")).to_have_text("$0.15")
        expect(page.get_by_test_id("usage-total-cost")).to_have_text("$0.15")
        expect(page.get_by_test_id("usage-total-calls")).to_have_text("2")
        expect(page.get_by_test_id("usage-total-input")).to_have_text("210,000")
        expect(page.get_by_test_id("usage-total-output")).to_have_text("105,000")
        expect(page.get_by_test_id("usage-by-agent-name")).to_have_text(
            "OpenAI-compatible tool loop helper"
        )
        expect(page.get_by_test_id("usage-unpriced")).to_have_count(0)

        # Logs: both runs with their model and cost; the first replayed beside its phases.
        page.goto(thread_url)
        page.get_by_test_id("agent-logs-link").click()
        page.wait_for_url(re.compile(r"/logs$"))
        runs = page.get_by_test_id("log-run")
        expect(runs).to_have_count(2)
        expect(runs.get_by_test_id("log-run-status")).to_have_text(["completed", "completed"])
        expect(runs.nth(0)).to_contain_text(DEAR_MODEL)
        expect(runs.nth(0).get_by_test_id("log-run-usage")).to_have_text("· 15,000 tokens · $0.06")
        expect(runs.nth(1)).to_contain_text(CHEAP_MODEL)
        expect(runs.nth(1).get_by_test_id("log-run-usage")).to_have_text("· 300,000 tokens · $0.09")
        runs.nth(1).click()
        replay = page.get_by_test_id("log-replay")
        expect(replay).to_contain_text("answer with the cheap model")
        expect(replay).to_contain_text("Cheap answer.")
        expect(replay).not_to_contain_text("Dear answer.")
        diagnostics = page.get_by_test_id("diagnostics")
        expect(diagnostics).to_contain_text("300,000 tokens · $0.09")
        labels = page.get_by_test_id("diagnostics-phase-label")
        expect(labels.first).to_have_text("Queued")
        phases = labels.all_inner_texts()
        wanted = ["Queued", "Sandbox create", "Driver start", "Input", "First token", "Answer"]
        assert _is_in_order(wanted, phases), phases
        times = page.get_by_test_id("diagnostics-phase-time").all_inner_texts()
        assert len(times) == len(phases) and all(PHASE_TIME.match(t) for t in times), times
        facts = page.get_by_test_id("diagnostics-fact")
        expect(facts.filter(has_text=re.compile(r"^Sandbox"))).to_contain_text(
            re.compile(r"Sandbox\s*\S+")
        )
        expect(facts.filter(has_text=re.compile(r"^Driver"))).to_contain_text("openai")

        # Approval from Logs: a bash call waits on Ask; the Logs replay answers it.
        page.goto(thread_url)
        expect(page.get_by_test_id("preview-status")).to_have_text("Ready")
        model.add(
            ToolCallsTurn([ToolCall("bash", {"command": "pwd"}, id="call_logs")], usage=DEAR_USAGE),
            TextTurn(FIRST_ANSWER, usage=DEAR_USAGE),
        )
        page.get_by_test_id("chat-input").fill("run pwd; I will approve it from the Logs")
        page.get_by_test_id("chat-input").press("Enter")
        expect(
            page.get_by_test_id("chat-permission").get_by_test_id("permission-allow")
        ).to_be_visible(timeout=BOOT_TIMEOUT_MS)
        page.get_by_test_id("agent-logs-link").click()
        page.wait_for_url(re.compile(r"/logs$"))
        expect(runs).to_have_count(3)
        # The newest run, open at once: waiting on the prompt (the thread keeps its first title).
        expect(runs.first.get_by_test_id("log-run-status")).to_have_text("waiting_input")
        expect(replay).to_contain_text("run pwd; I will approve it from the Logs")
        waiting = replay.get_by_test_id("chat-permission")
        expect(waiting).to_contain_text("pwd")
        waiting.get_by_test_id("permission-allow").click()
        expect(waiting.get_by_test_id("permission-allow")).to_have_count(0)

        def statuses() -> list[str]:
            with Session(engine) as db:
                found_runs = db.exec(
                    select(SessionRun)
                    .where(SessionRun.app_id == app_id)
                    .order_by(col(SessionRun.created_at))
                ).all()
                return [r.status for r in found_runs]

        wait_for(lambda: statuses()[-1] == "completed", 60, "the approved run to complete")
        assert statuses() == ["completed", "completed", "completed"]
        page.reload()
        expect(runs.first.get_by_test_id("log-run-status")).to_have_text("completed")
        expect(runs.first.get_by_test_id("log-run-usage")).to_have_text("· 30,000 tokens · $0.12")
        expect(waiting).to_contain_text("Allowed once")
        card = replay.get_by_test_id("chat-tool-card")
        expect(card).to_have_attribute("data-status", "done")
        card.locator("summary").click()
        expect(card.get_by_test_id("tool-output")).to_contain_text("/workspace")
        expect(replay.get_by_test_id("chat-assistant-message").last).to_have_text(FIRST_ANSWER)
        assert USAGE_KEY not in page.content()
    print(
        f"\ntwo runs after {two_runs_after:.1f}s, usage/logs journey "
        f"{time.monotonic() - started:.1f}s"
    )
