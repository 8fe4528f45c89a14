"""An owner manages skills on the Skills page: a refused upload names its field and makes
nothing; an upload is shown rendered with its front matter; a second version from the skill's
page; each version downloads as uploaded; Preview binds it pinned to version 1; Uninstall
warns about that Agent, which then shows the skill missing in its readiness."""

from __future__ import annotations

import re
import stat
import uuid
import zipfile
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.actions import choose
from tests.browser.conftest import WebServer
from tests.browser.test_console_journey import _sign_in
from tests.support.hostile_zips import make_zip

pytestmark = pytest.mark.browser

APP_URL = re.compile(r"/apps/([0-9A-Z]{26})$")
SKILL_URL = re.compile(r"/apps/[0-9A-Z]{26}/skills/([0-9A-Z]{26})$")
AGENT_URL = re.compile(r"/agents/([0-9A-Z]{26})$")
NAME = "release-checklist"
VERSION_1 = f"""\
---
name: {NAME}
description: Check a release before it ships. Use when asked to prepare a release.
license: Apache-2.0
metadata:
  owner: platform
---
# Release checklist

1. Run the **full** test suite.
2. Tag the release.

<img src=x onerror="document.title='pwned'"><b>raw html</b>
"""
VERSION_2 = VERSION_1.replace("2. Tag the release.", "2. Tag the release and write notes.")
NO_DESCRIPTION = f"---\nname: {NAME}\n---\n# Missing its description\n"


