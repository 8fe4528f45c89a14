"""Skills: uploads checked whole (the Agent Skills front matter, every archive attack the
`.agent` import refuses) before anything is stored; versions, pins, uninstall, fork; the
bindings runs resolve; skills travelling inside `.agent` packages; their files on the host."""

from __future__ import annotations

import io
import json
import os
import stat
import time
import tracemalloc
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlmodel import Session, func, select

from mosoo_core import agents, identity, skills, vault
from mosoo_core.errors import FieldConflict, InvalidInput, NotFound
from mosoo_core.runtime import skills as skill_files
from mosoo_core.runtime.runs import plan_boot
from mosoo_core.sessions import create_session, send_message
from mosoo_core.settings import get_settings
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import SessionRun
from mosoo_core.tables.skills import Skill, SkillVersion
from tests.support import hostile_zips
from tests.support.hostile_zips import make_zip, zip_attacks

PROVIDER_KEY = "sk-proj-SkillsTest4Lr7TvW2yHc9PbM3kJd6FsG1aQeR5u"
CHANGELOG = """\
---
name: changelog
description: Write release notes from merged pull requests. Use when asked for a changelog.
license: MIT
compatibility: Needs git and python3.
metadata:
  author: mosoo
  version: "1.0"
allowed-tools: bash read
---
# Changelog

1. Run `scripts/collect.sh` to list the merged pull requests.
2. Group them by label.
"""
COLLECT = b"#!/bin/sh\ngit log --merges --oneline\n"


@dataclass(frozen=True)
class Owner:
    account_id: str
    app_id: str


def _owner(db: Session, email: str = "owner@example.com") -> Owner:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    return Owner(account.id, identity.list_apps(db, account.id)[0].id)


def _upload(
    db: Session, owner: Owner, data: bytes | str, name: str = "SKILL.md"
) -> skills.SkillUpload:
    raw = data.encode() if isinstance(data, str) else data
    return skills.upload_skill(db, owner.account_id, owner.app_id, raw, name)


def _executable(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFREG | 0o755) << 16
    return info


def _skill_zip(skill_md: str = CHANGELOG, folder: str = "") -> bytes:
    return make_zip(
        [
            (f"{folder}SKILL.md", skill_md.encode()),
            (_executable(f"{folder}scripts/collect.sh"), COLLECT),
            (f"{folder}reference/labels.md", b"- feature\n- fix\n"),
        ]
    )


def _agent(
    db: Session, owner: Owner, skill_bindings: list[str], *, name: str = "Writer"
) -> agents.AgentView:
    credential = vault.create_provider_credential(
        db,
        owner.account_id,
        owner.app_id,
        vault.ProviderCredentialInput(
            name=f"Key for {name}",
            provider="openai_compatible",
            base_url="http://10.0.0.5:8000/v1",
            api_key=PROVIDER_KEY,
            models=["model-a"],
        ),
    )
    created = agents.create_agent(db, owner.account_id, owner.app_id, name=name)
    return agents.update_agent(
        db,
        owner.account_id,
        owner.app_id,
        created.id,
        agents.AgentChanges(
            provider_credential_id=credential.id, model="model-a", skills=skill_bindings
        ),
    )


def _stored_objects() -> list[Path]:
    root = get_settings().resolved_object_dir
    return [path for path in root.rglob("*") if path.is_file()] if root.exists() else []


def _counts(db: Session) -> tuple[int, int, int]:
    return (
        int(db.exec(select(func.count()).select_from(Skill)).one()),
        int(db.exec(select(func.count()).select_from(SkillVersion)).one()),
        len(_stored_objects()),
    )


# --- uploads -----------------------------------------------------------------------------


def test_a_markdown_upload_becomes_skill_md_with_its_front_matter_parsed(db: Session) -> None:
    owner = _owner(db)

    upload = _upload(db, owner, CHANGELOG, "changelog.md")

    assert (upload.new_skill, upload.new_version) == (True, True)
    skill, version = upload.skill, upload.version
    assert (skill.name, skill.latest_version, version.number, version.kind) == (
        "changelog",
        1,
        1,
        "md",
    )
    assert skill.description == version.description
    assert version.description.startswith("Write release notes")
    assert (version.license, version.compatibility) == ("MIT", "Needs git and python3.")
    assert version.metadata == {"author": "mosoo", "version": "1.0"}
    assert version.allowed_tools == "bash read"
    assert version.skill_md == CHANGELOG
    assert [(f.path, f.size) for f in version.files] == [("SKILL.md", len(CHANGELOG))]
    assert [s.id for s in skills.list_skills(db, owner.account_id, owner.app_id)] == [skill.id]
    content = skills.open_skill_content(db, owner.account_id, owner.app_id, skill.id)
    assert (content.filename, content.media_type) == ("SKILL.md", "text/markdown; charset=utf-8")
    assert b"".join(content.chunks) == CHANGELOG.encode()


