"""Environments and their revisions: a default per App, every save a numbered revision with
a summary, validation naming the field and the entry (nothing saved), secrets sealed and
write-only, fork, rename, delete refused while in use, and threads freezing a revision."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from sqlmodel import Session, select

from mosoo_core import agents, environments, identity, sessions
from mosoo_core.agents import AgentChanges
from mosoo_core.environments import EnvironmentChanges, VariableInput, builds
from mosoo_core.environments.validation import clean_npm, clean_pip, packages_hash
from mosoo_core.errors import Conflict, FieldConflict, InvalidInput, NotFound
from mosoo_core.tables.environments import Environment, EnvironmentBuild, EnvironmentRevision
from mosoo_core.tables.sessions import AgentSession, SessionRun
from mosoo_core.tables.vault import VaultSecret

SECRET = "ghp_Vq9Lr2Xn7TbW4yHc8PmM3kJd6FsG1aQeR5uI"


@dataclass(frozen=True)
class Owner:
    account_id: str
    app_id: str


def _owner(db: Session, email: str = "env-owner@example.com") -> Owner:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    return Owner(account.id, identity.list_apps(db, account.id)[0].id)


def _create(db: Session, owner: Owner, name: str = "Python", **changes: object) -> str:
    made = environments.create_environment(
        db,
        owner.account_id,
        owner.app_id,
        name,
        EnvironmentChanges(**changes),  # type: ignore[arg-type]
    )
    return made.id


def _revision_count(db: Session) -> int:
    return len(db.exec(select(EnvironmentRevision)).all())


def test_an_app_starts_with_a_default_environment_without_network(db: Session) -> None:
    owner = _owner(db)
    [default] = environments.list_environments(db, owner.account_id, owner.app_id)
    assert default.is_default and default.name == "Default"
    assert default.current_revision == 1
    assert default.revision.network_policy == "none"
    assert default.revision.pip == [] and default.revision.variables == []
    # An App added later gets one too.
    app = identity.create_app(db, owner.account_id, name="Second")
    [second] = environments.list_environments(db, owner.account_id, app.id)
    assert second.is_default and second.id != default.id


def test_every_save_is_a_new_numbered_revision_with_what_changed(db: Session) -> None:
    owner = _owner(db)
    env_id = _create(db, owner, setup_script="echo one", variables=[VariableInput("A", "1")])
    first = environments.get_environment(db, owner.account_id, owner.app_id, env_id)
    assert first.current_revision == 1
    assert first.revision.summary == "Created."

    saved = environments.update_environment(
        db,
        owner.account_id,
        owner.app_id,
        env_id,
        EnvironmentChanges(
            setup_script="echo two",
            network_policy="limited",
            allowed_hosts=["API.GitHub.com.", "*.example.com"],
        ),
    )
    assert saved.current_revision == 2
    assert saved.revision.summary == (
        "setup script changed; network none -> limited; allowed hosts changed"
    )
    assert [v.name for v in saved.revision.variables] == ["A"]  # left out: kept
    assert saved.revision.allowed_hosts == ["*.example.com", "api.github.com"]  # canonical
    revisions = environments.list_revisions(db, owner.account_id, owner.app_id, env_id)
    assert [r.number for r in revisions] == [2, 1]
    assert revisions[1].setup_script == "echo one"  # the old revision is untouched
    # A save that changes nothing makes no revision.
    same = environments.update_environment(
        db, owner.account_id, owner.app_id, env_id, EnvironmentChanges(setup_script="echo two")
    )
    assert same.current_revision == 2
    # Leaving limited drops its list.
    closed = environments.update_environment(
        db, owner.account_id, owner.app_id, env_id, EnvironmentChanges(network_policy="none")
    )
    assert (closed.current_revision, closed.revision.allowed_hosts) == (3, [])


def test_packages_queue_one_build_that_revisions_with_the_same_packages_share(
    db: Session,
) -> None:
    owner = _owner(db)
    env_id = _create(db, owner)
    saved = environments.update_environment(
        db,
        owner.account_id,
        owner.app_id,
        env_id,
        EnvironmentChanges(pip=["rich==13.9.4"], npm=["lodash@4.17.21"]),
    )
    assert saved.build is not None and saved.build.status == "queued"
    assert saved.revision.pip == ["rich==13.9.4"] and saved.revision.npm == ["lodash@4.17.21"]
    # A fork and another environment with the same packages share the build.
    fork = environments.fork_environment(db, owner.account_id, owner.app_id, env_id)
    other = environments.create_environment(
        db,
        owner.account_id,
        owner.app_id,
        "Other",
        EnvironmentChanges(npm=["lodash@4.17.21"], pip=["Rich == 13.9.4"]),
    )
    assert fork.build == other.build == saved.build
    assert len(db.exec(select(EnvironmentBuild)).all()) == 1
    # No packages, no build.
    bare = environments.update_environment(
        db, owner.account_id, owner.app_id, env_id, EnvironmentChanges(pip=[], npm=[])
    )
    assert bare.build is None and bare.revision.packages_hash == ""


def test_rebuild_queues_again_and_is_refused_while_building_or_without_packages(
    db: Session,
) -> None:
    owner = _owner(db)
    env_id = _create(db, owner)
    with pytest.raises(Conflict, match="no packages"):
        environments.rebuild_environment(db, owner.account_id, owner.app_id, env_id)
    view = environments.update_environment(
        db, owner.account_id, owner.app_id, env_id, EnvironmentChanges(pip=["rich==13.9.4"])
    )
    assert view.build is not None
    grant = builds.claim_build(db, view.build.packages_hash, stale_after=120)
    assert grant is not None
    # Claimed once: a second worker does not get it.
    assert builds.claim_build(db, view.build.packages_hash, stale_after=120) is None
    with pytest.raises(Conflict, match="in progress"):
        environments.rebuild_environment(db, owner.account_id, owner.app_id, env_id)
    assert builds.resolve_build_grant(db, grant) is not None
    assert builds.finish_build(
        db, view.build.packages_hash, grant, layer="", log="boom", error="Installing failed."
    )
    assert builds.resolve_build_grant(db, grant) is None  # the grant ends with the build
    failed = environments.get_environment(db, owner.account_id, owner.app_id, env_id)
    assert failed.build is not None and (failed.build.status, failed.build.log) == (
        "failed",
        "boom",
    )
    again = environments.rebuild_environment(db, owner.account_id, owner.app_id, env_id)
    assert again.build is not None and (again.build.status, again.build.log) == ("queued", "")
    # Another owner's environment is not found.
    stranger = _owner(db, "stranger@example.com")
    with pytest.raises(NotFound):
        environments.rebuild_environment(db, stranger.account_id, owner.app_id, env_id)


def test_a_package_listed_twice_is_a_conflict_naming_its_field(db: Session) -> None:
    owner = _owner(db)
    env_id = _create(db, owner)
    for changes, field in (
        (EnvironmentChanges(pip=["a==1", "A==2"]), "pip"),
        (EnvironmentChanges(npm=["x@1.0.0", "x@2.0.0"]), "npm"),
    ):
        with pytest.raises(FieldConflict, match="listed twice") as refused:
            environments.update_environment(db, owner.account_id, owner.app_id, env_id, changes)
        assert refused.value.field == field


def test_same_packages_share_one_content_hash() -> None:
    a = packages_hash(clean_pip(["rich==13.9.4"]), [], ["https://pypi.org/simple"])
    b = packages_hash(clean_pip(["Rich == 13.9.4"]), [], ["https://pypi.org/simple"])
    mirror = packages_hash(clean_pip(["rich==13.9.4"]), [], ["https://mirror.example/simple"])
    assert a == b != "" and a != mirror
    assert packages_hash([], [], ["https://pypi.org/simple"]) == ""
    assert clean_pip(["Requests[Socks] == 2.32.3", "a_b.c==1.0rc1"]) == [
        "a-b-c==1.0rc1",
        "requests[socks]==2.32.3",
    ]
    assert clean_npm(["@types/node@20.11.5", "lodash@4.17.21"]) == [
        "@types/node@20.11.5",
        "lodash@4.17.21",
    ]


@pytest.mark.parametrize(
    ("changes", "field", "named"),
    [
        ({"pip": ["requests>=2"]}, "pip", "requests>=2"),
        ({"pip": ["requests"]}, "pip", "requests"),
        ({"pip": ["git+https://github.com/x/y"]}, "pip", "git+https"),
        ({"pip": ["rich==13.*"]}, "pip", "rich==13.*"),
        ({"npm": ["lodash@^4.17.21"]}, "npm", "lodash@^4.17.21"),
        ({"npm": ["lodash@latest"]}, "npm", "lodash@latest"),
        ({"npm": ["lodash"]}, "npm", "lodash"),
        ({"npm": ["file:../x@1.0.0"]}, "npm", "file:"),
        ({"variables": [VariableInput("1ABC", "x")]}, "variables", "1ABC"),
        ({"variables": [VariableInput("HOME", "/tmp")]}, "variables", "HOME"),
        ({"variables": [VariableInput("MOSOO_TOKEN", "x")]}, "variables", "MOSOO_TOKEN"),
        ({"variables": [VariableInput("https_proxy", "x")]}, "variables", "https_proxy"),
        ({"variables": [VariableInput("A", "1"), VariableInput("A", "2")]}, "variables", "twice"),
        ({"network_policy": "open"}, "network_policy", "none, limited, full"),
        ({"network_policy": "limited", "allowed_hosts": ["10.0.0.1"]}, "allowed_hosts", "10.0.0.1"),
        (
            {"network_policy": "limited", "allowed_hosts": ["https://example.com"]},
            "allowed_hosts",
            "https://example.com",
        ),
        ({"network_policy": "none", "allowed_hosts": ["example.com"]}, "allowed_hosts", "limited"),
        ({"setup_script": "x" * (64 * 1024 + 1)}, "setup_script", "65,536 characters"),
    ],
)
def test_bad_content_is_refused_with_the_field_and_entry_named_and_nothing_saved(
    db: Session, changes: dict[str, object], field: str, named: str
) -> None:
    owner = _owner(db)
    env_id = _create(db, owner)
    before = _revision_count(db)
    with pytest.raises(InvalidInput) as refused:
        environments.update_environment(
            db,
            owner.account_id,
            owner.app_id,
            env_id,
            EnvironmentChanges(**changes),  # type: ignore[arg-type]
        )
    assert refused.value.field == field
    assert named in refused.value.message
    assert _revision_count(db) == before
    assert (
        environments.get_environment(db, owner.account_id, owner.app_id, env_id).current_revision
        == 1
    )


def test_secrets_are_sealed_write_only_and_kept_by_a_save_that_omits_them(db: Session) -> None:
    owner = _owner(db)
    env_id = _create(
        db,
        owner,
        variables=[
            VariableInput("REGION", "eu-west-1"),
            VariableInput("GH_TOKEN", SECRET, secret=True, setup_only=True),
        ],
    )
    view = environments.get_environment(db, owner.account_id, owner.app_id, env_id)
    shown = {v.name: v for v in view.revision.variables}
    assert shown["REGION"].value == "eu-west-1"
    assert shown["GH_TOKEN"].value == environments.MASK and shown["GH_TOKEN"].setup_only
    assert SECRET not in repr(view)
    # Not in the revision row either: only a vault secret id, the value sealed.
    row = db.exec(
        select(EnvironmentRevision).where(EnvironmentRevision.environment_id == env_id)
    ).one()
    assert SECRET not in str(row.variables)
    assert all(SECRET.encode() not in s.ciphertext for s in db.exec(select(VaultSecret)).all())

    # The form sends the secret back without a value: the stored one is kept.
    saved = environments.update_environment(
        db,
        owner.account_id,
        owner.app_id,
        env_id,
        EnvironmentChanges(
            variables=[
                VariableInput("REGION", "us-east-1"),
                VariableInput("GH_TOKEN", None, secret=True, setup_only=True),
            ]
        ),
    )
    assert saved.revision.summary == "variables changed: REGION"
    plain = {v.name: v for v in environments.run_variables(db, saved.revision.id)}
    assert plain["GH_TOKEN"].value == SECRET and plain["GH_TOKEN"].setup_only
    assert plain["REGION"].value == "us-east-1"


def test_fork_copies_the_current_revision_and_reseals_its_secrets(db: Session) -> None:
    owner = _owner(db)
    env_id = _create(
        db,
        owner,
        setup_script="make tools",
        variables=[VariableInput("TOKEN", SECRET, secret=True)],
    )
    fork = environments.fork_environment(db, owner.account_id, owner.app_id, env_id)
    assert fork.name == "Python (copy)" and fork.current_revision == 1
    assert fork.revision.setup_script == "make tools"
    [variable] = environments.run_variables(db, fork.revision.id)
    assert variable.value == SECRET
    source_row = db.exec(
        select(EnvironmentRevision).where(EnvironmentRevision.environment_id == env_id)
    ).one()
    fork_row = db.get(EnvironmentRevision, fork.revision.id)
    assert fork_row is not None
    assert fork_row.variables[0]["secret_id"] != source_row.variables[0]["secret_id"]


def test_names_are_unique_per_app_and_rename_keeps_revisions(db: Session) -> None:
    owner = _owner(db)
    env_id = _create(db, owner, "Node")
    with pytest.raises(FieldConflict) as taken:
        _create(db, owner, "node")
    assert taken.value.field == "name" and taken.value.code == "name_taken"
    renamed = environments.rename_environment(db, owner.account_id, owner.app_id, env_id, "Node 20")
    assert renamed.name == "Node 20" and renamed.current_revision == 1
    with pytest.raises(InvalidInput) as refused:
        environments.rename_environment(db, owner.account_id, owner.app_id, env_id, "  ")
    assert refused.value.field == "name"


def test_another_owners_environment_is_not_found(db: Session) -> None:
    owner = _owner(db)
    stranger = _owner(db, "stranger@example.com")
    env_id = _create(db, owner)
    for call in (
        lambda: environments.get_environment(db, stranger.account_id, stranger.app_id, env_id),
        lambda: environments.get_environment(db, stranger.account_id, owner.app_id, env_id),
        lambda: environments.update_environment(
            db, stranger.account_id, stranger.app_id, env_id, EnvironmentChanges(setup_script="x")
        ),
        lambda: environments.delete_environment(db, stranger.account_id, stranger.app_id, env_id),
        lambda: environments.fork_environment(db, stranger.account_id, stranger.app_id, env_id),
        lambda: environments.list_revisions(db, stranger.account_id, stranger.app_id, env_id),
    ):
        with pytest.raises(NotFound):
            call()


def test_delete_is_refused_while_an_agent_a_version_or_a_running_thread_uses_it(
    db: Session,
) -> None:
    owner = _owner(db)
    env_id = _create(db, owner)
    agent = agents.create_agent(db, owner.account_id, owner.app_id, name="Builder")
    agents.update_agent(
        db, owner.account_id, owner.app_id, agent.id, AgentChanges(environment_id=env_id)
    )
    with pytest.raises(Conflict) as refused:
        environments.delete_environment(db, owner.account_id, owner.app_id, env_id)
    assert "agent Builder" in refused.value.message

    # A running thread on one of its revisions keeps it too, after the draft moved on.
    thread = sessions.create_session(db, owner.account_id, owner.app_id, agent.id)
    db.add(SessionRun(session_id=thread.id, app_id=owner.app_id, input_text="hi", status="running"))
    agents.update_agent(
        db, owner.account_id, owner.app_id, agent.id, AgentChanges(environment_id=None)
    )
    with pytest.raises(Conflict) as refused:
        environments.delete_environment(db, owner.account_id, owner.app_id, env_id)
    assert "1 running thread(s)" in refused.value.message

    for run in db.exec(select(SessionRun)).all():
        run.status = "completed"
        db.add(run)
    db.flush()
    environments.delete_environment(db, owner.account_id, owner.app_id, env_id)
    assert [e.name for e in environments.list_environments(db, owner.account_id, owner.app_id)] == [
        "Default"
    ]
    # The thread keeps its frozen revision.
    row = db.get(AgentSession, thread.id)
    assert row is not None and row.environment_revision_id is not None
    assert db.get(EnvironmentRevision, row.environment_revision_id) is not None
    with pytest.raises(Conflict):
        default = environments.default_environment(db, owner.app_id)
        environments.delete_environment(db, owner.account_id, owner.app_id, default.id)


def test_a_thread_freezes_the_revision_current_when_it_starts(db: Session) -> None:
    owner = _owner(db)
    env_id = _create(db, owner, setup_script="echo 1")
    agent = agents.create_agent(db, owner.account_id, owner.app_id, name="Frozen")
    agents.update_agent(
        db, owner.account_id, owner.app_id, agent.id, AgentChanges(environment_id=env_id)
    )
    first = sessions.create_session(db, owner.account_id, owner.app_id, agent.id)
    environments.update_environment(
        db, owner.account_id, owner.app_id, env_id, EnvironmentChanges(setup_script="echo 2")
    )
    second = sessions.create_session(db, owner.account_id, owner.app_id, agent.id)

    def frozen(thread_id: str) -> EnvironmentRevision:
        row = db.get(AgentSession, thread_id)
        assert row is not None and row.environment_revision_id
        revision = db.get(EnvironmentRevision, row.environment_revision_id)
        assert revision is not None
        return revision

    assert (frozen(first.id).number, frozen(first.id).setup_script) == (1, "echo 1")
    assert (frozen(second.id).number, frozen(second.id).setup_script) == (2, "echo 2")
    # Without a binding, the App's default.
    plain = agents.create_agent(db, owner.account_id, owner.app_id, name="Plain")
    thread = sessions.create_session(db, owner.account_id, owner.app_id, plain.id)
    default = db.exec(select(Environment).where(Environment.is_default == True)).first()  # noqa: E712
    assert default is not None and frozen(thread.id).environment_id == default.id


def test_readiness_uses_the_real_lookup(db: Session) -> None:
    owner = _owner(db)
    env_id = _create(db, owner)
    agent = agents.create_agent(db, owner.account_id, owner.app_id, name="Ready")
    agents.update_agent(
        db, owner.account_id, owner.app_id, agent.id, AgentChanges(environment_id=env_id)
    )
    view = agents.get_agent(db, owner.account_id, owner.app_id, agent.id)
    assert "environment_missing" not in {b.code for b in agents.readiness(db, view).blockers}
    stranger = _owner(db, "other@example.com")
    foreign = _create(db, stranger, "Theirs")
    agents.update_agent(
        db, owner.account_id, owner.app_id, agent.id, AgentChanges(environment_id=foreign)
    )
    view = agents.get_agent(db, owner.account_id, owner.app_id, agent.id)
    assert "environment_missing" in {b.code for b in agents.readiness(db, view).blockers}


def test_a_kept_value_follows_its_switch_and_a_missing_one_is_a_conflict(db: Session) -> None:
    owner = _owner(db)
    env_id = _create(db, owner, variables=[VariableInput("TOKEN", SECRET)])
    saved = environments.update_environment(
        db,
        owner.account_id,
        owner.app_id,
        env_id,
        EnvironmentChanges(variables=[VariableInput("TOKEN", None, secret=True)]),
    )
    [shown] = saved.revision.variables
    assert shown.secret and shown.value == environments.MASK  # sealed now
    [plain] = environments.run_variables(db, saved.revision.id)
    assert plain.value == SECRET
    with pytest.raises(FieldConflict) as missing:
        environments.update_environment(
            db,
            owner.account_id,
            owner.app_id,
            env_id,
            EnvironmentChanges(variables=[VariableInput("OTHER", None, secret=True)]),
        )
    assert missing.value.field == "variables"
    # A limited policy with no hosts reaches nothing: allowed, and enforced as such.
    closed = environments.update_environment(
        db, owner.account_id, owner.app_id, env_id, EnvironmentChanges(network_policy="limited")
    )
    assert (closed.revision.network_policy, closed.revision.allowed_hosts) == ("limited", [])
