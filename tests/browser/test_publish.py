"""Publishing from the Preview header in Chromium: the badge, Publish with a summary, the
versions list, Unpublish, and Publish disabled while a blocker stands."""

from __future__ import annotations

import re
import uuid

import pytest
from playwright.sync_api import Browser, Page, expect

from mosoo_core import agents, vault
from mosoo_core.db import session_scope
from tests.browser.conftest import WebServer
from tests.browser.test_console_journey import _sign_in
from tests.browser.test_preview_chat import _account_id

pytestmark = pytest.mark.browser

APP_URL = re.compile(r"/apps/([0-9A-Z]{26})$")


def _ready_agent(account_id: str, app_id: str) -> str:
    with session_scope() as db:
        agent = agents.create_agent(db, account_id, app_id, name="Publisher")
        credential = vault.create_provider_credential(
            db,
            account_id,
            app_id,
            vault.ProviderCredentialInput(
                name="P",
                provider="openai_compatible",
                base_url="http://10.0.0.5:8000/v1",
                api_key="sk-test-0123456789abcdef0123456789",
                models=["m"],
            ),
        )
        agents.update_agent(
            db,
            account_id,
            app_id,
            agent.id,
            agents.AgentChanges(provider_credential_id=credential.id, model="m"),
        )
        return agent.id


def test_publish_from_preview_shows_the_version_and_unpublish_returns_to_draft(
    page: Page, browser: Browser, shared_database: WebServer
) -> None:
    server = shared_database
    page.goto(f"{server.url}/login")
    _sign_in(page, browser, server, f"publish-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(APP_URL)
    match = APP_URL.search(page.url)
    assert match
    app_id = match.group(1)
    account_id = _account_id(page)
    agent_id = _ready_agent(account_id, app_id)

    page.goto(f"{server.url}/apps/{app_id}/agents/{agent_id}")
    status = page.get_by_test_id("agent-publish-status")
    expect(status).to_have_text("Draft")
    page.get_by_test_id("publish-agent").click()
    page.get_by_test_id("publish-summary").fill("First release")
    page.get_by_test_id("publish-submit").click()
    expect(status).to_have_text("Published v1")

    page.get_by_test_id("agent-versions").click()
    rows = page.get_by_test_id("agent-version-row")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("v1")
    expect(rows.first).to_contain_text("First release")
    page.keyboard.press("Escape")

    page.get_by_test_id("unpublish-agent").click()
    page.get_by_role("button", name="Unpublish").last.click()
    expect(status).to_have_text("Draft")

    # A blocker disables Publish.
    with session_scope() as db:
        agents.update_agent(db, account_id, app_id, agent_id, agents.AgentChanges(model=""))
    page.reload()
    expect(status).to_have_text("Draft")
    expect(page.get_by_test_id("publish-agent")).to_be_disabled()