@pytest.mark.parametrize("folder", ["", "changelog/", "anything-else/"])
def test_a_zip_upload_keeps_its_files_with_skill_md_at_the_root_or_in_one_top_folder(
    db: Session, folder: str
) -> None:
    owner = _owner(db)
    junk = [("__MACOSX/._SKILL.md", b"junk"), (f"{folder}.DS_Store", b"junk")]
    package = make_zip(
        [
            (f"{folder}SKILL.md", CHANGELOG.encode()),
            (_executable(f"{folder}scripts/collect.sh"), COLLECT),
            (f"{folder}reference/labels.md", b"- feature\n"),
            *junk,
        ]
    )

    version = _upload(db, owner, package, "changelog.zip").version

    assert version.kind == "zip"
    assert [(f.path, f.executable) for f in version.files] == [
        ("SKILL.md", False),
        ("reference/labels.md", False),
        ("scripts/collect.sh", True),
    ]
    assert version.size == len(CHANGELOG) + len(COLLECT) + len(b"- feature\n")


def test_a_downloaded_zip_has_skill_md_at_its_root_and_uploads_again_unchanged(db: Session) -> None:
    owner = _owner(db)
    first = _upload(db, owner, _skill_zip(folder="changelog/"), "changelog.zip")

    content = skills.open_skill_content(db, owner.account_id, owner.app_id, first.skill.id)
    downloaded = b"".join(content.chunks)

    assert (content.filename, content.media_type) == ("changelog-v1.zip", "application/zip")
    assert content.size == len(downloaded)
    with zipfile.ZipFile(io.BytesIO(downloaded)) as archive:
        assert archive.namelist() == ["SKILL.md", "reference/labels.md", "scripts/collect.sh"]
        assert archive.getinfo("scripts/collect.sh").external_attr >> 16 & 0o111
    again = _upload(db, owner, downloaded, content.filename)
    assert (again.new_skill, again.new_version, again.version.number) == (False, False, 1)
    assert again.version.content_sha256 == first.version.content_sha256


def _with_front_matter(front_matter: str, body: str = "Body.\n") -> str:
    return f"---\n{front_matter}---\n{body}"


FRONT_MATTER_ERRORS: dict[str, tuple[str, str]] = {
    "no_front_matter": ("# Just markdown\n", "front_matter"),
    "unclosed_front_matter": ("---\nname: x\ndescription: y\n", "front_matter"),
    "not_yaml": (_with_front_matter("name: [unclosed\n"), "front_matter"),
    "a_list": (_with_front_matter("- name\n- description\n"), "front_matter"),
    "empty": (_with_front_matter(""), "name"),
    "no_name": (_with_front_matter("description: Does it.\n"), "name"),
    "name_upper_case": (_with_front_matter("name: Changelog\ndescription: d\n"), "name"),
    "name_with_space": (_with_front_matter("name: change log\ndescription: d\n"), "name"),
    "name_leading_hyphen": (_with_front_matter("name: -changelog\ndescription: d\n"), "name"),
    "name_trailing_hyphen": (_with_front_matter("name: changelog-\ndescription: d\n"), "name"),
    "name_double_hyphen": (_with_front_matter("name: change--log\ndescription: d\n"), "name"),
    "name_too_long": (_with_front_matter(f"name: {'a' * 65}\ndescription: d\n"), "name"),
    "name_a_number": (_with_front_matter("name: 42\ndescription: d\n"), "name"),
    "name_unicode": (_with_front_matter("name: café\ndescription: d\n"), "name"),
    "no_description": (_with_front_matter("name: changelog\n"), "description"),
    "blank_description": (
        _with_front_matter("name: changelog\ndescription: '  '\n"),
        "description",
    ),
    "description_too_long": (
        _with_front_matter(f"name: changelog\ndescription: {'d' * 1025}\n"),
        "description",
    ),
    "description_a_map": (
        _with_front_matter("name: changelog\ndescription: {a: b}\n"),
        "description",
    ),
    "license_a_number": (_with_front_matter("name: c\ndescription: d\nlicense: 2.0\n"), "license"),
    "compatibility_too_long": (
        _with_front_matter(f"name: c\ndescription: d\ncompatibility: {'c' * 501}\n"),
        "compatibility",
    ),
    "metadata_a_list": (_with_front_matter("name: c\ndescription: d\nmetadata: [a]\n"), "metadata"),
    "metadata_number_value": (
        _with_front_matter("name: c\ndescription: d\nmetadata:\n  version: 1.0\n"),
        "metadata",
    ),
    "allowed_tools_a_map": (
        _with_front_matter("name: c\ndescription: d\nallowed-tools: {bash: yes}\n"),
        "allowed-tools",
    ),
}


