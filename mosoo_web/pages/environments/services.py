"""The `mosoo_core.environments` calls the Environments pages make (each in a worker thread,
`asyncio.to_thread`) and the plain rows they hand back to the states.

Secrets never reach a row: a secret variable's row has an empty value and `stored_secret`,
so a form can only send a new value or nothing (the stored one is kept).

A save, fork or rebuild that leaves the packages' build queued asks the worker to build it,
once the database session is closed (the worker must see the committed row)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from mosoo_core import environments, tasks_client
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_web.formatting import relative_time
from mosoo_web.pages.environments.labels import packages_label, policy_label


@dataclass
class EnvironmentRow:
    id: str = ""
    name: str = ""
    is_default: bool = False
    revision: int = 0
    network_policy: str = "none"
    policy_label: str = ""
    packages_label: str = ""
    updated: str = ""
    delete_error: str = ""


@dataclass
class VariableRow:
    key: str = ""  # the row's form key (`var-name-<key>`), stable while the form is open
    name: str = ""
    value: str = ""  # an exposed variable's value; always "" for a secret
    secret: bool = False
    setup_only: bool = False
    stored_secret: bool = False  # a secret with a stored value: an empty value keeps it


@dataclass
class RevisionRow:
    number: int = 0
    summary: str = ""
    created: str = ""


@dataclass(frozen=True)
class BuildStatus:
    """The current revision's package build as the editor shows it; `status` is "" when the
    revision has no packages (nothing to build)."""

    status: str = ""  # queued, building, ready, failed
    log: str = ""
    error: str = ""
    finished: str = ""  # "5 min ago" once ready or failed

    @property
    def active(self) -> bool:
        return self.status in ("queued", "building")


def _build_status(build: environments.BuildView | None, now: datetime) -> BuildStatus:
    if build is None:
        return BuildStatus()
    return BuildStatus(
        status=build.status,
        log=build.log,
        error=build.error,
        finished=relative_time(build.finished_at, now) if build.finished_at else "",
    )


@dataclass(frozen=True)
class EditorContent:
    """One environment as its editor shows it: the current revision and the list of all."""

    id: str
    name: str
    is_default: bool
    revision: int
    pip: str
    npm: str
    setup_script: str
    variables: list[VariableRow]
    network_policy: str
    allowed_hosts: str
    allow_package_indexes: bool
    revisions: list[RevisionRow] = field(default_factory=list)
    # The current revision's build (`BuildStatus`, flattened): "" status without packages.
    build_status: str = ""
    build_log: str = ""
    build_error: str = ""
    build_finished: str = ""


@dataclass(frozen=True)
class Saved:
    content: EditorContent
    number: int
    summary: str
    changed: bool  # False: the save changed nothing, so no revision was made


def list_rows(account_id: str, app_id: str) -> list[EnvironmentRow]:
    with session_scope() as db:
        views = environments.list_environments(db, account_id, app_id)
    now = utcnow()
    return [
        EnvironmentRow(
            id=view.id,
            name=view.name,
            is_default=view.is_default,
            revision=view.current_revision,
            network_policy=view.revision.network_policy,
            policy_label=policy_label(view.revision),
            packages_label=packages_label(view.revision, view.build.status if view.build else ""),
            updated=relative_time(view.updated_at, now),
        )
        for view in views
    ]


def rename(account_id: str, app_id: str, environment_id: str, name: str) -> str:
    with session_scope() as db:
        return environments.rename_environment(db, account_id, app_id, environment_id, name).name


def fork(account_id: str, app_id: str, environment_id: str) -> str:
    """The copy's name; its packages (shared with the original) are built if still queued."""
    with session_scope() as db:
        view = environments.fork_environment(db, account_id, app_id, environment_id)
    tasks_client.enqueue_environment_build(view.build)
    return view.name


def delete(account_id: str, app_id: str, environment_id: str) -> None:
    with session_scope() as db:
        environments.delete_environment(db, account_id, app_id, environment_id)


def variable_rows(variables: Sequence[environments.VariableView]) -> list[VariableRow]:
    return [
        VariableRow(
            key=f"v{index}",
            name=variable.name,
            value="" if variable.secret else variable.value,
            secret=variable.secret,
            setup_only=variable.setup_only,
            stored_secret=variable.secret,
        )
        for index, variable in enumerate(variables)
    ]


def _content(
    view: environments.EnvironmentView, revisions: list[environments.RevisionView]
) -> EditorContent:
    current = view.revision
    now = utcnow()
    build = _build_status(view.build, now)
    return EditorContent(
        id=view.id,
        name=view.name,
        is_default=view.is_default,
        revision=view.current_revision,
        pip="\n".join(current.pip),
        npm="\n".join(current.npm),
        setup_script=current.setup_script,
        variables=variable_rows(current.variables),
        network_policy=current.network_policy,
        allowed_hosts="\n".join(current.allowed_hosts),
        allow_package_indexes=current.allow_package_indexes,
        revisions=[
            RevisionRow(
                number=revision.number,
                summary=revision.summary,
                created=relative_time(revision.created_at, now),
            )
            for revision in revisions
        ],
        build_status=build.status,
        build_log=build.log,
        build_error=build.error,
        build_finished=build.finished,
    )


def load_editor(account_id: str, app_id: str, environment_id: str) -> EditorContent:
    with session_scope() as db:
        view = environments.get_environment(db, account_id, app_id, environment_id)
        revisions = environments.list_revisions(db, account_id, app_id, environment_id)
    return _content(view, revisions)


def save(
    account_id: str,
    app_id: str,
    environment_id: str,
    name: str,
    changes: environments.EnvironmentChanges,
) -> Saved:
    """Create the environment (no `environment_id`: its first revision) or save a new
    revision of it. Refusals are the service's `InvalidInput`, naming the field."""
    with session_scope() as db:
        if environment_id:
            before = environments.get_environment(db, account_id, app_id, environment_id)
            view = environments.update_environment(db, account_id, app_id, environment_id, changes)
            changed = view.current_revision != before.current_revision
        else:
            view = environments.create_environment(db, account_id, app_id, name, changes)
            changed = True
        revisions = environments.list_revisions(db, account_id, app_id, view.id)
    tasks_client.enqueue_environment_build(view.build)
    return Saved(
        content=_content(view, revisions),
        number=view.current_revision,
        summary=view.revision.summary,
        changed=changed,
    )


def rebuild(account_id: str, app_id: str, environment_id: str) -> BuildStatus:
    """Queue the current revision's packages to be built again and ask the worker to build
    them. Refused (`Conflict`, with the reason) while they build, or without packages."""
    with session_scope() as db:
        view = environments.rebuild_environment(db, account_id, app_id, environment_id)
    tasks_client.enqueue_environment_build(view.build)
    return _build_status(view.build, utcnow())


def build_status(account_id: str, app_id: str, environment_id: str) -> BuildStatus:
    """The current revision's build now (what the editor polls while it is queued or
    building)."""
    with session_scope() as db:
        view = environments.get_environment(db, account_id, app_id, environment_id)
    return _build_status(view.build, utcnow())
