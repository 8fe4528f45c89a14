"""Signing out ends every open tab of that browser, in Chromium against a real web process.

One browser, three tabs signed in as one owner: tab 2 has the Agents page's create dialog
open and filled, tab 3 the Access tokens form filled. Nothing a signed-out tab submits may
reach the database, and the open tabs leave for /login on their own (pushed through Redis).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import sqlalchemy as sa
from playwright.sync_api import Browser, BrowserContext, Page, expect
from sqlmodel import Session, func, select

from mosoo_core import identity
from mosoo_core.clock import utcnow
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.identity import AccessToken, App, AuthSession, Organization
from tests.browser.conftest import TAB_SWEEP_SECONDS, WebServer
from tests.browser.test_console_journey import _sign_in

pytestmark = pytest.mark.browser

LOGIN_URL = re.compile(r"/login/?(\?|$)")
# "Within a few seconds": the push takes milliseconds; the margin is for a loaded machine.
# Below one sweep period: the sweep leaves a revocation younger than that to its push.
PUSH_TIMEOUT_MS = 10_000
assert PUSH_TIMEOUT_MS < TAB_SWEEP_SECONDS * 1000
# The console's web process sweeps every TAB_SWEEP_SECONDS (MOSOO_TAB_SWEEP_SECONDS).
SWEEP_TIMEOUT_MS = 2 * TAB_SWEEP_SECONDS * 1000


@dataclass
class SignedInTabs:
    context: BrowserContext
    console: Page  # tab 1: where the owner signs out
    agents: Page  # tab 2: the create dialog open and filled
    tokens: Page  # tab 3: the create form filled
    account_id: str
    session_token: str


@pytest.fixture
def database(web_server: WebServer) -> Iterator[sa.Engine]:
    """The web process's database, read directly."""
    engine = sa.create_engine(web_server.database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def tabs(browser: Browser, web_server: WebServer, database: sa.Engine) -> Iterator[SignedInTabs]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(30_000)
    console = context.new_page()
    console.goto(f"{web_server.url}/login")
    _sign_in(console, browser, web_server, f"tabs-{uuid.uuid4().hex[:8]}@example.com")
    console.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
    app_url = console.url
    token = next(c["value"] for c in context.cookies() if c["name"] == "mosoo_session")
    with Session(database) as db:
        account_id = identity.resolve_session(db, token)
    assert account_id

    agents = context.new_page()
    agents.goto(f"{app_url}/agents")
    expect(agents.get_by_test_id("page-title")).to_have_text("Agents")
    agents.get_by_test_id("new-agent").click()
    agents.get_by_test_id("new-agent-name").fill("Made after sign-out")
    expect(agents.get_by_test_id("new-agent-submit")).to_be_visible()

    tokens = context.new_page()
    tokens.goto(f"{web_server.url}/tokens")
    expect(tokens.get_by_test_id("page-title")).to_have_text("Access tokens")
    tokens.get_by_test_id("token-label-input").fill("Made after sign-out")
    expect(tokens.get_by_test_id("token-create")).to_be_visible()

    try:
        yield SignedInTabs(context, console, agents, tokens, account_id, token)
    finally:
        context.close()


def _owner_rows(database: sa.Engine, account_id: str) -> tuple[int, int]:
    """How many Agents and access tokens the owner has."""
    with Session(database) as db:
        agents = db.exec(
            select(func.count())
            .select_from(Agent)
            .join(App, App.id == Agent.app_id)
            .join(Organization, Organization.id == App.organization_id)
            .where(Organization.owner_account_id == account_id)
        ).one()
        tokens = db.exec(
            select(func.count())
            .select_from(AccessToken)
            .where(AccessToken.account_id == account_id)
        ).one()
    return int(agents), int(tokens)


def test_signing_out_sends_the_other_open_tabs_to_login_by_themselves(
    tabs: SignedInTabs, database: sa.Engine
) -> None:
    assert _owner_rows(database, tabs.account_id) == (0, 0)

    tabs.console.get_by_test_id("sign-out").click()
    tabs.console.wait_for_url(LOGIN_URL)

    # No click, no reload: the web process pushes both tabs to /login.
    tabs.agents.wait_for_url(LOGIN_URL, timeout=PUSH_TIMEOUT_MS)
    tabs.tokens.wait_for_url(LOGIN_URL, timeout=PUSH_TIMEOUT_MS)
    for tab in (tabs.agents, tabs.tokens):
        expect(tab.get_by_test_id("login-email")).to_be_visible()
        expect(tab.get_by_test_id("sign-out")).to_have_count(0)
    assert _owner_rows(database, tabs.account_id) == (0, 0)


def test_tabs_of_a_revoked_session_cannot_create_agents_or_tokens(
    tabs: SignedInTabs, database: sa.Engine
) -> None:
    """Every action re-checks the session, so a tab the push never reached (Redis down at
    sign-out, say) cannot act either. The session is revoked in the database here, which is
    what such a sign-out amounts to: nothing announces it."""
    with Session(database) as db:
        assert identity.revoke_session(db, tabs.session_token)
        db.commit()

    tabs.agents.get_by_test_id("new-agent-submit").click()
    tabs.tokens.get_by_test_id("token-create").click()

    # Each tab shows the outcome of its submit: sent to /login, or (the defect) the new
    # Agent's Preview and the new token's secret.
    tabs.agents.wait_for_url(re.compile(r"/login/?(\?|$)|/agents/[0-9A-Z]{26}"))
    expect(
        tabs.tokens.get_by_test_id("login-email").or_(tabs.tokens.get_by_test_id("token-secret"))
    ).to_be_visible()
    assert _owner_rows(database, tabs.account_id) == (0, 0), (
        "a signed-out tab created an Agent or a token"
    )
    for tab in (tabs.agents, tabs.tokens):
        tab.wait_for_url(LOGIN_URL)
        expect(tab.get_by_test_id("login-email")).to_be_visible()
    expect(tabs.tokens.get_by_test_id("token-secret")).to_have_count(0)


def test_open_tabs_of_an_expired_session_go_to_login_at_the_next_sweep(
    tabs: SignedInTabs, database: sa.Engine
) -> None:
    """Nothing announces an expiry: the web process's periodic sweep finds it."""
    with Session(database) as db:
        row = db.exec(select(AuthSession).where(AuthSession.account_id == tabs.account_id)).one()
        row.expires_at = utcnow()
        db.add(row)
        db.commit()

    for tab in (tabs.console, tabs.agents, tabs.tokens):
        tab.wait_for_url(LOGIN_URL, timeout=SWEEP_TIMEOUT_MS)
        expect(tab.get_by_test_id("login-email")).to_be_visible()
    assert _owner_rows(database, tabs.account_id) == (0, 0)