@pytest.mark.parametrize("case", sorted(FRONT_MATTER_ERRORS))
@pytest.mark.parametrize("as_zip", [False, True], ids=["md", "zip"])
def test_a_front_matter_error_names_its_field_and_stores_nothing(
    db: Session, case: str, as_zip: bool
) -> None:
    owner = _owner(db)
    text, field = FRONT_MATTER_ERRORS[case]
    data = make_zip([("SKILL.md", text.encode())]) if as_zip else text.encode()
    with pytest.raises(InvalidInput) as refused:
        _upload(db, owner, data, "skill.zip" if as_zip else "SKILL.md")
    assert refused.value.field == field, refused.value.message
    if field not in ("front_matter",):
        assert field in refused.value.message
    assert _counts(db) == (0, 0, 0)


def test_fields_the_format_does_not_define_are_kept_in_skill_md_and_not_refused(
    db: Session,
) -> None:
    owner = _owner(db)
    text = _with_front_matter("name: changelog\ndescription: d\nuser-invocable: true\n")
    version = _upload(db, owner, text).version
    assert "user-invocable: true" in version.skill_md and version.description == "d"


# --- hostile packages: every archive attack of the `.agent` import suite ----------------

BASE = [("SKILL.md", CHANGELOG.encode())]
HOSTILE: dict[str, tuple[Callable[[], bytes], str]] = {
    **zip_attacks(BASE),
    # What only a skill package can get wrong.
    "no_skill_md": (lambda: make_zip([("README.md", b"# hi")]), "has no SKILL.md at its root"),
    "skill_md_two_folders_down": (
        lambda: make_zip([("a/b/SKILL.md", CHANGELOG.encode())]),
        "has no SKILL.md at its root or in one top folder",
    ),
    "two_top_folders": (
        lambda: make_zip([("a/SKILL.md", CHANGELOG.encode()), ("b/other.md", b"x")]),
        "has no SKILL.md at its root or in one top folder",
    ),
    "a_file_and_a_folder": (
        lambda: make_zip([*BASE, ("scripts", b"x"), ("scripts/run.sh", b"y")]),
        "both a file and a folder",
    ),
    "skill_md_not_utf8": (
        lambda: make_zip([("SKILL.md", b"---\nname: c\ndescription: \xff\xfe\n---\n")]),
        "not UTF-8",
    ),
    "skill_md_with_nul": (
        lambda: make_zip([("SKILL.md", CHANGELOG.encode() + b"\x00")]),
        "NUL",
    ),
    "skill_md_over_1_mib": (
        lambda: make_zip([("SKILL.md", CHANGELOG.encode() + b"a" * (1024 * 1024))]),
        "SKILL.md is larger than 1 MiB",
    ),
}


def _refused(
    db: Session, owner: Owner, package: bytes, message: str, name: str = "skill.zip"
) -> None:
    before = _counts(db)
    with pytest.raises(InvalidInput, match=message) as refused:
        _upload(db, owner, package, name)
    assert refused.value.message.startswith("This skill cannot be uploaded:")
    assert refused.value.field == "file"
    assert _counts(db) == before == (0, 0, 0)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_or_broken_package_is_refused_and_creates_nothing(db: Session, case: str) -> None:
    build, message = HOSTILE[case]
    _refused(db, _owner(db), build(), message)


