"""The App home a new owner lands on: the getting-started checklist, nothing ticked at first,
then the steps done so far ticked from real state, and the App's Agents once it has one."""

from __future__ import annotations

import os
import re
import uuid

import pytest
from playwright.sync_api import Browser, Page, expect

from mosoo_core import agents, sessions, vault
from mosoo_core.app_home import STEPS
from mosoo_core.db import session_scope
from tests.browser.conftest import WebServer
from tests.browser.test_console_journey import _sign_in
from tests.browser.test_preview_chat import _account_id

pytestmark = pytest.mark.browser

APP_URL = re.compile(r"/apps/([0-9A-Z]{26})$")


def _screenshot(page: Page, name: str) -> None:
    """With MOSOO_TEST_APP_HOME_SCREENSHOT=/tmp/home.png, keep full-page pictures for a look."""
    path = os.environ.get("MOSOO_TEST_APP_HOME_SCREENSHOT")
    if path:
        page.screenshot(path=path.replace(".png", f"-{name}.png"), full_page=True)


def _ticked(page: Page) -> dict[str, bool]:
    """Which steps the checklist shows ticked (each step shows exactly one of the marks)."""
    found = {}
    for key in STEPS:
        step = page.get_by_test_id(f"step-{key}")
        expect(
            step.get_by_test_id("step-done").or_(step.get_by_test_id("step-todo"))
        ).to_be_visible()
        found[key] = step.get_by_test_id("step-done").count() == 1
    return found


def _provider_agent_and_preview_message(account_id: str, app_id: str) -> str:
    """What the owner would do on the Providers page, the Agents page and in Preview (the
    run is stored, not dispatched: no worker here)."""
    with session_scope() as db:
        credential = vault.create_provider_credential(
            db,
            account_id,
            app_id,
            vault.ProviderCredentialInput(
                name="Local",
                provider="openai_compatible",
                base_url="http://10.0.0.5:8000/v1",
                api_key="sk-test-0123456789abcdef0123456789",
                models=["m"],
            ),
        )
        agent = agents.create_agent(db, account_id, app_id, name="Concierge")
        agents.update_agent(
            db,
            account_id,
            app_id,
            agent.id,
            agents.AgentChanges(provider_credential_id=credential.id, model="m"),
        )
        thread = sessions.create_session(db, account_id, app_id, agent.id, purpose="preview")
        sessions.send_message(db, account_id, thread.id, "Hello from Preview")
        return agent.id


def test_new_owner_sees_the_checklist_unticked_then_ticked_by_what_they_did(
    page: Page, browser: Browser, shared_database: WebServer
) -> None:
    server = shared_database
    page.goto(f"{server.url}/login")
    _sign_in(page, browser, server, f"home-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(APP_URL)
    match = APP_URL.search(page.url)
    assert match
    app_id, account_id = match.group(1), _account_id(page)

    # The first sign-in lands on the App's home: the checklist, nothing done yet.
    expect(page.get_by_test_id("page-title")).to_have_text("Default App")
    expect(page.get_by_test_id("checklist-progress")).to_have_text("0 of 5 done")
    _screenshot(page, "new")
    assert _ticked(page) == dict.fromkeys(STEPS, False)
    expect(page.get_by_test_id("home-agents")).to_have_count(0)
    curl = page.get_by_test_id("example-curl")
    expect(curl).to_contain_text(f"{server.url}/api/v1/agents/$AGENT_ID/threads")
    expect(curl).to_contain_text("Bearer $MOSOO_TOKEN")
    expect(page.get_by_test_id("step-provider-link")).to_have_attribute(
        "href", f"/apps/{app_id}/providers"
    )
    expect(page.get_by_test_id("example-tokens-link")).to_have_attribute("href", "/tokens")

    agent_id = _provider_agent_and_preview_message(account_id, app_id)
    page.reload()
    expect(page.get_by_test_id("checklist-progress")).to_have_text("3 of 5 done")
    assert _ticked(page) == {
        "provider": True,
        "agent": True,
        "preview": True,
        "publish": False,
        "api": False,
    }
    # The examples now name the real Agent, which is to be published first.
    expect(curl).to_contain_text(f"{server.url}/api/v1/agents/{agent_id}/threads")
    expect(page.get_by_test_id("example-cli")).to_contain_text(f'mosoo run {agent_id} "Hello"')
    expect(page.get_by_test_id("step-publish-link")).to_have_attribute(
        "href", f"/apps/{app_id}/agents/{agent_id}"
    )
    # With an Agent the App's activity shows under the checklist.
    agent_row = page.get_by_test_id("home-agent")
    expect(agent_row).to_have_count(1)
    expect(agent_row).to_contain_text("Concierge")
    expect(agent_row.get_by_test_id("home-agent-status")).to_have_text("Draft")
    expect(page.get_by_test_id("home-thread")).to_contain_text("Hello from Preview")
    expect(page.get_by_test_id("cost-today")).to_have_text("$0.00")
    assert "mst_" not in page.content()

    with session_scope() as db:
        agents.publish_agent(db, account_id, app_id, agent_id)
    page.reload()
    expect(page.get_by_test_id("checklist-progress")).to_have_text("4 of 5 done")
    expect(page.get_by_test_id("step-publish").get_by_test_id("step-done")).to_be_visible()
    expect(agent_row.get_by_test_id("home-agent-status")).to_have_text("Published v1")
    _screenshot(page, "published")
