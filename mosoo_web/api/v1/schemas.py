"""Request and response shapes of the public API (they are the OpenAPI document's schemas)."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Annotated, Any, Literal, Self

from fastapi import Header, Path
from pydantic import BaseModel, ConfigDict, Field

from mosoo_core.agents import AgentView
from mosoo_core.sessions import RunView, SessionView, StoredEvent
from mosoo_core.usage import UsageTotals
from mosoo_web.api.v1._idempotency import HEADER, HEADER_DOC, REPLAYED_HEADER

# PostgreSQL text cannot hold NUL: refuse it at the door (400) rather than fail in the database (500).
NO_NUL = r"^[^\x00]*$"
# The largest seq the `seq` column (INTEGER, 32 bits on PostgreSQL) holds; a greater `after_seq`
# is refused (400) rather than failing in the database (500).
MAX_SEQ = 2**31 - 1

AgentId = Annotated[str, Path(pattern=NO_NUL, description="An agent id (see `GET /agents`).")]
ThreadId = Annotated[str, Path(pattern=NO_NUL, description="A thread id.")]
FileId = Annotated[str, Path(pattern=NO_NUL, description="A file id.")]
Text = Annotated[str, Field(pattern=NO_NUL)]
# What `str.strip()` removes: a message of only these is refused ("Write a message first.").
_SPACE = r"\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# No NUL and something besides white space (leading spaces, then the first other character: no backtracking).
MessageText = Annotated[str, Field(pattern=rf"^[{_SPACE}]*[^\x00{_SPACE}][^\x00]*$")]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias=HEADER,
        description=HEADER_DOC,
        max_length=255,
        # Documented, not enforced here: `idempotency.clean_key` refuses anything else with a clearer message.
        json_schema_extra={"pattern": r"^[!-~]([ -~]*[!-~])?$"},
    ),
]
REPLAYED_DOC = {
    REPLAYED_HEADER: {
        "description": "`true` when this is the stored answer to an earlier call with the same `Idempotency-Key`.",
        "schema": {"type": "string", "const": "true"},
    }
}


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, not silently ignored


class ErrorBody(BaseModel):
    code: str = Field(
        description="Stable machine-readable code, e.g. `not_found`.", examples=["not_found"]
    )
    message: str = Field(description="What went wrong, for people.")
    field: str | None = Field(
        default=None, description="The request field at fault, when there is one."
    )


class ErrorResponse(BaseModel):
    error: ErrorBody


# BodyLimit refuses a JSON body over 2 MiB before the route reads it.
JSON_BODY_TOO_LARGE: dict[str, Any] = {
    "model": ErrorResponse,
    "description": "`payload_too_large`: the JSON body is over 2 MiB.",
}


class Agent(BaseModel):
    id: str
    app_id: str
    name: str
    description: str
    runtime: str = Field(description="`openai`, `claude` or `acp`.")
    kind: str = Field(
        description="`pet` (Assistant: one long-lived sandbox) or `cattle` (Task: a fresh sandbox per run)."
    )
    model: str
    status: str = Field(
        description="`draft` or `published`. Only published agents take API threads."
    )
    published_version: int | None = Field(description="The version new threads pin.")
    skills: list[str] = Field(
        description="The draft's skill bindings: `<skill id>` (the latest version) or "
        "`<skill id>@<version>`."
    )
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, view: AgentView) -> Agent:
        return cls(
            id=view.id,
            app_id=view.app_id,
            name=view.name,
            description=view.description,
            runtime=view.runtime,
            kind=view.kind,
            model=view.model,
            status=view.status,
            published_version=view.published_version,
            skills=list(view.skills),
            created_at=view.created_at,
            updated_at=view.updated_at,
        )


class AgentList(BaseModel):
    agents: list[Agent]


class RunError(BaseModel):
    code: str
    message: str
    retryable: bool


class RunUsage(BaseModel):
    calls: int = Field(description="Model calls the run made.")
    input_tokens: int
    cached_input_tokens: int
    cache_creation_input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cost_usd_micros: int = Field(
        description="Millionths of a USD, at the prices in effect when each call was made."
    )
    unpriced_calls: int = Field(description="Calls of a model with no price (counted at 0).")

    @classmethod
    def of(cls, totals: UsageTotals) -> RunUsage:
        return cls(**dataclasses.asdict(totals))


class Run(BaseModel):
    id: str
    thread_id: str
    status: str = Field(
        description="Active: `queued`, `booting`, `running`, `waiting_input`. "
        "Terminal: `completed`, `failed`, `cancelled`, `expired`. `pending`: a message sent while "
        "the thread's run had not started yet waits its turn (it becomes `queued` when the run "
        "before it ends)."
    )
    error: RunError | None = Field(description="Why a failed run failed.")
    usage: RunUsage | None = Field(
        description="The tokens and cost of the run's model calls so far; null once its "
        "per-call records are past retention (`GET /usage` still counts them)."
    )
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, view: RunView, totals: UsageTotals | None) -> Run:
        """`totals`: the run's usage so far, read by the caller in its own unit of work
        (`usage.run_usage`; `UsageTotals()` for a run it has just queued), None when unknown."""
        error = None
        if view.error_code:
            error = RunError(
                code=view.error_code,
                message=view.error_message or "",
                retryable=bool(view.error_retryable),
            )
        return cls(
            id=view.id,
            thread_id=view.session_id,
            status=view.status,
            error=error,
            usage=RunUsage.of(totals) if totals is not None else None,
            created_at=view.created_at,
            started_at=view.started_at,
            finished_at=view.finished_at,
        )


class Thread(BaseModel):
    id: str
    app_id: str
    agent_id: str
    agent_version: int | None = Field(description="The published agent version this thread runs.")
    title: str
    status: str = Field(description="`idle`, `running`, `rescheduling` or `terminated`.")
    purpose: str = Field(
        description="Where the thread started: `api`, `console`, `preview`, `channel`."
    )
    end_user_id: str | None = Field(description="Your identifier for the user this thread serves.")
    archived: bool = Field(description="Archived threads are read-only until unarchived.")
    last_seq: int = Field(description="The seq of the thread's latest event.")
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, view: SessionView, **more: Any) -> Self:
        """`more`: a subclass's own fields (`ThreadDetail.of(view, latest_run=...)`)."""
        return cls(
            id=view.id,
            app_id=view.app_id,
            agent_id=view.agent_id,
            agent_version=view.agent_version,
            title=view.title,
            status=view.status,
            purpose=view.purpose,
            end_user_id=view.end_user_id,
            archived=view.archived,
            last_seq=view.last_seq,
            created_at=view.created_at,
            updated_at=view.updated_at,
            **more,
        )


