"""The files journey against the real stack (`mosoo web`, `control`, `worker`, Redis, a Docker
sandbox; the model replaced at its network boundary by the scripted OpenAI-compatible
server): attach a text file in Preview, the agent reads it with bash at
`/mnt/attachments/...` and writes `outputs/summary.md`; the artifact shows on the thread and
on the Files page, where it is previewed and downloaded; the thread is archived, a follow-up
unarchives it, and it is archived and unarchived from its page. And a Task Agent's Preview
shows its warm pool (on for `openai` sandboxes with a full network only, so the files journey
starts cold): off, then empty before its first run, then a miss and a sandbox standing by,
which its second run takes."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from mosoo_core import environments
from mosoo_core.db import session_scope
from mosoo_core.settings import reset_settings_cache
from tests.browser.actions import choose
from tests.browser.test_console_journey import _sign_in
from tests.browser.test_preview_chat import _account_id
from tests.support.browser_stack import RunStack, browser_run_stack
from tests.support.openai_server import TextTurn, ToolCall, ToolCallsTurn
from tests.support.redis_db import db_number

pytestmark = [pytest.mark.browser, pytest.mark.integration]

REDIS_DB = db_number(6)  # this module's own Redis database, flushed before the stack starts
PROVIDER_KEY = "sk-files-SECRET-" + uuid.uuid4().hex
AGENT_URL = re.compile(r"/apps/([0-9A-Z]{26})/agents/([0-9A-Z]{26})$")
THREAD_URL = re.compile(r"/threads/([0-9A-Z]{26})$")
BOOT_TIMEOUT_MS = 90_000
NOTES = "Quarterly notes\nRevenue grew 42% to 1.2M.\nChurn fell to 3%.\n"
SUMMARY = "# Summary\n\nRevenue grew 42%; churn fell to 3%.\n"
WRITE_SUMMARY = (
    f"mkdir -p /workspace/outputs && cat > /workspace/outputs/summary.md <<'EOF'\n{SUMMARY}EOF\n"
)


@pytest.fixture(scope="module")
def run_stack(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunStack]:
    with browser_run_stack(
        database_url,
        tmp_path_factory.mktemp("files-journey"),
        REDIS_DB,
        extra_env={"MOSOO_POOL_SIZES": '{"openai/full": 1}'},
    ) as stack:
        yield stack


def _set_up_agent(page: Page, stack: RunStack) -> None:
    """A provider key pointing at the scripted server and a Task agent with bash allowed."""
    page.get_by_test_id("nav-providers").click()
    page.wait_for_url(re.compile(r"/providers$"))
    choose(page, page.get_by_test_id("provider-preset"), "OpenAI-compatible", exact=True)
    page.get_by_test_id("provider-name-input").fill("Scripted")
    page.get_by_test_id("provider-base-url-input").fill(stack.model.base_url)
    page.get_by_test_id("provider-key-input").fill(PROVIDER_KEY)
    page.get_by_test_id("provider-models-input").fill("test-model")
    page.get_by_test_id("provider-add-submit").click()
    expect(page.get_by_test_id("provider-row")).to_have_count(1)

    page.get_by_test_id("nav-agents").click()
    page.wait_for_url(re.compile(r"/agents$"))
    page.get_by_test_id("new-agent").click()
    page.get_by_test_id("new-agent-name").fill("Summariser")
    page.get_by_test_id("kind-cattle").click()
    page.get_by_test_id("new-agent-submit").click()
    page.wait_for_url(AGENT_URL)
    choose(page, page.get_by_test_id("agent-provider"), "Scripted (default)")
    expect(page.get_by_test_id("agent-model")).to_have_value("test-model")
    # Fields save on their own; events of one tab run in order, so the message goes after.
    page.get_by_test_id("tool-bash").get_by_role("radio", name="Allow").click()
    expect(page.get_by_test_id("tool-bash").get_by_role("radio", name="Allow")).to_be_checked()
    expect(page.get_by_test_id("preview-status")).to_have_text("Ready")


def _attach(page: Page, name: str, data: bytes) -> None:
    page.get_by_test_id("chat-attach-upload").locator("input[type=file]").set_input_files(
        files=[{"name": name, "mimeType": "text/plain", "buffer": data}]
    )


def test_attach_in_preview_agent_writes_an_artifact_seen_on_the_thread_and_files_page(
    page: Page, browser: Browser, run_stack: RunStack, tmp_path: Path
) -> None:
    stack, model = run_stack, run_stack.model
    with stack.logs_on_failure():
        page.goto(f"{stack.web.url}/login", wait_until="networkidle")
        _sign_in(page, browser, stack.web, f"files-{uuid.uuid4().hex[:8]}@example.com")
        page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
        app_id = page.url.rsplit("/", 1)[-1]
        stack.app_ids.add(app_id)
        _set_up_agent(page, stack)

        # Attach two files, remove one: a chip per file until the message goes out.
        _attach(page, "notes.txt", NOTES.encode())
        chips = page.get_by_test_id("attachment-chip")
        expect(chips).to_have_count(1)
        expect(chips.first).to_have_attribute("data-name", "notes.txt")
        _attach(page, "scratch.txt", b"not needed")
        expect(chips).to_have_count(2)
        page.locator('[data-testid="attachment-chip"][data-name="scratch.txt"]').get_by_test_id(
            "attachment-remove"
        ).click()
        expect(chips).to_have_count(1)

        # The agent reads the attachment with bash and writes outputs/summary.md.
        model.add(
            ToolCallsTurn(
                [ToolCall("bash", {"command": "cat /mnt/attachments/*/notes.txt"}, id="call_cat")]
            ),
            ToolCallsTurn([ToolCall("bash", {"command": WRITE_SUMMARY}, id="call_write")]),
            TextTurn("I read notes.txt and wrote outputs/summary.md."),
        )
        page.get_by_test_id("chat-input").fill("Summarise notes.txt and write outputs/summary.md")
        page.get_by_test_id("chat-input").press("Enter")
        expect(page).to_have_url(re.compile(r"\?thread=[0-9A-Z]{26}$"))
        expect(chips).to_have_count(0)
        # The message shows which files it named.
        expect(
            page.get_by_test_id("chat-user-message").last.get_by_test_id("chat-user-attachment")
        ).to_have_text("notes.txt")
        thread_id = page.url.rsplit("=", 1)[-1]
        expect(page.get_by_test_id("chat-assistant-message").last).to_have_text(
            "I read notes.txt and wrote outputs/summary.md.", timeout=BOOT_TIMEOUT_MS
        )
        cat_card = page.get_by_test_id("chat-tool-card").first
        cat_card.locator("summary").click()
        expect(cat_card.get_by_test_id("tool-output")).to_contain_text("Revenue grew 42% to 1.2M.")
        # The model saw the file's content (the tool result) and where it was mounted.
        first_request = json.dumps(model.chat_requests[0].body)
        assert "/mnt/attachments/" in first_request and "notes.txt" in first_request
        assert "Revenue grew 42% to 1.2M." in json.dumps(model.chat_requests[1].body)
        # After the turn the chat names what the run left in outputs/, each a download.
        output_link = page.get_by_test_id("chat-outputs").get_by_test_id("chat-output-file")
        expect(output_link).to_have_text("summary.md", timeout=30_000)
        with page.expect_download() as from_chat:
            output_link.click()
        assert from_chat.value.suggested_filename == "summary.md"

        # The thread: the attachment and the artifact, with download links.
        page.get_by_test_id("nav-threads").click()
        page.wait_for_url(re.compile(r"/threads$"))
        page.locator(f'[data-thread-id="{thread_id}"]').click()
        page.wait_for_url(THREAD_URL)
        expect(page.get_by_test_id("page-title")).to_have_text(
            "Summarise notes.txt and write outputs/summary.md"
        )
        thread_files = page.get_by_test_id("thread-file")
        expect(
            page.locator('[data-testid="thread-file"][data-kind="attachment"]')
        ).to_have_attribute("data-name", "notes.txt")
        artifact = page.locator('[data-testid="thread-file"][data-kind="artifact"]')
        expect(artifact).to_have_attribute("data-name", re.compile(r"summary\.md$"), timeout=30_000)
        expect(thread_files).to_have_count(2)

        # The Files page, from the thread: filtered to it; then all files, by kind, by name.
        page.get_by_test_id("thread-files-open").click()
        page.wait_for_url(re.compile(rf"/files\?thread={thread_id}$"))
        rows = page.get_by_test_id("file-row")
        expect(rows).to_have_count(2)  # notes.txt and summary.md; the removed chip's file is gone
        expect(page.get_by_test_id("files-thread-filter")).to_have_text(
            "Summarise notes.txt and write outputs/summary.md"
        )
        page.get_by_test_id("nav-files").click()
        page.wait_for_url(re.compile(r"/files$"))
        expect(page.get_by_test_id("files-thread-filter")).to_have_text("All threads")
        expect(rows).to_have_count(2)
    _files_page_checks(page, stack, thread_id, tmp_path)
    _archive_checks(page, stack, app_id, thread_id)


def _files_page_checks(page: Page, stack: RunStack, thread_id: str, tmp_path: Path) -> None:
    with stack.logs_on_failure():
        rows = page.get_by_test_id("file-row")
        page.get_by_test_id("files-kind-filter").get_by_role("radio", name="Artifacts").click()
        expect(rows).to_have_count(1)
        expect(rows.first.get_by_test_id("file-kind")).to_have_text("Artifact")
        page.get_by_test_id("files-kind-filter").get_by_role("radio", name="All").click()
        page.get_by_test_id("files-search").fill("summary")
        page.get_by_test_id("files-search-submit").click()
        expect(rows).to_have_count(1)
        expect(rows.first.get_by_test_id("file-thread")).to_have_attribute(
            "href", re.compile(thread_id)
        )
        rows.first.get_by_test_id("file-name").click()
        expect(page.get_by_test_id("preview-text")).to_contain_text(
            "Revenue grew 42%; churn fell to 3%."
        )
        with page.expect_download() as download_info:
            page.get_by_test_id("preview-download").click()
        download = download_info.value
        assert download.suggested_filename == "summary.md"
        target = tmp_path / "summary.md"
        download.save_as(target)
        assert target.read_text() == SUMMARY


def _archive_checks(page: Page, stack: RunStack, app_id: str, thread_id: str) -> None:
    with stack.logs_on_failure():
        page.goto(f"{stack.web.url}/apps/{app_id}/threads/{thread_id}")
        page.get_by_test_id("thread-archive").click()
        expect(page.get_by_test_id("thread-archived")).to_be_visible()
        # A follow-up message unarchives it.
        stack.model.add(TextTurn("Still here."))
        page.get_by_test_id("chat-input").fill("Anything else?")
        page.get_by_test_id("chat-input").press("Enter")
        expect(page.get_by_test_id("thread-archived")).to_have_count(0)
        expect(page.get_by_test_id("chat-assistant-message").last).to_have_text(
            "Still here.", timeout=BOOT_TIMEOUT_MS
        )
        expect(page.get_by_test_id("chat-send")).to_be_enabled()
        # Archive and unarchive from its page.
        page.get_by_test_id("thread-archive").click()
        expect(page.get_by_test_id("thread-archived")).to_be_visible()
        page.reload()
        expect(page.get_by_test_id("thread-archived")).to_be_visible()
        page.get_by_test_id("thread-unarchive").click()
        expect(page.get_by_test_id("thread-archived")).to_have_count(0)
        expect(page.get_by_test_id("thread-archive")).to_be_enabled()


def _pool_shows(page: Page, figures: dict[str, str], timeout: float = 120) -> None:
    """Refresh the Warm pool panel until it shows `figures` (test id: text): its members
    start in the background after a run."""
    deadline = time.monotonic() + timeout
    while True:
        page.get_by_test_id("pool-refresh").click()
        try:
            for test_id, text in figures.items():
                expect(page.get_by_test_id(test_id)).to_have_text(text, timeout=2_000)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise


def test_a_task_agents_preview_shows_its_warm_pool_fill_then_serve_its_next_run(
    page: Page, browser: Browser, run_stack: RunStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack, model = run_stack, run_stack.model
    monkeypatch.setenv("MOSOO_DATABASE_URL", stack.web.database_url)
    reset_settings_cache()
    with stack.logs_on_failure():
        page.goto(f"{stack.web.url}/login", wait_until="networkidle")
        _sign_in(page, browser, stack.web, f"pool-{uuid.uuid4().hex[:8]}@example.com")
        page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
        app_id = page.url.rsplit("/", 1)[-1]
        stack.app_ids.add(app_id)  # its pool's sandboxes too go when the stack stops
        _set_up_agent(page, stack)
        panel = page.get_by_test_id("pool-panel")
        expect(panel.get_by_test_id("pool-status")).to_have_text("Off")
        expect(panel.get_by_test_id("pool-off")).to_contain_text("openai, network none")

        # A full network: the kind of sandbox this stack keeps warm.
        with session_scope() as db:
            environment = environments.default_environment(db, app_id)
            environments.update_environment(
                db,
                _account_id(page),
                app_id,
                environment.id,
                environments.EnvironmentChanges(network_policy="full"),
            )
        page.reload()
        expect(panel.get_by_test_id("pool-status")).to_have_text("On")
        expect(panel.get_by_test_id("pool-empty")).to_have_text(
            "The pool starts after this Agent's first run: sandboxes then stand by for the "
            "next ones."
        )

        # The first run misses and starts the pool: a sandbox stands by for the next.
        model.add(TextTurn("Cold start."))
        page.get_by_test_id("chat-input").fill("first")
        page.get_by_test_id("chat-input").press("Enter")
        expect(page.get_by_test_id("chat-assistant-message").last).to_have_text(
            "Cold start.", timeout=BOOT_TIMEOUT_MS
        )
        _pool_shows(
            page,
            {
                "pool-standing-by": "1 of 1",
                "pool-hits": "0",
                "pool-misses": "1",
                "pool-hit-rate": "0%",
            },
        )

        # The second run takes it.
        model.add(TextTurn("Warm start."))
        page.get_by_test_id("chat-input").fill("second")
        page.get_by_test_id("chat-input").press("Enter")
        expect(page.get_by_test_id("chat-assistant-message").last).to_have_text(
            "Warm start.", timeout=BOOT_TIMEOUT_MS
        )
        _pool_shows(page, {"pool-hits": "1", "pool-misses": "1", "pool-hit-rate": "50%"})
        expect(panel.get_by_test_id("pool-key")).to_have_count(1)
