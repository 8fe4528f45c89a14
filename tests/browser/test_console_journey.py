"""The first-run journey of a new owner, in Chromium against a real web process."""

from __future__ import annotations

import re
import uuid

import pytest
from playwright.sync_api import Browser, Page, expect

from mosoo_core import mail
from mosoo_core.db import get_engine, session_scope
from tests.browser.actions import choose
from tests.browser.conftest import WebServer, connection_report, record_connection
from tests.support.processes import wait_for

pytestmark = pytest.mark.browser


def _code_from_dev_mailbox(browser: Browser, server: WebServer, email: str) -> str:
    context = browser.new_context()
    mailbox = context.new_page()
    record_connection(mailbox)
    try:
        mailbox.goto(f"{server.url}/dev/mailbox")
        message = mailbox.get_by_test_id("mail-message").filter(has_text=email).first
        try:
            expect(message).to_be_visible(timeout=30_000)
        except AssertionError as error:
            log = server.log.read_text(errors="replace")[-4000:] if server.log.exists() else ""
            raise AssertionError(
                f"{error}\n{connection_report(mailbox)}\n--- the console's log, last lines:\n{log}"
            ) from error
        match = re.search(r"\b(\d{6})\b", message.get_by_test_id("mail-subject").inner_text())
        assert match, "the dev mailbox shows the code"
        return match.group(1)
    finally:
        context.close()


def _code_from_outbox(server: WebServer, email: str) -> str:
    """The code just mailed to `email`, from the rows the dev mailbox page shows, without
    opening that page (a second browser context and a page load per sign-in)."""
    codes: list[str] = []

    def mailed() -> bool:
        with session_scope(get_engine(server.database_url)) as db:
            subjects = [m.subject for m in mail.list_dev_mailbox(db) if m.to_address == email]
        codes.extend(re.findall(r"\b(\d{6})\b", subjects[0]) if subjects else [])
        return bool(codes)

    wait_for(mailed, 30, f"a sign-in code mailed to {email}")
    return codes[0]


def _sign_in(
    page: Page,
    browser: Browser,
    server: WebServer,
    email: str,
    *,
    through_mailbox_page: bool = False,
) -> None:
    """Sign in on the login page `page` shows. The code is read from the outbox; with
    `through_mailbox_page`, from the dev mailbox page as an owner reads it (this module's
    journey), which the other journeys need not repeat."""
    # The button is enabled once the page is connected; typing before that can be lost.
    try:
        expect(page.get_by_test_id("login-send-code")).to_be_enabled(timeout=30_000)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{connection_report(page)}") from error
    page.get_by_test_id("login-email").fill(email)
    page.get_by_test_id("login-send-code").click()
    expect(page.get_by_test_id("login-notice")).to_contain_text(email)
    code = (
        _code_from_dev_mailbox(browser, server, email)
        if through_mailbox_page
        else _code_from_outbox(server, email)
    )
    page.get_by_test_id("login-code").fill(code)
    page.get_by_test_id("login-verify").click()


def test_new_owner_signs_in_renames_creates_switches_and_signs_out(
    page: Page, browser: Browser, web_server: WebServer
) -> None:
    email = f"owner-{uuid.uuid4().hex[:8]}@example.com"

    # A console URL without a session goes to /login.
    page.goto(f"{web_server.url}/")
    page.wait_for_url(re.compile(r"/login"))

    _sign_in(page, browser, web_server, email, through_mailbox_page=True)

    # The first sign-in lands in the default App.
    page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
    expect(page.get_by_test_id("page-title")).to_have_text("Default App")
    first_app_url = page.url
    cookie = next(c for c in page.context.cookies() if c["name"] == "mosoo_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"

    # Its home is the overview; the settings have their own page. Rename the App there.
    expect(page.get_by_test_id("checklist")).to_be_visible()
    page.get_by_test_id("nav-app-settings").click()
    page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}/settings$"))
    page.get_by_test_id("app-name-input").fill("Support Desk")
    page.get_by_test_id("app-name-submit").click()
    expect(page.get_by_test_id("page-title")).to_have_text("Support Desk")

    # A bad name gets a clear error next to the field and changes nothing.
    page.get_by_test_id("app-name-input").fill("   ")
    page.get_by_test_id("app-name-submit").click()
    expect(page.get_by_test_id("field-error")).to_contain_text("cannot be empty")
    expect(page.get_by_test_id("page-title")).to_have_text("Support Desk")

    # Create a second App; it opens on its home.
    page.get_by_test_id("all-apps-link").click()
    page.wait_for_url(re.compile(r"/apps$"))
    page.get_by_test_id("new-app-name").fill("Research")
    page.get_by_test_id("new-app-submit").click()
    page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
    expect(page.get_by_test_id("page-title")).to_have_text("Research")
    assert page.url != first_app_url

    # Switch back with the App switcher.
    choose(page, page.get_by_test_id("app-switcher"), "Support Desk")
    page.wait_for_url(first_app_url)
    expect(page.get_by_test_id("page-title")).to_have_text("Support Desk")

    # With two Apps, `/` shows the picker.
    page.goto(f"{web_server.url}/")
    page.wait_for_url(re.compile(r"/apps$"))
    expect(page.get_by_test_id("app-card")).to_have_count(2)

    # Another owner's (or a made-up) App id is not found.
    page.goto(f"{web_server.url}/apps/01J0000000000000000000000Z")
    expect(page.get_by_test_id("app-not-found")).to_be_visible()

    # Organization and profile can be renamed.
    page.goto(f"{web_server.url}/org")
    page.get_by_test_id("org-name-input").fill("Acme Robots")
    page.get_by_test_id("org-name-submit").click()
    expect(page.get_by_text("Organization renamed.")).to_be_visible()
    page.goto(f"{web_server.url}/profile")
    page.get_by_test_id("profile-name-input").fill("Grace Hopper")
    page.get_by_test_id("profile-name-submit").click()
    expect(page.get_by_text("Grace Hopper").first).to_be_visible()

    # Sign out; a console URL then redirects to /login.
    page.get_by_test_id("sign-out").click()
    page.wait_for_url(re.compile(r"/login"))
    page.goto(first_app_url)
    page.wait_for_url(re.compile(r"/login\?next="))
    expect(page.get_by_test_id("login-email")).to_be_visible()


def test_second_owner_cannot_open_the_first_owners_app(
    page: Page, browser: Browser, web_server: WebServer
) -> None:
    first = browser.new_context()
    first_page = first.new_page()
    first_page.goto(f"{web_server.url}/login")
    _sign_in(first_page, browser, web_server, f"a-{uuid.uuid4().hex[:8]}@example.com")
    first_page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
    app_url = first_page.url
    first.close()

    page.goto(f"{web_server.url}/login")
    _sign_in(page, browser, web_server, f"b-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
    page.goto(app_url)
    expect(page.get_by_test_id("app-not-found")).to_be_visible()
