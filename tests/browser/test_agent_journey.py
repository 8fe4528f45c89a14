"""From nothing to two published versions without leaving Preview, against the real stack
(`mosoo web`, `mosoo control`, `mosoo worker`, Redis, a Docker sandbox; the model is the
scripted OpenAI-compatible server): create an Agent on the Agents page, see what blocks it,
fix each blocker from its "Fix" button (every change autosaves), chat, publish version 1,
change the prompt, publish version 2, export it and import the file as a new Agent with its
reconnect report; its skill travels with it."""

from __future__ import annotations

import json
import re
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from mosoo_core import agents, skills
from mosoo_core.db import session_scope
from mosoo_core.settings import reset_settings_cache
from tests.browser.actions import choose
from tests.browser.test_console_journey import _sign_in
from tests.browser.test_preview_chat import _account_id
from tests.support.browser_stack import RunStack, browser_run_stack
from tests.support.openai_server import TextTurn
from tests.support.processes import wait_for
from tests.support.redis_db import db_number

pytestmark = [pytest.mark.browser, pytest.mark.integration]

REDIS_DB = db_number(7)  # this module's own Redis database, flushed before the stack starts
PROVIDER_KEY = "sk-journey-SECRET-" + uuid.uuid4().hex
AGENT_URL = re.compile(r"/apps/([0-9A-Z]{26})/agents/([0-9A-Z]{26})$")
BOOT_TIMEOUT_MS = 90_000
SKILL = "01SKILLCHANGELOG0000000000"
MCP_SERVER = "01MCPGITHUB000000000000000"
ANSWER = "Added: exports. Fixed: the login loop."
CHANGELOG_SKILL = (
    b"---\nname: changelog\ndescription: Group merged changes by label.\n---\nGroup them.\n"
)


@pytest.fixture(scope="module")
def journey_stack(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunStack]:
    with browser_run_stack(
        database_url, tmp_path_factory.mktemp("agent-journey"), REDIS_DB
    ) as stack:
        yield stack


@pytest.fixture
def shared_database(journey_stack: RunStack, monkeypatch: pytest.MonkeyPatch) -> RunStack:
    """This process reads (and, where the console has no picker yet, writes) the stack's
    database and object store."""
    monkeypatch.setenv("MOSOO_DATABASE_URL", journey_stack.web.database_url)
    monkeypatch.setenv("MOSOO_DATA_DIR", str(journey_stack.data_dir))
    reset_settings_cache()
    return journey_stack


def _open_menu_item(page: Page, card_index: int, item: str) -> None:
    expect(page.get_by_role("menu")).to_have_count(0)
    page.get_by_test_id("agent-card").nth(card_index).get_by_test_id("agent-menu").click()
    page.get_by_test_id(item).click()


def _blocker(page: Page, label: str):  # type: ignore[no-untyped-def]
    return page.get_by_test_id("readiness-blocker").filter(has_text=label)


