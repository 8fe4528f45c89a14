"""The Skills pages' calls (`mosoo_web.pages.skills.services`) and the console's download of
a version (`/api/skills/{id}/versions/{n}/content`, session cookie): what the list and the
detail page show, uploads (a refusal names its field and stores nothing), a new version
that must keep the skill's name, fork, uninstall."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session, func, select

from mosoo_core import agents, identity, vault
from mosoo_core.errors import FieldConflict, InvalidInput, NotFound
from mosoo_core.settings import get_settings
from mosoo_core.tables.skills import Skill, SkillVersion
from mosoo_web.api import build_api
from mosoo_web.pages.skills import services
from tests.support.hostile_zips import make_zip

REVIEW = """\
---
name: code-review
description: Review a pull request for bugs and style. Use when asked to review code.
license: MIT
allowed-tools: read grep
metadata:
  author: mosoo
---
# Code review

1. Read the diff **twice**.
2. Run `scripts/lint.sh`.

<script>alert("not run")</script>
"""
REVIEW_V2 = REVIEW.replace("Read the diff **twice**.", "Read the diff three times.")


@dataclass(frozen=True)
class Owner:
    account_id: str
    app_id: str
    token: str  # a console session


def _owner(engine: Engine, email: str = "skills-page@example.com") -> Owner:
    with Session(engine) as db:
        account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
        owner = Owner(
            account.id,
            identity.list_apps(db, account.id)[0].id,
            identity.start_session(db, account.id, method="email").token,
        )
        db.commit()
    return owner


def _agent(engine: Engine, owner: Owner, name: str, bindings: list[str]) -> str:
    with Session(engine) as db:
        credential = vault.create_provider_credential(
            db,
            owner.account_id,
            owner.app_id,
            vault.ProviderCredentialInput(
                name=f"Key for {name}",
                provider="openai_compatible",
                base_url="http://10.0.0.5:8000/v1",
                api_key="sk-console-skills-" + "x" * 24,
                models=["model-a"],
            ),
        )
        agent_id = agents.create_agent(db, owner.account_id, owner.app_id, name=name).id
        agents.update_agent(
            db,
            owner.account_id,
            owner.app_id,
            agent_id,
            agents.AgentChanges(
                provider_credential_id=credential.id, model="model-a", skills=bindings
            ),
        )
        db.commit()
    return agent_id


def _counts(engine: Engine) -> tuple[int, int]:
    with Session(engine) as db:
        return (
            int(db.exec(select(func.count()).select_from(Skill)).one()),
            int(db.exec(select(func.count()).select_from(SkillVersion)).one()),
        )


def _upload(owner: Owner, text: str, filename: str = "SKILL.md") -> services.Uploaded:
    return services.upload(owner.account_id, owner.app_id, text.encode(), filename)


# --- the list ----------------------------------------------------------------------------


def test_the_list_shows_each_skill_with_its_latest_version_count_and_agents(
    engine: Engine,
) -> None:
    owner = _owner(engine)
    review = _upload(owner, REVIEW)
    _upload(owner, REVIEW_V2)
    notes = _upload(owner, "---\nname: notes\ndescription: Take notes.\n---\nWrite them down.\n")
    _agent(engine, owner, "Reviewer", [review.skill_id])
    _agent(engine, owner, "Pinned reviewer", [f"{review.skill_id}@1"])

    rows = services.list_rows(owner.account_id, owner.app_id)

    assert [(r.name, r.latest_version, r.versions, r.used_count) for r in rows] == [
        ("code-review", 2, 2, 2),
        ("notes", 1, 1, 0),
    ]
    assert rows[0].description.startswith("Review a pull request")
    assert rows[0].used_by == "Pinned reviewer, Reviewer"
    assert rows[1].id == notes.skill_id and rows[1].used_by == ""


# --- uploads -----------------------------------------------------------------------------


def test_an_upload_makes_a_skill_then_a_version_and_identical_content_makes_none(
    engine: Engine,
) -> None:
    owner = _owner(engine)

    first = _upload(owner, REVIEW, "review.md")
    second = _upload(owner, REVIEW_V2, "review.md")
    same = _upload(owner, REVIEW_V2, "again.md")

    assert (first.new_skill, first.new_version, first.number) == (True, True, 1)
    assert first.message == "Uploaded code-review, version 1."
    assert (second.skill_id, second.new_skill, second.number) == (first.skill_id, False, 2)
    assert second.message == "Uploaded code-review version 2."
    assert (same.new_version, same.number) == (False, 2)
    assert same.message == "code-review is unchanged: version 2 has the same content."
    assert _counts(engine) == (1, 2)


@pytest.mark.parametrize(
    ("text", "filename", "field", "words"),
    [
        ("---\nname: code-review\n---\nNo description.\n", "SKILL.md", "description", "missing"),
        ("---\nname: Code Review\ndescription: x\n---\n", "SKILL.md", "name", "lower-case"),
        ("# No front matter\n", "SKILL.md", "front_matter", "front matter"),
        ("just text", "notes.txt", "file", "upload a SKILL.md"),
    ],
)
def test_a_refused_upload_names_its_field_and_stores_nothing(
    engine: Engine, text: str, filename: str, field: str, words: str
) -> None:
    owner = _owner(engine)

    with pytest.raises(InvalidInput) as refused:
        _upload(owner, text, filename)

    assert refused.value.field == field
    assert words in refused.value.message
    assert _counts(engine) == (0, 0)
    assert services.list_rows(owner.account_id, owner.app_id) == []


def test_a_new_version_from_the_skills_page_must_keep_the_skills_name(engine: Engine) -> None:
    owner = _owner(engine)
    review = _upload(owner, REVIEW)
    other = REVIEW_V2.replace("name: code-review", "name: other-review")

    with pytest.raises(InvalidInput) as refused:
        services.upload_version(
            owner.account_id, owner.app_id, review.skill_id, other.encode(), "SKILL.md"
        )
    assert refused.value.field == "name"
    assert "must keep name: code-review" in refused.value.message
    assert _counts(engine) == (1, 1)  # neither a version nor a skill named other-review

    added = services.upload_version(
        owner.account_id, owner.app_id, review.skill_id, REVIEW_V2.encode(), "SKILL.md"
    )
    assert (added.skill_id, added.number, added.new_version) == (review.skill_id, 2, True)


# --- the detail page ---------------------------------------------------------------------


def test_the_detail_shows_the_latest_version_rendered_its_fields_versions_and_agents(
    engine: Engine,
) -> None:
    owner = _owner(engine)
    review = _upload(owner, REVIEW)
    package = make_zip(
        [
            ("code-review/SKILL.md", REVIEW_V2.encode()),
            ("code-review/scripts/lint.sh", b"#!/bin/sh\nexit 0\n"),
        ]
    )
    services.upload(owner.account_id, owner.app_id, package, "code-review.zip")
    follower = _agent(engine, owner, "Reviewer", [review.skill_id])
    _agent(engine, owner, "Pinned reviewer", [f"{review.skill_id}@1"])
    with Session(engine) as db:
        agents.publish_agent(db, owner.account_id, owner.app_id, follower)
        agents.update_agent(
            db, owner.account_id, owner.app_id, follower, agents.AgentChanges(skills=[])
        )
        db.commit()

    detail = services.load_detail(owner.account_id, owner.app_id, review.skill_id)

    assert (detail.name, detail.latest_version) == ("code-review", 2)
    shown = detail.shown
    assert shown.number == 2
    assert shown.body.startswith("# Code review\n\n1. Read the diff three times.")
    assert "name:" not in shown.body and "---" not in shown.body  # the front matter is cut off
    assert (shown.license, shown.allowed_tools) == ("MIT", "read grep")
    assert [(m.key, m.value) for m in shown.metadata] == [("author", "mosoo")]
    assert [f.path for f in shown.files] == ["SKILL.md", "scripts/lint.sh"]
    assert [(v.number, v.kind, v.files) for v in detail.versions] == [(2, "zip", 2), (1, "md", 1)]
    assert detail.versions[1].download_href == f"/api/skills/{review.skill_id}/versions/1/content"
    assert [(u.agent_name, u.binding, u.published) for u in detail.users] == [
        ("Pinned reviewer", "Version 1", ""),
        ("Reviewer", "Latest version", "Published version 1"),
    ]

    first = services.load_version(owner.account_id, owner.app_id, review.skill_id, 1)
    assert first.number == 1 and "Read the diff **twice**." in first.body
    with pytest.raises(NotFound):
        services.load_version(owner.account_id, owner.app_id, review.skill_id, 3)


def test_the_body_is_skill_md_after_its_front_matter() -> None:
    assert services.skill_body("\ufeff---\r\nname: a\r\ndescription: b\r\n---\r\n\r\n# A\r\n") == (
        "# A\r\n"
    )
    assert services.skill_body("---\nname: a\ndescription: b\n---\n") == ""
    assert services.skill_body("---\nname: a\n---\nText\n---\nMore\n") == "Text\n---\nMore\n"


def test_another_owners_skill_is_not_found_on_every_call(engine: Engine) -> None:
    owner = _owner(engine)
    other = _owner(engine, "someone-else@example.com")
    skill_id = _upload(owner, REVIEW).skill_id
    calls = [
        lambda: services.load_detail(other.account_id, owner.app_id, skill_id),
        lambda: services.load_detail(other.account_id, other.app_id, skill_id),
        lambda: services.load_version(other.account_id, other.app_id, skill_id, 1),
        lambda: services.upload_version(
            other.account_id, other.app_id, skill_id, REVIEW_V2.encode(), "SKILL.md"
        ),
        lambda: services.fork(other.account_id, other.app_id, skill_id, "mine-now"),
        lambda: services.uninstall(other.account_id, other.app_id, skill_id),
        lambda: services.upload(other.account_id, owner.app_id, REVIEW.encode(), "SKILL.md"),
    ]
    for call in calls:
        with pytest.raises(NotFound):
            call()
    assert _counts(engine) == (1, 1)


# --- fork and uninstall ------------------------------------------------------------------


def test_a_fork_is_a_new_skill_under_the_name_asked_for(engine: Engine) -> None:
    owner = _owner(engine)
    review = _upload(owner, REVIEW)
    _upload(owner, REVIEW_V2)

    new_id, new_name = services.fork(owner.account_id, owner.app_id, review.skill_id, " strict ")

    assert new_name == "strict"
    copy = services.load_detail(owner.account_id, owner.app_id, new_id)
    assert [v.number for v in copy.versions] == [1]
    assert (
        copy.shown.body
        == services.load_detail(owner.account_id, owner.app_id, review.skill_id).shown.body
    )  # a copy of the latest version
    with pytest.raises(FieldConflict) as taken:
        services.fork(owner.account_id, owner.app_id, review.skill_id, "strict")
    assert taken.value.field == "name"
    with pytest.raises(InvalidInput) as malformed:
        services.fork(owner.account_id, owner.app_id, review.skill_id, "Not A Name")
    assert malformed.value.field == "name"
    assert _counts(engine) == (2, 3)


def test_an_uninstalled_skill_leaves_the_list_and_its_agents_warn_that_it_is_missing(
    engine: Engine,
) -> None:
    owner = _owner(engine)
    review = _upload(owner, REVIEW)
    agent_id = _agent(engine, owner, "Reviewer", [f"{review.skill_id}@1"])

    services.uninstall(owner.account_id, owner.app_id, review.skill_id)

    assert services.list_rows(owner.account_id, owner.app_id) == []
    with pytest.raises(NotFound):
        services.load_detail(owner.account_id, owner.app_id, review.skill_id)
    with Session(engine) as db:
        agent = agents.get_agent(db, owner.account_id, owner.app_id, agent_id)
        warnings = agents.readiness(db, agent).warnings
    assert [(w.code, w.message) for w in warnings] == [
        ("skill_missing", "Skill code-review version 1 is missing; runs go without it.")
    ]


# --- the console's download ----------------------------------------------------------------


@pytest.fixture
def client(engine: Engine) -> Iterator[TestClient]:
    with TestClient(build_api(), base_url="http://127.0.0.1") as client:
        yield client


def _get(client: TestClient, token: str | None, path: str) -> httpx.Response:
    client.cookies.clear()
    if token:
        client.cookies.set(get_settings().session_cookie, token)
    return client.get(path)


def test_the_console_downloads_each_version_as_uploaded_with_safe_headers(
    client: TestClient, engine: Engine
) -> None:
    owner = _owner(engine)
    review = _upload(owner, REVIEW)
    package = make_zip(
        [("SKILL.md", REVIEW_V2.encode()), ("scripts/lint.sh", b"#!/bin/sh\nexit 0\n")]
    )
    services.upload(owner.account_id, owner.app_id, package, "review.zip")

    first = _get(client, owner.token, services.download_href(review.skill_id, 1))
    second = _get(client, owner.token, services.download_href(review.skill_id, 2))

    assert first.status_code == 200
    assert first.content == REVIEW.encode()
    assert first.headers["content-type"].startswith("text/markdown")
    assert first.headers["content-disposition"].startswith('attachment; filename="SKILL.md"')
    assert first.headers["x-content-type-options"] == "nosniff"
    assert first.headers["content-security-policy"] == "sandbox"
    assert first.headers["cross-origin-resource-policy"] == "same-origin"
    assert second.status_code == 200
    assert second.headers["content-disposition"].startswith(
        'attachment; filename="code-review-v2.zip"'
    )
    with zipfile.ZipFile(io.BytesIO(second.content)) as archive:
        assert archive.read("SKILL.md") == REVIEW_V2.encode()
        assert sorted(archive.namelist()) == ["SKILL.md", "scripts/lint.sh"]


def test_the_download_needs_the_owners_session_and_a_live_skill_and_version(
    client: TestClient, engine: Engine
) -> None:
    owner = _owner(engine)
    other = _owner(engine, "not-the-owner@example.com")
    skill_id = _upload(owner, REVIEW).skill_id
    path = services.download_href(skill_id, 1)

    assert _get(client, None, path).status_code == 401
    refused = _get(client, other.token, path)
    assert refused.status_code == 404
    assert REVIEW not in refused.text
    assert _get(client, owner.token, services.download_href(skill_id, 2)).status_code == 404
    assert _get(client, owner.token, services.download_href(skill_id, 2**40)).status_code == 404
    services.uninstall(owner.account_id, owner.app_id, skill_id)
    assert _get(client, owner.token, path).status_code == 404
