"""Preview with an Assistant (Pet) sandbox running: a change the sandbox was not built with shows
as pending with Apply (and stops being pending when changed back); Apply recreates the sandbox.
The Sandbox panel hibernates, wakes and resets it, and the Logs tab lists what was done.
And the form hides what the runtime cannot do."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from playwright.sync_api import Browser, Page, expect

from mosoo_core import agents, environments, vault
from mosoo_core.db import session_scope
from mosoo_core.runtime import runs
from mosoo_core.runtime.sandbox import LABEL_SUBJECT, WORKSPACE, SandboxRef, SandboxSpec
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


def _agent_sandbox(
    backend: DockerBackend, account_id: str, app_id: str, agent_id: str
) -> tuple[SandboxRef, dict[str, str]]:
    """The Agent's sandbox, as a run made it: labelled with what it was built from; with the
    label selector that finds it in Docker."""
    with session_scope() as db:
        driver_plane.register_driver(
            db, app_id=app_id, subject=f"agent:{agent_id}", runtime="openai"
        )
        agent = agents.get_agent(db, account_id, app_id, agent_id)
        revision_id = environments.revision_for_thread(db, app_id, agent.environment_id).id
        built_from = agents.sandbox_fingerprint(agent, revision_id)
    labels = {**runs.installation_label(), runs.LABEL_BUILT_FROM: built_from, "mosoo.test": "1"}
    sandbox = backend.create(SandboxSpec(subject=f"agent:{agent_id}", app_id=app_id, labels=labels))
    return sandbox, {LABEL_SUBJECT: f"agent:{agent_id}", **runs.installation_label()}


def test_a_kind_change_is_pending_until_apply_recreates_the_assistant_sandbox(
    page: Page, browser: Browser, shared_database: WebServer, docker_backend: DockerBackend
) -> None:
    server = shared_database
    account_id, app_id = _signed_in(page, browser, server, "pet")
    agent_id = _ready_agent(account_id, app_id)
    sandbox, selector = _agent_sandbox(docker_backend, account_id, app_id, agent_id)
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


@contextlib.contextmanager
def _control_socket(data_dir: Path) -> Iterator[None]:
    """The control socket Wake mounts into the sandbox it builds, bound at the web process's
    path (this stack runs no `mosoo control`; no driver boots before the next message)."""
    control_dir = data_dir / "run" / "control"
    control_dir.mkdir(parents=True, exist_ok=True)
    control_dir.chmod(0o755)
    path = control_dir / "control.sock"
    with socket.socket(socket.AF_UNIX) as bound:
        bound.bind(str(path))
        try:
            yield
        finally:
            path.unlink(missing_ok=True)


def _toast(page: Page, text: str) -> None:
    expect(page.locator("[data-sonner-toast]").filter(has_text=text).first).to_be_visible()


def test_the_sandbox_panel_hibernates_wakes_and_resets_the_assistant_sandbox(
    page: Page, browser: Browser, shared_database: WebServer, docker_backend: DockerBackend
) -> None:
    server = shared_database
    account_id, app_id = _signed_in(page, browser, server, "ops")
    agent_id = _ready_agent(account_id, app_id)
    _, selector = _agent_sandbox(docker_backend, account_id, app_id, agent_id)
    try:
        with _control_socket(server.log.parent):
            page.goto(f"{server.url}/apps/{app_id}/agents/{agent_id}")
            panel = page.get_by_test_id("sandbox-panel")
            status = panel.get_by_test_id("sandbox-status")
            expect(status).to_have_text("Running")
            expect(panel.get_by_test_id("sandbox-image")).to_have_text(re.compile(r"\S"))
            expect(panel.get_by_test_id("sandbox-memory")).to_have_text(re.compile(r"\d"))

            panel.get_by_test_id("sandbox-hibernate").click()
            _toast(page, "The workspace was saved and the sandbox removed")
            expect(status).to_have_text("Hibernated")
            assert docker_backend.list_by_label(selector) == []

            panel.get_by_test_id("sandbox-wake").click()
            _toast(page, "The sandbox was built again with its workspace restored.")
            expect(status).to_have_text("Running")
            assert len(docker_backend.list_by_label(selector)) == 1

            # Reset asks for the Agent's name, and only the exact name lets it go.
            panel.get_by_test_id("sandbox-reset").click()
            confirm = page.get_by_test_id("sandbox-reset-confirm")
            page.get_by_test_id("sandbox-reset-confirm-input").fill("Keepr")
            expect(confirm).to_be_disabled()
            page.get_by_test_id("sandbox-reset-confirm-input").fill("Keeper")
            expect(confirm).to_be_enabled()
            confirm.click()
            _toast(page, "The sandbox and its saved workspace were wiped")
            expect(confirm).to_have_count(0)
            expect(status).to_have_text("No sandbox")
            assert docker_backend.list_by_label(selector) == []

            # A refusal reaches the owner in the service's own words.
            panel.get_by_test_id("sandbox-wake").click()
            _toast(page, "There is nothing to wake: the next message builds a fresh sandbox.")
            expect(status).to_have_text("No sandbox")

            # Followed by its address: the header link sits under the toasts just shown, and a
            # toast under the pointer stays (its timer pauses), so a click can wait it out.
            logs = page.get_by_test_id("agent-logs-link").get_attribute("href")
            assert logs == f"/apps/{app_id}/agents/{agent_id}/logs"
            page.goto(f"{server.url}{logs}")
            operations = page.get_by_test_id("sandbox-operations").get_by_test_id(
                "sandbox-operation"
            )
            expect(operations).to_have_count(4)
            expect(operations.get_by_test_id("sandbox-operation-name")).to_have_text(
                ["Wake", "Reset", "Wake", "Hibernate"]
            )
            expect(operations.get_by_test_id("sandbox-operation-outcome")).to_have_text(
                ["refused", "done", "done", "done"]
            )
            expect(operations.first.get_by_test_id("sandbox-operation-error")).to_have_text(
                "There is nothing to wake: the next message builds a fresh sandbox."
            )
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
