"""A message to a hibernated Assistant: the chat says "Waking the assistant…" while its
sandbox is built again (the worker's `run.preparing {stage: "wake"}`), until the run starts."""

from __future__ import annotations

import os

import pytest
from playwright.sync_api import Browser, Page, expect

from mosoo_core import sessions
from mosoo_core.db import session_scope
from mosoo_core.sessions.driver_plane import NewEvent, append_events
from mosoo_core.tables.agents import Agent
from tests.browser.conftest import WebServer
from tests.browser.test_pet_pending import _signed_in

pytestmark = pytest.mark.browser


def test_a_message_to_a_hibernated_assistant_shows_waking_in_the_chat(
    page: Page, browser: Browser, shared_database: WebServer
) -> None:
    account_id, app_id = _signed_in(page, browser, shared_database, "wake")
    with session_scope() as db:
        agent = Agent(app_id=app_id, name="Keeper", model="m", kind="pet")
        db.add(agent)
        db.flush()
        thread_id = sessions.create_session(db, account_id, app_id, agent.id).id
        run_id = sessions.send_message(db, account_id, thread_id, "Still there?").run.id

    def worker_says(event_type: str, **payload: str) -> None:
        with session_scope() as db:
            append_events(
                db, thread_id, [NewEvent(type=event_type, payload=payload, run_id=run_id)]
            )

    page.goto(f"{shared_database.url}/apps/{app_id}/threads/{thread_id}")
    worker_says("run.preparing", stage="wake", status="waking")
    waking = page.get_by_test_id("chat-preparing")
    expect(waking).to_have_text("Waking the assistant…")
    expect(waking).to_have_attribute("data-status", "waking")
    expect(page.get_by_test_id("chat-working")).to_have_count(0)
    if os.environ.get("MOSOO_TEST_PET_WAKING_SCREENSHOT"):  # e.g. /tmp/waking.png, for a look
        page.screenshot(path=os.environ["MOSOO_TEST_PET_WAKING_SCREENSHOT"])

    worker_says("run.started")
    expect(waking).to_have_count(0)
    expect(page.get_by_test_id("chat-working")).to_be_visible()
