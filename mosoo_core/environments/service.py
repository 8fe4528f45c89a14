"""Environments of an App and their immutable, numbered revisions.

Every save is a new revision; a thread keeps the revision current when it started
(`revision_for_thread`), so an edit only reaches later threads. Secrets are sealed in the
vault, one vault secret per value: a revision that keeps a value points at the same secret,
a new value is a new secret, and no revision's secret is ever replaced in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, func, select

from mosoo_core.changes import UNSET, Unset, set_fields
from mosoo_core.clock import utcnow
from mosoo_core.environments import builds
from mosoo_core.environments.builds import BuildView
from mosoo_core.environments.validation import (
    MAX_VARIABLES,
    VariableInput,
    check_variable_value,
    clean_network,
    clean_npm,
    clean_pip,
    clean_setup_script,
    clean_variable_name,
    packages_hash,
)
from mosoo_core.errors import Conflict, FieldConflict, InvalidInput, NotFound
from mosoo_core.ownership import owned_app
from mosoo_core.settings import get_settings
from mosoo_core.tables.agents import Agent, AgentVersion
from mosoo_core.tables.environments import Environment, EnvironmentRevision
from mosoo_core.tables.sessions import ACTIVE_RUN_STATUSES, AgentSession, SessionRun
from mosoo_core.vault import reveal_secret, store_secret

NAME_MAX = 80
DEFAULT_NAME = "Default"
MASK = "••••••••"


@dataclass(frozen=True)
class EnvironmentChanges:
    """What a save changes; a field left UNSET keeps the current revision's value."""

    pip: Sequence[str] | Unset = UNSET
    npm: Sequence[str] | Unset = UNSET
    setup_script: str | Unset = UNSET
    variables: Sequence[VariableInput] | Unset = UNSET
    network_policy: str | Unset = UNSET
    allowed_hosts: Sequence[str] | Unset = UNSET
    allow_package_indexes: bool | Unset = UNSET

    def set_fields(self) -> dict[str, Any]:
        return set_fields(self)


@dataclass(frozen=True)
class VariableView:
    name: str
    secret: bool
    setup_only: bool
    value: str  # the value of an exposed variable; MASK for a secret (never its value)


@dataclass(frozen=True)
class RevisionView:
    id: str
    environment_id: str
    number: int
    summary: str
    pip: list[str]
    npm: list[str]
    setup_script: str
    variables: list[VariableView]
    network_policy: str
    allowed_hosts: list[str]
    allow_package_indexes: bool
    packages_hash: str
    created_at: datetime


@dataclass(frozen=True)
class EnvironmentView:
    id: str
    app_id: str
    name: str
    is_default: bool
    current_revision: int
    revision: RevisionView
    created_at: datetime
    updated_at: datetime
    build: BuildView | None = None  # the current revision's packages (None without any)


@dataclass(frozen=True)
class RunVariable:
    """A variable as a sandbox gets it: the plaintext, for the runtime only."""

    name: str
    value: str
    secret: bool
    setup_only: bool


# --- views -------------------------------------------------------------------------------


def _variable_view(item: dict[str, Any]) -> VariableView:
    secret = bool(item.get("secret"))
    return VariableView(
        name=item["name"],
        secret=secret,
        setup_only=bool(item.get("setup_only")),
        value=MASK if secret else str(item.get("value", "")),
    )


def revision_view(row: EnvironmentRevision) -> RevisionView:
    packages = row.packages or {}
    return RevisionView(
        id=row.id,
        environment_id=row.environment_id,
        number=row.number,
        summary=row.summary,
        pip=list(packages.get("pip", [])),
        npm=list(packages.get("npm", [])),
        setup_script=row.setup_script,
        variables=[_variable_view(item) for item in row.variables or []],
        network_policy=row.network_policy,
        allowed_hosts=list(row.allowed_hosts or []),
        allow_package_indexes=row.allow_package_indexes,
        packages_hash=row.packages_hash,
        created_at=row.created_at,
    )


def _current(db: Session, environment: Environment) -> EnvironmentRevision:
    row = db.exec(
        select(EnvironmentRevision).where(
            EnvironmentRevision.environment_id == environment.id,
            EnvironmentRevision.number == environment.current_revision,
        )
    ).one()
    return row


