"""An owner adds provider keys in the console; afterwards the page only ever shows them masked."""

from __future__ import annotations

import re
import uuid

import pytest
from playwright.sync_api import Browser, Locator, Page, expect
from sqlmodel import Session, create_engine, select

from mosoo_core.tables.agents import Agent
from mosoo_core.tables.vault import ProviderCredential
from tests.browser.actions import choose
from tests.browser.conftest import WebServer, received_frames
from tests.browser.test_console_journey import _sign_in
from tests.support.openai_server import ScriptedOpenAIServer

pytestmark = pytest.mark.browser

KEY = "sk-or-v1-" + uuid.uuid4().hex + "Wq7z"
SECOND_KEY = "sk-proj-" + uuid.uuid4().hex + "Kp3m"


def _row_named(page: Page, name: str) -> Locator:
    exact = page.get_by_test_id("provider-name").filter(has_text=re.compile(f"^{re.escape(name)}$"))
    return page.get_by_test_id("provider-row").filter(has=exact)


def _choose_preset(page: Page, label: str) -> None:
    choose(page, page.get_by_test_id("provider-preset"), label, exact=True)


def test_owner_adds_a_key_sees_it_masked_and_the_full_key_never_comes_back(
    page: Page, browser: Browser, web_server: WebServer
) -> None:
    received = received_frames(page)
    page.goto(f"{web_server.url}/login")
    _sign_in(page, browser, web_server, f"providers-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
    app_url = page.url

    page.get_by_test_id("nav-providers").click()
    page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}/providers$"))
    expect(page.get_by_test_id("page-title")).to_have_text("Providers")
    expect(page.get_by_test_id("providers-empty")).to_be_visible()

    # A preset fills its base URL; a custom endpoint starts empty and needs one.
    expect(page.get_by_test_id("provider-base-url-input")).to_have_value(
        "https://api.openai.com/v1"
    )
    expect(page.get_by_test_id("provider-route")).to_contain_text("OpenAI-compatible API")
    # The Anthropic preset is called through the gateway's Messages route.
    _choose_preset(page, "Anthropic")
    expect(page.get_by_test_id("provider-base-url-input")).to_have_value(
        "https://api.anthropic.com/v1"
    )
    expect(page.get_by_test_id("provider-route")).to_contain_text("Anthropic Messages API")
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
    expect(page.get_by_test_id("provider-masked-key").filter(has_text=KEY[-4:])).to_have_text(
        "••••" + KEY[-4:]
    )
    html = page.content()
    for key in (KEY, SECOND_KEY):
        assert key not in html and key[:-4] not in html

    # Make the first one the default again, then delete the other with confirmation.
    _row_named(page, "Local vLLM").get_by_test_id("provider-make-default").click()
    expect(page.get_by_test_id("provider-row").first.get_by_test_id("provider-name")).to_have_text(
        "Local vLLM"
    )
    _row_named(page, "OpenAI").get_by_test_id("provider-delete").click()
    page.get_by_test_id("provider-delete-confirm").click()
    expect(page.get_by_test_id("provider-row")).to_have_count(1)
    expect(page.get_by_test_id("provider-row").get_by_test_id("provider-name")).to_have_text(
        "Local vLLM"
    )

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


def _agent_using(web_server: WebServer, credential_name: str, agent_name: str) -> None:
    """An Agent of the credential's App that uses it, written straight to the web's database."""
    engine = create_engine(web_server.database_url)
    try:
        with Session(engine) as db:
            credential = db.exec(
                select(ProviderCredential).where(ProviderCredential.name == credential_name)
            ).one()
            db.add(
                Agent(
                    app_id=credential.app_id, name=agent_name, provider_credential_id=credential.id
                )
            )
            db.commit()
    finally:
        engine.dispose()


