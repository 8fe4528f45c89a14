"""The management API: skills uploaded as multipart (a new skill, then its versions), read,
downloaded as uploaded, bound to agents by id or id@version, and uninstalled."""

from __future__ import annotations

import io
import zipfile
from typing import Any

from fastapi.testclient import TestClient

from tests.api.conftest import ApiOwner
from tests.support.hostile_zips import make_zip

V1 = "/api/v1"
SKILL_MD = b"""\
---
name: changelog
description: Write release notes from merged pull requests.
metadata:
  author: mosoo
---
Run scripts/collect.sh, then group by label.
"""
SKILL_MD_V2 = SKILL_MD.replace(b"group by label", b"group by label, newest first")


def _upload(
    client: TestClient,
    owner: ApiOwner,
    data: bytes,
    name: str = "SKILL.md",
    *,
    status: int = 201,
    **form: str,
) -> dict[str, Any]:
    response = client.post(
        f"{V1}/skills", headers=owner.headers, files={"file": (name, data)}, data=form
    )
    assert response.status_code == status, response.text
    return dict(response.json())


def test_a_skill_lives_through_its_versions(client: TestClient, owner: ApiOwner) -> None:
    first = _upload(client, owner, SKILL_MD)
    skill = first["skill"]
    assert (first["new_skill"], first["new_version"], first["version"]["number"]) == (True, True, 1)
    assert (skill["name"], skill["app_id"], skill["latest_version"]) == (
        "changelog",
        owner.app_id,
        1,
    )
    assert skill["latest"]["metadata"] == {"author": "mosoo"}
    assert skill["latest"]["kind"] == "md" and skill["used_by"] == []

    package = make_zip(
        [("changelog/SKILL.md", SKILL_MD_V2), ("changelog/scripts/collect.sh", b"git log\n")]
    )
    second = _upload(client, owner, package, "changelog.zip", app_id=owner.app_id)
    assert (second["new_skill"], second["version"]["number"]) == (False, 2)
    assert second["skill"]["id"] == skill["id"]
    assert [f["path"] for f in second["version"]["files"]] == ["SKILL.md", "scripts/collect.sh"]

    url = f"{V1}/skills/{skill['id']}"
    got = client.get(url, headers=owner.headers).json()
    assert (got["latest_version"], got["latest"]["kind"]) == (2, "zip")
    versions = client.get(f"{url}/versions", headers=owner.headers).json()["versions"]
    assert [(v["number"], v["kind"]) for v in versions] == [(2, "zip"), (1, "md")]
    listed = client.get(f"{V1}/skills", headers=owner.headers).json()["skills"]
    assert [s["id"] for s in listed] == [skill["id"]]
    assert (
        client.get(f"{V1}/skills", headers=owner.headers, params={"app_id": owner.app_id}).json()[
            "skills"
        ]
        == listed
    )

    # Each version downloads as it was uploaded.
    md = client.get(f"{url}/content", headers=owner.headers, params={"version": 1})
    assert md.status_code == 200 and md.content == SKILL_MD
    assert md.headers["content-type"].startswith("text/markdown")
    assert md.headers["content-disposition"].startswith('attachment; filename="SKILL.md"')
    latest = client.get(f"{url}/content", headers=owner.headers)
    assert latest.headers["content-type"] == "application/zip"
    assert int(latest.headers["content-length"]) == len(latest.content)
    assert 'filename="changelog-v2.zip"' in latest.headers["content-disposition"]
    with zipfile.ZipFile(io.BytesIO(latest.content)) as archive:
        assert archive.namelist() == ["SKILL.md", "scripts/collect.sh"]
    again = _upload(client, owner, latest.content, "changelog-v2.zip")
    assert (again["new_version"], again["version"]["number"]) == (False, 2)
    missing = client.get(f"{url}/content", headers=owner.headers, params={"version": 3})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"

    deleted = client.delete(url, headers=owner.headers)
    assert deleted.status_code == 200 and deleted.json() == {"id": skill["id"], "deleted": True}
    assert client.get(url, headers=owner.headers).status_code == 404
    assert client.get(f"{V1}/skills", headers=owner.headers).json()["skills"] == []


