"""The agent's description and provider options in Preview (autosaved, kept over a reload,
refused next to the field when out of range) and the Agents list's status and last activity."""

from __future__ import annotations

import re
import uuid

import pytest
from playwright.sync_api import Browser, Page, expect

from mosoo_core import agents
from mosoo_core.db import session_scope
from tests.browser.conftest import WebServer
from tests.browser.test_console_journey import _sign_in
from tests.browser.test_preview_chat import _account_id
from tests.support.processes import wait_for

pytestmark = pytest.mark.browser

APP_URL = re.compile(r"/apps/([0-9A-Z]{26})$")


def test_description_and_temperature_are_kept_and_the_list_shows_status_and_activity(
    page: Page, browser: Browser, shared_database: WebServer
) -> None:
    server = shared_database
    page.goto(f"{server.url}/login")
    _sign_in(page, browser, server, f"options-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(APP_URL)
    match = APP_URL.search(page.url)
    assert match
    app_id = match.group(1)
    account_id = _account_id(page)
    with session_scope() as db:
        agent_id = agents.create_agent(db, account_id, app_id, name="Tuned").id

    page.goto(f"{server.url}/apps/{app_id}/agents/{agent_id}")
    page.get_by_test_id("agent-description").fill("Answers billing questions.")
    page.get_by_test_id("agent-temperature").fill("0.7")  # typing stops: saved after a moment

    def saved() -> agents.AgentView:
        with session_scope() as db:
            return agents.get_agent(db, account_id, app_id, agent_id)

    wait_for(
        lambda: saved().provider_options == {"temperature": 0.7}, 10, "the temperature to autosave"
    )
    assert saved().description == "Answers billing questions."
    expect(page.get_by_test_id("save-indicator")).to_have_text("Saved")

    page.reload()
    expect(page.get_by_test_id("agent-description")).to_have_value("Answers billing questions.")
    expect(page.get_by_test_id("agent-temperature")).to_have_value("0.7")

    # Out of range: the error next to the field, nothing saved.
    page.get_by_test_id("agent-temperature").fill("3")
    page.get_by_test_id("agent-temperature").blur()
    expect(page.get_by_test_id("agent-temperature-error")).to_contain_text("0 to 2")
    expect(page.get_by_test_id("save-indicator")).to_contain_text("Not saved: Temperature")
    assert saved().provider_options == {"temperature": 0.7}

    page.goto(f"{server.url}/apps/{app_id}/agents")
    card = page.get_by_test_id("agent-card")
    expect(card).to_have_count(1)
    expect(card.get_by_test_id("agent-status")).to_have_text("Draft")
    expect(card.get_by_test_id("agent-last-activity")).to_have_text(
        re.compile(r"^Active (just now|\d+ min ago)$")
    )
