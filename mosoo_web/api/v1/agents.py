"""Agents: what a token can start threads with (the CLI lists them), and configuring them from
code or CI with the same services as the console's Preview form: create, change, readiness,
publish."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from mosoo_core import agents
from mosoo_core.db import session_scope
from mosoo_core.ownership import account_agent
from mosoo_core.sessions import actions
from mosoo_web.api.v1._auth import CallerDep
from mosoo_web.api.v1._errors import error_responses
from mosoo_web.api.v1._idempotency import answer_once
from mosoo_web.api.v1.environment_schemas import (
    AgentProfile,
    AgentReadiness,
    CreateAgent,
    PublishAgent,
    Version,
)
from mosoo_web.api.v1.environments import app_for
from mosoo_web.api.v1.schemas import (
    JSON_BODY_TOO_LARGE,
    REPLAYED_DOC,
    Agent,
    AgentId,
    AgentList,
    IdempotencyKey,
)

router = APIRouter(tags=["Agents"])


@router.get(
    "/agents",
    response_model=AgentList,
    operation_id="listAgents",
    summary="List agents",
    description="Every agent of the token owner's Apps. Only `published` agents take new API threads. "
    "(Not in the product contract's endpoint list: added for the CLI and for discovering agent ids.)",
    responses=error_responses(),
)
async def list_agents(caller: CallerDep) -> AgentList:
    def work() -> AgentList:
        with session_scope() as db:
            return AgentList(
                agents=[
                    Agent.of(view) for view in actions.list_account_agents(db, caller.account_id)
                ]
            )

    return await run_in_threadpool(work)


@router.get(
    "/agents/{agent_id}",
    response_model=Agent,
    operation_id="getAgent",
    summary="Get an agent",
    description="One agent of the token owner. (Added for the CLI, like `GET /agents`.)",
    responses=error_responses(404),
)
async def get_agent(agent_id: AgentId, caller: CallerDep) -> Agent:
    def work() -> Agent:
        with session_scope() as db:
            return Agent.of(agents.agent_view(account_agent(db, caller.account_id, agent_id)))

    return await run_in_threadpool(work)


_PROFILE_INVALID = (
    "`invalid_request`: a field is invalid; `field` names it, as the console's Preview form "
    "shows it."
)


@router.post(
    "/agents",
    status_code=201,
    response_model=Agent,
    operation_id="createAgent",
    summary="Create an agent",
    description="A draft with the given profile (the other fields take the defaults of a new "
    "agent); `app_id` defaults to the account's first App. Publish it to take API threads.",
    responses={
        201: {"headers": REPLAYED_DOC},
        **error_responses(
            404,
            conflicts="`conflict`: `provider_credential_id` names no key of the App (`field` "
            "names it). `idempotency_conflict`: see `Idempotency-Key`.",
            invalid=_PROFILE_INVALID,
        ),
        413: JSON_BODY_TOO_LARGE,
    },
)
async def create_agent(
    body: CreateAgent, request: Request, caller: CallerDep, idempotency_key: IdempotencyKey = None
) -> JSONResponse:
    def work() -> Agent:
        app_id = app_for(caller.account_id, body.app_id)
        with session_scope() as db:
            made = agents.create_agent(
                db,
                caller.account_id,
                app_id,
                name=body.name,
                runtime=body.runtime or "openai",
                kind=body.kind or "cattle",
            )
            return Agent.of(
                agents.update_agent(db, caller.account_id, app_id, made.id, body.changes())
            )

    return await answer_once(
        request, caller, "POST /agents", body.model_dump(mode="json"), 201, work
    )


@router.patch(
    "/agents/{agent_id}",
    response_model=Agent,
    operation_id="updateAgent",
    summary="Change an agent",
    description="Changes the draft profile; published versions and the threads pinned to them "
    "keep theirs until the next `publish`.",
    responses=error_responses(
        404,
        invalid=_PROFILE_INVALID,
        conflicts="`conflict` (`field` names it): kind and runtime are locked after the first "
        "publish; `provider_credential_id` names no key of the agent's App.",
    ),
)
async def update_agent(agent_id: AgentId, body: AgentProfile, caller: CallerDep) -> Agent:
    def work() -> Agent:
        with session_scope() as db:
            agent = account_agent(db, caller.account_id, agent_id)
            return Agent.of(
                agents.update_agent(db, caller.account_id, agent.app_id, agent.id, body.changes())
            )

    return await run_in_threadpool(work)


@router.get(
    "/agents/{agent_id}/readiness",
    response_model=AgentReadiness,
    operation_id="getAgentReadiness",
    summary="What stops an agent from running",
    responses=error_responses(404),
)
async def get_readiness(agent_id: AgentId, caller: CallerDep) -> AgentReadiness:
    def work() -> AgentReadiness:
        with session_scope() as db:
            agent = agents.agent_view(account_agent(db, caller.account_id, agent_id))
            return AgentReadiness.of(agents.readiness(db, agent))

    return await run_in_threadpool(work)


@router.post(
    "/agents/{agent_id}/publish",
    status_code=201,
    response_model=Version,
    operation_id="publishAgent",
    summary="Publish an agent",
    description="Freezes the draft as the next version; new API threads pin it.",
    responses=error_responses(
        404, conflicts="`readiness_blocked`: the draft has blockers (see readiness)."
    ),
)
async def publish_agent(
    agent_id: AgentId, caller: CallerDep, body: PublishAgent | None = None
) -> Version:
    def work() -> Version:
        with session_scope() as db:
            agent = account_agent(db, caller.account_id, agent_id)
            return Version.of(
                agents.publish_agent(
                    db, caller.account_id, agent.app_id, agent.id, (body or PublishAgent()).summary
                )
            )

    return await run_in_threadpool(work)
