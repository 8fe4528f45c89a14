"""An owner builds an environment in the console: revisions on every save, secrets never shown
again, refusals next to their field, and a delete refused while an Agent is bound to it."""

from __future__ import annotations

import re
import uuid

import pytest
from playwright.sync_api import Browser, Locator, Page, expect
from sqlmodel import Session, create_engine

from mosoo_core.environments import MASK
from mosoo_core.tables.agents import Agent
from tests.browser.conftest import WebServer, received_frames
from tests.browser.test_console_journey import _sign_in

pytestmark = pytest.mark.browser

APP_URL = re.compile(r"/apps/([0-9A-Z]{26})$")
ENVIRONMENT_URL = re.compile(r"/apps/[0-9A-Z]{26}/environments/[0-9A-Z]{26}$")
AGENT_URL = re.compile(r"/agents/([0-9A-Z]{26})$")
SECRET = "tok-" + uuid.uuid4().hex + "Zq8v"
GONE = "01J0000000000000000000000Z"  # an environment id that does not exist


def _row(page: Page, name: str) -> Locator:
    exact = page.get_by_test_id("environment-name").filter(
        has_text=re.compile(f"^{re.escape(name)}$")
    )
    return page.get_by_test_id("environment-row").filter(has=exact)


def _bind_environment(web_server: WebServer, agent_id: str, environment_id: str) -> None:
    """What only the API or an older export could leave: an Agent bound to an environment
    that is not there (written straight to the web's database)."""
    engine = create_engine(web_server.database_url)
    try:
        with Session(engine) as db:
            agent = db.get(Agent, agent_id)
            assert agent is not None
            agent.environment_id = environment_id
            db.add(agent)
            db.commit()
    finally:
        engine.dispose()


def _add_variable(page: Page, name: str, value: str, secret: bool = False) -> None:
    rows = page.get_by_test_id("variable-row")
    count = rows.count()
    page.get_by_test_id("variable-add").click()
    expect(rows).to_have_count(count + 1)  # the new row is there before anything is typed
    row = rows.nth(count)
    row.get_by_test_id("variable-name").fill(name)
    if secret:
        row.get_by_test_id("variable-secret").click()
        expect(row.get_by_test_id("variable-value")).to_have_attribute("type", "password")
    row.get_by_test_id("variable-value").fill(value)


