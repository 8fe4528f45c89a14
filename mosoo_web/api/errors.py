"""Domain errors become `{"error": {"code", "message"}}` responses, in one place."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

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
    NotFound: 404, Conflict: 409, InvalidInput: 400, Unauthenticated: 401, Forbidden: 403,
    PayloadTooLarge: 413, RateLimited: 429,
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