def _view(db: Session, environment: Environment) -> EnvironmentView:
    current = _current(db, environment)
    build = builds.get_build(db, current.packages_hash)
    return EnvironmentView(
        id=environment.id,
        app_id=environment.app_id,
        name=environment.name,
        is_default=environment.is_default,
        current_revision=environment.current_revision,
        revision=revision_view(current),
        created_at=environment.created_at,
        updated_at=environment.updated_at,
        build=builds.build_view(build) if build else None,
    )


# --- lookups -----------------------------------------------------------------------------


def _live(app_id: str) -> Any:
    return select(Environment).where(
        Environment.app_id == app_id, col(Environment.deleted_at).is_(None)
    )


def _owned(db: Session, account_id: str, app_id: str, environment_id: str) -> Environment:
    owned_app(db, account_id, app_id)
    row = db.get(Environment, environment_id) if environment_id else None
    if row is None or row.app_id != app_id or row.deleted_at is not None:
        raise NotFound("Environment not found.")
    return row


def environment_app_id(db: Session, account_id: str, environment_id: str) -> str:
    """The App of one of the account's environments (for callers that hold only its id,
    like the public API); NotFound for another owner's, a deleted one, or none."""
    row = db.get(Environment, environment_id) if environment_id else None
    if row is None or row.deleted_at is not None:
        raise NotFound("Environment not found.")
    try:
        owned_app(db, account_id, row.app_id)
    except NotFound:
        raise NotFound("Environment not found.") from None
    return row.app_id


def environment_exists(db: Session, app_id: str, environment_id: str) -> bool:
    """Whether the environment exists (not deleted) in the App."""
    row = db.get(Environment, environment_id) if environment_id else None
    return row is not None and row.app_id == app_id and row.deleted_at is None


def default_environment(db: Session, app_id: str) -> Environment:
    """The App's default environment, created if the App has none (an App made before the
    migration that adds them, or whose default was lost)."""
    row = db.exec(_live(app_id).where(col(Environment.is_default).is_(True))).first()
    return row if row is not None else create_default_environment(db, app_id)


def list_environments(db: Session, account_id: str, app_id: str) -> list[EnvironmentView]:
    owned_app(db, account_id, app_id)
    default_environment(db, app_id)
    rows = db.exec(
        _live(app_id).order_by(
            col(Environment.is_default).desc(), func.lower(Environment.name), col(Environment.id)
        )
    ).all()
    return [_view(db, row) for row in rows]


def get_environment(
    db: Session, account_id: str, app_id: str, environment_id: str
) -> EnvironmentView:
    return _view(db, _owned(db, account_id, app_id, environment_id))


def list_revisions(
    db: Session, account_id: str, app_id: str, environment_id: str
) -> list[RevisionView]:
    """Newest first."""
    environment = _owned(db, account_id, app_id, environment_id)
    rows = db.exec(
        select(EnvironmentRevision)
        .where(EnvironmentRevision.environment_id == environment.id)
        .order_by(col(EnvironmentRevision.number).desc())
    ).all()
    return [revision_view(row) for row in rows]


# --- saving ------------------------------------------------------------------------------


def _clean_name(raw: str) -> str:
    name = " ".join((raw or "").split())
    if not name:
        raise InvalidInput("The environment needs a name.", field="name")
    if len(name) > NAME_MAX:
        raise InvalidInput(f"Names are limited to {NAME_MAX} characters.", field="name")
    return name


def _check_name_free(db: Session, app_id: str, name: str, keep_id: str = "") -> None:
    taken = db.exec(
        _live(app_id).where(func.lower(Environment.name) == name.lower(), Environment.id != keep_id)
    ).first()
    if taken is not None:
        raise FieldConflict(
            f"An environment named {name} already exists.", field="name", code="name_taken"
        )


def index_urls() -> list[str]:
    settings = get_settings()
    return [settings.pip_index_url, settings.npm_registry]


