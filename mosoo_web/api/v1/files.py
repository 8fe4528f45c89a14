"""Files: upload attachments, list a thread's files, read, download and delete them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from mosoo_core import files, sessions
from mosoo_core.db import session_scope
from mosoo_core.ownership import account_agent
from mosoo_web.api.v1._auth import CallerDep
from mosoo_web.api.v1._errors import error_responses
from mosoo_web.api.v1._uploads import UploadLimit, check_upload_headers, upload_body, upload_form
from mosoo_web.api.v1.schemas import (
    AgentId,
    Deleted,
    File,
    FileId,
    FileList,
    Text,
    ThreadId,
    attachment_response,
)

router = APIRouter(tags=["Files"])

_LIMIT = UploadLimit(
    max_bytes=files.MAX_FILE_BYTES,
    too_large=f"Files are limited to {files.MAX_FILE_BYTES // (1024 * 1024)} MiB.",
    what="the file",
)

_UPLOAD_BODY = upload_body("The file (≤ 64 MiB).")


@router.post(
    "/agents/{agent_id}/files",
    status_code=201,
    response_model=File,
    operation_id="uploadFile",
    summary="Upload a file",
    description="Upload an attachment (multipart field `file`, at most 64 MiB). It belongs to no thread until a "
    "message names it in `file_ids` (`POST /agents/{agent_id}/threads` or `POST /threads/{id}/events`); the "
    "agent then sees it read-only at `/mnt/attachments/<file_id>/<name>` for that message. A thread holds at "
    "most 100 attachments. Unsafe names are cleaned; a name with nothing usable left is refused.",
    openapi_extra={"requestBody": _UPLOAD_BODY},
    responses=error_responses(404, 413),
)
async def upload_file(agent_id: AgentId, request: Request, caller: CallerDep) -> File:
    check_upload_headers(request, _LIMIT)

    def app_of_agent() -> str:
        with session_scope() as db:
            return account_agent(db, caller.account_id, agent_id).app_id

    app_id = await run_in_threadpool(app_of_agent)
    async with upload_form(request, _LIMIT) as (upload, _form):

        def store(source: IO[bytes], filename: str, media_type: str | None) -> File:
            with session_scope() as db:
                view = files.upload_file(
                    db, caller.account_id, app_id, agent_id, source, filename, media_type
                )
            return File.of(view)

        return await run_in_threadpool(
            store, upload.file, upload.filename or "", upload.content_type
        )


@router.get(
    "/threads/{thread_id}/files",
    response_model=FileList,
    operation_id="listThreadFiles",
    summary="List a thread's files",
    description="The thread's attachments and artifacts (files the agent wrote under `/workspace/outputs`), "
    "oldest first. Ask for several at once with repeated `ids`.",
    responses=error_responses(404),
)
async def list_thread_files(
    thread_id: ThreadId,
    caller: CallerDep,
    ids: Annotated[
        list[Text] | None, Query(max_length=100, description="File ids (repeat the parameter).")
    ] = None,
) -> FileList:
    def work() -> FileList:
        with session_scope() as db:
            found = files.list_thread_files(db, caller.account_id, thread_id, ids=ids or None)
        return FileList(files=[File.of(view) for view in found])

    return await run_in_threadpool(work)


@router.delete(
    "/threads/{thread_id}/files/{file_id}",
    response_model=Deleted,
    operation_id="deleteThreadFile",
    summary="Delete a file of a thread",
    description="`not_found` unless the file belongs to this thread.",
    responses=error_responses(404),
)
async def delete_thread_file(thread_id: ThreadId, file_id: FileId, caller: CallerDep) -> Deleted:
    def work() -> Deleted:
        with session_scope() as db:
            sessions.get_session(
                db, caller.account_id, thread_id
            )  # another owner's thread: not_found
            files.delete_file(db, caller.account_id, file_id, session_id=thread_id)
        return Deleted(id=file_id)

    return await run_in_threadpool(work)


@router.get(
    "/files/{file_id}",
    response_model=File,
    operation_id="getFile",
    summary="Get a file",
    responses=error_responses(404),
)
async def get_file(file_id: FileId, caller: CallerDep) -> File:
    def work() -> File:
        with session_scope() as db:
            return File.of(files.get_file(db, caller.account_id, file_id))

    return await run_in_threadpool(work)


@router.delete(
    "/files/{file_id}",
    response_model=Deleted,
    operation_id="deleteFile",
    summary="Delete a file",
    description="Deletes the file record and, when nothing else uses the same content, its bytes.",
    responses=error_responses(404),
)
async def delete_file(file_id: FileId, caller: CallerDep) -> Deleted:
    def work() -> Deleted:
        with session_scope() as db:
            files.delete_file(db, caller.account_id, file_id)
        return Deleted(id=file_id)

    return await run_in_threadpool(work)


def content_disposition(name: str) -> str:
    # An ASCII fallback plus the exact UTF-8 name (RFC 6266 / 5987); quotes and controls never pass.
    fallback = (
        "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in name) or "download"
    )
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"


# The download answers with the stored media type, whatever it is: `*/*` documents exactly that.
_DOWNLOAD_RESPONSE = attachment_response(
    "The file's bytes, streamed, with the file's `media_type` as `Content-Type` "
    "(`application/octet-stream` when it is unknown).",
    {"application/octet-stream": {}, "*/*": {}},
    length="The file's `size`.",
)


@router.get(
    "/files/{file_id}/content",
    operation_id="downloadFile",
    summary="Download a file",
    description="The file's bytes, streamed, as an attachment. `not_found` also while the file is not `ready`.",
    response_class=StreamingResponse,
    responses={200: _DOWNLOAD_RESPONSE, **error_responses(404)},
)
async def download_file(file_id: FileId, caller: CallerDep) -> StreamingResponse:
    def work() -> tuple[files.FileView, IO[bytes]]:
        with session_scope() as db:
            return files.open_file(db, caller.account_id, file_id)

    view, handle = await run_in_threadpool(work)
    body: Iterator[bytes] = files.iter_chunks(handle)
    return StreamingResponse(
        body,
        headers={
            # Set as a header, not `media_type`, so no `charset` is claimed for text the server never decoded.
            "Content-Type": view.media_type or "application/octet-stream",
            "Content-Disposition": content_disposition(view.name),
            "Content-Length": str(view.size),
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "private, no-store",
        },
    )
