"""An owner builds an environment in the console: revisions on every save, secrets never shown
again, refusals next to their field, and a delete refused while an Agent is bound to it; the
build of its packages followed live, Rebuild, and a run that waits for the build in chat."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from playwright.sync_api import Browser, Locator, Page, expect
from sqlmodel import Session, create_engine, select

from mosoo_core import sessions
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.environments import MASK
from mosoo_core.sessions.driver_plane import NewEvent, append_events
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.environments import Environment, EnvironmentBuild, EnvironmentRevision
from tests.browser.actions import choose
from tests.browser.conftest import WebServer, received_frames
from tests.browser.test_console_journey import _sign_in
from tests.browser.test_preview_chat import _account_id

pytestmark = pytest.mark.browser

APP_URL = re.compile(r"/apps/([0-9A-Z]{26})$")
ENVIRONMENT_URL = re.compile(r"/apps/[0-9A-Z]{26}/environments/([0-9A-Z]{26})$")
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
    expect(page.get_by_test_id("packages-note")).to_have_count(0)  # packages are offered
    expect(page.get_by_test_id("pip-hint")).to_contain_text("Built once per revision")
    expect(page.get_by_test_id("environment-build")).to_have_count(0)  # nothing to build yet
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

    # A malformed package is refused under pip (an exact version is needed).
    page.get_by_test_id("environment-allowed-hosts").fill("api.example.com\nuploads.example.com")
    page.get_by_test_id("environment-pip").fill("requests")
    page.get_by_test_id("environment-save").click()
    expect(page.get_by_test_id("environment-pip-error")).to_contain_text("name==version")
    expect(page.get_by_test_id("environment-allowed-hosts-error")).to_have_count(0)
    expect(page.get_by_test_id("environment-pip")).to_have_value("requests")
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
    choose(page, page.get_by_test_id("agent-environment"), "Tools · Limited: 2 hosts")
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
    choose(page, page.get_by_test_id("agent-environment"), "Default environment")
    expect(page.get_by_test_id("agent-environment")).to_have_text("Default environment")
    expect(page.get_by_test_id("readiness-blocker").filter(has_text="Environment")).to_have_count(0)


def _move_build(environment_id: str, **values: Any) -> None:
    """What a worker building the packages would write (none runs in this stack): the
    environment's current build row, changed straight in the web's database."""
    with session_scope() as db:
        environment = db.get(Environment, environment_id)
        assert environment is not None
        revision = db.exec(
            select(EnvironmentRevision).where(
                EnvironmentRevision.environment_id == environment_id,
                EnvironmentRevision.number == environment.current_revision,
            )
        ).one()
        build = db.exec(
            select(EnvironmentBuild).where(EnvironmentBuild.packages_hash == revision.packages_hash)
        ).one()
        for name, value in values.items():
            setattr(build, name, value)
        db.add(build)


def _environment_id(page: Page) -> str:
    match = ENVIRONMENT_URL.search(page.url)
    assert match
    return match.group(1)


def test_owner_follows_the_package_build_live_and_rebuilds_it(
    page: Page, browser: Browser, shared_database: WebServer
) -> None:
    page.goto(f"{shared_database.url}/login")
    _sign_in(page, browser, shared_database, f"builds-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(APP_URL)
    page.get_by_test_id("nav-environments").click()
    page.wait_for_url(re.compile(r"/environments$"))

    # One pip package: saving queues its build (no worker takes it here).
    page.get_by_test_id("new-environment").click()
    page.wait_for_url(re.compile(r"/environments/new$"))
    page.get_by_test_id("environment-name-input").fill("Plots")
    page.get_by_test_id("environment-pip").fill("rich==13.9.4")
    page.get_by_test_id("environment-save").click()
    page.wait_for_url(ENVIRONMENT_URL)
    environment_id = _environment_id(page)
    expect(page.get_by_text("Saved revision 1: Created.")).to_be_visible()
    status = page.get_by_test_id("build-status")
    build_log = page.get_by_test_id("build-log")
    rebuild = page.get_by_test_id("build-rebuild")
    expect(status).to_have_text("Queued")
    expect(build_log).to_contain_text("Waiting for the build to start")
    expect(rebuild).to_be_disabled()

    # The worker takes it and writes its log: the page follows without a reload.
    _move_build(
        environment_id,
        status="building",
        started_at=utcnow(),
        attempts=1,
        log="Collecting rich==13.9.4\n",
    )
    expect(status).to_have_text("Building")
    expect(build_log).to_contain_text("Collecting rich==13.9.4")
    expect(rebuild).to_be_disabled()
    _move_build(
        environment_id,
        log="Collecting rich==13.9.4\nDownloading rich-13.9.4-py3-none-any.whl\n",
    )
    expect(build_log).to_contain_text("Downloading rich-13.9.4-py3-none-any.whl")
    _move_build(
        environment_id,
        status="ready",
        finished_at=utcnow(),
        log="Collecting rich==13.9.4\nSuccessfully installed rich-13.9.4\n",
    )
    expect(status).to_have_text("Ready")
    expect(build_log).to_contain_text("Successfully installed rich-13.9.4")
    expect(page.get_by_test_id("build-finished")).to_have_text("Finished just now")
    expect(rebuild).to_be_enabled()
    expect(page.get_by_test_id("build-error")).to_have_count(0)

    # Rebuild queues it again, and a failed build shows why.
    rebuild.click()
    expect(page.get_by_text("Rebuild queued.")).to_be_visible()
    expect(status).to_have_text("Queued")
    expect(rebuild).to_be_disabled()
    expect(page.get_by_test_id("build-finished")).to_have_count(0)
    _move_build(environment_id, status="building", started_at=utcnow(), log="")
    expect(status).to_have_text("Building")
    _move_build(
        environment_id,
        status="failed",
        finished_at=utcnow(),
        error="Installing the pip packages failed.",
        log="ERROR: No matching distribution found for rich==13.9.4\n",
    )
    expect(status).to_have_text("Failed")
    expect(page.get_by_test_id("build-error")).to_have_text("Installing the pip packages failed.")
    expect(build_log).to_contain_text("No matching distribution found")
    expect(rebuild).to_be_enabled()

    # Settled, the page stops reading it; a build started elsewhere meanwhile refuses the
    # Rebuild with the reason.
    _move_build(environment_id, status="building", error="", started_at=utcnow(), log="")
    rebuild.click()
    expect(page.get_by_test_id("build-rebuild-error")).to_contain_text("in progress")

    # The list shows the build next to the packages; the editor follows it again once opened.
    page.get_by_test_id("environments-back").click()
    page.wait_for_url(re.compile(r"/environments$"))
    plots = _row(page, "Plots")
    expect(plots.get_by_test_id("environment-packages")).to_have_text("1 package · Building")
    expect(_row(page, "Default").get_by_test_id("environment-packages")).to_have_text("No packages")
    plots.get_by_test_id("environment-open").click()
    page.wait_for_url(ENVIRONMENT_URL)
    expect(status).to_have_text("Building")
    _move_build(environment_id, status="ready", finished_at=utcnow(), log="Done.\n")
    expect(status).to_have_text("Ready")
    expect(build_log).to_contain_text("Done.")

    # Without packages, there is no build to show.
    page.get_by_test_id("environment-pip").fill("")
    page.get_by_test_id("environment-save").click()
    expect(page.get_by_text("Saved revision 2: pip -rich==13.9.4")).to_be_visible()
    expect(page.get_by_test_id("environment-build")).to_have_count(0)


def test_a_run_waiting_for_its_environment_shows_preparing_in_the_chat(
    page: Page, browser: Browser, shared_database: WebServer
) -> None:
    page.goto(f"{shared_database.url}/login")
    _sign_in(page, browser, shared_database, f"prepare-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(APP_URL)
    app_match = APP_URL.search(page.url)
    assert app_match
    app_id = app_match.group(1)
    account_id = _account_id(page)
    with session_scope() as db:
        agent = Agent(app_id=app_id, name="Plotter", model="m")
        db.add(agent)
        db.flush()
        thread_id = sessions.create_session(db, account_id, app_id, agent.id).id
        run_id = sessions.send_message(db, account_id, thread_id, "Plot the sales").run.id

    def worker_says(event_type: str, **payload: str) -> None:
        with session_scope() as db:
            append_events(
                db, thread_id, [NewEvent(type=event_type, payload=payload, run_id=run_id)]
            )

    worker_says("run.preparing", stage="environment", status="queued")
    page.goto(f"{shared_database.url}/apps/{app_id}/threads/{thread_id}")
    preparing = page.get_by_test_id("chat-preparing")
    expect(preparing).to_have_text("Preparing environment…")
    expect(page.get_by_test_id("chat-working")).to_have_count(0)

    worker_says("run.preparing", stage="environment", status="building")
    expect(preparing).to_have_text("Preparing environment… (building packages)")

    worker_says("run.started")
    expect(preparing).to_have_count(0)
    expect(page.get_by_test_id("chat-working")).to_be_visible()