def test_a_file_that_is_neither_markdown_nor_a_zip_is_refused(db: Session) -> None:
    _refused(db, _owner(db), b"\x00\x01binary", "upload a SKILL.md", name="tool.bin")


def test_a_package_declaring_huge_entry_counts_is_refused_before_parsing_them(db: Session) -> None:
    _refused(
        db, _owner(db), hostile_zips.declaring_huge_entry_counts(make_zip(BASE)), "at most 512"
    )


def test_a_package_hiding_tens_of_thousands_of_entries_is_refused(db: Session) -> None:
    owner = _owner(db)
    package = hostile_zips.hiding_entries(BASE)
    tracemalloc.start()
    try:
        _refused(db, owner, package, "file list is too large")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024


def test_a_package_of_exactly_512_entries_is_accepted(db: Session) -> None:
    owner = _owner(db)
    package = make_zip([*BASE, *[(f"reference/{i}.md", b"") for i in range(511)]])
    assert len(_upload(db, owner, package, "skill.zip").version.files) == 512


def test_an_upload_over_16_mib_is_refused(db: Session) -> None:
    _refused(db, _owner(db), b"PK" + b"\0" * (16 * 1024 * 1024), "larger than 16 MiB")


def test_an_entry_over_16_mib_is_refused(db: Session) -> None:
    owner = _owner(db)
    big = make_zip([*BASE, ("data/big.bin", b"a" * (16 * 1024 * 1024 + 1))])
    assert len(big) < 16 * 1024 * 1024  # compressed it fits: the entry's own size refuses it
    _refused(db, owner, big, "larger than 16 MiB")


def test_entries_unpacking_to_over_32_mib_in_total_are_refused(db: Session) -> None:
    owner = _owner(db)
    chunk = b"b" * (15 * 1024 * 1024)
    package = make_zip([*BASE, *[(f"data/{i}.bin", chunk) for i in range(3)]])
    _refused(db, owner, package, "unpacks to more than 32 MiB")


@pytest.fixture(scope="module")
def compression_bomb() -> bytes:
    return hostile_zips.compression_bomb(BASE, "data/zeros.bin")


def test_a_compression_bomb_is_refused_quickly_without_inflating_it(
    db: Session, compression_bomb: bytes
) -> None:
    owner = _owner(db)
    for package, message in (
        (compression_bomb, "larger than 16 MiB"),
        (hostile_zips.lying(compression_bomb, b"data/zeros.bin", 1000), "is damaged"),
    ):
        tracemalloc.start()
        started = time.monotonic()
        try:
            _refused(db, owner, package, message)
            elapsed = time.monotonic() - started
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert elapsed < 5
        assert peak < 64 * 1024 * 1024


# --- versions and bindings ---------------------------------------------------------------

CHANGELOG_V2 = CHANGELOG.replace("Group them by label.", "Group them by label, newest first.")


def test_a_second_upload_makes_version_2_and_a_pinned_agent_keeps_version_1(db: Session) -> None:
    owner = _owner(db)
    first = _upload(db, owner, CHANGELOG)
    skill_id = first.skill.id
    pinned = _agent(db, owner, [f"{skill_id}@1"], name="Pinned")
    follower = _agent(db, owner, [skill_id], name="Follower")

    second = _upload(db, owner, CHANGELOG_V2)

    assert (second.new_skill, second.new_version, second.skill.id) == (False, True, skill_id)
    assert (second.version.number, second.skill.latest_version) == (2, 2)
    assert [
        v.number for v in skills.list_skill_versions(db, owner.account_id, owner.app_id, skill_id)
    ] == [2, 1]
    assert (
        skills.get_skill_version(db, owner.account_id, owner.app_id, skill_id, 1).skill_md
        == CHANGELOG
    )
    [kept] = skills.bound_skills(db, owner.app_id, pinned.skills)
    [moved] = skills.bound_skills(db, owner.app_id, follower.skills)
    assert (kept.version, kept.pinned, kept.version_id) == (1, True, first.version.id)
    assert (moved.version, moved.pinned, moved.version_id) == (2, False, second.version.id)
    for agent in (pinned, follower):
        assert agents.readiness(db, agent).warnings == []
    # The same content again makes no version 3.
    third = _upload(db, owner, CHANGELOG_V2)
    assert (third.new_version, third.version.number) == (False, 2)
    # The pinned version downloads as it was.
    old = skills.open_skill_content(db, owner.account_id, owner.app_id, skill_id, 1)
    assert b"".join(old.chunks) == CHANGELOG.encode()


