"""Sending while a hibernated Assistant wakes: the composer stays open while the chat says
"Waking the assistant…", each message sent then shows as queued below the chat (its run
`pending` in the database) and joins the transcript when its turn comes, after the answer to
the message before it; once the run is running, Send is off again; Stop cancels the run and
the message still queued, each shown as stopped in turn. The worker's and driver's events are
written here as they would write them."""

from __future__ import annotations

import os

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlmodel import col, select

from mosoo_core import sessions
from mosoo_core.db import session_scope
from mosoo_core.sessions.driver_plane import NewEvent, append_events, finish_run
from mosoo_core.tables.sessions import SessionRun
from tests.browser.conftest import WebServer
from tests.browser.test_pet_pending import _ready_agent, _signed_in

pytestmark = pytest.mark.browser


def _runs(thread_id: str) -> list[SessionRun]:
    """The thread's runs, oldest first."""
    with session_scope() as db:
        return list(
            db.exec(
                select(SessionRun)
                .where(SessionRun.session_id == thread_id)
                .order_by(col(SessionRun.created_at))
            ).all()
        )


def _statuses(thread_id: str) -> list[tuple[str, str]]:
    return [(run.input_text, run.status) for run in _runs(thread_id)]


def test_messages_sent_while_an_assistant_wakes_are_queued_then_read_in_turn(
    page: Page, browser: Browser, shared_database: WebServer
) -> None:
    account_id, app_id = _signed_in(page, browser, shared_database, "queue")
    agent_id = _ready_agent(account_id, app_id)
    with session_scope() as db:
        thread_id = sessions.create_session(db, account_id, app_id, agent_id).id
        first = sessions.send_message(db, account_id, thread_id, "Still there?").run.id

    def worker_says(run_id: str, event_type: str, **payload: str) -> None:
        with session_scope() as db:
            append_events(
                db, thread_id, [NewEvent(type=event_type, payload=payload, run_id=run_id)]
            )

    page.goto(f"{shared_database.url}/apps/{app_id}/threads/{thread_id}")
    worker_says(first, "run.preparing", stage="wake", status="waking")
    expect(page.get_by_test_id("chat-preparing")).to_have_text("Waking the assistant…")
    send = page.get_by_test_id("chat-send")
    queued = page.get_by_test_id("chat-queued-message")
    for count, text in enumerate(("And the notes?", "Then summarise them."), start=1):
        expect(send).to_be_enabled()
        page.get_by_test_id("chat-input").fill(text)
        send.click()
        expect(queued).to_have_count(count)
        expect(queued.last).to_contain_text(text)
        expect(queued.last).to_contain_text("Queued")
    expect(page.get_by_test_id("chat-user-message")).to_have_count(3)  # two of them queued
    if os.environ.get("MOSOO_TEST_PROMPT_QUEUE_SCREENSHOT"):  # e.g. /tmp/queued.png, for a look
        page.screenshot(path=os.environ["MOSOO_TEST_PROMPT_QUEUE_SCREENSHOT"])
    assert _statuses(thread_id) == [
        ("Still there?", "queued"),
        ("And the notes?", "pending"),
        ("Then summarise them.", "pending"),
    ]

    # Awake: the run starts; a message now would be refused, so Send is off.
    worker_says(first, "run.started")
    expect(page.get_by_test_id("chat-preparing")).to_have_count(0)
    expect(send).to_be_disabled()
    worker_says(first, "agent.message.delta", message_id="m1", text="I am here.")
    with session_scope() as db:
        run = db.get(SessionRun, first)
        assert run is not None
        finish_run(db, run, "completed", emit_event=True)  # the next message's turn
    second = _runs(thread_id)[1].id
    worker_says(second, "run.started")
    expect(queued).to_have_count(1)
    transcript = page.get_by_test_id("chat-transcript")
    expect(transcript.get_by_test_id("chat-assistant-message")).to_have_text("I am here.")
    # "And the notes?" now reads after the answer to the first message.
    texts = page.locator(
        "[data-testid=chat-user-message], [data-testid=chat-assistant-message]"
    ).all_inner_texts()
    assert [t.strip() for t in texts[:3]] == ["Still there?", "I am here.", "And the notes?"]

    # Stop: the run and the message still queued are cancelled, each shown as stopped.
    page.get_by_test_id("chat-stop").click()
    expect(queued).to_have_count(0)
    expect(page.get_by_test_id("chat-run-stopped")).to_have_count(2)
    assert _statuses(thread_id) == [
        ("Still there?", "completed"),
        ("And the notes?", "cancelled"),
        ("Then summarise them.", "cancelled"),
    ]
    expect(send).to_be_enabled()
