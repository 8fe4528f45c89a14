"""`GET /agents`, `GET /agents/{agent_id}`: what a token can start threads with (the CLI lists them)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from mosoo_core import agents
from mosoo_core.db import session_scope
from mosoo_core.sessions import actions
from mosoo_web.api.v1._auth import CallerDep
from mosoo_web.api.v1._errors import error_responses
from mosoo_web.api.v1.schemas import Agent, AgentId, AgentList

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
            return Agent.of(
                agents.agent_view(actions.account_agent(db, caller.account_id, agent_id))
            )

    return await run_in_threadpool(work)