def test_owner_builds_an_environment_in_revisions_and_cannot_delete_it_while_bound(
    page: Page, browser: Browser, web_server: WebServer
) -> None:
    received = received_frames(page)
    page.goto(f"{web_server.url}/login")
    _sign_in(page, browser, web_server, f"envs-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(APP_URL)

    # The App starts with its default environment.
    page.get_by_test_id("nav-environments").click()
    page.wait_for_url(re.compile(r"/environments$"))
    expect(page.get_by_test_id("page-title")).to_have_text("Environments")
    default = _row(page, "Default")
    expect(page.get_by_test_id("environment-row")).to_have_count(1)
    expect(default.get_by_test_id("environment-default-badge")).to_be_visible()
    expect(default.get_by_test_id("environment-revision")).to_have_text("Revision 1")
    expect(default.get_by_test_id("environment-policy")).to_have_text("No network")
    expect(default.get_by_test_id("environment-delete")).to_have_count(0)

    # A new one: setup script, an exposed and a secret variable, limited to one host.
    page.get_by_test_id("new-environment").click()
    page.wait_for_url(re.compile(r"/environments/new$"))
    expect(page.get_by_test_id("packages-note")).to_contain_text("not available yet")
    page.get_by_test_id("environment-name-input").fill("Tools")
    page.get_by_test_id("environment-setup-script").fill("echo ready > /tmp/ready")
    _add_variable(page, "REGION", "eu-west-1")
    _add_variable(page, "API_TOKEN", SECRET, secret=True)
    expect(page.get_by_test_id("environment-allowed-hosts")).to_be_hidden()
    page.get_by_test_id("network-full").click()
    expect(page.get_by_test_id("network-full-warning")).to_contain_text("whole internet")
    page.get_by_test_id("network-limited").click()
    expect(page.get_by_test_id("network-full-warning")).to_have_count(0)
    page.get_by_test_id("environment-allowed-hosts").fill("api.example.com")
    page.get_by_test_id("environment-save").click()
    page.wait_for_url(ENVIRONMENT_URL)
    expect(page.get_by_text("Saved revision 1: Created.")).to_be_visible()
    expect(page.get_by_test_id("environment-revision")).to_have_text("Revision 1")

    # The secret comes back masked and empty, never its value.
    variables = page.get_by_test_id("variable-row")
    expect(variables).to_have_count(2)
    expect(variables.nth(0).get_by_test_id("variable-name")).to_have_value("REGION")
    expect(variables.nth(0).get_by_test_id("variable-value")).to_have_value("eu-west-1")
    secret_value = variables.nth(1).get_by_test_id("variable-value")
    expect(secret_value).to_have_value("")
    expect(secret_value).to_have_attribute("placeholder", MASK)
    expect(variables.nth(1).get_by_test_id("variable-secret-hint")).to_contain_text(
        "Leave empty to keep the stored value"
    )
    assert SECRET not in page.content()

    # Another host: revision 2, its summary in the toast and on top of the revisions.
    page.get_by_test_id("environment-allowed-hosts").fill("api.example.com\nuploads.example.com")
    page.get_by_test_id("environment-save").click()
    expect(page.get_by_text("Saved revision 2: allowed hosts changed")).to_be_visible()
    expect(page.get_by_test_id("environment-revision")).to_have_text("Revision 2")
    revisions = page.get_by_test_id("revision-row")
    expect(revisions).to_have_count(2)
    expect(revisions.first.get_by_test_id("revision-summary")).to_have_text("allowed hosts changed")
    expect(revisions.last.get_by_test_id("revision-summary")).to_have_text("Created.")

    # An IP address is refused under Allowed hosts; nothing typed elsewhere is lost.
    page.get_by_test_id("environment-setup-script").fill("echo changed")
    page.get_by_test_id("environment-allowed-hosts").fill("10.0.0.1")
    page.get_by_test_id("environment-save").click()
    expect(page.get_by_test_id("environment-allowed-hosts-error")).to_be_visible()
    expect(page.get_by_test_id("environment-setup-script")).to_have_value("echo changed")
    expect(variables).to_have_count(2)
    expect(variables.nth(0).get_by_test_id("variable-value")).to_have_value("eu-west-1")
    expect(page.get_by_test_id("environment-revision")).to_have_text("Revision 2")

    # Removing a row leaves what was typed in the others where it was.
    _add_variable(page, "EXTRA", "typed")
    variables.nth(0).get_by_test_id("variable-remove").click()
    expect(variables).to_have_count(2)
    expect(variables.nth(0).get_by_test_id("variable-name")).to_have_value("API_TOKEN")
    expect(variables.nth(0).get_by_test_id("variable-value")).to_have_value("")
    expect(variables.nth(1).get_by_test_id("variable-name")).to_have_value("EXTRA")
    expect(variables.nth(1).get_by_test_id("variable-value")).to_have_value("typed")

    # Packages are refused for now, under pip.
    page.get_by_test_id("environment-allowed-hosts").fill("api.example.com\nuploads.example.com")
    page.get_by_test_id("environment-pip").fill("requests==2.32.3")
    page.get_by_test_id("environment-save").click()
    expect(page.get_by_test_id("environment-pip-error")).to_contain_text("build step")
    expect(page.get_by_test_id("environment-allowed-hosts-error")).to_have_count(0)
    expect(page.get_by_test_id("environment-pip")).to_have_value("requests==2.32.3")
    expect(page.get_by_test_id("environment-revision")).to_have_text("Revision 2")

    # After a reload, still masked; the value was never sent back to the browser.
    page.reload()
    expect(page.get_by_test_id("environment-revision")).to_have_text("Revision 2")
    expect(page.get_by_test_id("environment-setup-script")).to_have_value("echo ready > /tmp/ready")
    expect(
        page.get_by_test_id("variable-row").nth(1).get_by_test_id("variable-value")
    ).to_have_value("")
    assert SECRET not in page.content()
    assert received, "the page talks to the server over its websocket"
    assert not any(SECRET in frame for frame in received)

    # An Agent bound to it in Preview, through the picker.
    page.get_by_test_id("nav-agents").click()
    page.get_by_test_id("new-agent").click()
    page.get_by_test_id("new-agent-name").fill("Helper")
    page.get_by_test_id("new-agent-submit").click()
    page.wait_for_url(AGENT_URL)
    agent_url = page.url
    expect(page.get_by_test_id("agent-name-input")).to_have_value("Helper")  # the form is loaded
    expect(page.get_by_test_id("agent-environment")).to_have_text("Default environment")
    page.get_by_test_id("agent-environment").click()
    page.get_by_role("option", name="Tools · Limited: 2 hosts").click()
    expect(page.get_by_test_id("save-indicator")).to_have_text("Saved")
    page.reload()
    expect(page.get_by_test_id("agent-environment")).to_have_text("Tools · Limited: 2 hosts")

    # Delete is refused, naming the Agent; the environment stays.
    page.get_by_test_id("nav-environments").click()
    page.wait_for_url(re.compile(r"/environments$"))
    tools = _row(page, "Tools")
    expect(tools.get_by_test_id("environment-policy")).to_have_text("Limited: 2 hosts")
    expect(tools.get_by_test_id("environment-revision")).to_have_text("Revision 2")
    tools.get_by_test_id("environment-delete").click()
    page.get_by_test_id("environment-delete-confirm").click()
    expect(tools.get_by_test_id("environment-delete-error")).to_contain_text("agent Helper")
    expect(page.get_by_test_id("environment-row")).to_have_count(2)

    # Rename; then fork, whose copy is the same content at revision 1, and delete the copy.
    tools.get_by_test_id("environment-rename").click()
    page.get_by_test_id("environment-rename-input").fill("Default")
    page.get_by_test_id("environment-rename-submit").click()
    expect(page.get_by_test_id("environment-rename-error")).to_contain_text("already exists")
    page.get_by_test_id("environment-rename-input").fill("Build tools")
    page.get_by_test_id("environment-rename-submit").click()
    tools = _row(page, "Build tools")
    expect(tools).to_have_count(1)
    expect(_row(page, "Tools")).to_have_count(0)

    tools.get_by_test_id("environment-fork").click()
    copy = _row(page, "Build tools (copy)")
    expect(copy).to_have_count(1)
    expect(copy.get_by_test_id("environment-revision")).to_have_text("Revision 1")
    expect(copy.get_by_test_id("environment-policy")).to_have_text("Limited: 2 hosts")
    copy.get_by_test_id("environment-delete").click()
    page.get_by_test_id("environment-delete-confirm").click()
    expect(copy).to_have_count(0)
    expect(page.get_by_test_id("environment-row")).to_have_count(2)

    # Open goes to its editor, under its new name.
    tools.get_by_test_id("environment-open").click()
    page.wait_for_url(ENVIRONMENT_URL)
    expect(page.get_by_test_id("page-title")).to_have_text("Build tools")
    expect(page.get_by_test_id("variable-row")).to_have_count(2)
    assert SECRET not in page.content()

    # Bound to an environment that is gone: the picker names it missing; back to the default.
    agent_match = AGENT_URL.search(agent_url)
    assert agent_match
    _bind_environment(web_server, agent_match.group(1), GONE)
    page.goto(agent_url)
    expect(page.get_by_test_id("agent-environment")).to_have_text(f"Missing: {GONE}")
    expect(page.get_by_test_id("readiness-blocker").filter(has_text="Environment")).to_have_count(1)
    page.get_by_test_id("agent-environment").click()
    page.get_by_role("option", name="Default environment").click()
    expect(page.get_by_test_id("agent-environment")).to_have_text("Default environment")
    expect(page.get_by_test_id("readiness-blocker").filter(has_text="Environment")).to_have_count(0)
