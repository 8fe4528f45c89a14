"""One-file multipart uploads (files, skills): the size limit applied while the body streams,
and the `file` field found or a clear error, before anything is stored."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from mosoo_core.errors import InvalidInput, PayloadTooLarge

# Room for the multipart boundaries, part headers and a few small fields around the file.
MULTIPART_OVERHEAD = 64 * 1024


@dataclass(frozen=True)
class UploadLimit:
    """What one upload endpoint accepts: `what` names the thing in the errors ("the file")."""

    max_bytes: int
    too_large: str
    what: str

    @property
    def request_limit(self) -> int:
        return self.max_bytes + MULTIPART_OVERHEAD


def upload_body(file_description: str, **fields: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI request body of an upload endpoint: a required `file` part described as
    given, plus the endpoint's other form fields (their JSON schemas)."""
    properties: dict[str, Any] = {
        "file": {"type": "string", "format": "binary", "description": file_description},
        **fields,
    }
    schema = {"type": "object", "required": ["file"], "properties": properties}
    return {"required": True, "content": {"multipart/form-data": {"schema": schema}}}


def check_upload_headers(request: Request, limit: UploadLimit) -> None:
    """Refuse what the headers already show is wrong, before any lookup or read."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not (declared.isascii() and declared.isdigit()):
            raise InvalidInput("Content-Length must be a number of bytes.", field="Content-Length")
        if int(declared) > limit.request_limit:
            raise PayloadTooLarge(limit.too_large)
    if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        raise InvalidInput(
            f"Send {limit.what} as multipart/form-data in a field named `file`.", field="file"
        )


async def _limited(stream: AsyncIterator[bytes], limit: UploadLimit) -> AsyncGenerator[bytes, None]:
    # A body without Content-Length (chunked) is cut off here rather than spooled without end.
    received = 0
    async for chunk in stream:
        received += len(chunk)
        if received > limit.request_limit:
            raise PayloadTooLarge(limit.too_large)
        yield chunk


@contextlib.asynccontextmanager
async def upload_form(
    request: Request, limit: UploadLimit
) -> AsyncIterator[tuple[UploadFile, FormData]]:
    """The parsed body's `file` part and the whole form (for its other fields), closed
    (its spooled file removed) when the block ends."""
    parser = MultiPartParser(
        request.headers, _limited(request.stream(), limit), max_files=1, max_fields=10
    )
    try:
        form = await parser.parse()
    except MultiPartException as error:
        raise InvalidInput(
            f"The multipart body is malformed: {error.message}", field="file"
        ) from None
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise InvalidInput(
                f"Send {limit.what} in a multipart field named `file`.", field="file"
            )
        yield upload, form
    finally:
        await form.close()
