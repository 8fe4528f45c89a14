"""The Agents page actions in Chromium: fork, export a `.agent` package, import it back
(and refuse a broken one), delete with a confirmation that names what goes with it."""

from __future__ import annotations

import json
import re
import uuid
import zipfile
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from mosoo_core import sessions
from mosoo_core.db import session_scope
from tests.browser.conftest import WebServer
from tests.browser.test_console_journey import _sign_in
from tests.browser.test_preview_chat import _account_id

pytestmark = pytest.mark.browser

AGENT_URL = re.compile(r"/apps/([0-9A-Z]{26})/agents/([0-9A-Z]{26})")


def _open_menu_item(page: Page, card_index: int, item: str) -> None:
    # The previous menu must be fully closed first: while a Radix menu is open (or closing)
    # the page ignores pointer events, so a click on the next trigger would be lost.
    expect(page.get_by_role("menu")).to_have_count(0)
    expect(page.locator("body")).not_to_have_css("pointer-events", "none")
    page.get_by_test_id("agent-card").nth(card_index).get_by_test_id("agent-menu").click()
    page.get_by_test_id(item).click()


def test_fork_export_import_and_delete_an_agent(
    page: Page, browser: Browser, shared_database: WebServer, tmp_path: Path
) -> None:
    server = shared_database
    page.goto(f"{server.url}/login")
    _sign_in(page, browser, server, f"actions-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))

    # Create one.
    page.get_by_test_id("nav-agents").click()
    page.wait_for_url(re.compile(r"/agents$"))
    page.get_by_test_id("new-agent").click()
    page.get_by_test_id("new-agent-name").fill("Release notes writer")
    page.get_by_test_id("new-agent-submit").click()
    page.wait_for_url(AGENT_URL)
    page.get_by_test_id("nav-agents").click()
    page.wait_for_url(re.compile(r"/agents$"))
    cards = page.get_by_test_id("agent-card")
    expect(cards).to_have_count(1)

    # Fork: a second card, the copy.
    _open_menu_item(page, 0, "agent-fork")
    expect(cards).to_have_count(2)
    expect(cards.nth(1).get_by_test_id("agent-name")).to_have_text("Release notes writer (copy)")

    # Export: a zip named after the agent, with its manifest.
    with page.expect_download() as download_info:
        _open_menu_item(page, 0, "agent-export")
    download = download_info.value
    assert download.suggested_filename == "release-notes-writer.agent"
    package = tmp_path / download.suggested_filename
    download.save_as(package)
    with zipfile.ZipFile(package) as archive:
        manifest = json.loads(archive.read("manifest.json"))
    assert manifest["agent"]["name"] == "Release notes writer"

    # Import a broken package: a clear error, nothing created.
    broken = tmp_path / "broken.agent"
    broken.write_bytes(b"this is not a zip archive")
    page.get_by_test_id("import-agent").click()
    page.locator("input[type=file]").set_input_files(broken)
    expect(page.get_by_test_id("import-error")).to_contain_text("This package cannot be imported")
    expect(cards).to_have_count(2)

    # Import the exported one: a third card and the report, with a way into Preview.
    page.locator("input[type=file]").set_input_files(package)
    expect(page.get_by_test_id("import-report")).to_contain_text("Release notes writer")
    expect(page.get_by_test_id("import-open-preview")).to_have_attribute("href", AGENT_URL)
    expect(cards).to_have_count(3)
    page.keyboard.press("Escape")
    expect(page.get_by_test_id("import-report")).to_have_count(0)

    # Delete the fork, which has a thread: the confirmation says so, then the card is gone.
    page.get_by_test_id("agent-card").nth(1).get_by_test_id("agent-link").click()
    page.wait_for_url(AGENT_URL)
    match = AGENT_URL.search(page.url)
    assert match
    app_id, fork_id = match.groups()
    with session_scope() as db:
        sessions.create_session(db, _account_id(page), app_id, fork_id)
    page.get_by_test_id("nav-agents").click()
    page.wait_for_url(re.compile(r"/agents$"))
    expect(cards).to_have_count(3)
    _open_menu_item(page, 1, "agent-delete")
    expect(page.get_by_test_id("agent-delete-summary")).to_contain_text(
        "1 thread, files and sandboxes"
    )
    page.get_by_test_id("agent-delete-confirm").click()
    expect(cards).to_have_count(2)
    expect(page.get_by_text("Release notes writer (copy)")).to_have_count(0)
    page.reload()
    expect(cards).to_have_count(2)
