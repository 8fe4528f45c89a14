"""Every answer of /api/v1 that is not a success is `{"error": {"code", "message"}}`:
domain errors, request validation, unknown routes and unexpected failures alike."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security.utils import get_authorization_scheme_param
from starlette.exceptions import HTTPException as StarletteHTTPException

from mosoo_core.errors import MosooError
from mosoo_core.logs import get_logger
from mosoo_web.api.errors import error_response
from mosoo_web.api.v1.schemas import ErrorResponse

log = get_logger(__name__)

_HTTP_CODES = {
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    429: "rate_limited",
}

DESCRIPTIONS = {
    400: "`invalid_request`: a parameter or body field is missing or invalid (`field` names it).",
    401: "`unauthenticated`: no `Authorization: Bearer mst_…` header, or the token is unknown or revoked (the answer carries `WWW-Authenticate: Bearer`, RFC 6750).",
    404: "`not_found`: no such resource among the token owner's.",
    409: "A conflict with the resource's state (see the code).",
    413: "`payload_too_large`: the file is over 64 MiB.",
    429: "`rate_limited`: too many requests for this token; retry after `Retry-After` seconds.",
    500: "`internal_error`: something failed on our side (logged; no detail is returned).",
}


def error_responses(
    *statuses: int, conflicts: str = "", invalid: str = ""
) -> dict[int | str, dict[str, Any]]:
    """The documented error answers of an operation: 400, 401, 429 and 500 always, plus
    `statuses`, plus 409 described by `conflicts` (its codes) when given; `invalid` replaces
    the 400 description (which fields the service refuses, and how)."""
    documented: dict[int | str, dict[str, Any]] = {}
    for status in sorted({400, 401, 429, 500, *statuses, *([409] if conflicts else [])}):
        description = DESCRIPTIONS[status]
        if status == 409 and conflicts:
            description = conflicts
        if status == 400 and invalid:
            description = invalid
        entry: dict[str, Any] = {"model": ErrorResponse, "description": description}
        if status == 401:
            entry["headers"] = {
                "WWW-Authenticate": {
                    "description": '`Bearer`, plus `error="invalid_token"` when a token was sent but refused.',
                    "schema": {"type": "string"},
                }
            }
        if status == 429:
            entry["headers"] = {
                "Retry-After": {
                    "description": "Seconds until the limit resets.",
                    "schema": {"type": "integer"},
                }
            }
        documented[status] = entry
    return documented


def _error(
    status: int, code: str, message: str, field: str | None = None, **headers: str
) -> JSONResponse:
    body: dict[str, Any] = {"code": code, "message": message}
    if field:
        body["field"] = field
    return JSONResponse({"error": body}, status_code=status, headers=headers or None)


def _bearer_challenge(request: Request) -> str:
    # RFC 6750: an error code only when a token was sent (malformed, unknown or revoked).
    scheme, credentials = get_authorization_scheme_param(request.headers.get("authorization"))
    return (
        'Bearer error="invalid_token"' if scheme.lower() == "bearer" and credentials else "Bearer"
    )


def _challenged(request: Request, response: JSONResponse) -> JSONResponse:
    if response.status_code == 401 and "www-authenticate" not in response.headers:
        response.headers["WWW-Authenticate"] = _bearer_challenge(request)
    return response


def _field_of(location: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(part) for part in location]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]
    # A tagged union adds the tag as a path step (`user_message.text`): drop it.
    return ".".join(
        part
        for part in parts
        if part not in ("user_message", "permission_decision", "user_interrupt")
    )


def install_v1_error_handlers(api: FastAPI) -> None:
    @api.exception_handler(MosooError)
    async def _domain(request: Request, error: MosooError) -> JSONResponse:
        return _challenged(request, error_response(error))

    @api.exception_handler(RequestValidationError)
    async def _validation(_request: Request, error: RequestValidationError) -> JSONResponse:
        problems = error.errors()
        first = problems[0] if problems else {}
        field = _field_of(first.get("loc", ()))
        if first.get("type") in ("union_tag_invalid", "union_tag_not_found"):
            tag = str((first.get("ctx") or {}).get("discriminator", "type")).strip("'\"")
            field = f"{field}.{tag}" if field else tag
        message = str(first.get("msg", "Invalid request."))
        if field:
            message = f"{field}: {message}"
        return _error(400, "invalid_request", message, field or None)

    @api.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(
            error.status_code, "invalid_request" if error.status_code < 500 else "internal_error"
        )
        message = "No such endpoint." if error.status_code == 404 else str(error.detail)
        return _challenged(
            request, _error(error.status_code, code, message, **dict(error.headers or {}))
        )

    @api.exception_handler(Exception)
    async def _unexpected(request: Request, error: Exception) -> JSONResponse:
        log.exception("api.unexpected_error", path=request.url.path, error=type(error).__name__)
        return _error(
            500, "internal_error", "Something went wrong on our side. It has been logged."
        )
