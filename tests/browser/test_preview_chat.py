"""Agents and Preview in Chromium: create an Agent, see what blocks it, and watch a thread
stream in (events written through the services and published to Redis by this test, the
way control does it), survive a reload, and answer a permission prompt."""

from __future__ import annotations

import os
import re
import uuid
from datetime import UTC, datetime

import pytest
from playwright.sync_api import Browser, Page, expect

from driver.protocol import DriverEvent
from mosoo_core import agents, identity, sessions, streams, vault
from mosoo_core.db import session_scope
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.sessions import DriverInstance
from tests.browser.actions import choose
from tests.browser.conftest import WebServer
from tests.browser.test_console_journey import _sign_in
from tests.support.processes import wait_for

pytestmark = pytest.mark.browser

AGENT_URL = re.compile(r"/apps/([0-9A-Z]{26})/agents/([0-9A-Z]{26})")


class FakeDriver:
    """Stands in for control ingesting a driver's events: store, then publish."""

    def __init__(self, instance_id: str, run_id: str) -> None:
        self.instance_id = instance_id
        self.run_id = run_id
        self.count = 0

    def send(self, kind: str, **payload: object) -> None:
        self.count += 1
        event = DriverEvent(
            source_event_id=f"{self.instance_id}-{self.count}",
            run_id=self.run_id,
            kind=kind,
            occurred_at=datetime.now(UTC).isoformat(),
            payload=payload,
        )
        with session_scope() as db:
            instance = db.get(DriverInstance, self.instance_id)
            assert instance is not None
            stored = driver_plane.ingest_driver_events(db, instance, [event])
        streams.publish_events(stored)


def _screenshot(page: Page, name: str) -> None:
    """With MOSOO_TEST_PREVIEW_SCREENSHOT=/tmp/preview.png, keep pictures for a look."""
    path = os.environ.get("MOSOO_TEST_PREVIEW_SCREENSHOT")
    if path:
        page.screenshot(path=path.replace(".png", f"-{name}.png") if name else path)


def _account_id(page: Page) -> str:
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "mosoo_session")
    with session_scope() as db:
        account_id = identity.resolve_session(db, token)
    assert account_id
    return account_id


def _attach_driver(app_id: str, thread_id: str) -> FakeDriver:
    """A driver instance picks up the thread's active run."""
    with session_scope() as db:
        run = sessions.active_run(db, thread_id)
        assert run is not None
        driver = driver_plane.register_driver(
            db,
            app_id=app_id,
            subject=f"session:{thread_id}",
            runtime="openai",
            session_id=thread_id,
        )
        run.driver_instance_id, run.status = driver.instance_id, "booting"
        db.add(run)
        return FakeDriver(driver.instance_id, run.id)


def _start_thread_on_a_driver(
    account_id: str, app_id: str, agent_id: str
) -> tuple[str, FakeDriver]:
    """A thread with a message whose run a driver instance has picked up."""
    with session_scope() as db:
        thread = sessions.create_session(db, account_id, app_id, agent_id)
        sent = sessions.send_message(db, account_id, thread.id, "What is in the workspace?")
    streams.publish_events(sent.events)
    return thread.id, _attach_driver(app_id, thread.id)


def test_agent_preview_streams_a_thread_survives_reload_and_answers_a_permission(
    page: Page, browser: Browser, shared_database: WebServer
) -> None:
    server = shared_database
    page.goto(f"{server.url}/login")
    _sign_in(page, browser, server, f"preview-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))

    # Agents page: create one; only implemented runtimes can be chosen.
    page.get_by_test_id("nav-agents").click()
    page.wait_for_url(re.compile(r"/agents$"))
    expect(page.get_by_test_id("agents-empty")).to_be_visible()
    page.get_by_test_id("new-agent").click()
    for runtime in agents.RUNTIMES.values():
        choice = expect(page.get_by_test_id(f"runtime-{runtime.name}"))
        if runtime.implemented:
            choice.to_be_enabled()
        else:
            choice.to_be_disabled()
    expect(page.get_by_test_id("runtime-claude")).to_be_enabled()
    page.get_by_test_id("new-agent-submit").click()
    expect(page.get_by_test_id("new-agent-name-error")).to_contain_text("name")
    page.get_by_test_id("new-agent-name").fill("Workspace helper")
    page.get_by_test_id("kind-pet").click()
    _screenshot(page, "new-agent")
    page.get_by_test_id("new-agent-submit").click()

    # Preview: blocked until a provider key and a model are set.
    page.wait_for_url(AGENT_URL)
    match = AGENT_URL.search(page.url)
    assert match
    app_id, agent_id = match.groups()
    expect(page.get_by_test_id("page-title")).to_have_text("Workspace helper")
    expect(page.get_by_test_id("preview-status")).to_have_text("Setup required")
    blockers = page.get_by_test_id("readiness-blocker")
    expect(blockers).to_have_count(2)
    expect(blockers.nth(0)).to_contain_text("Provider key")
    expect(blockers.nth(1)).to_contain_text("Model")
    expect(page.get_by_test_id("chat-send")).to_be_disabled()

    # A model (autosaved) clears that blocker; the name is validated next to its field.
    page.get_by_test_id("agent-model").fill("gpt-4o-mini")
    page.get_by_test_id("agent-name-input").fill("   ")
    page.get_by_test_id("agent-name-input").blur()
    expect(page.get_by_test_id("agent-name-error")).to_contain_text("name")
    page.get_by_test_id("agent-name-input").fill("Workspace helper")
    page.get_by_test_id("agent-name-input").blur()
    expect(page.get_by_test_id("agent-name-error")).to_have_count(0)
    expect(blockers).to_have_count(1)
    expect(blockers.first).to_contain_text("Provider key")
    expect(page.get_by_test_id("chat-send")).to_be_disabled()

    # The agent is listed.
    page.get_by_test_id("nav-agents").click()
    expect(page.get_by_test_id("agent-card")).to_have_count(1)
    expect(page.get_by_test_id("agent-card")).to_contain_text("gpt-4o-mini")
    _screenshot(page, "agents")

    # A thread whose run a driver has picked up; open it, then the driver streams.
    account_id = _account_id(page)
    thread_id, driver = _start_thread_on_a_driver(account_id, app_id, agent_id)
    thread_url = f"{server.url}/apps/{app_id}/agents/{agent_id}?thread={thread_id}"
    page.goto(thread_url)
    expect(page.get_by_test_id("chat-user-message")).to_have_text("What is in the workspace?")
    expect(page.get_by_test_id("preview-status")).to_have_text("Working")

    driver.send("run.started")
    driver.send("message.started", message_id="m1")
    for piece in ["Let me ", "look at ", "the files", " first."]:
        driver.send("message.delta", message_id="m1", text=piece)
    expect(page.get_by_test_id("chat-transcript")).to_contain_text(
        "Let me look at the files first."
    )
    driver.send("message.completed", message_id="m1", text="Let me look at the files first.")
    driver.send(
        "tool.call.started",
        tool_call_id="call_1",
        name="bash",
        input={"command": "ls -la /workspace"},
    )
    driver.send(
        "tool.call.completed",
        tool_call_id="call_1",
        output="notes.md\nreport.csv",
        is_error=False,
        duration_ms=42,
    )
    driver.send(
        "tool.call.started", tool_call_id="call_2", name="bash", input={"command": "rm report.csv"}
    )
    driver.send(
        "permission.requested",
        request_id="perm_1",
        tool_call_id="call_2",
        name="bash",
        input={"command": "rm report.csv"},
    )
    driver.send("usage.updated", input_tokens=1200, output_tokens=85, model="gpt-4o-mini")

    def check_transcript() -> None:
        expect(page.get_by_test_id("chat-assistant-message").first).to_have_text(
            "Let me look at the files first."
        )
        tools = page.get_by_test_id("chat-tool-card")
        expect(tools).to_have_count(2)
        expect(tools.nth(0)).to_contain_text("ls -la /workspace")
        expect(tools.nth(0)).to_contain_text("42 ms")
        expect(tools.nth(0)).to_have_attribute("data-status", "done")
        tools.nth(0).locator("summary").click()
        expect(tools.nth(0).get_by_test_id("tool-output")).to_contain_text("report.csv")
        tools.nth(0).locator("summary").click()
        expect(tools.nth(1)).to_have_attribute("data-status", "waiting")
        prompt = page.get_by_test_id("chat-permission")
        expect(prompt).to_contain_text("rm report.csv")
        expect(prompt.get_by_test_id("permission-allow")).to_be_visible()
        expect(page.get_by_test_id("preview-status")).to_have_text("Needs approval")
        expect(page.get_by_test_id("chat-send")).to_be_disabled()
        expect(page.get_by_test_id("chat-stop")).to_be_visible()

    check_transcript()
    _screenshot(page, "")

    # A reload shows everything so far (from the database) and keeps following the stream.
    page.reload()
    check_transcript()

    page.get_by_test_id("permission-allow").click()
    expect(page.get_by_test_id("permission-sent")).to_be_visible()

    def resolve_command_queued() -> bool:
        with session_scope() as db:
            commands = driver_plane.undelivered_commands(db, driver.instance_id)
            return any(
                c.kind == "permission.resolve"
                and c.payload == {"request_id": "perm_1", "decision": "allow_once"}
                for c in commands
            )

    wait_for(resolve_command_queued, 15, "the permission.resolve command")

    # The driver answers; the page, reloaded earlier, is still streaming.
    driver.send("permission.resolved", request_id="perm_1", decision="allow_once")
    expect(page.get_by_test_id("chat-permission")).to_contain_text("Allowed once")
    driver.send(
        "tool.call.completed", tool_call_id="call_2", output="", is_error=False, duration_ms=5
    )
    driver.send("message.delta", message_id="m2", text="Removed report.csv.")
    driver.send("run.completed", final_text="Removed report.csv.")
    expect(page.get_by_test_id("chat-usage")).to_contain_text("1,200 in")
    expect(page.get_by_test_id("chat-assistant-message").last).to_have_text("Removed report.csv.")
    # Still blocked by the missing provider key: Send stays off even though the run ended.
    expect(page.get_by_test_id("preview-status")).to_have_text("Setup required")
    expect(page.get_by_test_id("chat-send")).to_be_disabled()

    _screenshot(page, "done")

    # New chat: an empty thread view, and the URL forgets the old thread.
    page.get_by_test_id("chat-new").click()
    expect(page.get_by_test_id("chat-empty")).to_be_visible()
    expect(page).not_to_have_url(re.compile(r"thread="))


def test_a_ready_agent_sends_from_the_composer_stops_and_shows_a_failed_run(
    page: Page, browser: Browser, shared_database: WebServer
) -> None:
    server = shared_database
    page.goto(f"{server.url}/login")
    _sign_in(page, browser, server, f"ready-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
    app_id = page.url.rsplit("/", 1)[-1]
    account_id = _account_id(page)
    with session_scope() as db:
        vault.create_provider_credential(
            db,
            account_id,
            app_id,
            vault.ProviderCredentialInput(
                name="OpenAI",
                provider="openai",
                base_url="",
                api_key="sk-test-1234567890",
                models=["gpt-4o-mini", "gpt-4o"],
            ),
        )
        agent_id = agents.create_agent(db, account_id, app_id, name="Analyst").id

    # Choose the provider key; its first model fills in; each change saves on its own.
    page.goto(f"{server.url}/apps/{app_id}/agents/{agent_id}")
    expect(page.get_by_test_id("preview-status")).to_have_text("Setup required")
    choose(page, page.get_by_test_id("agent-provider"), "OpenAI (default)")
    expect(page.get_by_test_id("agent-model")).to_have_value("gpt-4o-mini")
    page.get_by_test_id("agent-model-choice").filter(has_text="gpt-4o").last.click()
    expect(page.get_by_test_id("agent-model")).to_have_value("gpt-4o")
    page.get_by_test_id("tool-bash").get_by_role("radio", name="Off").click()
    expect(page.get_by_test_id("preview-status")).to_have_text("Ready")
    expect(page.get_by_test_id("readiness-blocker")).to_have_count(0)

    def saved() -> agents.AgentView:
        with session_scope() as db:
            return agents.get_agent(db, account_id, app_id, agent_id)

    wait_for(
        lambda: saved().model == "gpt-4o" and "bash" not in saved().tools,
        10,
        "the choices to autosave",
    )

    # Send from the composer: a thread starts, its id goes into the URL, the run is queued.
    page.get_by_test_id("chat-input").fill("Summarize the quarter")
    page.get_by_test_id("chat-send").click()
    expect(page.get_by_test_id("chat-user-message")).to_have_text("Summarize the quarter")
    expect(page.get_by_test_id("preview-status")).to_have_text("Working")
    expect(page.get_by_test_id("chat-send")).to_be_disabled()
    expect(page).to_have_url(re.compile(r"\?thread=[0-9A-Z]{26}$"))
    expect(page.get_by_test_id("chat-input")).to_have_value("")
    thread_id = page.url.rsplit("=", 1)[-1]

    # Stop: no driver has the run yet, so it is cancelled at once.
    page.get_by_test_id("chat-stop").click()
    expect(page.get_by_test_id("chat-run-stopped")).to_be_visible()
    expect(page.get_by_test_id("preview-status")).to_have_text("Stopped")
    expect(page.get_by_test_id("chat-stop")).to_have_count(0)

    # An empty message is refused with a reason next to the composer.
    page.get_by_test_id("chat-send").click()
    expect(page.get_by_test_id("chat-error")).to_contain_text("Write a message first")

    # Send again (Enter submits); this time a driver thinks, writes markdown, then fails.
    page.get_by_test_id("chat-input").fill("Try again, with a table")
    page.get_by_test_id("chat-input").press("Enter")
    expect(page.get_by_test_id("chat-user-message")).to_have_count(2)
    driver = _attach_driver(app_id, thread_id)
    driver.send("run.started")
    driver.send("thought.delta", text="The user wants a table. ")
    driver.send("thought.delta", text="I will make one.")
    driver.send("message.started", message_id="m1")
    driver.send("message.delta", message_id="m1", text="**Quarter summary**\n\n- Revenue up 12%\n")
    driver.send("message.delta", message_id="m1", text="- Costs flat\n")
    # Raw HTML in the model's text (as a prompt injection would put it there) stays text.
    hostile = (
        '<iframe data-testid="injected" srcdoc="<script>parent.injected=1</script>"></iframe>'
        '<img data-testid="injected" src="x" onerror="window.injected=1">'
    )
    driver.send(
        "message.completed",
        message_id="m1",
        text="**Quarter summary**\n\n- Revenue up 12%\n- Costs flat\n\n" + hostile,
    )
    driver.send(
        "tool.call.started", tool_call_id="c1", name="read", input={"path": "/workspace/q3.csv"}
    )
    driver.send(
        "tool.call.completed",
        tool_call_id="c1",
        output="no such file: /workspace/q3.csv",
        is_error=True,
        duration_ms=2,
    )
    driver.send("usage.updated", input_tokens=2048, output_tokens=128, cached_input_tokens=1024)
    driver.send(
        "run.failed",
        code="provider_error",
        message="The provider answered 429: rate limited.",
        retryable=True,
    )

    expect(page.get_by_test_id("chat-thinking")).to_contain_text("I will make one.")
    expect(page.locator("[data-testid=chat-assistant-message] strong")).to_have_text(
        "Quarter summary"
    )
    expect(page.get_by_test_id("chat-assistant-message").last).to_contain_text("<iframe")
    expect(page.get_by_test_id("injected")).to_have_count(0)
    assert page.evaluate("window.injected") is None
    tool = page.get_by_test_id("chat-tool-card")
    expect(tool).to_have_attribute("data-status", "error")
    expect(tool.get_by_test_id("tool-output")).to_contain_text("no such file")
    expect(page.get_by_test_id("chat-run-error")).to_contain_text("rate limited")
    expect(page.get_by_test_id("chat-run-error")).to_contain_text("provider_error")
    expect(page.get_by_test_id("preview-status")).to_have_text("Ready")
    _screenshot(page, "failed")

    # A reload re-opens the thread from the URL with everything in it.
    page.reload()
    expect(page.get_by_test_id("chat-user-message")).to_have_count(2)
    expect(page.get_by_test_id("chat-run-stopped")).to_be_visible()
    expect(page.get_by_test_id("chat-run-error")).to_contain_text("rate limited")
    expect(page.get_by_test_id("chat-send")).to_be_enabled()
