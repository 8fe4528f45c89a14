"""Preview with an Assistant (Pet) sandbox running: a change the sandbox was not built with shows
as pending with Apply (and stops being pending when changed back); Apply recreates the sandbox.
And the form hides what the runtime cannot do."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator

import docker
import pytest
from playwright.sync_api import Browser, Page, expect

from mosoo_core import agents, environments, vault
from mosoo_core.db import session_scope
from mosoo_core.runtime import runs
from mosoo_core.runtime.sandbox import LABEL_SUBJECT, WORKSPACE, SandboxSpec
from mosoo_core.runtime.sandbox.docker_backend import DockerBackend
from mosoo_core.runtime.sandbox.image import ensure_sandbox_image
from mosoo_core.sessions import driver_plane
from tests.browser.actions import choose
from tests.browser.conftest import WebServer
from tests.browser.test_console_journey import _sign_in
from tests.browser.test_preview_chat import _account_id

pytestmark = pytest.mark.browser

APP_URL = re.compile(r"/apps/([0-9A-Z]{26})$")


@pytest.fixture(scope="module")
def docker_backend() -> Iterator[DockerBackend]:
    client = docker.from_env(timeout=600)
    image = ensure_sandbox_image(client, base_image=os.environ.get("MOSOO_SANDBOX_BASE_IMAGE", ""))
    yield DockerBackend(client, image=image)
    client.close()


def _signed_in(page: Page, browser: Browser, server: WebServer, prefix: str) -> tuple[str, str]:
    page.goto(f"{server.url}/login")
    _sign_in(page, browser, server, f"{prefix}-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(APP_URL)
    match = APP_URL.search(page.url)
    assert match
    return _account_id(page), match.group(1)


def _ready_agent(account_id: str, app_id: str, **fields: str) -> str:
    with session_scope() as db:
        agent = agents.create_agent(db, account_id, app_id, name="Keeper", kind="pet")
        credential = vault.create_provider_credential(
            db,
            account_id,
            app_id,
            vault.ProviderCredentialInput(
                name="P",
                provider="openai_compatible",
                base_url="http://10.0.0.5:8000/v1",
                api_key="sk-test-0123456789abcdef0123456789",
                models=["m"],
            ),
        )
        agents.update_agent(
            db,
            account_id,
            app_id,
            agent.id,
            agents.AgentChanges(provider_credential_id=credential.id, model="m", **fields),
        )
        return agent.id


def test_a_kind_change_is_pending_until_apply_recreates_the_assistant_sandbox(
    page: Page, browser: Browser, shared_database: WebServer, docker_backend: DockerBackend
) -> None:
    server = shared_database
    account_id, app_id = _signed_in(page, browser, server, "pet")
    agent_id = _ready_agent(account_id, app_id)
    # The Agent's sandbox, as a run made it: labelled with what it was built from.
    with session_scope() as db:
        driver_plane.register_driver(
            db, app_id=app_id, subject=f"agent:{agent_id}", runtime="openai"
        )
        agent = agents.get_agent(db, account_id, app_id, agent_id)
        revision_id = environments.revision_for_thread(db, app_id, agent.environment_id).id
        built_from = agents.sandbox_fingerprint(agent, revision_id)
    labels = {**runs.installation_label(), runs.LABEL_BUILT_FROM: built_from, "mosoo.test": "1"}
    sandbox = docker_backend.create(
        SandboxSpec(subject=f"agent:{agent_id}", app_id=app_id, labels=labels)
    )
    selector = {LABEL_SUBJECT: f"agent:{agent_id}", **runs.installation_label()}
    try:
        docker_backend.put_file(sandbox, f"{WORKSPACE}/notes.md", b"keep me\n", mode=0o644)
        page.goto(f"{server.url}/apps/{app_id}/agents/{agent_id}")
        expect(page.get_by_test_id("preview-status")).to_have_text("Ready")
        expect(page.get_by_test_id("pending-changes")).to_have_count(0)

        # A model change needs no Apply.
        page.get_by_test_id("agent-model").fill("m2")
        page.get_by_test_id("agent-model").blur()
        expect(page.get_by_test_id("save-indicator")).to_have_text("Saved")
        expect(page.get_by_test_id("pending-changes")).to_have_count(0)

        # The kind does: pending while it differs from what the sandbox was built with.
        page.get_by_test_id("agent-kind").get_by_role("radio", name="Task").click()
        expect(page.get_by_test_id("pending-fields")).to_have_text("Pending: Kind")
        page.get_by_test_id("agent-kind").get_by_role("radio", name="Assistant").click()
        expect(page.get_by_test_id("pending-changes")).to_have_count(0)
        page.get_by_test_id("agent-kind").get_by_role("radio", name="Task").click()
        expect(page.get_by_test_id("pending-fields")).to_have_text("Pending: Kind")
        page.reload()
        expect(page.get_by_test_id("pending-fields")).to_have_text("Pending: Kind")

        page.get_by_test_id("agent-apply").click()
        expect(page.get_by_test_id("pending-changes")).to_have_count(0)
        assert docker_backend.list_by_label(selector) == []
    finally:
        for ref in docker_backend.list_by_label(selector):
            docker_backend.remove(ref)


def test_the_form_hides_what_the_runtime_cannot_do(
    page: Page, browser: Browser, shared_database: WebServer
) -> None:
    server = shared_database
    account_id, app_id = _signed_in(page, browser, server, "caps")
    agent_id = _ready_agent(account_id, app_id)
    page.goto(f"{server.url}/apps/{app_id}/agents/{agent_id}")
    expect(page.get_by_test_id("agent-reasoning-effort")).to_be_visible()
    expect(page.get_by_test_id("tool-bash").get_by_role("radio", name="Ask")).to_be_visible()

    # Every runtime streams thinking now; what one cannot take shows as a blocker on its
    # field instead: Claude Code with this OpenAI-compatible key. The ACP runtime takes it.
    with session_scope() as db:
        agents.update_agent(db, account_id, app_id, agent_id, agents.AgentChanges(runtime="claude"))
    page.reload()
    expect(page.get_by_test_id("preview-status")).to_have_text("Setup required")
    expect(page.get_by_test_id("readiness-blocker")).to_contain_text("Provider key")
    page.get_by_test_id("readiness-fix").click()
    expect(page.get_by_test_id("agent-provider")).to_be_focused()
    choose(page, page.get_by_test_id("agent-runtime"), "ACP agent (OpenCode)")
    expect(page.get_by_test_id("preview-status")).to_have_text("Ready")
    expect(page.get_by_test_id("agent-reasoning-effort")).to_be_visible()
