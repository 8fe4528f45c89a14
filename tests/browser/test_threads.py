"""The Threads pages in Chromium: sections with counts, the agent and failed filters, a
thread's history and files, rename (with a refused title), archive, unarchive and delete."""

from __future__ import annotations

import io
import re
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlmodel import select

from mosoo_core import files, identity, sessions
from mosoo_core.db import session_scope
from mosoo_core.sessions import driver_plane
from mosoo_core.sessions.driver_plane import NewEvent, append_events
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import AgentSession, SessionRun
from mosoo_core.tables.usage import UsageEvent
from tests.browser.actions import choose
from tests.browser.conftest import WebServer
from tests.browser.test_console_journey import _sign_in
from tests.browser.test_preview_chat import _account_id

pytestmark = pytest.mark.browser

APP_URL = re.compile(r"/apps/([0-9A-Z]{26})$")


def _signed_in_app(page: Page, browser: Browser, server: WebServer, who: str) -> tuple[str, str]:
    """A new owner signed in on their App's page: (account id, App id)."""
    page.goto(f"{server.url}/login")
    _sign_in(page, browser, server, f"{who}-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(APP_URL)
    match = APP_URL.search(page.url)
    assert match
    return _account_id(page), match.group(1)


def _thread(
    account_id: str, app_id: str, agent_id: str, text: str, finish: str | None, **error: str
) -> str:
    """A thread with one message; its run finished as `finish` (None: still active)."""
    with session_scope() as db:
        thread_id = sessions.create_session(db, account_id, app_id, agent_id).id
        sent = sessions.send_message(db, account_id, thread_id, text)
        run = db.get(SessionRun, sent.run.id)
        assert run is not None
        if finish == "completed":
            append_events(
                db,
                thread_id,
                [
                    NewEvent(
                        type="agent.message.completed",
                        payload={"text": f"Answer to: {text}", "message_id": "m1"},
                        run_id=run.id,
                    ),
                ],
            )
        if finish is not None:
            driver_plane.finish_run(
                db,
                run,
                finish,
                code=error.get("code"),
                message=error.get("message"),
                retryable=False,
                emit_event=True,
            )
    return thread_id


def _seed(account_id: str, app_id: str) -> dict[str, str]:
    with session_scope() as db:
        helper = Agent(app_id=app_id, name="Helper", model="m")
        other = Agent(app_id=app_id, name="Other", model="m")
        db.add(helper)
        db.add(other)
        db.flush()
        helper_id, other_id = helper.id, other.id
    ids = {
        "report": _thread(
            account_id, app_id, helper_id, "Summarise the quarterly report", "completed"
        ),
        "broken": _thread(
            account_id,
            app_id,
            helper_id,
            "Fetch the sales data",
            "failed",
            code="driver_lost",
            message="The sandbox stopped answering.",
        ),
        "busy": _thread(account_id, app_id, helper_id, "Crunch all the numbers", None),
        "other": _thread(account_id, app_id, other_id, "Hello from the other agent", "completed"),
        "other_agent": other_id,
    }
    with session_scope() as db:
        files.upload_file(
            db,
            account_id,
            app_id,
            helper_id,
            io.BytesIO(b"revenue,42\n"),
            "numbers.csv",
            session_id=ids["report"],
        )
    return ids


def test_owner_browses_sections_filters_a_thread_and_renames_archives_unarchives_and_deletes_it(
    page: Page, browser: Browser, shared_database: WebServer, tmp_path: Path
) -> None:
    server = shared_database
    account_id, app_id = _signed_in_app(page, browser, server, "threads")

    # An App without threads says what to do.
    page.get_by_test_id("nav-threads").click()
    page.wait_for_url(re.compile(r"/threads$"))
    expect(page.get_by_test_id("threads-empty")).to_contain_text("No threads yet")

    ids = _seed(account_id, app_id)
    page.reload()

    # Something is working: the page opens on Working, with counts on every section.
    rows = page.get_by_test_id("thread-row")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Crunch all the numbers")
    expect(page.get_by_test_id("section-working").first).to_contain_text("1")
    expect(page.get_by_test_id("section-completed").first).to_contain_text("3")
    expect(page.get_by_test_id("section-archived").first).to_contain_text("0")

    page.get_by_test_id("thread-sections").get_by_role(
        "radio", name=re.compile("Completed")
    ).click()
    expect(rows).to_have_count(3)
    expect(page.get_by_test_id("thread-row-error")).to_contain_text(
        "The sandbox stopped answering."
    )

    # Failed only, then one agent.
    page.get_by_test_id("thread-failed-filter").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Fetch the sales data")
    page.get_by_test_id("thread-failed-filter").click()
    choose(page, page.get_by_test_id("thread-agent-filter"), "Other", exact=True)
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Hello from the other agent")
    choose(page, page.get_by_test_id("thread-agent-filter"), "All agents")
    expect(rows).to_have_count(3)

    # The detail: title from the first message, agent, version, history and files.
    page.locator(f'[data-thread-id="{ids["report"]}"]').click()
    page.wait_for_url(re.compile(rf"/threads/{ids['report']}$"))
    expect(page.get_by_test_id("page-title")).to_have_text("Summarise the quarterly report")
    expect(page.get_by_test_id("thread-agent")).to_have_text("Helper")
    expect(page.get_by_test_id("thread-version")).to_have_text("Draft")
    expect(page.get_by_test_id("chat-user-message")).to_have_text("Summarise the quarterly report")
    expect(page.get_by_test_id("chat-assistant-message")).to_have_text(
        "Answer to: Summarise the quarterly report"
    )
    thread_file = page.get_by_test_id("thread-file")
    expect(thread_file).to_have_attribute("data-name", "numbers.csv")
    with page.expect_download() as download_info:
        thread_file.get_by_test_id("thread-file-download").click()
    assert download_info.value.suggested_filename == "numbers.csv"
    assert Path(download_info.value.path()).read_bytes() == b"revenue,42\n"

    # Attachments: a file over 64 MiB is refused with a clear reason and nothing uploaded; a
    # chip can be removed before sending (its upload goes too).
    big = tmp_path / "big.bin"
    with open(big, "wb") as handle:
        handle.truncate(64 * 1024 * 1024 + 1)
    # The widget refuses it, and still posts the pick's (empty) list of accepted files; Reflex
    # drops a pick made while an upload of the same widget is in flight, so wait that out.
    with page.expect_response(lambda response: "/_upload" in response.url):
        page.get_by_test_id("chat-attach-upload").locator("input[type=file]").set_input_files(
            str(big)
        )
    expect(page.get_by_test_id("attach-error")).to_have_text(
        "big.bin was not attached: files are at most 64 MiB each, 20 at a time."
    )
    expect(page.get_by_test_id("attachment-chip")).to_have_count(0)
    page.get_by_test_id("chat-attach-upload").locator("input[type=file]").set_input_files(
        files=[{"name": "draft.txt", "mimeType": "text/plain", "buffer": b"draft"}]
    )
    expect(page.get_by_test_id("attachment-chip")).to_have_attribute("data-name", "draft.txt")
    expect(page.get_by_test_id("attach-error")).to_have_count(0)
    page.get_by_test_id("attachment-remove").click()
    expect(page.get_by_test_id("attachment-chip")).to_have_count(0)
    with session_scope() as db:
        assert [f.name for f in files.list_thread_files(db, account_id, ids["report"])] == [
            "numbers.csv"
        ]

    # Rename: a blank title is refused next to the field; a good one sticks.
    page.get_by_test_id("thread-rename").click()
    page.get_by_test_id("thread-title-input").fill("   ")
    page.get_by_test_id("thread-title-save").click()
    expect(page.get_by_test_id("thread-title-error")).to_contain_text("Give the thread a title")
    page.get_by_test_id("thread-title-input").fill("Q3 report")
    page.get_by_test_id("thread-title-save").click()
    expect(page.get_by_test_id("page-title")).to_have_text("Q3 report")

    # Archive: it moves to Archived; unarchive brings it back.
    page.get_by_test_id("thread-archive").click()
    expect(page.get_by_test_id("thread-archived")).to_be_visible()
    expect(page.get_by_test_id("thread-archived-note")).to_contain_text(
        "Sending a message unarchives it"
    )
    page.get_by_test_id("thread-back").click()
    page.wait_for_url(re.compile(r"/threads$"))
    expect(page.get_by_test_id("section-archived").first).to_contain_text("1")
    page.get_by_test_id("thread-sections").get_by_role("radio", name=re.compile("Archived")).click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Q3 report")
    rows.first.click()
    page.wait_for_url(re.compile(rf"/threads/{ids['report']}$"))
    page.get_by_test_id("thread-unarchive").click()
    expect(page.get_by_test_id("thread-archive")).to_be_visible()
    expect(page.get_by_test_id("thread-archived")).to_have_count(0)
    with session_scope() as db:
        assert sessions.get_thread(db, account_id, ids["report"]).archived is False

    # A thread with an active run cannot be archived.
    page.goto(f"{server.url}/apps/{app_id}/threads/{ids['busy']}")
    expect(page.get_by_test_id("page-title")).to_have_text("Crunch all the numbers")
    expect(page.get_by_test_id("thread-archive")).to_be_disabled()

    # Delete, with confirmation: back to the list, gone from it and from the database.
    page.goto(f"{server.url}/apps/{app_id}/threads/{ids['report']}")
    expect(page.get_by_test_id("page-title")).to_have_text("Q3 report")
    page.get_by_test_id("thread-delete").click()
    page.get_by_test_id("thread-delete-confirm").click()
    page.wait_for_url(re.compile(r"/threads$"))
    expect(page.locator(f'[data-thread-id="{ids["report"]}"]')).to_have_count(0)
    with session_scope() as db:
        assert db.get(AgentSession, ids["report"]) is None

    # An open list follows the runs: the busy thread's run ends and it leaves Working by itself.
    page.get_by_test_id("thread-sections").get_by_role("radio", name=re.compile("Working")).click()
    expect(rows).to_have_count(1)
    with session_scope() as db:
        run = db.exec(select(SessionRun).where(SessionRun.session_id == ids["busy"])).one()
        driver_plane.finish_run(db, run, "completed", emit_event=True)
    expect(rows).to_have_count(0, timeout=10_000)
    expect(page.get_by_test_id("section-working").first).to_contain_text("0")
    expect(page.get_by_test_id("section-completed").first).to_contain_text("3")

    # A deleted (or someone else's) thread is not found.
    page.goto(f"{server.url}/apps/{app_id}/threads/{ids['report']}")
    expect(page.get_by_test_id("thread-not-found")).to_be_visible()
    stranger_email = f"stranger-{uuid.uuid4().hex[:8]}@example.com"
    with session_scope() as db:
        stranger = identity.sign_in_identity(
            db, provider="email", subject=stranger_email, email=stranger_email
        )
        stranger_app = identity.list_apps(db, stranger.id)[0].id
    page.goto(f"{server.url}/apps/{stranger_app}/threads/{ids['broken']}")
    expect(
        page.get_by_test_id("thread-not-found").or_(page.get_by_text("App not found"))
    ).to_be_visible()


def test_a_long_list_shows_a_page_at_a_time(
    page: Page, browser: Browser, shared_database: WebServer
) -> None:
    server = shared_database
    account_id, app_id = _signed_in_app(page, browser, server, "many-threads")
    with session_scope() as db:
        agent = Agent(app_id=app_id, name="Busy bee", model="m")
        db.add(agent)
        db.flush()
        for number in range(105):
            thread_id = sessions.create_session(db, account_id, app_id, agent.id).id
            sessions.rename_thread(db, account_id, thread_id, f"Thread number {number:03d}")

    page.goto(f"{server.url}/apps/{app_id}/threads")
    rows = page.get_by_test_id("thread-row")
    expect(rows).to_have_count(100)
    expect(page.get_by_test_id("section-completed").first).to_contain_text("105")
    more = page.get_by_test_id("threads-show-more")
    expect(more).to_have_text("Show more (5 more)")
    more.click()
    expect(rows).to_have_count(105)
    expect(more).to_have_count(0)
    # Newest first, each thread once across the pages.
    titles = rows.all_inner_texts()
    assert len({t.split("\n")[0] for t in titles}) == 105


def _timed_run(account_id: str, app_id: str, agent_id: str) -> tuple[str, str]:
    """A completed run with a tool call and its marks (as the worker and control write
    them), and a failed one: (completed run id, failed run id)."""
    with session_scope() as db:
        thread_id = sessions.create_session(db, account_id, app_id, agent_id).id
        sent = sessions.send_message(db, account_id, thread_id, "List the workspace")
        run = db.get(SessionRun, sent.run.id)
        assert run is not None
        append_events(
            db,
            thread_id,
            [
                NewEvent(type="run.started", payload={}, run_id=run.id),
                NewEvent(
                    type="tool.use.started",
                    payload={"tool_call_id": "t1", "name": "bash", "input": {"command": "ls"}},
                    run_id=run.id,
                ),
                NewEvent(
                    type="tool.use.completed",
                    payload={"tool_call_id": "t1", "output": "notes.txt\n", "is_error": False},
                    run_id=run.id,
                ),
                NewEvent(
                    type="agent.message.completed",
                    payload={"text": "There is one file: notes.txt.", "message_id": "m1"},
                    run_id=run.id,
                ),
            ],
        )
        start = run.created_at
        steps = [
            ("dispatch", 40, {}),
            ("sandbox", 300, {"created": True, "sandbox": "c0ffee", "image": "mosoo-sandbox:t"}),
            ("driver_start", 20, {}),
            ("input", 500, {}),
            ("first_token", 900, {}),
            ("last_event", 1200, {}),
            ("teardown", 240, {"sandbox": "removed"}),
        ]
        marks, at = {}, start
        for name, ms, detail in steps:
            at += timedelta(milliseconds=ms)
            marks[name] = (at, detail)
        driver_plane.record_marks(db, run.id, marks)
        for output in (200, 40):  # two model calls, as the gateway records them
            db.add(
                UsageEvent(
                    app_id=app_id,
                    agent_id=agent_id,
                    session_id=thread_id,
                    run_id=run.id,
                    provider="openai",
                    model="gpt-test",
                    input_tokens=1000,
                    output_tokens=output,
                    cost_usd_micros=2100,
                    unpriced=False,
                )
            )
        driver_plane.finish_run(db, run, "completed", emit_event=True)
        completed = run.id
    failed_thread = _thread(
        account_id,
        app_id,
        agent_id,
        "Fetch the sales data",
        "failed",
        code="driver_lost",
        message="The sandbox stopped answering.",
    )
    with session_scope() as db:
        failed = db.exec(select(SessionRun.id).where(SessionRun.session_id == failed_thread)).one()
    return completed, failed


def test_an_agents_logs_replay_a_run_beside_its_diagnostics_and_filter_by_status(
    page: Page, browser: Browser, shared_database: WebServer
) -> None:
    server = shared_database
    account_id, app_id = _signed_in_app(page, browser, server, "logs")
    with session_scope() as db:
        agent = Agent(app_id=app_id, name="Logger", model="m")
        db.add(agent)
        db.flush()
        agent_id = agent.id
    completed, _ = _timed_run(account_id, app_id, agent_id)
    with session_scope() as db:
        thread_of_completed = db.exec(
            select(SessionRun.session_id).where(SessionRun.id == completed)
        ).one()

    # From the Agent's page, its Logs: the newest run (the failure) is open.
    page.goto(f"{server.url}/apps/{app_id}/agents/{agent_id}")
    page.get_by_test_id("agent-logs-link").click()
    page.wait_for_url(re.compile(r"/logs$"))
    runs = page.get_by_test_id("log-run")
    expect(runs).to_have_count(2)
    expect(runs.first).to_contain_text("driver_lost")
    expect(page.get_by_test_id("diagnostics-error")).to_contain_text(
        "driver_lost: The sandbox stopped answering."
    )
    expect(page.get_by_test_id("diagnostics-events-before")).to_contain_text("run.failed")

    # The completed run: its turn replayed as the chat showed it, and every phase timed.
    runs.nth(1).click()
    replay = page.get_by_test_id("log-replay")
    expect(replay).to_contain_text("List the workspace")
    expect(replay).to_contain_text("There is one file: notes.txt.")
    expect(replay).to_contain_text("bash")
    labels = page.get_by_test_id("diagnostics-phase-label")
    expect(labels).to_have_text(
        ["Queued", "Sandbox create", "Driver start", "Input", "First token", "Answer", "Teardown"]
    )
    expect(page.get_by_test_id("diagnostics-phase-time")).to_have_text(
        ["40 ms", "300 ms", "20 ms", "500 ms", "900 ms", "1.20 s", "240 ms"]
    )
    expect(page.get_by_test_id("diagnostics-total")).to_have_text("3.20 s")
    expect(page.get_by_test_id("diagnostics")).to_contain_text("mosoo-sandbox:t")
    expect(page.get_by_test_id("diagnostics-error")).to_have_count(0)
    # Its tokens and cost, from the gateway's records, in the list and the diagnostics; and
    # on the thread itself.
    expect(runs.nth(1).get_by_test_id("log-run-usage")).to_have_text("· 2,240 tokens · $0.0042")
    expect(page.get_by_test_id("diagnostics")).to_contain_text("2,240 tokens · $0.0042")

    # Filtered to failures: only the failed run.
    choose(page, page.get_by_test_id("log-status-filter"), "Failed")
    expect(runs).to_have_count(1)
    expect(runs.first).to_contain_text("driver_lost")

    page.goto(f"{server.url}/apps/{app_id}/threads/{thread_of_completed}")
    expect(page.get_by_test_id("thread-cost")).to_have_text("Billed 2,240 tokens · $0.0042")

    # Another owner's Agent id is not found here either.
    page.goto(f"{server.url}/apps/{app_id}/agents/01J00000000000000000000000/logs")
    expect(page.get_by_test_id("agent-not-found")).to_be_visible()
