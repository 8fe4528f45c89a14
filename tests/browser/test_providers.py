"""An owner adds provider keys in the console; afterwards the page only ever shows them masked."""

from __future__ import annotations

import re
import uuid

import pytest
from playwright.sync_api import Browser, Locator, Page, WebSocket, expect

from tests.browser.conftest import WebServer
from tests.browser.test_console_journey import _sign_in

pytestmark = pytest.mark.browser

KEY = "sk-or-v1-" + uuid.uuid4().hex + "Wq7z"
SECOND_KEY = "sk-proj-" + uuid.uuid4().hex + "Kp3m"


def _row_named(page: Page, name: str) -> Locator:
    exact = page.get_by_test_id("provider-name").filter(has_text=re.compile(f"^{re.escape(name)}$"))
    return page.get_by_test_id("provider-row").filter(has=exact)


def _choose_preset(page: Page, label: str) -> None:
    page.get_by_test_id("provider-preset").click()
    page.get_by_role("option", name=label, exact=True).click()


def test_owner_adds_a_key_sees_it_masked_and_the_full_key_never_comes_back(
    page: Page, browser: Browser, web_server: WebServer
) -> None:
    received: list[str] = []

    def watch(socket: WebSocket) -> None:
        socket.on("framereceived", lambda payload: received.append(payload if isinstance(payload, str) else payload.decode(errors="replace")))

    page.on("websocket", watch)
    page.goto(f"{web_server.url}/login")
    _sign_in(page, browser, web_server, f"providers-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
    app_url = page.url

    page.get_by_test_id("nav-providers").click()
    page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}/providers$"))
    expect(page.get_by_test_id("page-title")).to_have_text("Providers")
    expect(page.get_by_test_id("providers-empty")).to_be_visible()

    # A preset fills its base URL; a custom endpoint starts empty and needs one.
    expect(page.get_by_test_id("provider-base-url-input")).to_have_value("https://api.openai.com/v1")
    _choose_preset(page, "OpenAI-compatible")
    expect(page.get_by_test_id("provider-base-url-input")).to_have_value("")
    page.get_by_test_id("provider-name-input").fill("Local vLLM")
    page.get_by_test_id("provider-key-input").fill(KEY)
    page.get_by_test_id("provider-models-input").fill("qwen2.5-coder, llama3.1,")
    page.get_by_test_id("provider-add-submit").click()
    expect(page.get_by_test_id("provider-base-url-error")).to_contain_text("base URL")
    expect(page.get_by_test_id("providers-empty")).to_be_visible()

    page.get_by_test_id("provider-base-url-input").fill("ftp://10.0.0.5/v1")
    page.get_by_test_id("provider-add-submit").click()
    expect(page.get_by_test_id("provider-base-url-error")).to_contain_text("http://")

    page.get_by_test_id("provider-base-url-input").fill("http://10.0.0.5:8000/v1")
    page.get_by_test_id("provider-add-submit").click()

    row = page.get_by_test_id("provider-row")
    expect(row).to_have_count(1)
    expect(row.get_by_test_id("provider-name")).to_have_text("Local vLLM")
    expect(row.get_by_test_id("provider-masked-key")).to_have_text("••••" + KEY[-4:])
    expect(row.get_by_test_id("provider-base-url")).to_have_text("http://10.0.0.5:8000/v1")
    expect(row.get_by_test_id("provider-models")).to_have_text("qwen2.5-coder, llama3.1")
    expect(row.get_by_test_id("provider-default-badge")).to_be_visible()  # the first is the default
    # The form was cleared: the key is gone from the page, not only hidden.
    expect(page.get_by_test_id("provider-key-input")).to_have_value("")
    expect(page.get_by_test_id("provider-base-url-error")).to_have_count(0)
    assert KEY not in page.content()

    # A second provider, made the default from the form.
    _choose_preset(page, "OpenAI")
    page.get_by_test_id("provider-name-input").fill("OpenAI")
    page.get_by_test_id("provider-key-input").fill(SECOND_KEY)
    page.get_by_test_id("provider-models-input").fill("gpt-4o-mini")
    page.get_by_test_id("provider-default-checkbox").click()
    page.get_by_test_id("provider-add-submit").click()
    expect(page.get_by_test_id("provider-row")).to_have_count(2)
    first_row = page.get_by_test_id("provider-row").first
    expect(first_row.get_by_test_id("provider-name")).to_have_text("OpenAI")
    expect(first_row.get_by_test_id("provider-default-badge")).to_be_visible()
    expect(page.get_by_test_id("provider-default-badge")).to_have_count(1)

    # Reload: still masked, and neither full key is anywhere in the page.
    page.reload()
    expect(page.get_by_test_id("provider-row")).to_have_count(2)
    expect(page.get_by_test_id("provider-masked-key").filter(has_text=KEY[-4:])).to_have_text("••••" + KEY[-4:])
    html = page.content()
    for key in (KEY, SECOND_KEY):
        assert key not in html and key[:-4] not in html

    # Make the first one the default again, then delete the other with confirmation.
    _row_named(page, "Local vLLM").get_by_test_id("provider-make-default").click()
    expect(page.get_by_test_id("provider-row").first.get_by_test_id("provider-name")).to_have_text("Local vLLM")
    _row_named(page, "OpenAI").get_by_test_id("provider-delete").click()
    page.get_by_test_id("provider-delete-confirm").click()
    expect(page.get_by_test_id("provider-row")).to_have_count(1)
    expect(page.get_by_test_id("provider-row").get_by_test_id("provider-name")).to_have_text("Local vLLM")

    # The server never sent either key back to the browser, in any state update.
    assert received, "the page talks to the server over its websocket"
    for frame in received:
        assert KEY not in frame and SECOND_KEY not in frame

    # Another owner cannot open this App's providers.
    stranger = browser.new_context()
    try:
        other = stranger.new_page()
        other.goto(f"{web_server.url}/login")
        _sign_in(other, browser, web_server, f"stranger-{uuid.uuid4().hex[:8]}@example.com")
        other.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
        other.goto(f"{app_url}/providers")
        expect(other.get_by_test_id("app-not-found")).to_be_visible()
        assert "Local vLLM" not in other.content()
    finally:
        stranger.close()