def test_owner_edits_a_provider_tests_its_connection_and_cannot_delete_it_while_in_use(
    page: Page, browser: Browser, web_server: WebServer
) -> None:
    good_key = "sk-good-" + uuid.uuid4().hex + "Gd9x"
    wrong_key = "sk-wrong-" + uuid.uuid4().hex + "Wr0n"
    name = f"Scripted {uuid.uuid4().hex[:6]}"
    with ScriptedOpenAIServer(
        models=["scripted-small", "scripted-large"], api_key=good_key
    ) as provider:
        page.goto(f"{web_server.url}/login")
        _sign_in(page, browser, web_server, f"edit-{uuid.uuid4().hex[:8]}@example.com")
        page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
        page.get_by_test_id("nav-providers").click()
        page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}/providers$"))

        # Saved with a key the provider does not accept: Test connection says so.
        _choose_preset(page, "OpenAI-compatible")
        page.get_by_test_id("provider-name-input").fill(name)
        page.get_by_test_id("provider-base-url-input").fill(provider.base_url)
        page.get_by_test_id("provider-key-input").fill(wrong_key)
        page.get_by_test_id("provider-add-submit").click()
        row = _row_named(page, name)
        expect(row).to_have_count(1)
        row.get_by_test_id("provider-test").click()
        expect(row.get_by_test_id("provider-test-result")).to_have_text(
            "The provider refused the key."
        )
        assert provider.requests[-1].headers["authorization"] == f"Bearer {wrong_key}"

        # Edit fills the same form, never with the key.
        row.get_by_test_id("provider-edit").click()
        expect(page.get_by_text(f"Edit {name}")).to_be_visible()
        expect(page.get_by_test_id("provider-name-input")).to_have_value(name)
        expect(page.get_by_test_id("provider-base-url-input")).to_have_value(provider.base_url)
        expect(page.get_by_test_id("provider-key-input")).to_have_value("")
        expect(page.get_by_test_id("provider-add-submit")).to_have_count(0)
        # A new host with a blank key is refused next to the key field.
        page.get_by_test_id("provider-base-url-input").fill("http://127.0.0.2:9/v1")
        page.get_by_test_id("provider-save").click()
        expect(page.get_by_test_id("provider-key-error")).to_contain_text("Enter the key again")
        page.get_by_test_id("provider-base-url-input").fill(provider.base_url)
        page.get_by_test_id("provider-name-input").fill(name + " v2")
        page.get_by_test_id("provider-key-input").fill(good_key)
        page.get_by_test_id("provider-save").click()
        name += " v2"
        row = _row_named(page, name)
        expect(row).to_have_count(1)
        expect(row.get_by_test_id("provider-masked-key")).to_have_text("••••" + good_key[-4:])
        expect(
            page.get_by_test_id("provider-add-submit")
        ).to_be_visible()  # back to an empty add form
        expect(page.get_by_test_id("provider-key-input")).to_have_value("")

        # Now the provider accepts the key and lists its models; they are shown, not saved.
        row.get_by_test_id("provider-test").click()
        expect(row.get_by_test_id("provider-test-result")).to_contain_text(
            "the provider lists 2 model(s)"
        )
        expect(row.get_by_test_id("provider-test-models")).to_have_text(
            "Offered: scripted-small, scripted-large"
        )
        expect(row.get_by_test_id("provider-models")).to_have_text("none listed")
        assert provider.requests[-1].headers["authorization"] == f"Bearer {good_key}"

        # Editing again with a blank key keeps the saved key.
        row.get_by_test_id("provider-edit").click()
        expect(page.get_by_test_id("provider-name-input")).to_have_value(name)
        page.get_by_test_id("provider-models-input").fill("scripted-large, scripted-small")
        page.get_by_test_id("provider-save").click()
        expect(row.get_by_test_id("provider-models")).to_have_text("scripted-large, scripted-small")
        expect(row.get_by_test_id("provider-masked-key")).to_have_text("••••" + good_key[-4:])
        row.get_by_test_id("provider-test").click()
        expect(row.get_by_test_id("provider-test-result")).to_contain_text("Connected in")

        # An Agent uses it: delete is refused, naming the Agent, and the row stays.
        _agent_using(web_server, name, "Helpdesk")
        row.get_by_test_id("provider-delete").click()
        page.get_by_test_id("provider-delete-confirm").click()
        expect(row.get_by_test_id("provider-delete-error")).to_have_text(
            "Used by agent(s): Helpdesk. Choose another key for them first."
        )
        page.reload()
        expect(_row_named(page, name)).to_have_count(1)
        for key in (good_key, wrong_key):
            assert key not in page.content()
