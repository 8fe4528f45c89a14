"""A thread's event log: read a page, post user events, follow it as Server-Sent Events."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from mosoo_core import sessions
from mosoo_core.db import session_scope
from mosoo_core.errors import InvalidInput
from mosoo_core.sessions import actions
from mosoo_web.api.v1._auth import CallerDep
from mosoo_web.api.v1._errors import error_responses
from mosoo_web.api.v1._idempotency import HEADER, HEADER_DOC, answer_once
from mosoo_web.api.v1.schemas import (
    Event,
    EventList,
    PermissionDecision,
    PostedEvent,
    PostEvent,
    Run,
    UserInterrupt,
    UserMessage,
)
from mosoo_web.api.v1.sse import SSE_HEADERS, event_stream

router = APIRouter(tags=["Events"])


@router.get(
    "/threads/{thread_id}/events", response_model=EventList, operation_id="listEvents", summary="Read events",
    description="Stored events after `after_seq`, oldest first. Poll with the returned `next_after_seq`, "
    "or stream them with `GET /threads/{id}/events/stream`.",
    responses=error_responses(404),
)
async def list_events(
    thread_id: str, caller: CallerDep,
    after_seq: Annotated[int, Query(ge=0, description="Return events with a greater seq.")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> EventList:
    def work() -> EventList:
        with session_scope() as db:
            events = sessions.list_events(db, caller.account_id, thread_id, after_seq=after_seq, limit=limit)
            last_seq = sessions.get_session(db, caller.account_id, thread_id).last_seq
        next_after = events[-1].seq if events else after_seq
        return EventList(
            events=[Event.of(event) for event in events], next_after_seq=next_after, has_more=next_after < last_seq
        )

    return await run_in_threadpool(work)


_POST_EXAMPLES = {
    "user_message": {"summary": "Send a message", "value": {"type": "user_message", "text": "Summarise the report."}},
    "permission_decision": {
        "summary": "Answer a permission request",
        "value": {"type": "permission_decision", "request_id": "perm_1", "decision": "allow_once"},
    },
    "user_interrupt": {"summary": "Stop the active run", "value": {"type": "user_interrupt"}},
}


@router.post(
    "/threads/{thread_id}/events", status_code=202, response_model=PostedEvent, operation_id="postEvent",
    summary="Send a message, a permission decision or an interrupt",
    description="`user_message` stores the message and starts a run (one active run per thread; attach "
    "uploaded files with `file_ids`). `permission_decision` answers a `tool.confirmation.required` event "
    "(`allow_once` or `reject_once`). `user_interrupt` stops the active run. The outcome arrives as events.",
    responses=error_responses(
        404, conflicts="`conflict`: a run is already active, or nothing awaits a decision. `thread_archived`: "
        "unarchive the thread first. `readiness_blocked`: the agent version cannot run. "
        "`idempotency_conflict`: see `Idempotency-Key`. `worker_unavailable`: no worker took the run.",
    ),
)
async def post_event(
    thread_id: str, request: Request, caller: CallerDep,
    body: Annotated[PostEvent, Body(openapi_examples=_POST_EXAMPLES)],  # type: ignore[arg-type]
    idempotency_key: Annotated[str | None, Header(alias=HEADER, description=HEADER_DOC, max_length=255)] = None,
) -> JSONResponse:
    def work() -> PostedEvent:
        if isinstance(body, UserMessage):
            sent = actions.send_and_dispatch(
                caller.account_id, thread_id, body.text, file_ids=body.file_ids, refuse_archived=True
            )
            return PostedEvent(type=body.type, run=Run.of(sent.run), events=[Event.of(e) for e in sent.events])
        if isinstance(body, PermissionDecision):
            actions.answer_permission(caller.account_id, thread_id, body.request_id, body.decision)
            return PostedEvent(type=body.type, run=None, events=[])
        assert isinstance(body, UserInterrupt)
        events = actions.stop_run(caller.account_id, thread_id)
        return PostedEvent(type=body.type, run=None, events=[Event.of(e) for e in events])

    return await answer_once(
        request, caller, "POST /threads/{thread_id}/events", body.model_dump(mode="json"), 202, work
    )


@router.get(
    "/threads/{thread_id}/events/stream", operation_id="streamEvents", summary="Stream events (SSE)",
    description="Server-Sent Events: each event is `id: <seq>`, `event: <type>`, `data: <event JSON>`. "
    "Stored events after `Last-Event-ID` (or `after_seq`) come first, then live ones, each exactly once and "
    "in seq order; reconnect with the last `id` you received to resume without gaps or duplicates. "
    "Comment lines (`: keep-alive`) keep idle connections open. The stream stays open until you close it.",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "A `text/event-stream`.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        **error_responses(404),
    },
)
async def stream_events(
    thread_id: str, request: Request, caller: CallerDep,
    after_seq: Annotated[int, Query(ge=0, description="Start after this seq (`Last-Event-ID` wins).")] = 0,
    last_event_id: Annotated[
        str | None, Header(alias="Last-Event-ID", description="The last `id` received, to resume.")
    ] = None,
) -> StreamingResponse:
    start = after_seq
    if last_event_id is not None and last_event_id.strip():
        if not last_event_id.strip().isdigit():
            raise InvalidInput("Last-Event-ID must be the seq of an event.", field="Last-Event-ID")
        start = int(last_event_id.strip())

    def check() -> None:
        with session_scope() as db:
            sessions.get_session(db, caller.account_id, thread_id)

    await run_in_threadpool(check)  # a 404 must be an answer, not an empty stream
    return StreamingResponse(
        event_stream(request, caller.account_id, thread_id, start),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )
