"""Skills end to end: real control, worker, Redis, Docker sandbox and driver. An Agent bound to
a skill lists it in its system prompt, reads its SKILL.md with the read tool from the
read-only mount at /opt/mosoo/skills/<name>/, and runs its script; exported and imported
into another owner's App, the skill comes along and the imported Agent reads it there too."""

from __future__ import annotations

import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import agents, skills
from mosoo_core.sessions import driver_plane
from tests.support.hostile_zips import make_zip
from tests.support.openai_server import TextTurn, ToolCall, ToolCallsTurn
from tests.support.redis_db import db_number
from tests.support.stack import (
    Owner,
    RuntimeStack,
    make_agent,
    new_thread,
    runtime_stack,
    send,
    wait_run,
)

pytestmark = pytest.mark.integration
REDIS_DB = db_number(11)
PROVIDER_KEY = "sk-skills-TOPSECRET-1a2b3c4d5e"
SKILL_DIR = "/opt/mosoo/skills/release-notes"
SKILL_MD = """\
---
name: release-notes
description: Write release notes from a list of merged changes. Use when asked for release notes.
---
# Release notes

Run `scripts/count.sh` first, then write one line per change.
"""
COUNT = b"#!/bin/sh\necho counted-by-the-skill\n"


@pytest.fixture
def stack(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RuntimeStack]:
    with runtime_stack(engine, database_url, tmp_path, monkeypatch, redis_db=REDIS_DB) as stack:
        yield stack


def _package() -> bytes:
    script = zipfile.ZipInfo("release-notes/scripts/count.sh")
    script.create_system = 3
    script.external_attr = (stat.S_IFREG | 0o755) << 16
    return make_zip([("release-notes/SKILL.md", SKILL_MD.encode()), (script, COUNT)])


def _bind_skill(engine: Engine, owner: Owner) -> skills.SkillUpload:
    return bind_skill(engine, owner, _package(), "release-notes.zip")


def bind_skill(engine: Engine, owner: Owner, data: bytes, filename: str) -> skills.SkillUpload:
    """Upload a skill to the owner's App and bind it to their Agent (latest version)."""
    with Session(engine) as db:
        upload = skills.upload_skill(db, owner.account_id, owner.app_id, data, filename)
        agents.update_agent(
            db,
            owner.account_id,
            owner.app_id,
            owner.agent_id,
            agents.AgentChanges(skills=[upload.skill.id]),
        )
        db.commit()
        return upload


def _tool_outputs(engine: Engine, thread_id: str) -> list[tuple[str, bool]]:
    with Session(engine) as db:
        return [
            (str(e.payload["output"]), bool(e.payload["is_error"]))
            for e in driver_plane.read_events(db, thread_id, limit=1000)
            if e.type == "tool.use.completed"
        ]


PROBE = (
    f"sh {SKILL_DIR}/scripts/count.sh; "
    f"test -x {SKILL_DIR}/scripts/count.sh && echo executable; "
    f"touch {SKILL_DIR}/intruder 2>/dev/null && echo writable || echo read-only; "
    "mkdir /opt/mosoo/skills/other 2>/dev/null && echo writable || echo read-only; "
    "ls /opt/mosoo/skills"
)


def test_an_agent_lists_its_skill_reads_it_from_the_read_only_mount_and_takes_it_along(
    stack: RuntimeStack,
) -> None:
    stack.model.add(
        ToolCallsTurn([ToolCall("read", {"path": f"{SKILL_DIR}/SKILL.md"}, id="read_skill")]),
        ToolCallsTurn([ToolCall("bash", {"command": PROBE}, id="probe")]),
        TextTurn("Release notes: one change."),
    )
    owner = make_agent(
        stack.engine, stack.model.base_url, PROVIDER_KEY, tools={"read": "allow", "bash": "allow"}
    )
    upload = _bind_skill(stack.engine, owner)
    thread_id = new_thread(stack.engine, owner)

    run = wait_run(
        stack.engine, send(stack.engine, owner.account_id, thread_id, "Write the release notes")
    )

    assert run.status == "completed", (run.error_code, run.error_message)
    system = stack.model.chat_requests[0].messages[0]
    assert system["role"] == "system"
    assert "<available_skills>" in system["content"]
    assert "<name>release-notes</name>" in system["content"]
    assert f"<description>{upload.version.description}</description>" in system["content"]
    assert f"<location>{SKILL_DIR}/SKILL.md</location>" in system["content"]
    assert "Run `scripts/count.sh` first" not in system["content"]  # only read when it applies
    (read, read_failed), (probe, probe_failed) = _tool_outputs(stack.engine, thread_id)
    assert not read_failed and not probe_failed
    assert [line.split("\t", 1)[1] for line in read.splitlines()] == SKILL_MD.splitlines()
    assert probe.split() == [
        "counted-by-the-skill",
        "executable",
        "read-only",
        "read-only",
        "release-notes",
    ]
    assert run.snapshot["skills"] == [
        {
            "id": upload.skill.id,
            "name": "release-notes",
            "description": upload.version.description,
            "version": 1,
            "path": f"{SKILL_DIR}/SKILL.md",
        }
    ]

    # Exported and imported into another owner's App, the Agent brings its skill along.
    with Session(stack.engine) as db:
        package = agents.export_agent(db, owner.account_id, owner.app_id, owner.agent_id)
    elsewhere = make_agent(
        stack.engine, stack.model.base_url, PROVIDER_KEY, email="elsewhere@example.com"
    )
    with Session(stack.engine) as db:
        report = agents.import_agent(db, elsewhere.account_id, elsewhere.app_id, package)
        imported = agents.get_agent(db, elsewhere.account_id, elsewhere.app_id, report.agent_id)
        [recreated] = skills.list_skills(db, elsewhere.account_id, elsewhere.app_id)
        assert agents.readiness(db, imported).ready
        db.commit()
    assert report.reconnect == []  # the same provider key was found and bound
    assert "Added the skill release-notes." in report.notes
    assert recreated.id != upload.skill.id and imported.skills == [recreated.id]
    assert recreated.latest.content_sha256 == upload.version.content_sha256

    stack.model.add(
        ToolCallsTurn([ToolCall("read", {"path": f"{SKILL_DIR}/SKILL.md"}, id="read_again")]),
        TextTurn("Read it there too."),
    )
    imported_owner = Owner(elsewhere.account_id, elsewhere.app_id, imported.id)
    other_thread = new_thread(stack.engine, imported_owner)
    again = wait_run(stack.engine, send(stack.engine, elsewhere.account_id, other_thread, "Notes?"))
    assert again.status == "completed", (again.error_code, again.error_message)
    [(read_there, failed_there)] = _tool_outputs(stack.engine, other_thread)
    assert not failed_there and "# Release notes" in read_there
