"""Access tokens and CLI sign-in in the console, in Chromium against a real web process."""

from __future__ import annotations

import re
import uuid

import httpx
import pytest
import sqlalchemy as sa
from playwright.sync_api import Browser, Page, expect
from sqlmodel import Session

from mosoo_core import identity
from mosoo_core.errors import Unauthenticated
from tests.browser.conftest import WebServer
from tests.browser.test_console_journey import _sign_in

pytestmark = pytest.mark.browser


def _authenticates(server: WebServer, secret: str) -> bool:
    engine = sa.create_engine(server.database_url)
    try:
        with Session(engine) as db:
            identity.authenticate_access_token(db, secret)
            db.commit()
        return True
    except Unauthenticated:
        return False
    finally:
        engine.dispose()


def test_token_is_shown_once_listed_and_revoked(
    page: Page, browser: Browser, web_server: WebServer
) -> None:
    page.goto(f"{web_server.url}/tokens")
    page.wait_for_url(re.compile(r"/login"))
    _sign_in(page, browser, web_server, f"tokens-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(re.compile(r"/tokens/?$"))
    expect(page.get_by_test_id("page-title")).to_have_text("Access tokens")
    expect(page.get_by_test_id("tokens-empty")).to_be_visible()

    # A blank label is refused with a clear message, and nothing is created.
    page.get_by_test_id("token-create").click()
    expect(page.get_by_test_id("field-error")).to_contain_text("label")
    expect(page.get_by_test_id("token-row")).to_have_count(0)

    page.get_by_test_id("token-label-input").fill("Support backend")
    page.get_by_test_id("token-create").click()
    secret_box = page.get_by_test_id("token-secret")
    expect(secret_box).to_have_text(re.compile(r"^mst_[A-Za-z0-9_-]{43}$"))
    secret = secret_box.inner_text()
    expect(page.get_by_test_id("token-created")).to_contain_text("only this once")
    row = page.get_by_test_id("token-row")
    expect(row).to_have_count(1)
    expect(row.get_by_test_id("token-label")).to_have_text("Support backend")
    expect(row.get_by_test_id("token-suffix")).to_have_text("…" + secret[-4:])
    expect(row.get_by_test_id("token-last-used")).to_have_text("never")
    assert _authenticates(web_server, secret)

    # After a reload the secret is gone for good; the token stays listed, with its last use.
    page.reload()
    expect(page.get_by_test_id("token-row")).to_have_count(1)
    expect(page.get_by_test_id("token-row").get_by_test_id("token-last-used")).to_have_text(
        "just now"
    )
    expect(page.get_by_test_id("token-secret")).to_have_count(0)
    assert secret not in page.content()

    page.get_by_test_id("token-revoke").click()
    page.get_by_test_id("token-revoke-confirm").click()
    expect(page.get_by_test_id("tokens-empty")).to_be_visible()
    assert not _authenticates(web_server, secret)


def test_cli_code_link_survives_sign_in_and_is_approved_once(
    page: Page, browser: Browser, web_server: WebServer
) -> None:
    started = httpx.post(
        f"{web_server.url}/api/auth/cli/start", json={"client_name": "mosoo CLI on test-box"}
    ).json()
    # The link the CLI prints: opening it signed out goes through sign-in and comes back.
    page.goto(started["verification_uri_complete"])
    page.wait_for_url(re.compile(r"/login/?\?next="))
    _sign_in(page, browser, web_server, f"cli-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(re.compile(r"/cli-auth/?\?code="))
    expect(page.get_by_test_id("cli-client-name")).to_have_text("mosoo CLI on test-box")
    expect(page.get_by_test_id("cli-user-code")).to_have_text(started["user_code"])

    page.get_by_test_id("cli-approve").click()
    expect(page.get_by_test_id("cli-approved")).to_be_visible()
    poll = httpx.post(
        f"{web_server.url}/api/auth/cli/token", json={"device_code": started["device_code"]}
    )
    assert poll.status_code == 200 and poll.json()["access_token"].startswith("mst_")

    # The same link again: the code is used up, and the page says so.
    page.goto(started["verification_uri_complete"])
    expect(page.get_by_test_id("cli-status")).to_contain_text("already been used")
    expect(page.get_by_test_id("cli-approve")).to_have_count(0)

    # Another request, typed in by hand and denied.
    other = httpx.post(f"{web_server.url}/api/auth/cli/start", json={}).json()
    page.goto(f"{web_server.url}/cli-auth")
    # Typed at once, before the page's load (which clears the previous visit's code) is done.
    page.get_by_test_id("cli-code-input").fill(other["user_code"].lower().replace("-", ""))
    page.get_by_test_id("cli-code-submit").click()
    expect(page.get_by_test_id("cli-user-code")).to_have_text(other["user_code"])
    page.get_by_test_id("cli-deny").click()
    expect(page.get_by_test_id("cli-denied")).to_be_visible()
    denied = httpx.post(
        f"{web_server.url}/api/auth/cli/token", json={"device_code": other["device_code"]}
    )
    assert denied.status_code == 400 and denied.json()["error"]["code"] == "access_denied"

    # A code nobody issued gets a clear message.
    page.goto(f"{web_server.url}/cli-auth?code=BBBB-BBBB")
    expect(page.get_by_test_id("field-error")).to_contain_text("No sign-in request has this code")