def _executable(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3  # Unix: the mode is in the upper bits
    info.external_attr = (stat.S_IFREG | 0o755) << 16
    return info


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _upload(page: Page, button_test_id: str, path: Path) -> None:
    page.get_by_test_id(f"{button_test_id}-upload").locator("input[type=file]").set_input_files(
        path
    )


def test_owner_uploads_versions_of_a_skill_binds_one_in_preview_and_uninstalls_it(
    page: Page, browser: Browser, web_server: WebServer, tmp_path: Path
) -> None:
    page.goto(f"{web_server.url}/login")
    _sign_in(page, browser, web_server, f"skills-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(APP_URL)
    app_id = page.url.rsplit("/", 1)[-1]

    page.get_by_test_id("nav-skills").click()
    page.wait_for_url(re.compile(r"/skills$"))
    expect(page.get_by_test_id("page-title")).to_have_text("Skills")
    expect(page.get_by_test_id("skills-empty")).to_be_visible()

    # Refused: the service's message names the field, and nothing is made.
    _upload(page, "skill-upload-button", _write(tmp_path, "broken.md", NO_DESCRIPTION))
    error = page.get_by_test_id("skill-upload-error")
    expect(error).to_have_text("SKILL.md front matter: description is missing.")
    expect(error).to_have_attribute("data-field", "description")
    expect(page.get_by_test_id("skills-empty")).to_be_visible()
    # A file that is neither: the browser refuses it before uploading, in the same words.
    _upload(page, "skill-upload-button", _write(tmp_path, "notes.txt", VERSION_1))
    expect(error).to_have_text(
        "This skill cannot be uploaded: upload a SKILL.md (.md) or a .zip holding one, "
        "of at most 16 MiB."
    )
    expect(error).to_have_attribute("data-field", "file")
    page.reload()
    expect(page.get_by_test_id("skills-empty")).to_be_visible()

    # Uploaded: the skill's page shows SKILL.md rendered (raw HTML as text) and its fields.
    _upload(page, "skill-upload-button", _write(tmp_path, "release.md", VERSION_1))
    page.wait_for_url(SKILL_URL)
    skill_id = page.url.rsplit("/", 1)[-1]
    expect(page.get_by_text(f"Uploaded {NAME}, version 1.")).to_be_visible()
    expect(page.get_by_test_id("page-title")).to_have_text(NAME)
    rendered = page.get_by_test_id("skill-rendered")
    expect(rendered.locator("h1")).to_have_text("Release checklist")
    expect(rendered.locator("ol > li")).to_have_count(2)
    expect(rendered.locator("strong")).to_have_text("full")
    expect(rendered).not_to_contain_text("name:")  # the front matter is shown on its own
    expect(rendered).to_contain_text("<b>raw html</b>")
    expect(rendered.locator("img, b")).to_have_count(0)
    expect(page).not_to_have_title("pwned")
    expect(page.get_by_test_id("skill-field-name")).to_have_text(NAME)
    expect(page.get_by_test_id("skill-field-description")).to_have_text(
        "Check a release before it ships. Use when asked to prepare a release."
    )
    expect(page.get_by_test_id("skill-field-license")).to_have_text("Apache-2.0")
    expect(page.get_by_test_id("skill-field-metadata")).to_have_text("platform")
    expect(page.get_by_test_id("skill-file")).to_have_text(re.compile(r"^SKILL\.md"))
    versions = page.get_by_test_id("skill-version-row")
    expect(versions).to_have_count(1)

    # A new version from the skill's page: shown at once; version 1 is still there to show.
    _upload(page, "skill-version-upload-button", _write(tmp_path, "release-2.md", VERSION_2))
    expect(page.get_by_text(f"Uploaded {NAME} version 2.")).to_be_visible()
    expect(page.get_by_test_id("skill-latest-version")).to_have_text("Version 2")
    expect(versions).to_have_count(2)
    expect(page.get_by_test_id("skill-shown-version")).to_have_text("Version 2")
    expect(rendered).to_contain_text("Tag the release and write notes.")
    versions.nth(1).get_by_test_id("skill-version-show").click()
    expect(page.get_by_test_id("skill-shown-version")).to_have_text("Version 1")
    expect(rendered).not_to_contain_text("write notes")
    # A file of another skill's name is no version of this one.
    other = VERSION_2.replace(f"name: {NAME}", "name: other-skill")
    _upload(page, "skill-version-upload-button", _write(tmp_path, "other.md", other))
    expect(page.get_by_test_id("skill-upload-error")).to_contain_text(f"must keep name: {NAME}")
    expect(versions).to_have_count(2)

    # Each version downloads as it was uploaded.
    for row, text in ((versions.nth(0), VERSION_2), (versions.nth(1), VERSION_1)):
        with page.expect_download() as download:
            row.get_by_test_id("skill-version-download").click()
        assert download.value.suggested_filename == "SKILL.md"
        assert Path(download.value.path()).read_text() == text

    # The list: its description, the latest version and how many there are.
    page.get_by_test_id("skills-back").click()
    page.wait_for_url(re.compile(r"/skills$"))
    row = page.get_by_test_id("skill-row")
    expect(row).to_have_count(1)  # the refused upload and the other name made nothing
    expect(row.get_by_test_id("skill-name")).to_have_text(NAME)
    expect(row.get_by_test_id("skill-latest-version")).to_have_text("Version 2")
    expect(row.get_by_test_id("skill-versions")).to_have_text("2 versions")
    expect(row.get_by_test_id("skill-description")).to_contain_text("Check a release")
    expect(row.get_by_test_id("skill-users")).to_have_text("Not used by any Agent")

    # Preview: bind it, pinned to version 1.
    page.get_by_test_id("nav-agents").click()
    page.wait_for_url(re.compile(r"/agents$"))
    page.get_by_test_id("new-agent").click()
    page.get_by_test_id("new-agent-name").fill("Releaser")
    page.get_by_test_id("new-agent-submit").click()
    page.wait_for_url(AGENT_URL)
    agent_url = page.url
    choose(page, page.get_by_test_id("agent-skills-add"), NAME)
    bound = page.get_by_test_id("agent-skills-bound")
    expect(bound.get_by_test_id("agent-skill-name")).to_have_text(NAME)
    expect(bound.get_by_test_id("agent-skill-version")).to_have_text("Latest version")
    choose(page, bound.get_by_test_id("agent-skill-version"), "Version 1")
    expect(page.get_by_test_id("save-indicator")).to_have_text("Saved")
    page.reload()
    expect(bound.get_by_test_id("agent-skill-version")).to_have_text("Version 1")
    expect(page.get_by_test_id("readiness-warning")).to_have_count(0)

    # The skill's page lists the Agent; Uninstall warns about it.
    page.goto(f"{web_server.url}/apps/{app_id}/skills/{skill_id}")
    expect(page.get_by_test_id("skill-user-name")).to_have_text("Releaser")
    expect(page.get_by_test_id("skill-user-binding")).to_have_text("Version 1")
    page.get_by_test_id("skill-uninstall").click()
    expect(page.get_by_test_id("skill-uninstall-warning")).to_contain_text("Releaser")
    expect(page.get_by_test_id("skill-uninstall-warning")).to_contain_text("run without")
    page.get_by_test_id("skill-uninstall-confirm").click()
    page.wait_for_url(re.compile(r"/skills$"))
    expect(
        page.get_by_text(f"Uninstalled {NAME}. 1 Agent binds it and runs without it.")
    ).to_be_visible()
    expect(page.get_by_test_id("skills-empty")).to_be_visible()

    # The Agent keeps the binding, shows it missing and warns (it is not a blocker).
    page.goto(agent_url)
    warning = page.get_by_test_id("readiness-warning")
    expect(warning).to_have_count(1)
    expect(warning).to_contain_text(f"Skill {NAME} version 1 is missing; runs go without it.")
    expect(bound).to_contain_text("Missing")

    # A .zip is a skill too: its files are listed, a script with its executable bit.
    package = tmp_path / "notes.zip"
    package.write_bytes(
        make_zip(
            [
                ("notes/SKILL.md", b"---\nname: notes\ndescription: Take notes.\n---\n# Notes\n"),
                (_executable("notes/scripts/save.sh"), b"#!/bin/sh\necho saved\n"),
            ]
        )
    )
    page.get_by_test_id("nav-skills").click()
    page.wait_for_url(re.compile(r"/skills$"))
    _upload(page, "skill-upload-button", package)
    page.wait_for_url(SKILL_URL)
    expect(page.get_by_test_id("page-title")).to_have_text("notes")
    files = page.get_by_test_id("skill-file")
    expect(files).to_have_count(2)
    expect(files.nth(1)).to_contain_text("scripts/save.sh")
    expect(files.nth(1)).to_contain_text("executable")
