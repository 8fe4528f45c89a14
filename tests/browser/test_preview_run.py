"""The Preview journey against the real stack: `mosoo web`, `mosoo control` and `mosoo worker`
with Redis and a Docker sandbox, the model replaced at its network boundary by the scripted
OpenAI-compatible server. The owner adds a provider key, creates an Agent, approves a bash
call, watches the answer stream, reloads mid-stream and presses Stop."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, WebSocket, expect

from tests.browser.actions import choose
from tests.browser.test_console_journey import _sign_in
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


def _add_provider(page: Page, base_url: str) -> None:
    page.get_by_test_id("nav-providers").click()
    page.wait_for_url(re.compile(r"/providers$"))
    choose(page, page.get_by_test_id("provider-preset"), "OpenAI-compatible", exact=True)
    page.get_by_test_id("provider-name-input").fill("Scripted")
    page.get_by_test_id("provider-base-url-input").fill(base_url)
    page.get_by_test_id("provider-key-input").fill(PROVIDER_KEY)
    page.get_by_test_id("provider-models-input").fill("test-model")
    page.get_by_test_id("provider-add-submit").click()
    expect(page.get_by_test_id("provider-row")).to_have_count(1)