class ThreadDetail(Thread):
    latest_run: Run | None = Field(description="The thread's most recent run, active or finished.")


class ThreadList(BaseModel):
    threads: list[Thread]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; null on the last page."
    )


class CreateThread(_Request):
    model_config = ConfigDict(
        # As the service checks it: files ride on a message, so a non-empty `file_ids` needs `message`.
        json_schema_extra={
            "dependentSchemas": {
                "file_ids": {
                    "anyOf": [
                        {"properties": {"file_ids": {"maxItems": 0}}},
                        {"required": ["message"], "properties": {"message": {"type": "string"}}},
                    ]
                }
            }
        }
    )

    message: MessageText | None = Field(
        default=None,
        min_length=1,
        max_length=100_000,
        description="The first user message; starts a run.",
    )
    file_ids: list[Text] = Field(
        default_factory=list,
        max_length=100,
        description="Files uploaded with `POST /agents/{agent_id}/files` to attach to the first message "
        "(needs `message`).",
    )
    end_user_id: Text | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="Your identifier for the user this thread serves.",
    )
    title: Text | None = Field(default=None, max_length=80)


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
    text: MessageText = Field(min_length=1, max_length=100_000)
    file_ids: list[Text] = Field(default_factory=list, max_length=100)


class PermissionDecision(_Request):
    type: Literal["permission_decision"]
    request_id: Text = Field(
        min_length=1, max_length=200, description="From the `tool.confirmation.required` event."
    )
    decision: Literal["allow_once", "reject_once"]


class UserInterrupt(_Request):
    type: Literal["user_interrupt"]


PostEvent = Annotated[UserMessage | PermissionDecision | UserInterrupt, Field(discriminator="type")]


class PostedEvent(BaseModel):
    type: str = Field(description="The type of the event you posted.")
    run: Run | None = Field(
        description="The run a `user_message` started (`pending` when it waits its turn)."
    )
    events: list[Event] = Field(
        description="Events stored by this call (they also appear on the stream)."
    )


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
            id=view.id,
            app_id=view.app_id,
            agent_id=view.agent_id,
            thread_id=view.session_id,
            run_id=view.run_id,
            kind=view.kind,
            status=view.status,
            name=view.name,
            path=view.path,
            media_type=view.media_type,
            size=view.size,
            sha256=view.sha256,
            created_at=view.created_at,
            updated_at=view.updated_at,
        )


class FileList(BaseModel):
    files: list[File]


class Deleted(BaseModel):
    id: str
    deleted: Literal[True] = True


def attachment_response(
    description: str, content: dict[str, Any], *, length: str = ""
) -> dict[str, Any]:
    """The OpenAPI answer of a download: streamed as an attachment, never sniffed or cached."""
    content_length: dict[str, Any] = {"required": True, "schema": {"type": "integer", "minimum": 0}}
    if length:
        content_length["description"] = length
    return {
        "description": description,
        "headers": {
            "Content-Disposition": {
                "required": True,
                "description": "`attachment`, with an ASCII `filename` and the exact UTF-8 "
                "`filename*` (RFC 6266).",
                "schema": {
                    "type": "string",
                    "pattern": '^attachment; filename="[^"]*"; filename\\*=UTF-8\'\'',
                },
            },
            "Content-Length": content_length,
            "X-Content-Type-Options": {
                "required": True,
                "schema": {"type": "string", "const": "nosniff"},
            },
            "Cache-Control": {
                "required": True,
                "schema": {"type": "string", "const": "private, no-store"},
            },
        },
        "content": content,
    }
