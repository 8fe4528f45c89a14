"""Threads: start one (optionally with its first message), list, read, archive, unarchive, delete."""

from __future__ import annotations

from typing import Annotated, Literal

import sqlalchemy as sa
from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from mosoo_core import sessions
from mosoo_core.db import session_scope
from mosoo_core.runtime.threads import delete_thread_everywhere
from mosoo_core.sessions import actions
from mosoo_core.sessions import threads as inbox
from mosoo_core.usage import UsageTotals, usage_of_run
from mosoo_web.api.v1._auth import Caller, CallerDep, CredentialsDep, as_caller
from mosoo_web.api.v1._errors import error_responses
from mosoo_web.api.v1._idempotency import answer_once
from mosoo_web.api.v1.schemas import (
    JSON_BODY_TOO_LARGE,
    NO_NUL,
    REPLAYED_DOC,
    AgentId,
    CreatedThread,
    CreateThread,
    Deleted,
    IdempotencyKey,
    Run,
    Text,
    Thread,
    ThreadDetail,
    ThreadId,
    ThreadList,
)

router = APIRouter(tags=["Threads"])


def _thread(account_id: str, thread_id: str) -> Thread:
    with session_scope() as db:
        return Thread.of(sessions.get_session(db, account_id, thread_id))


@router.post(
    "/agents/{agent_id}/threads",
    status_code=201,
    response_model=CreatedThread,
    operation_id="createThread",
    summary="Start a thread",
    description="Starts a thread on the agent's published version (the thread keeps that version). With "
    "`message`, the first run starts at once: follow it on `GET /threads/{id}/events/stream`. `file_ids` "
    "attaches files uploaded with `POST /agents/{agent_id}/files` to that message.",
    responses={
        201: {"headers": REPLAYED_DOC},
        **error_responses(
            404,
            conflicts="`agent_not_published`: the agent has no published version. `readiness_blocked`: the "
            "published version cannot run (e.g. its provider key was deleted). `idempotency_conflict`: see "
            "`Idempotency-Key`. `worker_unavailable`: the message was stored but no worker took the run.",
        ),
        413: JSON_BODY_TOO_LARGE,
    },
)
async def create_thread(
    agent_id: AgentId,
    request: Request,
    caller: CallerDep,
    body: CreateThread | None = None,
    idempotency_key: IdempotencyKey = None,
) -> JSONResponse:
    wanted = body or CreateThread()

    def work() -> CreatedThread:
        started = actions.start_thread(
            caller.account_id,
            agent_id,
            purpose="api",
            message=wanted.message,
            file_ids=wanted.file_ids,
            end_user_id=wanted.end_user_id,
            title=wanted.title,
        )
        return CreatedThread(
            thread=Thread.of(started.thread),
            # A run queued just now has made no model call yet.
            run=Run.of(started.run, UsageTotals()) if started.run is not None else None,
        )

    return await answer_once(
        request,
        caller,
        "POST /agents/{agent_id}/threads",
        wanted.model_dump(mode="json"),
        201,
        work,
    )


@router.get(
    "/agents/{agent_id}/threads",
    response_model=ThreadList,
    operation_id="listThreads",
    summary="List threads",
    description="The agent's threads, newest first. Filter by `end_user_id`, `status`, `archived`, or ask for "
    "several threads at once with repeated `ids` (`?ids=a&ids=b`, at most 100). Page with `cursor`.",
    responses=error_responses(404),
)
async def list_threads(
    agent_id: AgentId,
    caller: CallerDep,
    end_user_id: Annotated[str | None, Query(max_length=200, pattern=NO_NUL)] = None,
    status: Literal["idle", "running", "rescheduling", "terminated"] | None = None,
    archived: bool | None = None,
    ids: Annotated[
        list[Text] | None, Query(max_length=100, description="Thread ids (repeat the parameter).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[
        str | None,
        Query(max_length=26, pattern=NO_NUL, description="`next_cursor` of the previous page."),
    ] = None,
) -> ThreadList:
    def work() -> ThreadList:
        with session_scope() as db:
            page = actions.list_agent_threads(
                db,
                caller.account_id,
                agent_id,
                end_user_id=end_user_id,
                status=status,
                archived=archived,
                ids=ids or (),
                limit=limit,
                cursor=cursor,
            )
        return ThreadList(
            threads=[Thread.of(view) for view in page.threads], next_cursor=page.next_cursor
        )

    return await run_in_threadpool(work)


@router.get(
    "/threads/{thread_id}",
    response_model=ThreadDetail,
    operation_id="getThread",
    summary="Get a thread",
    description="The thread and its latest run (poll `latest_run.status` if you do not stream).",
    responses=error_responses(404),
)
async def get_thread(thread_id: ThreadId, credentials: CredentialsDep) -> ThreadDetail:
    def work(db: sa.Connection, caller: Caller) -> ThreadDetail:
        thread, run = actions.thread_with_latest_run(db, caller.account_id, thread_id)
        latest = Run.of(run, usage_of_run(db, run.id, run.created_at)) if run else None
        return ThreadDetail.of(thread, latest_run=latest)

    return await as_caller(credentials, work)


@router.post(
    "/threads/{thread_id}/archive",
    response_model=Thread,
    operation_id="archiveThread",
    summary="Archive a thread",
    description="Archived threads are read-only until unarchived. Refused while a run is active.",
    responses=error_responses(404, conflicts="`thread_active`: a run is active; stop it or wait."),
)
async def archive_thread(thread_id: ThreadId, caller: CallerDep) -> Thread:
    def work() -> Thread:
        with session_scope() as db:
            inbox.archive_thread(db, caller.account_id, thread_id)
        return _thread(caller.account_id, thread_id)

    return await run_in_threadpool(work)


@router.post(
    "/threads/{thread_id}/unarchive",
    response_model=Thread,
    operation_id="unarchiveThread",
    summary="Unarchive a thread",
    responses=error_responses(404),
)
async def unarchive_thread(thread_id: ThreadId, caller: CallerDep) -> Thread:
    def work() -> Thread:
        with session_scope() as db:
            inbox.unarchive_thread(db, caller.account_id, thread_id)
        return _thread(caller.account_id, thread_id)

    return await run_in_threadpool(work)


@router.delete(
    "/threads/{thread_id}",
    response_model=Deleted,
    operation_id="deleteThread",
    summary="Delete a thread",
    description="Deletes the thread for good: its events, runs, files (from storage too), checkpoints and "
    "sandbox. An active run is stopped first.",
    responses=error_responses(404),
)
async def delete_thread(thread_id: ThreadId, caller: CallerDep) -> Deleted:
    def work() -> Deleted:
        delete_thread_everywhere(caller.account_id, thread_id)
        return Deleted(id=thread_id)

    return await run_in_threadpool(work)