def test_the_run_spec_lists_the_versions_the_bindings_resolve_to_and_leaves_missing_ones_out(
    db: Session,
) -> None:
    owner = _owner(db)
    skill_id = _upload(db, owner, CHANGELOG).skill.id
    _upload(db, owner, CHANGELOG_V2)
    agent = _agent(db, owner, [f"{skill_id}@1", "01MISSINGSKILL000000000000"])
    thread = create_session(db, owner.account_id, owner.app_id, agent.id)
    sent = send_message(db, owner.account_id, thread.id, "Write the changelog")

    plan, events = plan_boot(db, sent.run.id)

    assert plan is not None, events
    spec = json.loads(plan.payload_json)["execution_spec"]
    assert spec["skills"] == [
        {
            "id": skill_id,
            "name": "changelog",
            "description": "Write release notes from merged pull requests. Use when asked for a changelog.",
            "version": 1,
            "path": "/opt/mosoo/skills/changelog/SKILL.md",
        }
    ]
    assert [bound.version for bound in plan.skills] == [1]
    run = db.get(SessionRun, sent.run.id)
    assert run is not None
    assert run.snapshot["bindings"]["skills"] == [f"{skill_id}@1", "01MISSINGSKILL000000000000"]


@pytest.mark.parametrize(
    "bindings",
    [["not an id"], ["01ABC@0"], ["01ABC@v2"], ["01ABC@"], ["@1"], [7], "01ABC"],
    ids=["spaces", "version_0", "version_text", "no_version", "no_id", "a_number", "not_a_list"],
)
def test_bindings_are_an_id_or_an_id_at_a_version(db: Session, bindings: object) -> None:
    owner = _owner(db)
    agent = agents.create_agent(db, owner.account_id, owner.app_id, name="A")
    with pytest.raises(InvalidInput) as refused:
        agents.update_agent(
            db,
            owner.account_id,
            owner.app_id,
            agent.id,
            agents.AgentChanges(skills=bindings),  # type: ignore[arg-type]
        )
    assert refused.value.field == "skills"


def test_a_skill_bound_twice_keeps_its_first_binding_and_33_skills_are_too_many(
    db: Session,
) -> None:
    owner = _owner(db)
    agent = agents.create_agent(db, owner.account_id, owner.app_id, name="A")
    saved = agents.update_agent(
        db,
        owner.account_id,
        owner.app_id,
        agent.id,
        agents.AgentChanges(skills=["01ABC@2", "01DEF", "01ABC", "01DEF"]),
    )
    assert saved.skills == ["01ABC@2", "01DEF"]
    with pytest.raises(InvalidInput, match="at most 32"):
        agents.update_agent(
            db,
            owner.account_id,
            owner.app_id,
            agent.id,
            agents.AgentChanges(skills=[f"01S{i:03d}" for i in range(33)]),
        )


def test_a_pin_to_a_version_the_skill_does_not_have_is_missing(db: Session) -> None:
    owner = _owner(db)
    skill_id = _upload(db, owner, CHANGELOG).skill.id
    agent = _agent(db, owner, [f"{skill_id}@5"])
    ready = agents.readiness(db, agent)
    assert ready.ready
    assert [(w.code, w.message) for w in ready.warnings] == [
        ("skill_missing", "Skill changelog version 5 is missing; runs go without it.")
    ]


def test_the_skill_lists_the_agents_that_bind_it(db: Session) -> None:
    owner = _owner(db)
    skill_id = _upload(db, owner, CHANGELOG).skill.id
    pinned = _agent(db, owner, [f"{skill_id}@1"], name="Pinned")
    follower = _agent(db, owner, [skill_id], name="Follower")
    _agent(db, owner, [], name="Unrelated")
    agents.publish_agent(db, owner.account_id, owner.app_id, follower.id)
    agents.update_agent(
        db, owner.account_id, owner.app_id, follower.id, agents.AgentChanges(skills=[])
    )

    uses = skills.get_skill(db, owner.account_id, owner.app_id, skill_id).used_by

    assert [(u.agent_name, u.version, u.published_version) for u in uses] == [
        ("Follower", None, 1),  # only its published version binds it now
        ("Pinned", 1, None),
    ]
    assert {u.agent_id for u in uses} == {pinned.id, follower.id}


