"""The management API: environments (each change a revision, secrets write-only, refusals
with the field named, delete refused while in use) and agents configured and published from
code with the same services as the Preview form."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core.environments import builds
from mosoo_core.tables.environments import EnvironmentBuild, EnvironmentRevision
from tests.api.conftest import ApiOwner

SECRET = "ghp_ApiSecret9Lr2Xn7TbW4yHc8PmM3kJd6Fs"
V1 = "/api/v1"


def _create(client: TestClient, owner: ApiOwner, **body: Any) -> dict[str, Any]:
    response = client.post(
        f"{V1}/environments", headers=owner.headers, json={"name": "Tools", **body}
    )
    assert response.status_code == 201, response.text
    return dict(response.json())


def test_an_environment_lives_through_its_revisions(client: TestClient, owner: ApiOwner) -> None:
    listed = client.get(f"{V1}/environments", headers=owner.headers).json()["environments"]
    assert [(e["name"], e["is_default"]) for e in listed] == [("Default", True)]

    made = _create(
        client,
        owner,
        setup_script="echo hi",
        variables={
            "REGION": {"value": "eu-west-1"},
            "TOKEN": {"value": SECRET, "secret": True, "setup_only": True},
        },
        network_policy="limited",
        allowed_hosts=["api.example.com", "*.github.com:8443"],
    )
    assert made["app_id"] == owner.app_id and made["current_revision"] == 1
    revision = made["revision"]
    assert revision["network_policy"] == "limited"
    assert revision["allowed_hosts"] == ["*.github.com:8443", "api.example.com"]
    assert {v["name"]: v["value"] for v in revision["variables"]} == {
        "REGION": "eu-west-1",
        "TOKEN": "••••••••",
    }

    env_url = f"{V1}/environments/{made['id']}"
    changed = client.patch(
        env_url,
        headers=owner.headers,
        json={
            "name": "Build tools",
            "allowed_hosts": ["api.example.com"],
            "variables": {
                "REGION": {"value": "us-east-1"},
                "TOKEN": {"secret": True, "setup_only": True},  # kept
            },
        },
    )
    assert changed.status_code == 200, changed.text
    body = changed.json()
    assert (body["name"], body["current_revision"]) == ("Build tools", 2)
    assert body["revision"]["summary"] == "variables changed: REGION; allowed hosts changed"
    # Renaming alone makes no revision; nor does sending the same content.
    same = client.patch(env_url, headers=owner.headers, json={"setup_script": "echo hi"}).json()
    assert same["current_revision"] == 2
    revisions = client.get(f"{env_url}/revisions", headers=owner.headers).json()["revisions"]
    assert [r["number"] for r in revisions] == [2, 1]
    assert revisions[1]["allowed_hosts"] == ["*.github.com:8443", "api.example.com"]

    # The secret is in no answer.
    for url in (env_url, f"{env_url}/revisions", f"{V1}/environments"):
        assert SECRET not in client.get(url, headers=owner.headers).text

    deleted = client.delete(env_url, headers=owner.headers)
    assert deleted.status_code == 200 and deleted.json() == {"id": made["id"], "deleted": True}
    assert client.get(env_url, headers=owner.headers).status_code == 404


def test_bad_content_is_refused_with_the_field_and_nothing_saved(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    made = _create(client, owner)
    env_url = f"{V1}/environments/{made['id']}"
    for body, status, field in (
        ({"network_policy": "limited", "allowed_hosts": ["169.254.169.254"]}, 400, "allowed_hosts"),
        (
            {"network_policy": "limited", "allowed_hosts": ["evil.com@good.com"]},
            400,
            "allowed_hosts",
        ),
        ({"network_policy": "none", "allowed_hosts": ["good.com"]}, 400, None),
        ({"variables": {"PATH": {"value": "/x"}}}, 400, "variables"),
        ({"variables": {"https_proxy": {"value": "x"}}}, 400, "variables"),
        ({"pip": ["requests>=2.32.3"]}, 400, "pip"),  # exact versions only
        ({"npm": ["lodash@^4.17.21"]}, 400, "npm"),
        ({"pip": ["a==1", "A==2"]}, 409, "pip"),  # each entry is fine; together they conflict
        # Well-formed, but what is stored refuses it: a conflict naming the field.
        ({"variables": {"SECRET_ONE": {"secret": True}}}, 409, "variables"),
        ({"allowed_hosts": ["good.com"]}, 409, "allowed_hosts"),  # the stored policy is none
        ({"name": "Default"}, 409, "name"),
    ):
        response = client.patch(env_url, headers=owner.headers, json=body)
        assert response.status_code == status, (body, response.text)
        if field:  # the service names the field; the schema names the entry (`allowed_hosts.0`)
            assert response.json()["error"]["field"].startswith(field), body
    unknown = client.patch(env_url, headers=owner.headers, json={"network": "full"})
    assert unknown.status_code == 400
    with Session(api_env) as db:
        assert len(db.exec(select(EnvironmentRevision)).all()) == 2  # the default's and this one's


def test_delete_is_refused_while_an_agent_binds_it_and_for_the_default(
    client: TestClient, owner: ApiOwner
) -> None:
    made = _create(client, owner)
    bound = client.patch(
        f"{V1}/agents/{owner.agent_id}", headers=owner.headers, json={"environment_id": made["id"]}
    )
    assert bound.status_code == 200, bound.text
    refused = client.delete(f"{V1}/environments/{made['id']}", headers=owner.headers)
    assert refused.status_code == 409
    assert "agent Agent of owner@example.com" in refused.json()["error"]["message"]
    default = client.get(f"{V1}/environments", headers=owner.headers).json()["environments"][0]
    assert (
        client.delete(f"{V1}/environments/{default['id']}", headers=owner.headers).status_code
        == 409
    )


def test_another_owners_app_is_not_found_and_creation_is_idempotent(
    client: TestClient, owner: ApiOwner, other: ApiOwner
) -> None:
    foreign = client.post(
        f"{V1}/environments",
        headers=other.headers,
        json={"name": "Sneaky", "app_id": owner.app_id},
    )
    assert foreign.status_code == 404
    assert (
        client.get(f"{V1}/environments?app_id={owner.app_id}", headers=other.headers).status_code
        == 404
    )
    headers = {**owner.headers, "Idempotency-Key": "env-1"}
    first = client.post(f"{V1}/environments", headers=headers, json={"name": "Once"})
    again = client.post(f"{V1}/environments", headers=headers, json={"name": "Once"})
    assert first.status_code == again.status_code == 201
    assert again.headers["Idempotency-Replayed"] == "true" and again.json() == first.json()
    names = [
        e["name"]
        for e in client.get(f"{V1}/environments", headers=owner.headers).json()["environments"]
    ]
    assert names.count("Once") == 1


def test_an_agent_is_configured_checked_and_published_from_code(
    client: TestClient, owner: ApiOwner
) -> None:
    made = client.post(
        f"{V1}/agents", headers=owner.headers, json={"name": "From CI", "kind": "pet"}
    )
    assert made.status_code == 201, made.text
    agent = made.json()
    assert (agent["status"], agent["kind"], agent["app_id"]) == ("draft", "pet", owner.app_id)
    agent_url = f"{V1}/agents/{agent['id']}"

    readiness = client.get(f"{agent_url}/readiness", headers=owner.headers).json()
    assert readiness["ready"] is False
    assert {b["code"] for b in readiness["blockers"]} == {"no_provider_key", "model_not_set"}
    assert client.post(f"{agent_url}/publish", headers=owner.headers).status_code == 409

    bad = client.patch(agent_url, headers=owner.headers, json={"tools": {"bash": "always"}})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "tools.bash"
    unknown = client.patch(agent_url, headers=owner.headers, json={"tools": {"rm_rf": "allow"}})
    assert unknown.status_code == 400 and unknown.json()["error"]["field"].startswith("tools")
    foreign = client.patch(
        agent_url, headers=owner.headers, json={"environment_id": "01NOSUCHENVIRONMENT0000000"}
    )
    assert foreign.status_code == 200
    blocked = client.get(f"{agent_url}/readiness", headers=owner.headers).json()
    assert "environment_missing" in {b["code"] for b in blocked["blockers"]}

    env = _create(client, owner, setup_script="echo ready")
    ready = client.patch(
        agent_url,
        headers=owner.headers,
        json={
            "provider_credential_id": owner.credential_id,
            "model": "test-model",
            "system_prompt": "Be brief.",
            "tools": {"bash": "ask", "web_fetch": "ask"},
            "environment_id": env["id"],
        },
    )
    assert ready.status_code == 200, ready.text
    assert client.get(f"{agent_url}/readiness", headers=owner.headers).json() == {
        "ready": True,
        "blockers": [],
        "warnings": [],
    }
    published = client.post(
        f"{agent_url}/publish", headers=owner.headers, json={"summary": "From CI"}
    )
    assert published.status_code == 201, published.text
    assert (published.json()["number"], published.json()["summary"]) == (1, "From CI")
    assert client.get(agent_url, headers=owner.headers).json()["published_version"] == 1


def test_packages_are_built_and_rebuilt_through_the_api(
    client: TestClient, owner: ApiOwner, other: ApiOwner, engine: Engine
) -> None:
    made = _create(client, owner)
    assert made["build"] is None  # no packages, nothing to build
    env_url = f"{V1}/environments/{made['id']}"
    refused = client.post(f"{env_url}/rebuild", headers=owner.headers)
    assert refused.status_code == 409 and "no packages" in refused.json()["error"]["message"]
    changed = client.patch(
        env_url, headers=owner.headers, json={"pip": ["rich==13.9.4"], "npm": ["lodash@4.17.21"]}
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["build"]["status"] == "queued"
    assert changed.json()["revision"]["pip"] == ["rich==13.9.4"]
    # While a worker builds it, a rebuild is refused; after it failed, a rebuild queues it.
    with Session(engine) as db:
        packages_hash = db.exec(select(EnvironmentBuild)).one().packages_hash
        grant = builds.claim_build(db, packages_hash, stale_after=120)
        db.commit()
    busy = client.post(f"{env_url}/rebuild", headers=owner.headers)
    assert busy.status_code == 409 and "in progress" in busy.json()["error"]["message"]
    with Session(engine) as db:
        assert grant is not None
        builds.finish_build(db, packages_hash, grant, layer="", log="E: boom", error="x")
        db.commit()
    failed = client.get(env_url, headers=owner.headers).json()["build"]
    assert (failed["status"], failed["log"], failed["attempts"]) == ("failed", "E: boom", 1)
    again = client.post(f"{env_url}/rebuild", headers=owner.headers)
    assert again.status_code == 200 and again.json()["build"]["status"] == "queued"
    # Another owner's environment is not found, for a rebuild as for everything else.
    assert client.post(f"{env_url}/rebuild", headers=other.headers).status_code == 404
