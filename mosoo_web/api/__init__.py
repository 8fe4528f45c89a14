"""The HTTP API served inside the web process: `/api/auth`, `/api/health` and the public `/api/v1`."""

from __future__ import annotations

import re

from fastapi import FastAPI
from starlette.routing import Mount

from mosoo_core.origins import allowed_origins
from mosoo_core.settings import get_settings
from mosoo_web.api import (
    auth,
    cli_auth,
    files,
    google,
    health,
    mcp_oauth,
    skills,
    terminal,
    usage_export,
)
from mosoo_web.api._origin import OriginCheck
from mosoo_web.api._routes import NO_NATIVE_TELEMETRY, add_routes
from mosoo_web.api.body_limit import BodyLimit
from mosoo_web.api.errors import install_error_handlers
from mosoo_web.api.request_spans import install_request_spans
from mosoo_web.api.v1 import PREFIX, build_v1

SIGN_IN_BODY_LIMIT = 64 * 1024


def _match_line_breaks(api: FastAPI, prefix: str) -> None:
    """Starlette compiles a mount's `{path:path}` to `.*`, which stops at a line break, so an id
    with an encoded newline (`%0A`) fell out of the mount to this app's bare 404. Recompiled with
    DOTALL, every path under the prefix reaches the public API and its error envelope."""
    for route in api.router.routes:
        if isinstance(route, Mount) and route.path == prefix:
            route.path_regex = re.compile(route.path_regex.pattern, re.DOTALL)


def build_api() -> FastAPI:
    api = FastAPI(
        title="Mosoo",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        telemetry=NO_NATIVE_TELEMETRY,
    )
    install_error_handlers(api)
    # First: the public API takes most requests, and a path under it matches nothing else.
    api.mount(PREFIX, build_v1())
    _match_line_breaks(api, PREFIX)
    for module in (health, auth, cli_auth, files, skills, mcp_oauth, usage_export, terminal):
        add_routes(api, module.router)
    google.install(api)
    # Sign-in bodies are a few fields; nobody unauthenticated gets to send megabytes.
    api.add_middleware(
        BodyLimit,
        limit=SIGN_IN_BODY_LIMIT,
        applies=lambda scope: scope["path"].startswith("/api/auth/"),
        message="Sign-in requests are limited to 64 KiB.",
    )
    # Added last, so outermost: a refused request never reaches a route.
    api.add_middleware(OriginCheck, allowed=allowed_origins(get_settings().public_url))
    install_request_spans(api)  # outermost of all, when tracing exports: a span per request
    return api