def test_a_pet_sandbox_shows_skills_pending_when_a_followed_skill_gets_a_new_version(
    db: Session,
) -> None:
    owner = _owner(db)
    skill_id = _upload(db, owner, CHANGELOG).skill.id
    agent = _agent(db, owner, [skill_id])
    built = agents.sandbox_fingerprint(
        agent, "rev", [b.version_id for b in skills.bound_skills(db, owner.app_id, agent.skills)]
    )
    _upload(db, owner, CHANGELOG_V2)
    now = [b.version_id for b in skills.bound_skills(db, owner.app_id, agent.skills)]
    assert agents.pending_sandbox_fields(agent, built, "rev", now) == ["skills"]
    assert (
        agents.pending_sandbox_fields(
            agent, agents.sandbox_fingerprint(agent, "rev", now), "rev", now
        )
        == []
    )
    # Without skills the label is what it was before skills had versions.
    bare = _agent(db, owner, [], name="Bare")
    assert agents.sandbox_fingerprint(bare, "rev") == agents.sandbox_fingerprint(bare, "rev", ["x"])


# --- uninstall and fork ------------------------------------------------------------------


def test_an_uninstalled_skill_is_missing_for_the_agents_that_bind_it(db: Session) -> None:
    owner = _owner(db)
    skill_id = _upload(db, owner, CHANGELOG).skill.id
    agent = _agent(db, owner, [skill_id])

    skills.uninstall_skill(db, owner.account_id, owner.app_id, skill_id)

    assert skills.list_skills(db, owner.account_id, owner.app_id) == []
    with pytest.raises(NotFound):
        skills.get_skill(db, owner.account_id, owner.app_id, skill_id)
    assert skills.bound_skills(db, owner.app_id, agent.skills) == []
    ready = agents.readiness(db, agent)
    assert ready.ready
    assert [(w.code, w.field, w.message) for w in ready.warnings] == [
        ("skill_missing", "skills", "Skill changelog is missing; runs go without it.")
    ]
    # The name is free again: the same upload is a new skill, which the old binding is not.
    again = _upload(db, owner, CHANGELOG)
    assert again.new_skill and again.skill.id != skill_id
    assert [w.code for w in agents.readiness(db, agent).warnings] == ["skill_missing"]


def test_a_fork_is_a_new_skill_with_a_new_name_and_the_same_files(db: Session) -> None:
    owner = _owner(db)
    source = _upload(db, owner, _skill_zip(), "changelog.zip")
    _upload(db, owner, _skill_zip(CHANGELOG_V2), "changelog.zip")

    fork = skills.fork_skill(
        db, owner.account_id, owner.app_id, source.skill.id, "release-notes", version=1
    )

    assert (fork.name, fork.latest_version) == ("release-notes", 1)
    assert fork.id != source.skill.id
    assert fork.latest.skill_md == CHANGELOG.replace("name: changelog", "name: release-notes")
    assert fork.latest.description == source.version.description
    assert [(f.path, f.executable) for f in fork.latest.files] == [
        (f.path, f.executable) for f in source.version.files
    ]
    assert sorted(s.name for s in skills.list_skills(db, owner.account_id, owner.app_id)) == [
        "changelog",
        "release-notes",
    ]
    with pytest.raises(FieldConflict) as taken:
        skills.fork_skill(db, owner.account_id, owner.app_id, source.skill.id, "release-notes")
    assert (taken.value.field, taken.value.code) == ("name", "name_taken")
    with pytest.raises(InvalidInput) as bad:
        skills.fork_skill(db, owner.account_id, owner.app_id, source.skill.id, "Release Notes")
    assert bad.value.field == "name"


