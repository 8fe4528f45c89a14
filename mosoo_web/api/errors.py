"""Domain errors become `{"error": {"code", "message"}}` responses, in one place."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from mosoo_core.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    MosooError,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    Unauthenticated,
)

STATUS = {
    NotFound: 404,
    Conflict: 409,
    InvalidInput: 400,
    Unauthenticated: 401,
    Forbidden: 403,
    PayloadTooLarge: 413,
    RateLimited: 429,
}


def error_response(error: MosooError) -> JSONResponse:
    status = next((code for kind, code in STATUS.items() if isinstance(error, kind)), 500)
    headers = {}
    if isinstance(error, RateLimited):
        headers["Retry-After"] = str(error.retry_after_seconds)
    body: dict[str, object] = {"code": error.code, "message": error.message}
    if isinstance(error, InvalidInput) and error.field:
        body["field"] = error.field
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def install_error_handlers(api: FastAPI) -> None:
    @api.exception_handler(MosooError)
    async def _mosoo_error(_request: Request, error: MosooError) -> JSONResponse:
        return error_response(error)

    @api.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, error: StarletteHTTPException) -> Response:
        # A body refused while it streams (BodyLimit) speaks our envelope; the rest as FastAPI does.
        if error.status_code == 413:
            return error_response(PayloadTooLarge(str(error.detail)))
        return await http_exception_handler(request, error)
