"""Public API v1: a FastAPI sub-application mounted at `/api/v1`, with its own OpenAPI
document (`/api/v1/openapi.json`), interactive docs (`/api/v1/docs`) and error envelope."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.routing import compile_path

from mosoo_web.api._routes import NO_NATIVE_TELEMETRY, add_routes
from mosoo_web.api.v1 import (
    agents,
    environments,
    events,
    files,
    mcp_servers,
    pet_sandbox,
    skills,
    threads,
    usage,
)
from mosoo_web.api.v1._body_limit import BodyLimit
from mosoo_web.api.v1._errors import install_v1_error_handlers
from mosoo_web.api.v1.schemas import ErrorBody, ErrorResponse

PREFIX = "/api/v1"

DESCRIPTION = """\
Run your Mosoo agents from your own backend.

**Authentication.** Send a personal access token as `Authorization: Bearer mst_…` (create one on the
console's *Access tokens* page, or with `mosoo login`). Every id is scoped to the token's owner: another
owner's resources answer `404 not_found`.

**Flow.** Start a thread with `POST /agents/{agent_id}/threads` (optionally with the first `message`),
follow it with `GET /threads/{id}/events/stream` (Server-Sent Events, resumable with `Last-Event-ID`),
then continue with `POST /threads/{id}/events`.

**Errors** are `{"error": {"code", "message"}}` (plus `field` for invalid input): `invalid_request` 400,
`unauthenticated` 401, `not_found` 404, `method_not_allowed` 405 (see `Allow`), `agent_not_published` /
`readiness_blocked` / `idempotency_conflict` 409, `payload_too_large` 413, `rate_limited` 429 (see
`Retry-After`), `internal_error` 500.

**Limits.** 120 requests a minute per token by default. Creating threads and posting events accept an
`Idempotency-Key` header: a retry with the same key and body within 24 hours returns the first answer
with `Idempotency-Replayed: true`.
"""

TAGS = [
    {
        "name": "Agents",
        "description": "The agents a token can start threads with, and configuring them from code.",
    },
    {
        "name": "Environments",
        "description": "What sandboxes are built from: setup script, variables and secrets, network "
        "policy; every change a new revision.",
    },
    {
        "name": "Threads",
        "description": "Conversations with an agent, pinned to a published version.",
    },
    {"name": "Events", "description": "A thread's event log: read, stream, and post user events."},
    {"name": "Files", "description": "Attachments you upload and artifacts the agent writes."},
    {
        "name": "MCP servers",
        "description": "Remote tools over MCP (Streamable HTTP); their credentials are write-only "
        "and never reach a sandbox. Test connection lists a server's tools.",
    },
    {
        "name": "Skills",
        "description": "Agent Skills packages (SKILL.md and its files) agents read when a task "
        "fits them; every upload of new content a new version.",
    },
    {
        "name": "Usage",
        "description": "What an App's model calls cost: tokens and USD by day, agent, model or "
        "purpose.",
    },
]


def build_v1() -> FastAPI:
    api = FastAPI(
        title="Mosoo API",
        version="1.0.0",
        description=DESCRIPTION,
        openapi_tags=TAGS,
        docs_url="/docs",
        redoc_url=None,
        openapi_url="/openapi.json",
        telemetry=NO_NATIVE_TELEMETRY,
    )
    install_v1_error_handlers(api)
    api.add_exception_handler(405, _method_not_allowed)
    api.add_middleware(BodyLimit)
    # Routes are tried in order, a few microseconds each: what clients poll (threads and their
    # events) first. Tags, not this order, arrange the interactive docs.
    for module in (
        threads,
        events,
        agents,
        pet_sandbox,
        environments,
        files,
        skills,
        mcp_servers,
        usage,
    ):
        add_routes(api, module.router)
    generate = api.openapi

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            api.openapi_schema = _as_served(generate())
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]
    return api


async def _method_not_allowed(request: Request, error: Exception) -> JSONResponse:
    # Starlette's `Allow` names the methods of the first route that matched the path only; the
    # document has them all (FastAPI keeps one route per method, under included routers).
    path = request.scope["path"].removeprefix(request.scope.get("root_path", "")) or "/"
    allowed = sorted(
        method.upper()
        for template, item in request.app.openapi()["paths"].items()
        if compile_path(template)[0].match(path)
        for method in item
    ) or [(getattr(error, "headers", None) or {}).get("Allow", "GET")]  # /docs, /openapi.json
    body = ErrorResponse(
        error=ErrorBody(
            code="method_not_allowed",
            message=f"{request.method} is not allowed here; use {', '.join(allowed)}.",
        )
    )
    return JSONResponse(
        body.model_dump(exclude_none=True), status_code=405, headers={"Allow": ", ".join(allowed)}
    )


def _as_served(document: dict[str, Any]) -> dict[str, Any]:
    """What FastAPI documents but the server does not do: a 422 on every operation with parameters
    (invalid input is a 400 here), and `null` for optional parameters (a query or header value is
    text, so `?archived=null` is the string "null", refused like any other bad value)."""
    for item in document.get("paths", {}).values():
        for operation in item.values():
            operation.get("responses", {}).pop("422", None)
            for parameter in operation.get("parameters", []):
                schema = parameter.get("schema", {})
                choices = [
                    choice for choice in schema.get("anyOf", []) if choice != {"type": "null"}
                ]
                if len(choices) == 1:
                    del schema["anyOf"]
                    schema.update(choices[0])
    schemas = document.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    return document