def test_agents_bind_skills_by_id_or_pinned_version_and_readiness_names_a_missing_one(
    client: TestClient, owner: ApiOwner
) -> None:
    skill_id = _upload(client, owner, SKILL_MD)["skill"]["id"]
    agent_url = f"{V1}/agents/{owner.agent_id}"

    bound = client.patch(agent_url, headers=owner.headers, json={"skills": [f"{skill_id}@1"]})
    assert bound.status_code == 200, bound.text
    assert bound.json()["skills"] == [f"{skill_id}@1"]
    skill = client.get(f"{V1}/skills/{skill_id}", headers=owner.headers).json()
    assert [(u["agent_id"], u["version"]) for u in skill["used_by"]] == [(owner.agent_id, 1)]
    assert client.get(f"{agent_url}/readiness", headers=owner.headers).json()["warnings"] == []

    for wrong in (["not an id"], [f"{skill_id}@0"], f"{skill_id}"):
        refused = client.patch(agent_url, headers=owner.headers, json={"skills": wrong})
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["field"].startswith("skills")

    client.delete(f"{V1}/skills/{skill_id}", headers=owner.headers)
    warnings = client.get(f"{agent_url}/readiness", headers=owner.headers).json()["warnings"]
    assert [(w["code"], w["field"]) for w in warnings] == [("skill_missing", "skills")]
    assert "changelog" in warnings[0]["message"]


def test_a_refused_upload_names_the_field_and_stores_nothing(
    client: TestClient, owner: ApiOwner
) -> None:
    for data, name, field in (
        (b"---\nname: Changelog\ndescription: d\n---\n", "SKILL.md", "name"),
        (b"---\nname: changelog\n---\n", "SKILL.md", "description"),
        (b"# no front matter\n", "SKILL.md", "front_matter"),
        (make_zip([("../SKILL.md", SKILL_MD)]), "evil.zip", "file"),
        (b"not a zip", "skill.zip", "file"),
    ):
        refused = _upload(client, owner, data, name, status=400)
        assert refused["error"]["code"] == "invalid_request"
        assert refused["error"]["field"] == field, refused
    assert client.get(f"{V1}/skills", headers=owner.headers).json()["skills"] == []
    no_file = client.post(f"{V1}/skills", headers=owner.headers, data={"app_id": owner.app_id})
    assert no_file.status_code == 400 and no_file.json()["error"]["field"] == "file"
    json_body = client.post(f"{V1}/skills", headers=owner.headers, json={"file": "x"})
    assert json_body.status_code == 400 and json_body.json()["error"]["field"] == "file"


def test_an_upload_over_the_limit_is_refused_before_it_is_read(
    client: TestClient, owner: ApiOwner
) -> None:
    big = b"PK" + b"\0" * (16 * 1024 * 1024 + 1)
    response = client.post(f"{V1}/skills", headers=owner.headers, files={"file": ("big.zip", big)})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


def test_another_owners_app_and_skills_are_not_found(
    client: TestClient, owner: ApiOwner, other: ApiOwner
) -> None:
    skill_id = _upload(client, owner, SKILL_MD)["skill"]["id"]
    into_theirs = _upload(client, other, SKILL_MD, app_id=owner.app_id, status=404)
    assert into_theirs["error"]["code"] == "not_found"
    assert client.get(f"{V1}/skills", headers=other.headers).json()["skills"] == []
    listed = client.get(f"{V1}/skills", headers=other.headers, params={"app_id": owner.app_id})
    assert listed.status_code == 404
    assert client.get(f"{V1}/skills/{skill_id}", headers=owner.headers).status_code == 200


def test_an_upload_with_an_idempotency_key_is_made_once(
    client: TestClient, owner: ApiOwner
) -> None:
    headers = {**owner.headers, "Idempotency-Key": "skill-upload-1"}
    first = client.post(f"{V1}/skills", headers=headers, files={"file": ("SKILL.md", SKILL_MD)})
    assert first.status_code == 201
    replay = client.post(f"{V1}/skills", headers=headers, files={"file": ("SKILL.md", SKILL_MD)})
    assert replay.status_code == 201 and replay.headers["idempotency-replayed"] == "true"
    assert replay.json() == first.json()
    other = client.post(f"{V1}/skills", headers=headers, files={"file": ("SKILL.md", SKILL_MD_V2)})
    assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_conflict"
    versions = client.get(
        f"{V1}/skills/{first.json()['skill']['id']}/versions", headers=owner.headers
    ).json()["versions"]
    assert len(versions) == 1