def test_an_agent_goes_from_nothing_to_two_published_versions_in_preview_and_moves_as_a_file(
    page: Page, browser: Browser, shared_database: RunStack, tmp_path: Path
) -> None:
    stack, model = shared_database, shared_database.model
    with stack.logs_on_failure():
        page.goto(f"{stack.web.url}/login", wait_until="networkidle")
        _sign_in(page, browser, stack.web, f"journey-{uuid.uuid4().hex[:8]}@example.com")
        page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
        app_id = page.url.rsplit("/", 1)[-1]
        stack.app_ids.add(app_id)
        account_id = _account_id(page)

        # A provider key pointing at the scripted model server.
        page.get_by_test_id("nav-providers").click()
        page.wait_for_url(re.compile(r"/providers$"))
        choose(page, page.get_by_test_id("provider-preset"), "OpenAI-compatible", exact=True)
        page.get_by_test_id("provider-name-input").fill("Scripted")
        page.get_by_test_id("provider-base-url-input").fill(model.base_url)
        page.get_by_test_id("provider-key-input").fill(PROVIDER_KEY)
        page.get_by_test_id("provider-models-input").fill("test-model")
        page.get_by_test_id("provider-add-submit").click()
        expect(page.get_by_test_id("provider-row")).to_have_count(1)

        # The Agents page: create a Task agent; Preview opens.
        page.get_by_test_id("nav-agents").click()
        page.wait_for_url(re.compile(r"/agents$"))
        page.get_by_test_id("new-agent").click()
        page.get_by_test_id("new-agent-name").fill("Changelog writer")
        page.get_by_test_id("kind-cattle").click()
        page.get_by_test_id("new-agent-submit").click()
        page.wait_for_url(AGENT_URL)
        match = AGENT_URL.search(page.url)
        assert match
        agent_id = match.group(2)

        def saved() -> agents.AgentView:
            with session_scope() as db:
                return agents.get_agent(db, account_id, app_id, agent_id)

        # Bindings made elsewhere (the pickers list nothing until skills and MCP arrive): a
        # skill and an MCP server that do not exist in this App.
        with session_scope() as db:
            agents.update_agent(
                db,
                account_id,
                app_id,
                agent_id,
                agents.AgentChanges(skills=[SKILL], mcp_servers=[MCP_SERVER]),
            )
            skill_id = skills.upload_skill(
                db, account_id, app_id, CHANGELOG_SKILL, "SKILL.md"
            ).skill.id
        page.reload()

        # Setup required, each blocker by name; the missing skill only warns.
        expect(page.get_by_test_id("preview-status")).to_have_text("Setup required")
        blockers = page.get_by_test_id("readiness-blocker")
        expect(blockers).to_have_count(3)
        for label in ("Provider key", "Model", "MCP servers"):
            expect(_blocker(page, label)).to_have_count(1)
        expect(page.get_by_test_id("readiness-warning")).to_contain_text("runs go without it")
        expect(page.get_by_test_id("chat-send")).to_be_disabled()
        expect(page.get_by_test_id("publish-agent")).to_be_disabled()
        expect(page.get_by_test_id("agent-save")).to_have_count(0)
        expect(page.get_by_test_id("agent-environment")).to_have_text("Default environment")

        # 1. The model: "Fix" puts the cursor in its field; typing saves after a pause.
        _blocker(page, "Model").get_by_test_id("readiness-fix").click()
        expect(page.get_by_test_id("agent-model")).to_be_focused()
        page.keyboard.type("test-model")
        expect(page.get_by_test_id("save-indicator")).to_have_text("Saved")
        expect(blockers).to_have_count(2)
        wait_for(lambda: saved().model == "test-model", 10, "the model to autosave")

        # 2. The provider key: "Fix" focuses the select; the choice saves at once.
        _blocker(page, "Provider key").get_by_test_id("readiness-fix").click()
        expect(page.get_by_test_id("agent-provider")).to_be_focused()
        choose(page, page.get_by_test_id("agent-provider"), "Scripted (default)")
        expect(blockers).to_have_count(1)

        # 3. The MCP server that does not exist: removed from the bindings.
        _blocker(page, "MCP servers").get_by_test_id("readiness-fix").click()
        page.get_by_test_id("agent-mcp-servers-remove").click()
        expect(blockers).to_have_count(0)
        expect(page.get_by_test_id("preview-status")).to_have_text("Ready")
        expect(page.get_by_test_id("save-indicator")).to_have_text("Saved")
        assert saved().mcp_servers == [] and saved().skills == [SKILL]

        # 4. Skills: bind the App's skill from the picker, drop the missing one.
        choose(page, page.get_by_test_id("agent-skills-add"), "changelog")
        bound = page.get_by_test_id("agent-skills-bound")
        expect(bound).to_have_count(2)
        bound.filter(has_text=SKILL).get_by_test_id("agent-skills-remove").click()
        expect(bound).to_have_count(1)
        expect(bound.get_by_test_id("agent-skill-version")).to_have_text("Latest version")
        expect(page.get_by_test_id("readiness-warning")).to_have_count(0)
        wait_for(lambda: saved().skills == [skill_id], 10, "the skill bindings to save")

        # Chat with the draft.
        model.add(TextTurn(ANSWER, delay=0.02))
        page.get_by_test_id("chat-input").fill("What changed this week?")
        page.get_by_test_id("chat-input").press("Enter")
        expect(page.get_by_test_id("chat-user-message")).to_have_text("What changed this week?")
        expect(page.get_by_test_id("chat-assistant-message").last).to_have_text(
            ANSWER, timeout=BOOT_TIMEOUT_MS
        )
        expect(page.get_by_test_id("preview-status")).to_have_text("Ready")

        # Publish version 1.
        status = page.get_by_test_id("agent-publish-status")
        page.get_by_test_id("publish-agent").click()
        page.get_by_test_id("publish-summary").fill("First release")
        page.get_by_test_id("publish-submit").click()
        expect(status).to_have_text("Published v1")

        # Change the prompt (saved on blur), publish version 2.
        page.get_by_test_id("agent-system-prompt").fill("Write terse changelogs.")
        page.get_by_test_id("agent-system-prompt").blur()
        wait_for(
            lambda: saved().system_prompt == "Write terse changelogs.", 10, "the prompt to autosave"
        )
        page.get_by_test_id("publish-agent").click()
        page.get_by_test_id("publish-summary").fill("Terser")
        page.get_by_test_id("publish-submit").click()
        expect(status).to_have_text("Published v2")
        with session_scope() as db:
            versions = agents.list_versions(db, account_id, app_id, agent_id)
        assert [(v.number, v.profile["system_prompt"]) for v in versions] == [
            (2, "Write terse changelogs."),
            (1, ""),
        ]
        assert versions[0].profile["skills"] == [skill_id]

        # Export from the Agents page: the manifest carries the skill, never the key.
        page.get_by_test_id("nav-agents").click()
        page.wait_for_url(re.compile(r"/agents$"))
        cards = page.get_by_test_id("agent-card")
        expect(cards).to_have_count(1)
        with page.expect_download() as download_info:
            _open_menu_item(page, 0, "agent-export")
        package = tmp_path / download_info.value.suggested_filename
        download_info.value.save_as(package)
        assert PROVIDER_KEY.encode() not in package.read_bytes()
        with zipfile.ZipFile(package) as archive:
            manifest = json.loads(archive.read("manifest.json"))
        assert manifest["agent"]["system_prompt"] == "Write terse changelogs."
        assert [(s["name"], s["pinned"]) for s in manifest["skills"]] == [("changelog", False)]

        # Import it as a new Agent: the key of the same provider is bound, the App's skill
        # with the same content is reused.
        page.get_by_test_id("import-agent").click()
        page.locator("input[type=file]").set_input_files(package)
        report = page.get_by_test_id("import-report")
        expect(report).to_contain_text("Changelog writer")
        notes = page.get_by_test_id("import-note")
        expect(notes.filter(has_text="Scripted")).to_have_count(1)
        expect(notes.filter(has_text="Used the App's skill changelog")).to_have_count(1)
        expect(cards).to_have_count(2)
