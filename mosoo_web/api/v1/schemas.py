"""Request and response shapes of the public API (they are the OpenAPI document's schemas)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mosoo_core.agents import AgentView
from mosoo_core.sessions import RunView, SessionView, StoredEvent


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, not silently ignored


class ErrorBody(BaseModel):
    code: str = Field(description="Stable machine-readable code, e.g. `not_found`.", examples=["not_found"])
    message: str = Field(description="What went wrong, for people.")
    field: str | None = Field(default=None, description="The request field at fault, when there is one.")


class ErrorResponse(BaseModel):
    error: ErrorBody


class Agent(BaseModel):
    id: str
    app_id: str
    name: str
    description: str
    runtime: str = Field(description="`openai`, `claude` or `acp`.")
    kind: str = Field(description="`pet` (Assistant: one long-lived sandbox) or `cattle` (Task: a fresh sandbox per run).")
    model: str
    status: str = Field(description="`draft` or `published`. Only published agents take API threads.")
    published_version: int | None = Field(description="The version new threads pin.")
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, view: AgentView) -> Agent:
        return cls(
            id=view.id, app_id=view.app_id, name=view.name, description=view.description, runtime=view.runtime,
            kind=view.kind, model=view.model, status=view.status, published_version=view.published_version,
            created_at=view.created_at, updated_at=view.updated_at,
        )


class AgentList(BaseModel):
    agents: list[Agent]


class RunError(BaseModel):
    code: str
    message: str
    retryable: bool


class Run(BaseModel):
    id: str
    thread_id: str
    status: str = Field(
        description="Active: `queued`, `booting`, `running`, `waiting_input`. "
        "Terminal: `completed`, `failed`, `cancelled`, `expired`."
    )
    error: RunError | None = Field(description="Why a failed run failed.")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, view: RunView) -> Run:
        error = None
        if view.error_code:
            error = RunError(
                code=view.error_code, message=view.error_message or "", retryable=bool(view.error_retryable)
            )
        return cls(
            id=view.id, thread_id=view.session_id, status=view.status, error=error, created_at=view.created_at,
            started_at=view.started_at, finished_at=view.finished_at,
        )


class Thread(BaseModel):
    id: str
    app_id: str
    agent_id: str
    agent_version: int | None = Field(description="The published agent version this thread runs.")
    title: str
    status: str = Field(description="`idle`, `running`, `rescheduling` or `terminated`.")
    purpose: str = Field(description="Where the thread started: `api`, `console`, `preview`, `channel`.")
    end_user_id: str | None = Field(description="Your identifier for the user this thread serves.")
    archived: bool = Field(description="Archived threads are read-only until unarchived.")
    last_seq: int = Field(description="The seq of the thread's latest event.")
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, view: SessionView) -> Thread:
        return cls(
            id=view.id, app_id=view.app_id, agent_id=view.agent_id, agent_version=view.agent_version,
            title=view.title, status=view.status, purpose=view.purpose, end_user_id=view.end_user_id,
            archived=view.archived, last_seq=view.last_seq, created_at=view.created_at, updated_at=view.updated_at,
        )


class ThreadDetail(Thread):
    latest_run: Run | None = Field(description="The thread's most recent run, active or finished.")


class ThreadList(BaseModel):
    threads: list[Thread]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


class CreateThread(_Request):
    message: str | None = Field(
        default=None, min_length=1, max_length=100_000, description="The first user message; starts a run."
    )
    file_ids: list[str] = Field(
        default_factory=list, max_length=100,
        description="Files uploaded with `POST /agents/{agent_id}/files` to attach to the first message.",
    )
    end_user_id: str | None = Field(
        default=None, min_length=1, max_length=200, description="Your identifier for the user this thread serves."
    )
    title: str | None = Field(default=None, max_length=80)


class CreatedThread(BaseModel):
    thread: Thread
    run: Run | None = Field(description="The run started by `message`; null without a message.")


class Event(BaseModel):
    seq: int = Field(description="Position in the thread's event log, from 1, without gaps.")
    type: str = Field(
        description="`user.message`, `run.started`, `run.completed`, `run.failed`, `agent.message.delta`, "
        "`agent.thinking.delta`, `tool.use.started`, `tool.use.completed`, `tool.confirmation.required`, "
        "`file.changed`, `session_files.updated`, `session.status`, `usage.updated`, …"
    )
    run_id: str | None
    occurred_at: datetime
    payload: dict[str, Any]

    @classmethod
    def of(cls, event: StoredEvent) -> Event:
        return cls.model_validate(event.to_public())


class EventList(BaseModel):
    events: list[Event]
    next_after_seq: int = Field(description="Pass as `after_seq` to read on.")
    has_more: bool = Field(description="More stored events follow this page.")


class UserMessage(_Request):
    type: Literal["user_message"]
    text: str = Field(min_length=1, max_length=100_000)
    file_ids: list[str] = Field(default_factory=list, max_length=100)


class PermissionDecision(_Request):
    type: Literal["permission_decision"]
    request_id: str = Field(min_length=1, max_length=200, description="From the `tool.confirmation.required` event.")
    decision: Literal["allow_once", "reject_once"]


class UserInterrupt(_Request):
    type: Literal["user_interrupt"]


PostEvent = Annotated[UserMessage | PermissionDecision | UserInterrupt, Field(discriminator="type")]


class PostedEvent(BaseModel):
    type: str = Field(description="The type of the event you posted.")
    run: Run | None = Field(description="The run a `user_message` started.")
    events: list[Event] = Field(description="Events stored by this call (they also appear on the stream).")


class File(BaseModel):
    id: str
    app_id: str
    agent_id: str
    thread_id: str | None = Field(description="Null until a message names the file.")
    run_id: str | None
    kind: str = Field(description="`attachment` (uploaded) or `artifact` (written by the agent).")
    status: str = Field(description="`pending`, `ready`, `failed` or `deleting`.")
    name: str
    path: str = Field(description="Artifacts: the path under `/workspace/outputs`.")
    media_type: str
    size: int
    sha256: str
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, view: Any) -> File:
        return cls(
            id=view.id, app_id=view.app_id, agent_id=view.agent_id, thread_id=view.session_id, run_id=view.run_id,
            kind=view.kind, status=view.status, name=view.name, path=view.path, media_type=view.media_type,
            size=view.size, sha256=view.sha256, created_at=view.created_at, updated_at=view.updated_at,
        )


class FileList(BaseModel):
    files: list[File]


class Deleted(BaseModel):
    id: str
    deleted: Literal[True] = True