def _seal_variables(
    db: Session,
    environment: Environment,
    given: Sequence[VariableInput],
    previous: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    if len(given) > MAX_VARIABLES:
        raise InvalidInput(f"At most {MAX_VARIABLES} variables.", field="variables")
    kept = {item["name"]: item for item in previous}
    out: list[dict[str, Any]] = []
    names: set[str] = set()
    for variable in given:
        name = clean_variable_name(variable.name)
        if name in names:
            raise InvalidInput(f"{name} is listed twice.", field="variables")
        names.add(name)
        item: dict[str, Any] = {
            "name": name,
            "secret": bool(variable.secret),
            "setup_only": bool(variable.setup_only),
        }
        value = variable.value
        stored = kept.get(name)
        if value is None:
            # Keep the stored value: a secret is never sent back, so a form leaves it empty.
            if stored is None:
                raise FieldConflict(
                    f"Give {name} a value: there is no stored value to keep.", field="variables"
                )
            if bool(stored.get("secret")) == bool(variable.secret):
                item.update({k: stored[k] for k in ("secret_id", "value") if k in stored})
                out.append(item)
                continue
            # The Secret switch changed: the stored value moves to its new form.
            value = (
                reveal_secret(
                    db,
                    stored["secret_id"],
                    app_id=environment.app_id,
                    owner_ref=_owner_ref(environment),
                )
                if stored.get("secret")
                else str(stored.get("value", ""))
            )
        check_variable_value(name, value)
        if variable.secret:
            item["secret_id"] = store_secret(
                db, app_id=environment.app_id, owner_ref=_owner_ref(environment), value=value
            )
        else:
            item["value"] = value
        out.append(item)
    return out


def _owner_ref(environment: Environment) -> str:
    return f"environment:{environment.id}"


def _summary(before: EnvironmentRevision | None, after: EnvironmentRevision) -> str:
    """What changed, in a line: "pip +requests==2.32.3; network none -> limited"."""
    if before is None:
        return "Created."
    parts: list[str] = []
    for manager in ("pip", "npm"):
        old = set((before.packages or {}).get(manager, []))
        new = set((after.packages or {}).get(manager, []))
        changes = [f"+{p}" for p in sorted(new - old)] + [f"-{p}" for p in sorted(old - new)]
        if changes:
            parts.append(f"{manager} {' '.join(changes)}")
    if before.setup_script != after.setup_script:
        parts.append("setup script changed")
    old_vars = {v["name"]: v for v in before.variables or []}
    new_vars = {v["name"]: v for v in after.variables or []}
    added = sorted(set(new_vars) - set(old_vars))
    removed = sorted(set(old_vars) - set(new_vars))
    changed = sorted(
        name for name in set(new_vars) & set(old_vars) if new_vars[name] != old_vars[name]
    )
    for label, names in (("added", added), ("removed", removed), ("changed", changed)):
        if names:
            parts.append(f"variables {label}: {', '.join(names)}")
    if before.network_policy != after.network_policy:
        parts.append(f"network {before.network_policy} -> {after.network_policy}")
    if before.allowed_hosts != after.allowed_hosts:
        parts.append("allowed hosts changed")
    if before.allow_package_indexes != after.allow_package_indexes:
        parts.append(
            "package indexes " + ("allowed" if after.allow_package_indexes else "not allowed")
        )
    return ("; ".join(parts) or "No change.")[:500]


def _new_revision(
    db: Session,
    environment: Environment,
    values: dict[str, Any],
    before: EnvironmentRevision | None,
) -> EnvironmentRevision:
    """Validate the full content of a revision and add it as the environment's next one."""
    previous_packages = (before.packages or {}) if before else {}
    pip = clean_pip(values.get("pip", previous_packages.get("pip", [])))
    npm = clean_npm(values.get("npm", previous_packages.get("npm", [])))
    script = clean_setup_script(values.get("setup_script", before.setup_script if before else ""))
    policy = values.get("network_policy", before.network_policy if before else "none")
    indexes = bool(
        values.get("allow_package_indexes", before.allow_package_indexes if before else False)
    )
    hosts = values.get("allowed_hosts", before.allowed_hosts if before else [])
    if (
        "network_policy" in values
        and values["network_policy"] != "limited"
        and ("allowed_hosts" not in values)
    ):
        hosts = []  # leaving `limited` drops its list rather than refusing the save
    if "network_policy" not in values and policy != "limited" and values.get("allowed_hosts"):
        raise FieldConflict(
            f"Allowed hosts apply to the limited policy; this environment's is {policy}: "
            "set network_policy to limited with them.",
            field="allowed_hosts",
        )
    allowed = clean_network(policy, hosts, indexes)
    previous_variables = list(before.variables or []) if before else []
    if "variables" in values:
        variables = _seal_variables(db, environment, values["variables"], previous_variables)
    else:
        variables = previous_variables
    number = (before.number + 1) if before else 1
    revision = EnvironmentRevision(
        environment_id=environment.id,
        app_id=environment.app_id,
        number=number,
        packages={"pip": pip, "npm": npm},
        setup_script=script,
        variables=variables,
        network_policy=policy,
        allowed_hosts=allowed,
        allow_package_indexes=indexes and policy == "limited",
        packages_hash=packages_hash(pip, npm, index_urls()),
    )
    revision.summary = _summary(before, revision)
    db.add(revision)
    environment.current_revision = number
    environment.updated_at = utcnow()
    db.add(environment)
    db.flush()
    builds.ensure_build(db, revision)  # built before any run needs it (the front door enqueues)
    return revision


def create_default_environment(db: Session, app_id: str) -> Environment:
    """The App's default environment: no packages, no variables, no network."""
    environment = Environment(app_id=app_id, name=DEFAULT_NAME, is_default=True)
    db.add(environment)
    db.flush()
    _new_revision(db, environment, {}, None)
    return environment


def create_environment(
    db: Session, account_id: str, app_id: str, name: str, changes: EnvironmentChanges | None = None
) -> EnvironmentView:
    owned_app(db, account_id, app_id)
    default_environment(db, app_id)
    clean = _clean_name(name)
    _check_name_free(db, app_id, clean)
    environment = Environment(app_id=app_id, name=clean)
    db.add(environment)
    db.flush()
    _new_revision(db, environment, (changes or EnvironmentChanges()).set_fields(), None)
    return _view(db, environment)


def update_environment(
    db: Session,
    account_id: str,
    app_id: str,
    environment_id: str,
    changes: EnvironmentChanges,
) -> EnvironmentView:
    """Save: a new revision with the changes over the current one (a save that changes
    nothing makes none)."""
    environment = _owned(db, account_id, app_id, environment_id)
    values = changes.set_fields()
    if not values:
        return _view(db, environment)
    # Lock the environment row (PostgreSQL; SQLite writes one at a time anyway), then read
    # its current revision, so two saves cannot both take the same next number.
    db.exec(
        select(Environment)
        .where(Environment.id == environment.id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one()
    before = _current(db, environment)
    revision = _new_revision(db, environment, values, before)
    if _same_content(before, revision):
        db.delete(revision)
        environment.current_revision = before.number
        db.add(environment)
        db.flush()
    return _view(db, environment)


def _same_content(a: EnvironmentRevision, b: EnvironmentRevision) -> bool:
    return (
        a.packages == b.packages
        and a.setup_script == b.setup_script
        and a.variables == b.variables
        and a.network_policy == b.network_policy
        and a.allowed_hosts == b.allowed_hosts
        and a.allow_package_indexes == b.allow_package_indexes
    )


def rename_environment(
    db: Session, account_id: str, app_id: str, environment_id: str, name: str
) -> EnvironmentView:
    environment = _owned(db, account_id, app_id, environment_id)
    clean = _clean_name(name)
    _check_name_free(db, app_id, clean, keep_id=environment.id)
    environment.name = clean
    environment.updated_at = utcnow()
    db.add(environment)
    db.flush()
    return _view(db, environment)


def fork_environment(
    db: Session, account_id: str, app_id: str, environment_id: str, name: str = ""
) -> EnvironmentView:
    """A new environment whose first revision is a copy of the source's current one; its
    secrets are sealed again, bound to the new environment."""
    source = _owned(db, account_id, app_id, environment_id)
    current = _current(db, source)
    clean = _clean_name(name or f"{source.name} (copy)"[:NAME_MAX])
    _check_name_free(db, app_id, clean)
    fork = Environment(app_id=app_id, name=clean)
    db.add(fork)
    db.flush()
    variables = [
        VariableInput(
            name=plain.name,
            value=plain.value,
            secret=plain.secret,
            setup_only=plain.setup_only,
        )
        for plain in _reveal_variables(db, source, current)
    ]
    _new_revision(
        db,
        fork,
        {
            "pip": (current.packages or {}).get("pip", []),
            "npm": (current.packages or {}).get("npm", []),
            "setup_script": current.setup_script,
            "variables": variables,
            "network_policy": current.network_policy,
            "allowed_hosts": current.allowed_hosts,
            "allow_package_indexes": current.allow_package_indexes,
        },
        None,
    )
    return _view(db, fork)


def environment_users(db: Session, environment: Environment) -> list[str]:
    """What still uses the environment, named for the refusal of a delete: Agents whose
    draft binds it (the default is bound by every Agent without one), published versions,
    and threads with a run in progress on one of its revisions."""
    users: list[str] = []
    bound = col(Agent.environment_id) == environment.id
    if environment.is_default:
        bound = sa.or_(bound, col(Agent.environment_id).is_(None))
    drafts = db.exec(
        select(Agent.name)
        .where(Agent.app_id == environment.app_id, bound)
        .order_by(func.lower(Agent.name))
    ).all()
    users += [f"agent {name}" for name in drafts]
    published = db.exec(
        select(Agent.name, AgentVersion.number, AgentVersion.profile)
        .join(AgentVersion, col(AgentVersion.agent_id) == col(Agent.id))
        .where(
            Agent.app_id == environment.app_id,
            Agent.status == "published",
            col(Agent.published_version) == col(AgentVersion.number),
        )
    ).all()
    for name, number, profile in published:
        bound_id = (profile or {}).get("environment_id")
        if bound_id == environment.id or (environment.is_default and not bound_id):
            users.append(f"{name} version {number}")
    active = db.exec(
        select(func.count())
        .select_from(SessionRun)
        .join(AgentSession, col(AgentSession.id) == col(SessionRun.session_id))
        .join(
            EnvironmentRevision,
            col(EnvironmentRevision.id) == col(AgentSession.environment_revision_id),
        )
        .where(
            EnvironmentRevision.environment_id == environment.id,
            col(SessionRun.status).in_(ACTIVE_RUN_STATUSES),
        )
    ).one()
    if active:
        users.append(f"{active} running thread(s)")
    return users


def delete_environment(db: Session, account_id: str, app_id: str, environment_id: str) -> None:
    """Refused while anything uses it (Conflict naming them) and for the default. Its
    revisions stay for the threads that froze them; the environment is gone from lists."""
    environment = _owned(db, account_id, app_id, environment_id)
    if environment.is_default:
        raise Conflict("The default environment cannot be deleted.")
    users = environment_users(db, environment)
    if users:
        raise Conflict(f"In use by {', '.join(users)}. Bind them to another environment first.")
    environment.deleted_at = utcnow()
    db.add(environment)
    db.flush()


# --- threads and runs --------------------------------------------------------------------


def revision_for_thread(
    db: Session, app_id: str, environment_id: str | None
) -> EnvironmentRevision:
    """The revision a new thread freezes: the current one of the bound environment, else of
    the App's default (also when the bound one was deleted: readiness reports that)."""
    environment = db.get(Environment, environment_id) if environment_id else None
    if environment is None or environment.app_id != app_id or environment.deleted_at is not None:
        environment = default_environment(db, app_id)
    return _current(db, environment)


def _reveal_variables(
    db: Session, environment: Environment, revision: EnvironmentRevision
) -> list[RunVariable]:
    out: list[RunVariable] = []
    for item in revision.variables or []:
        if item.get("secret"):
            value = reveal_secret(
                db, item["secret_id"], app_id=revision.app_id, owner_ref=_owner_ref(environment)
            )
        else:
            value = str(item.get("value", ""))
        out.append(
            RunVariable(
                name=item["name"],
                value=value,
                secret=bool(item.get("secret")),
                setup_only=bool(item.get("setup_only")),
            )
        )
    return out


def run_variables(db: Session, revision_id: str) -> list[RunVariable]:
    """The revision's variables in plaintext, for the runtime that starts its sandbox."""
    revision = db.get(EnvironmentRevision, revision_id)
    if revision is None:
        raise NotFound("Environment revision not found.")
    environment = db.get(Environment, revision.environment_id)
    assert environment is not None
    return _reveal_variables(db, environment, revision)


def rebuild_environment(
    db: Session, account_id: str, app_id: str, environment_id: str
) -> EnvironmentView:
    """Build the current revision's packages again (Conflict while a build of them runs or
    without packages); the front door enqueues the build."""
    environment = _owned(db, account_id, app_id, environment_id)
    builds.request_rebuild(db, _current(db, environment))
    return _view(db, environment)
