"""Environments from code or CI: list, create, read, change (each change a new revision),
revisions, delete. Secrets are write-only: no answer carries their value."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from mosoo_core import environments, identity, tasks_client
from mosoo_core.db import session_scope
from mosoo_web.api.v1._auth import CallerDep
from mosoo_web.api.v1._errors import error_responses
from mosoo_web.api.v1._idempotency import answer_once
from mosoo_web.api.v1.environment_schemas import (
    CreateEnvironment,
    Environment,
    EnvironmentId,
    EnvironmentList,
    Revision,
    RevisionList,
    UpdateEnvironment,
)
from mosoo_web.api.v1.schemas import (
    JSON_BODY_TOO_LARGE,
    NO_NUL,
    REPLAYED_DOC,
    Deleted,
    IdempotencyKey,
)

router = APIRouter(tags=["Environments"])

_INVALID = (
    "`invalid_request`: a field is invalid; `field` names it (`pip`, `npm`, `variables`, "
    "`setup_script`, `network_policy`, `allowed_hosts`, `name`) and the message the entry."
)


def app_for(db_account_id: str, app_id: str | None) -> str:
    """The App a creating call names, or the account's first App."""
    with session_scope() as db:
        if app_id:
            return identity.get_app(db, db_account_id, app_id).id
        return identity.list_apps(db, db_account_id)[0].id


@router.get(
    "/environments",
    response_model=EnvironmentList,
    operation_id="listEnvironments",
    summary="List environments",
    description="The environments of the token owner's Apps (or of one, with `app_id`), the "
    "default first.",
    responses=error_responses(404),
)
async def list_environments(
    caller: CallerDep,
    app_id: Annotated[str | None, Query(max_length=26, pattern=NO_NUL)] = None,
) -> EnvironmentList:
    def work() -> EnvironmentList:
        with session_scope() as db:
            apps = (
                [identity.get_app(db, caller.account_id, app_id)]
                if app_id
                else identity.list_apps(db, caller.account_id)
            )
            return EnvironmentList(
                environments=[
                    Environment.of(view)
                    for app in apps
                    for view in environments.list_environments(db, caller.account_id, app.id)
                ]
            )

    return await run_in_threadpool(work)


@router.post(
    "/environments",
    status_code=201,
    response_model=Environment,
    operation_id="createEnvironment",
    summary="Create an environment",
    description="Its first revision holds the given content; `app_id` defaults to the "
    "account's first App.",
    responses={
        201: {"headers": REPLAYED_DOC},
        **error_responses(
            404,
            conflicts="`name_taken`: another environment has the name. `idempotency_conflict`: "
            "see `Idempotency-Key`.",
            invalid=_INVALID,
        ),
        413: JSON_BODY_TOO_LARGE,
    },
)
async def create_environment(
    body: CreateEnvironment,
    request: Request,
    caller: CallerDep,
    idempotency_key: IdempotencyKey = None,
) -> JSONResponse:
    def work() -> Environment:
        app_id = app_for(caller.account_id, body.app_id)
        with session_scope() as db:
            view = environments.create_environment(
                db, caller.account_id, app_id, body.name, body.changes()
            )
        tasks_client.enqueue_environment_build(view.build)
        return Environment.of(view)

    return await answer_once(
        request, caller, "POST /environments", body.model_dump(mode="json"), 201, work
    )


def _get(account_id: str, environment_id: str) -> Environment:
    with session_scope() as db:
        app_id = environments.environment_app_id(db, account_id, environment_id)
        return Environment.of(environments.get_environment(db, account_id, app_id, environment_id))


@router.get(
    "/environments/{environment_id}",
    response_model=Environment,
    operation_id="getEnvironment",
    summary="Get an environment",
    responses=error_responses(404),
)
async def get_environment(environment_id: EnvironmentId, caller: CallerDep) -> Environment:
    return await run_in_threadpool(_get, caller.account_id, environment_id)


@router.patch(
    "/environments/{environment_id}",
    response_model=Environment,
    operation_id="updateEnvironment",
    summary="Change an environment",
    description="A change of content makes a new revision (threads that started before keep "
    "theirs); `name` renames. A change that changes nothing makes no revision.",
    responses={
        **error_responses(
            404,
            invalid=_INVALID,
            conflicts="`name_taken`: another environment has the name. `conflict`: what is "
            "stored refuses a well-formed value (`field` names it): a variable kept without a "
            "stored value, allowed hosts for a policy that is not limited.",
        ),
        413: JSON_BODY_TOO_LARGE,
    },
)
async def update_environment(
    environment_id: EnvironmentId, body: UpdateEnvironment, caller: CallerDep
) -> Environment:
    def work() -> Environment:
        with session_scope() as db:
            app_id = environments.environment_app_id(db, caller.account_id, environment_id)
            if body.name is not None:
                environments.rename_environment(
                    db, caller.account_id, app_id, environment_id, body.name
                )
            view = environments.update_environment(
                db, caller.account_id, app_id, environment_id, body.changes()
            )
        tasks_client.enqueue_environment_build(view.build)
        return Environment.of(view)

    return await run_in_threadpool(work)


@router.post(
    "/environments/{environment_id}/rebuild",
    response_model=Environment,
    operation_id="rebuildEnvironment",
    summary="Build an environment's packages again",
    description="Queues a new build of the current revision's packages (for example after a "
    "failed build, or when an index now serves what it did not). Runs keep the ready build "
    "until the new one is ready.",
    responses=error_responses(
        404,
        conflicts="`conflict`: the current revision has no packages, or a build of them is "
        "in progress.",
    ),
)
async def rebuild_environment(environment_id: EnvironmentId, caller: CallerDep) -> Environment:
    def work() -> Environment:
        with session_scope() as db:
            app_id = environments.environment_app_id(db, caller.account_id, environment_id)
            view = environments.rebuild_environment(db, caller.account_id, app_id, environment_id)
        tasks_client.enqueue_environment_build(view.build)
        return Environment.of(view)

    return await run_in_threadpool(work)


@router.get(
    "/environments/{environment_id}/revisions",
    response_model=RevisionList,
    operation_id="listEnvironmentRevisions",
    summary="List an environment's revisions",
    responses=error_responses(404),
)
async def list_revisions(environment_id: EnvironmentId, caller: CallerDep) -> RevisionList:
    def work() -> RevisionList:
        with session_scope() as db:
            app_id = environments.environment_app_id(db, caller.account_id, environment_id)
            return RevisionList(
                revisions=[
                    Revision.of(view)
                    for view in environments.list_revisions(
                        db, caller.account_id, app_id, environment_id
                    )
                ]
            )

    return await run_in_threadpool(work)


@router.delete(
    "/environments/{environment_id}",
    response_model=Deleted,
    operation_id="deleteEnvironment",
    summary="Delete an environment",
    description="Refused while an agent, a published version or a running thread uses it, "
    "and for the App's default. Threads that froze one of its revisions keep it.",
    responses=error_responses(
        404, conflicts="`conflict`: in use (the message names what uses it), or the default."
    ),
)
async def delete_environment(environment_id: EnvironmentId, caller: CallerDep) -> Deleted:
    def work() -> Deleted:
        with session_scope() as db:
            app_id = environments.environment_app_id(db, caller.account_id, environment_id)
            environments.delete_environment(db, caller.account_id, app_id, environment_id)
        return Deleted(id=environment_id)

    return await run_in_threadpool(work)
