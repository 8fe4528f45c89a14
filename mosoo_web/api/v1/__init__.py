"""Public API v1: a FastAPI sub-application mounted at `/api/v1`, with its own OpenAPI
document (`/api/v1/openapi.json`), interactive docs (`/api/v1/docs`) and error envelope."""

from __future__ import annotations

from fastapi import FastAPI

from mosoo_web.api.v1 import agents, events, files, threads
from mosoo_web.api.v1._body_limit import BodyLimit
from mosoo_web.api.v1._errors import install_v1_error_handlers

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
`unauthenticated` 401, `forbidden` 403, `not_found` 404, `agent_not_published` / `readiness_blocked` /
`idempotency_conflict` 409, `payload_too_large` 413, `rate_limited` 429 (see `Retry-After`),
`internal_error` 500.

**Limits.** 120 requests a minute per token by default. Creating threads and posting events accept an
`Idempotency-Key` header: a retry with the same key and body within 24 hours returns the first answer
with `Idempotency-Replayed: true`.
"""

TAGS = [
    {"name": "Agents", "description": "The agents a token can start threads with."},
    {"name": "Threads", "description": "Conversations with an agent, pinned to a published version."},
    {"name": "Events", "description": "A thread's event log: read, stream, and post user events."},
    {"name": "Files", "description": "Attachments you upload and artifacts the agent writes."},
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
    )
    install_v1_error_handlers(api)
    api.add_middleware(BodyLimit)
    for module in (agents, threads, events, files):
        api.include_router(module.router)
    return api