def test_another_owners_skill_is_not_found_everywhere(db: Session) -> None:
    owner = _owner(db)
    skill_id = _upload(db, owner, CHANGELOG).skill.id
    other = _owner(db, "other@example.com")
    calls: list[Callable[[], object]] = [
        lambda: skills.skill_app_id(db, other.account_id, skill_id),
        lambda: skills.get_skill(db, other.account_id, other.app_id, skill_id),
        lambda: skills.get_skill(db, other.account_id, owner.app_id, skill_id),
        lambda: skills.list_skill_versions(db, other.account_id, owner.app_id, skill_id),
        lambda: skills.open_skill_content(db, other.account_id, owner.app_id, skill_id),
        lambda: skills.fork_skill(db, other.account_id, owner.app_id, skill_id, "mine"),
        lambda: skills.uninstall_skill(db, other.account_id, owner.app_id, skill_id),
        lambda: skills.list_skills(db, other.account_id, owner.app_id),
        lambda: skills.upload_skill(db, other.account_id, owner.app_id, CHANGELOG.encode(), "a.md"),
    ]
    for call in calls:
        with pytest.raises(NotFound):
            call()
    assert skills.get_skill(db, owner.account_id, owner.app_id, skill_id).latest_version == 1
    # Another App's binding to it is missing there.
    assert skills.bound_skills(db, other.app_id, [skill_id]) == []


# --- `.agent` packages -------------------------------------------------------------------


def test_export_then_import_recreates_the_skills_in_another_app(db: Session) -> None:
    owner = _owner(db)
    zipped = _upload(db, owner, _skill_zip(), "changelog.zip")
    _upload(db, owner, _skill_zip(CHANGELOG_V2), "changelog.zip")
    lone = _upload(db, owner, _with_front_matter("name: tone\ndescription: Be brief.\n"), "tone.md")
    agent = _agent(db, owner, [f"{zipped.skill.id}@1", lone.skill.id])
    package = agents.export_agent(db, owner.account_id, owner.app_id, agent.id)
    with zipfile.ZipFile(io.BytesIO(package)) as archive:
        manifest = json.loads(archive.read("manifest.json"))
        assert sorted(archive.namelist()) == [
            "manifest.json",
            "skills/changelog/SKILL.md",
            "skills/changelog/reference/labels.md",
            "skills/changelog/scripts/collect.sh",
            "skills/tone/SKILL.md",
        ]
        assert archive.read("skills/changelog/SKILL.md") == CHANGELOG.encode()  # version 1
    assert [(s["name"], s["version"], s["pinned"], s["kind"]) for s in manifest["skills"]] == [
        ("changelog", 1, True, "zip"),
        ("tone", 1, False, "md"),
    ]
    elsewhere = _owner(db, "elsewhere@example.com")

    report = agents.import_agent(db, elsewhere.account_id, elsewhere.app_id, package)

    assert not any("skill" in line for line in report.reconnect)
    assert "Added the skill changelog." in report.notes and "Added the skill tone." in report.notes
    imported = agents.get_agent(db, elsewhere.account_id, elsewhere.app_id, report.agent_id)
    recreated = {s.name: s for s in skills.list_skills(db, elsewhere.account_id, elsewhere.app_id)}
    assert set(recreated) == {"changelog", "tone"}
    changelog, tone = recreated["changelog"], recreated["tone"]
    assert imported.skills == [f"{changelog.id}@1", tone.id]
    assert changelog.latest.content_sha256 == zipped.version.content_sha256
    assert [(f.path, f.executable) for f in changelog.latest.files] == [
        (f.path, f.executable) for f in zipped.version.files
    ]
    assert (tone.latest.kind, tone.latest.skill_md) == ("md", lone.version.skill_md)
    assert agents.readiness(db, imported).warnings == []


def test_import_reuses_a_skill_with_the_same_content_and_versions_one_that_differs(
    db: Session,
) -> None:
    owner = _owner(db)
    skill_id = _upload(db, owner, CHANGELOG).skill.id
    package = agents.export_agent(
        db, owner.account_id, owner.app_id, _agent(db, owner, [skill_id]).id
    )

    same = agents.import_agent(db, owner.account_id, owner.app_id, package)
    assert agents.get_agent(db, owner.account_id, owner.app_id, same.agent_id).skills == [skill_id]
    assert "Used the App's skill changelog (version 1, the same content)." in same.notes

    elsewhere = _owner(db, "elsewhere@example.com")
    theirs = _upload(db, elsewhere, CHANGELOG_V2).skill.id
    report = agents.import_agent(db, elsewhere.account_id, elsewhere.app_id, package)
    assert "Added version 2 of the skill changelog." in report.notes
    assert agents.get_agent(db, elsewhere.account_id, elsewhere.app_id, report.agent_id).skills == [
        theirs
    ]
    [bound] = skills.bound_skills(db, elsewhere.app_id, [theirs])
    assert (
        bound.version == 2
        and bound.content_sha256 == skills.parse_upload(CHANGELOG.encode(), "a.md").content_sha256
    )


