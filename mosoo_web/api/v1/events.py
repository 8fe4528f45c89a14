"""A thread's event log: read a page, post user events, follow it as Server-Sent Events."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Body, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from mosoo_core import sessions
from mosoo_core.db import session_scope
from mosoo_core.errors import InvalidInput
from mosoo_core.sessions import actions
from mosoo_core.usage import UsageTotals
from mosoo_web.api.v1._auth import CallerDep
from mosoo_web.api.v1._errors import error_responses
from mosoo_web.api.v1._idempotency import answer_once
from mosoo_web.api.v1.schemas import (
    JSON_BODY_TOO_LARGE,
    MAX_SEQ,
    REPLAYED_DOC,
    Event,
    EventList,
    IdempotencyKey,
    PermissionDecision,
    PostedEvent,
    PostEvent,
    Run,
    ThreadId,
    UserInterrupt,
    UserMessage,
)
from mosoo_web.api.v1.sse import SSE_HEADERS, event_stream

AfterSeq = Annotated[int, Query(ge=0, le=MAX_SEQ, description="Return events with a greater seq.")]

router = APIRouter(tags=["Events"])


@router.get(
    "/threads/{thread_id}/events",
    response_model=EventList,
    operation_id="listEvents",
    summary="Read events",
    description="Stored events after `after_seq`, oldest first. Poll with the returned `next_after_seq`, "
    "or stream them with `GET /threads/{id}/events/stream`.",
    responses=error_responses(404),
)
async def list_events(
    thread_id: ThreadId,
    caller: CallerDep,
    after_seq: AfterSeq = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> EventList:
    def work() -> EventList:
        with session_scope() as db:
            events = sessions.list_events(
                db, caller.account_id, thread_id, after_seq=after_seq, limit=limit
            )
            last_seq = sessions.get_session(db, caller.account_id, thread_id).last_seq
        next_after = events[-1].seq if events else after_seq
        return EventList(
            events=[Event.of(event) for event in events],
            next_after_seq=next_after,
            has_more=next_after < last_seq,
        )

    return await run_in_threadpool(work)


_POST_EXAMPLES = {
    "user_message": {
        "summary": "Send a message",
        "value": {"type": "user_message", "text": "Summarise the report."},
    },
    "permission_decision": {
        "summary": "Answer a permission request",
        "value": {"type": "permission_decision", "request_id": "perm_1", "decision": "allow_once"},
    },
    "user_interrupt": {"summary": "Stop the active run", "value": {"type": "user_interrupt"}},
}


@router.post(
    "/threads/{thread_id}/events",
    status_code=202,
    response_model=PostedEvent,
    operation_id="postEvent",
    summary="Send a message, a permission decision or an interrupt",
    description="`user_message` stores the message and starts a run (one active run per thread; attach "
    "uploaded files with `file_ids`). Sent while the active run has not started yet (`queued`, `booting`: "
    "waiting for a worker, an environment build or a hibernated Assistant to wake), the message waits its "
    f"turn as a `pending` run, at most {sessions.MAX_PENDING_MESSAGES} per thread, and is answered after the "
    "ones before it. "
    "`permission_decision` answers a `tool.confirmation.required` event (`allow_once` or `reject_once`). "
    "`user_interrupt` stops the active run and cancels the messages waiting their turn. The outcome "
    "arrives as events.",
    responses={
        202: {"headers": REPLAYED_DOC},
        **error_responses(
            404,
            conflicts="`conflict`: a run is already running, or nothing awaits a decision. `queue_full`: "
            f"{sessions.MAX_PENDING_MESSAGES} messages already wait their turn. `thread_archived`: "
            "unarchive the thread first. `readiness_blocked`: the agent version cannot run. "
            "`idempotency_conflict`: see `Idempotency-Key`. `worker_unavailable`: no worker took the run.",
        ),
        413: JSON_BODY_TOO_LARGE,
    },
)
async def post_event(
    thread_id: ThreadId,
    request: Request,
    caller: CallerDep,
    body: Annotated[PostEvent, Body(openapi_examples=_POST_EXAMPLES)],
    idempotency_key: IdempotencyKey = None,
) -> JSONResponse:
    def work() -> PostedEvent:
        if isinstance(body, UserMessage):
            sent = actions.send_and_dispatch(
                caller.account_id,
                thread_id,
                body.text,
                file_ids=body.file_ids,
                refuse_archived=True,
            )
            return PostedEvent(
                type=body.type,
                run=Run.of(sent.run, UsageTotals()),  # queued just now: no model call yet
                events=[Event.of(e) for e in sent.events],
            )
        if isinstance(body, PermissionDecision):
            actions.answer_permission(caller.account_id, thread_id, body.request_id, body.decision)
            return PostedEvent(type=body.type, run=None, events=[])
        assert isinstance(body, UserInterrupt)
        events = actions.stop_run(caller.account_id, thread_id)
        return PostedEvent(type=body.type, run=None, events=[Event.of(e) for e in events])

    return await answer_once(
        request, caller, "POST /threads/{thread_id}/events", body.model_dump(mode="json"), 202, work
    )


# One Server-Sent Event, as OpenAPI 3.1 tools (and 3.2's `itemSchema`) read a `text/event-stream` schema:
# its fields, with `data` the same Event JSON that `GET /threads/{id}/events` returns.
_STREAM_EVENT = {
    "type": "object",
    "required": ["id", "event", "data"],
    "properties": {
        "id": {"type": "string", "pattern": "^[1-9][0-9]*$", "description": "The event's `seq`."},
        "event": {"type": "string", "description": "The event's `type`."},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"$ref": "#/components/schemas/Event"},
            "description": "The event as JSON, on one line.",
        },
    },
}
_STREAM_EXAMPLE = (
    'id: 1\nevent: user.message\ndata: {"seq":1,"type":"user.message","run_id":"01JRUN","occurred_at":'
    '"2025-01-01T00:00:00Z","payload":{"text":"Hello"}}\n\n: keep-alive\n\n'
)
_LAST_EVENT_ID = re.compile(r"[0-9]{1,19}")


@router.get(
    "/threads/{thread_id}/events/stream",
    operation_id="streamEvents",
    summary="Stream events (SSE)",
    description="Server-Sent Events: each event is `id: <seq>`, `event: <type>`, `data: <event JSON>` (the "
    "`Event` of `GET /threads/{id}/events`), then a blank line. Stored events after `Last-Event-ID` (or "
    "`after_seq`) come first, then live ones, each exactly once and in seq order; reconnect with the last `id` "
    "you received to resume without gaps or duplicates. Comment lines (`: keep-alive`) keep idle connections "
    "open. The stream stays open until you close it.",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "A `text/event-stream` of events (the schema describes one event).",
            "headers": {
                "Cache-Control": {
                    "required": True,
                    "schema": {"type": "string", "const": "no-cache, no-transform"},
                },
                "X-Accel-Buffering": {
                    "required": True,
                    "schema": {"type": "string", "const": "no"},
                },
            },
            "content": {"text/event-stream": {"schema": _STREAM_EVENT, "example": _STREAM_EXAMPLE}},
        },
        **error_responses(404),
    },
)
async def stream_events(
    thread_id: ThreadId,
    request: Request,
    caller: CallerDep,
    after_seq: Annotated[
        int, Query(ge=0, le=MAX_SEQ, description="Start after this seq (`Last-Event-ID` wins).")
    ] = 0,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            description="The last `id` received, to resume (blank: ignored).",
            json_schema_extra={"pattern": "^[0-9]{0,19}$"},
        ),
    ] = None,
) -> StreamingResponse:
    start = after_seq
    if last_event_id is not None and last_event_id.strip():
        value = last_event_id.strip()
        if not _LAST_EVENT_ID.fullmatch(value):
            raise InvalidInput("Last-Event-ID must be the seq of an event.", field="Last-Event-ID")
        start = min(
            int(value), MAX_SEQ
        )  # past any seq the database can hold: only the end of the log is left

    def check() -> None:
        with session_scope() as db:
            sessions.get_session(db, caller.account_id, thread_id)

    await run_in_threadpool(check)  # a 404 must be an answer, not an empty stream
    return StreamingResponse(
        event_stream(request, caller.account_id, thread_id, start),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )
