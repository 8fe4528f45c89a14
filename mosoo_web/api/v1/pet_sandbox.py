"""An Agent's sandbox from code: an Assistant's (Pet's) status and use and the operations an
owner can do to it (restart, recreate, reset, hibernate, wake); a Task's (Cattle's) warm pool."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Path
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from mosoo_core.db import session_scope
from mosoo_core.runtime import agent_pool, pet_operations
from mosoo_web.api.v1._auth import CallerDep
from mosoo_web.api.v1._errors import error_responses
from mosoo_web.api.v1.schemas import JSON_BODY_TOO_LARGE, NO_NUL, AgentId

router = APIRouter(tags=["Agents"])

OperationName = Annotated[
    Literal["restart", "recreate", "reset", "hibernate", "wake"],
    Path(description="What to do to the sandbox (see the operation's description)."),
]


class SandboxStatus(BaseModel):
    kind: Literal["pet"] = Field(description="An assistant: the sandbox is its own.")
    state: Literal["running", "stopped", "hibernated", "none"] = Field(
        description="`running`; `stopped` (the container exists but is not running); "
        "`hibernated` (no container, its workspace saved: the next message or `wake` builds "
        "it); `none` (the next message builds a fresh one)."
    )
    sandbox_id: str = Field(description='The container\'s id; "" without one.')
    image: str = Field(description="What the sandbox was made from.")
    started_at: datetime | None
    uptime_seconds: int | None
    cpu_percent: float | None = Field(description="Of one CPU, over about the last second.")
    memory_bytes: int | None
    memory_limit_bytes: int | None
    pending: list[str] = Field(
        description="Profile fields changed since the sandbox was built (see Apply)."
    )

    @classmethod
    def of(cls, status: pet_operations.SandboxStatus) -> SandboxStatus:
        return cls(kind="pet", **dataclasses.asdict(status))


class PoolKeyFigures(BaseModel):
    key_id: str
    runtime: str
    network_policy: str = Field(description="`none`, `limited` or `full`.")
    revision_id: str = Field(description="The environment revision its sandboxes were made with.")
    target: int = Field(description="How many sandboxes the key keeps standing by.")
    standing_by: int = Field(description="Sandboxes ready now, each for one run.")
    starting: int = Field(description="Sandboxes being made.")
    hits: int = Field(description="Runs that took a sandbox standing by.")
    misses: int = Field(description="Runs that found none and started their own.")
    hit_rate: float | None = Field(description="`hits / (hits + misses)`; null before a run.")
    last_wanted_at: datetime = Field(description="The last run that wanted this key.")


class WarmPool(BaseModel):
    kind: Literal["cattle"] = Field(description="A task: each run gets a sandbox of its own.")
    enabled: bool = Field(
        description="false: the pool is off for this kind of sandbox (every run starts cold)."
    )
    runtime: str
    network_policy: str = Field(description="Of the environment's current revision.")
    revision_id: str = Field(description="The environment's current revision.")
    target: int = Field(description="How many sandboxes each key keeps standing by.")
    keys: list[PoolKeyFigures] = Field(
        description="The keys the agent's next run would take a sandbox from, on this host: "
        "empty until its first run there (a run that finds none starts the pool)."
    )

    @classmethod
    def of(cls, pool: agent_pool.AgentPool) -> WarmPool:
        return cls(
            kind="cattle",
            enabled=pool.enabled,
            runtime=pool.runtime,
            network_policy=pool.network_policy,
            revision_id=pool.revision_id,
            target=pool.target,
            keys=[PoolKeyFigures.model_validate(key, from_attributes=True) for key in pool.keys],
        )


AgentSandbox = Annotated[SandboxStatus | WarmPool, Field(discriminator="kind")]


class SandboxOperationBody(BaseModel):
    confirm_name: Annotated[str, Field(pattern=NO_NUL, max_length=200)] | None = Field(
        default=None, description="`reset` only: the agent's name, typed to confirm."
    )


class SandboxOperationResult(BaseModel):
    operation: str
    message: str = Field(description="What happened, for the owner.")
    seconds: float = Field(description="How long it took.")


_PET_ONLY = "`conflict`: the agent is a Task, which has no sandbox of its own."


@router.get(
    "/agents/{agent_id}/sandbox",
    response_model=AgentSandbox,
    operation_id="getAgentSandbox",
    summary="An agent's sandbox, or a task's warm pool",
    description="An assistant (`kind` `pet`): whether its sandbox is running, hibernated or "
    "not there, its uptime, image, CPU and memory use (sampled for about a second). A task "
    "(`kind` `cattle`): its warm pool on this host, the sandboxes started ahead of its runs, "
    "with how many stand by against the target, and the hits and misses of its runs.",
    responses=error_responses(404),
)
async def get_sandbox(agent_id: AgentId, caller: CallerDep) -> SandboxStatus | WarmPool:
    def work() -> SandboxStatus | WarmPool:
        with session_scope() as db:
            pool = agent_pool.agent_pool(db, caller.account_id, agent_id)
            if pool is not None:
                return WarmPool.of(pool)
            return SandboxStatus.of(pet_operations.sandbox_status(db, caller.account_id, agent_id))

    return await run_in_threadpool(work)


@router.post(
    "/agents/{agent_id}/sandbox/{operation}",
    response_model=SandboxOperationResult,
    operation_id="operateAgentSandbox",
    summary="Restart, recreate, reset, hibernate or wake an assistant's sandbox",
    description="`restart`: stops its driver, the container and its files stay. `recreate`: "
    "saves `/workspace`, removes the container and builds a new one from the current profile "
    "with the workspace restored (if saving fails the old sandbox stays and the error says "
    "why). `reset`: wipes the sandbox and its saved workspace, keeping the configuration, "
    "threads, usage and logs; `confirm_name` must be the agent's name. `hibernate`: saves "
    "`/workspace` and removes the container. `wake`: builds a hibernated sandbox again. An "
    "environment with a setup script or packages is built by the next message instead. "
    "Every operation is recorded for the agent's logs, refused and failed ones too.",
    responses={
        **error_responses(
            404,
            conflicts=f"{_PET_ONLY} Also `conflict` while a run of the agent is active, and "
            "when the sandbox cannot do it now (nothing to wake, saving failed): the message "
            "says why.",
            invalid="`invalid_request`: an unknown operation, or `confirm_name` (reset) is not "
            "the agent's name (`field` names it).",
        ),
        413: JSON_BODY_TOO_LARGE,
    },
)
async def operate_sandbox(
    agent_id: AgentId,
    operation: OperationName,
    caller: CallerDep,
    body: SandboxOperationBody | None = None,
) -> SandboxOperationResult:
    def work() -> SandboxOperationResult:
        result = pet_operations.run_operation(
            caller.account_id,
            agent_id,
            operation,
            confirm_name=(body.confirm_name if body else None) or "",
        )
        return SandboxOperationResult.model_validate(dataclasses.asdict(result))

    return await run_in_threadpool(work)
