"""Skills in sandboxes, on the process backend (bubblewrap; no container is started): a
Pet's runs list exactly the skills its sandbox mounts (a skill bound since waits for Apply,
in the prompt too), and extracted skill versions are collected once no sandbox mounts them
and no run used them for a while, then extracted again by the next run that needs them."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from driver.backends.openai import skills_prompt
from driver.protocol import SKILLS_DIR, BootPayload
from mosoo_core import agents, identity, sessions, skills, vault
from mosoo_core.runtime import runs
from mosoo_core.runtime import skills as skill_files
from mosoo_core.runtime.labels import LABEL_BUILD, installation_label
from mosoo_core.runtime.pets import apply_pet_changes, pet_sandbox_status
from mosoo_core.runtime.sandbox import SandboxRef, SandboxSpec, remove_read_only_tree
from mosoo_core.runtime.sandbox.process_backend import ProcessBackend
from mosoo_core.sessions import driver_plane
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.sessions import SessionRun

KEEP = timedelta(days=7)
LONG_AGO = 8 * 24 * 3600  # seconds: older than KEEP


@dataclass(frozen=True)
class Owner:
    account_id: str
    app_id: str


@dataclass(frozen=True)
class Booted:
    """One run's boot as `runs.dispatch_run` does it, up to the driver's start."""

    sandbox: SandboxRef
    created: bool
    listed: list[str]  # the skills the run's spec names (the openai runtime's prompt)
    versions: list[int]
    prompt: str
    mounted: list[str]  # what `ls /opt/mosoo/skills` shows inside its sandbox


@pytest.fixture
def host(
    engine: Engine,
    process_backend: ProcessBackend,
    sandbox_tmp: Path,
    echo_socket: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[ProcessBackend]:
    """The process backend with a data dir the sandbox user (uid 10001) can reach, and a
    control socket to mount; every sandbox the test made is removed afterwards."""
    data = Path(tempfile.mkdtemp(dir=sandbox_tmp))
    data.chmod(0o755)
    monkeypatch.setenv("MOSOO_DATA_DIR", str(data))
    monkeypatch.setenv("MOSOO_CONTROL_SOCKET", str(echo_socket))
    reset_settings_cache()
    before = {ref.id for ref in process_backend.list_by_label()}
    yield process_backend
    for ref in process_backend.list_by_label():
        if ref.id not in before:
            process_backend.remove(ref)
    remove_read_only_tree(data / "skills")
    shutil.rmtree(data, ignore_errors=True)


def _skill_md(name: str) -> bytes:
    return (
        f"---\nname: {name}\ndescription: The {name} skill. Use when a task asks for {name}.\n"
        f"---\n# {name}\n\nSteps for {name}.\n"
    ).encode()


def _owner(engine: Engine) -> Owner:
    with Session(engine) as db:
        account = identity.sign_in_identity(
            db, provider="email", subject="skills@example.com", email="skills@example.com"
        )
        owner = Owner(account.id, identity.list_apps(db, account.id)[0].id)
        db.commit()
    return owner


def _upload(engine: Engine, owner: Owner, name: str) -> skills.SkillUpload:
    with Session(engine) as db:
        upload = skills.upload_skill(
            db, owner.account_id, owner.app_id, _skill_md(name), f"{name}.md"
        )
        db.commit()
    return upload


def _agent(engine: Engine, owner: Owner, name: str, kind: str, bindings: list[str]) -> str:
    with Session(engine) as db:
        credential = vault.create_provider_credential(
            db,
            owner.account_id,
            owner.app_id,
            vault.ProviderCredentialInput(
                name=f"Key for {name}",
                provider="openai_compatible",
                base_url="http://10.0.0.5:8000/v1",
                api_key="sk-skill-files-TOPSECRET-9z8y7x",
                models=["model-a"],
            ),
        )
        created = agents.create_agent(db, owner.account_id, owner.app_id, name=name, kind=kind)
        agents.update_agent(
            db,
            owner.account_id,
            owner.app_id,
            created.id,
            agents.AgentChanges(
                provider_credential_id=credential.id, model="model-a", skills=bindings
            ),
        )
        db.commit()
    return created.id


def _bind(engine: Engine, owner: Owner, agent_id: str, bindings: list[str]) -> None:
    with Session(engine) as db:
        agents.update_agent(
            db, owner.account_id, owner.app_id, agent_id, agents.AgentChanges(skills=bindings)
        )
        db.commit()


def _boot(backend: ProcessBackend, engine: Engine, owner: Owner, agent_id: str) -> Booted:
    """A message in a new thread, its run planned and its sandbox got (made or reused) as the
    dispatcher does; then the run ends (its Cattle sandbox stays until the finish task)."""
    with Session(engine) as db:
        thread = sessions.create_session(db, owner.account_id, owner.app_id, agent_id)
        sent = sessions.send_message(db, owner.account_id, thread.id, "Do the task")
        plan, events = runs.plan_boot(db, sent.run.id, backend)
        assert plan is not None, events
        db.commit()
    ref, created = runs.sandbox_for(backend, plan)
    spec = BootPayload.model_validate_json(plan.payload_json).execution_spec
    listing = backend.exec(ref, ["ls", SKILLS_DIR])
    assert listing.exit_code == 0, listing.stderr_text
    with Session(engine) as db:
        run = db.get(SessionRun, sent.run.id)
        assert run is not None
        assert [item["name"] for item in run.snapshot["skills"]] == [s.name for s in spec.skills]
        driver_plane.finish_run(db, run, "completed")
        db.commit()
    return Booted(
        sandbox=ref,
        created=created,
        listed=[item.name for item in spec.skills],
        versions=[item.version for item in spec.skills],
        prompt=skills_prompt(spec.skills),
        mounted=listing.stdout_text.split(),
    )


def _age(folder: Path) -> None:
    old = time.time() - LONG_AGO
    os.utime(folder, (old, old))


def test_a_pet_lists_the_skills_its_sandbox_mounts_until_apply_mounts_the_new_one(
    host: ProcessBackend, engine: Engine
) -> None:
    owner = _owner(engine)
    changelog = _upload(engine, owner, "changelog").skill.id
    review = _upload(engine, owner, "review").skill.id
    agent_id = _agent(engine, owner, "Keeper", "pet", [changelog])
    ids = (owner.account_id, owner.app_id, agent_id)

    first = _boot(host, engine, owner, agent_id)
    assert first.created and first.listed == first.mounted == ["changelog"]

    _bind(engine, owner, agent_id, [changelog, review])
    assert pet_sandbox_status(*ids, backend=host).pending == ["skills"]

    # The sandbox does not have "review" yet: the run must not be told of it.
    second = _boot(host, engine, owner, agent_id)
    assert not second.created and second.sandbox.id == first.sandbox.id
    assert second.listed == second.mounted == ["changelog"]
    assert "<name>changelog</name>" in second.prompt
    assert "review" not in second.prompt

    assert apply_pet_changes(*ids, backend=host) == "recreated"

    third = _boot(host, engine, owner, agent_id)
    assert third.created and third.sandbox.id != first.sandbox.id
    assert third.listed == third.mounted == ["changelog", "review"]
    assert f"<location>{SKILLS_DIR}/review/SKILL.md</location>" in third.prompt
    assert pet_sandbox_status(*ids, backend=host).pending == []


def test_a_pet_keeps_listing_the_version_it_mounts_when_a_newer_one_is_uploaded(
    host: ProcessBackend, engine: Engine
) -> None:
    owner = _owner(engine)
    first_version = _upload(engine, owner, "changelog")
    agent_id = _agent(engine, owner, "Keeper", "pet", [first_version.skill.id])
    assert _boot(host, engine, owner, agent_id).listed == ["changelog"]
    with Session(engine) as db:
        newer = skills.upload_skill_version(
            db,
            owner.account_id,
            owner.app_id,
            first_version.skill.id,
            _skill_md("changelog").replace(b"Steps", b"Newer steps"),
            "SKILL.md",
        )
        db.commit()
    assert newer.version.number == 2

    again = _boot(host, engine, owner, agent_id)

    assert not again.created and again.versions == [1]
    read = host.exec(again.sandbox, ["cat", f"{SKILLS_DIR}/changelog/SKILL.md"])
    assert b"Newer steps" not in read.stdout and b"Steps for changelog" in read.stdout


def test_collection_keeps_mounted_and_recent_skills_removes_old_ones_and_a_run_extracts_again(
    host: ProcessBackend, engine: Engine
) -> None:
    owner = _owner(engine)
    uploads = {name: _upload(engine, owner, name) for name in ("mounted", "recent", "unused")}
    folder = {
        name: skill_files.skills_root() / upload.version.id for name, upload in uploads.items()
    }
    # "unused" was extracted by a run long ago; "recent" too, and a run used it just now.
    with Session(engine) as db:
        for name in ("unused", "recent"):
            [bound] = skills.bound_skills(db, owner.app_id, [uploads[name].skill.id])
            skill_files.extracted_skill(bound)
    _age(folder["recent"])
    recent = _agent(engine, owner, "Recent", "cattle", [uploads["recent"].skill.id])
    host.remove(_boot(host, engine, owner, recent).sandbox)  # that run is over: not mounted
    # "mounted" is in a live sandbox and was not used for long.
    mounting = _agent(engine, owner, "Mounting", "cattle", [uploads["mounted"].skill.id])
    live = _boot(host, engine, owner, mounting).sandbox
    _age(folder["mounted"])
    _age(folder["unused"])
    leftover = skill_files.skills_root() / f".{uploads['unused'].version.id}.dead.partial"
    leftover.mkdir()
    _age(leftover)
    # A build sandbox mounts no skill (and has no skills label): it does not hold collection.
    host.create(
        SandboxSpec(
            subject="build:skills-test",
            app_id="",
            labels={**installation_label(), LABEL_BUILD: "x"},
        )
    )

    assert skill_files.collect_skill_files(host, unused_for=KEEP) == 2  # "unused", the partial

    assert sorted(p.name for p in skill_files.skills_root().iterdir()) == sorted(
        [uploads["mounted"].version.id, uploads["recent"].version.id]
    )
    assert host.exec(live, ["cat", f"{SKILLS_DIR}/mounted/SKILL.md"]).stdout == _skill_md("mounted")
    assert skill_files.collect_skill_files(host, unused_for=KEEP) == 0  # nothing more to take

    # A run that needs the collected version extracts it again and mounts it.
    needing = _agent(engine, owner, "Needing", "cattle", [uploads["unused"].skill.id])
    booted = _boot(host, engine, owner, needing)
    assert booted.listed == booted.mounted == ["unused"]
    assert (folder["unused"] / "SKILL.md").read_bytes() == _skill_md("unused")
    read = host.exec(booted.sandbox, ["cat", f"{SKILLS_DIR}/unused/SKILL.md"])
    assert read.stdout == _skill_md("unused")


def test_collection_waits_while_a_run_sandbox_from_before_the_skills_label_exists(
    host: ProcessBackend, engine: Engine
) -> None:
    owner = _owner(engine)
    upload = _upload(engine, owner, "changelog")
    with Session(engine) as db:
        [bound] = skills.bound_skills(db, owner.app_id, [upload.skill.id])
    path = skill_files.extracted_skill(bound)
    _age(path)
    # A Pet sandbox made before sandboxes were labelled with their skills: it may mount it.
    old = host.create(
        SandboxSpec(
            subject="agent:01OLDPET000000000000000000",
            app_id=owner.app_id,
            labels=installation_label(),
        )
    )

    assert skill_files.collect_skill_files(host, unused_for=KEEP) == 0
    assert path.is_dir()

    host.remove(old)
    assert skill_files.collect_skill_files(host, unused_for=KEEP) == 1
    assert not path.exists()