def _package_with(skill_entries: list[tuple[str, bytes]], item: dict[str, object]) -> bytes:
    manifest = {
        "format": "mosoo.agent",
        "version": 1,
        "agent": {"name": "Imported"},
        "provider": None,
        "skills": [item],
        "mcp_servers": [],
        "environment": None,
    }
    return make_zip([("manifest.json", json.dumps(manifest).encode()), *skill_entries])


@pytest.mark.parametrize(
    ("entries", "item", "message"),
    [
        ([], {"name": "changelog"}, "has no skills/changelog/SKILL.md"),
        (
            [("skills/changelog/SKILL.md", b"# no front matter")],
            {"name": "changelog"},
            "the skill changelog: .*front matter",
        ),
        (
            [
                (
                    "skills/changelog/SKILL.md",
                    CHANGELOG.replace("changelog\n", "other\n", 1).encode(),
                )
            ],
            {"name": "changelog"},
            "is named other in its SKILL.md",
        ),
        ([("skills/Bad/SKILL.md", CHANGELOG.encode())], {"name": "Bad"}, "not a skill name"),
        (
            [("skills/changelog/SKILL.md", CHANGELOG.encode())],
            {"name": "changelog", "pinned": "yes"},
            "pinned must be true or false",
        ),
        (
            [("skills/changelog/SKILL.md", CHANGELOG.encode())],
            {"name": "changelog", "url": "https://example.com"},
            "unknown fields of skills",
        ),
        (
            [("skills/changelog/SKILL.md", CHANGELOG.encode()), ("skills/changelog/.env", b"K=1")],
            {"name": "changelog"},
            "looks like a secret",
        ),
    ],
    ids=[
        "no_files",
        "bad_front_matter",
        "other_name",
        "bad_name",
        "pinned_text",
        "unknown_field",
        "secret",
    ],
)
def test_an_import_with_a_broken_skill_is_refused_and_creates_nothing(
    db: Session, entries: list[tuple[str, bytes]], item: dict[str, object], message: str
) -> None:
    owner = _owner(db)
    with pytest.raises(InvalidInput, match=message) as refused:
        agents.import_agent(db, owner.account_id, owner.app_id, _package_with(entries, item))
    assert refused.value.message.startswith("This package cannot be imported:")
    assert _counts(db) == (0, 0, 0)
    assert db.exec(select(func.count()).select_from(Agent)).one() == 0


# --- on the host -------------------------------------------------------------------------


def test_a_version_is_extracted_once_read_only_with_its_executable_bits(db: Session) -> None:
    owner = _owner(db)
    skill_id = _upload(db, owner, _skill_zip(), "changelog.zip").skill.id
    [bound] = skills.bound_skills(db, owner.app_id, [skill_id])

    [mount] = skill_files.skill_mounts([bound])

    assert mount.target == "/opt/mosoo/skills/changelog" and mount.read_only
    assert mount.source == get_settings().data_dir.resolve() / "skills" / bound.version_id
    assert (mount.source / "SKILL.md").read_text() == CHANGELOG
    assert os.access(mount.source / "scripts" / "collect.sh", os.X_OK)
    modes = {
        p.relative_to(mount.source).as_posix(): stat.S_IMODE(p.stat().st_mode)
        for p in mount.source.rglob("*")
    }
    assert modes == {
        "SKILL.md": 0o444,
        "reference": 0o555,
        "reference/labels.md": 0o444,
        "scripts": 0o555,
        "scripts/collect.sh": 0o555,
    }
    assert stat.S_IMODE(mount.source.stat().st_mode) == 0o555
    written = (mount.source / "SKILL.md").stat().st_mtime_ns
    assert skill_files.extracted_skill(bound) == mount.source  # once: the second call reuses it
    assert (mount.source / "SKILL.md").stat().st_mtime_ns == written
    assert [p.name for p in mount.source.parent.iterdir()] == [bound.version_id]  # no partial left
