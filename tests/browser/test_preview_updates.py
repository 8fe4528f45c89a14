"""What the console sends a Preview tab while an answer streams: about ten updates a second,
each carrying the text that streamed, never the thread's history (Reflex re-sends a changed
var whole, so the history must stay out of the var that changes on every delta), and the tab
keeps up however long the thread (it re-renders the live item, not the transcript)."""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass

import pytest
from playwright.sync_api import Browser, Page, WebSocket, expect

from mosoo_core import agents, sessions, streams
from mosoo_core.db import session_scope
from tests.api.conftest import add_provider_key
from tests.browser.conftest import WebServer
from tests.browser.test_console_journey import _sign_in
from tests.browser.test_preview_chat import (
    _account_id,
    _attach_driver,
    _start_thread_on_a_driver,
)

pytestmark = pytest.mark.browser

HISTORY_MARK = "HISTORY-PARAGRAPH"
HISTORY_PARAGRAPHS = 60
HISTORY = "\n\n".join(
    f"{HISTORY_MARK} {i}: " + "earlier words " * 40 for i in range(HISTORY_PARAGRAPHS)
)
DELTAS_PER_SECOND = 50
STREAM_SECONDS = 3.0
DELTA = "streamed words, "  # 16 characters
LIVE_STATE = "thread_chat____live_text"  # the live text state, as updates name it


@dataclass(frozen=True)
class Update:
    at: float
    size: int
    text: str


def _record_updates(page: Page) -> list[Update]:
    """Every state update the server pushes to `page` from now on, with when it came."""
    updates: list[Update] = []

    def watch(socket: WebSocket) -> None:
        def received(payload: str | bytes) -> None:
            text = payload if isinstance(payload, str) else payload.decode(errors="replace")
            if '"delta"' in text:
                updates.append(Update(time.monotonic(), len(text.encode()), text))

        socket.on("framereceived", received)

    page.on("websocket", watch)
    return updates


def test_a_streaming_answer_reaches_the_tab_in_about_ten_updates_a_second_without_its_history(
    page: Page, browser: Browser, shared_database: WebServer
) -> None:
    server = shared_database
    updates = _record_updates(page)
    page.goto(f"{server.url}/login")
    _sign_in(page, browser, server, f"updates-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
    app_id = page.url.rsplit("/", 1)[-1]
    account_id = _account_id(page)
    with session_scope() as db:
        credential = add_provider_key(db, account_id, app_id, api_key="sk-test-1234567890")
        agent_id = agents.create_agent(db, account_id, app_id, name="Streamer").id
        agents.update_agent(
            db,
            account_id,
            app_id,
            agent_id,
            agents.AgentChanges(provider_credential_id=credential.id, model="test-model"),
        )
    # A thread with a long answer in its history, then a second question being answered.
    thread_id, driver = _start_thread_on_a_driver(account_id, app_id, agent_id)
    driver.send("run.started")
    driver.send("message.started", message_id="m1")
    driver.send("message.completed", message_id="m1", text=HISTORY)
    driver.send("run.completed", final_text=HISTORY)

    page.goto(f"{server.url}/apps/{app_id}/agents/{agent_id}?thread={thread_id}")
    expect(page.get_by_test_id("chat-assistant-message").first).to_contain_text(
        f"{HISTORY_MARK} {HISTORY_PARAGRAPHS - 1}"
    )

    # The second question, answered in deltas paced like a fast model's tokens.
    with session_scope() as db:
        sent = sessions.send_message(db, account_id, thread_id, "And in short?")
    streams.publish_events(sent.events)
    answering = _attach_driver(app_id, thread_id)
    answering.send("run.started")
    answering.send("message.started", message_id="m2")
    expect(page.get_by_test_id("chat-user-message")).to_have_count(2)
    first = len(updates)
    started = time.monotonic()
    deltas = int(DELTAS_PER_SECOND * STREAM_SECONDS)
    for index in range(deltas):
        answering.send("message.delta", message_id="m2", text=DELTA)
        # Paced as a model streams (a producer's pace, not a wait for an outcome).
        time.sleep(max(0.0, started + (index + 1) / DELTAS_PER_SECOND - time.monotonic()))
    answering.send("message.delta", message_id="m2", text="THE END")
    sent_all = time.monotonic()
    # Shown at once: on this 36 KB thread the tab fell 8 to 10 seconds behind while every
    # update re-rendered the whole transcript (a one-paragraph thread kept up).
    expect(page.get_by_test_id("chat-assistant-live")).to_contain_text("THE END", timeout=2_000)
    shown = time.monotonic()
    live = [u for u in updates[first:] if LIVE_STATE in u.text]
    assert live, "the live item came in updates of its own state"
    # About ten updates a second (one each 100 ms at the most, from the first delta on).
    assert len(live) <= 10 * (shown - started) + 2, (len(live), shown - started)
    # Each carries the open answer (at most what streamed), never the thread's history.
    streamed_text = DELTA * deltas + "THE END"
    assert all(HISTORY_MARK not in u.text for u in live)
    assert max(u.size for u in live) <= len(streamed_text) + 1024
    assert sent_all - started < STREAM_SECONDS + 2  # the producer kept its pace
