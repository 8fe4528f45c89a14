"""Adding a router's routes to an app, and what every FastAPI app of ours is made with."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi.telemetry import TelemetryConfig

# FastAPI's native OpenTelemetry off: Mosoo's request spans are its own (`request_spans`,
# from its own provider, never the global one) and name no more than the method and route,
# where FastAPI's would record what an exception says, which may carry what a request sent.
# Its per-request check for a global provider read three environment variables each time.
NO_NATIVE_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}


def add_routes(api: FastAPI, router: APIRouter) -> None:
    """The router's routes themselves, not the router (`include_router`): FastAPI matches an
    included router's routes through a per-route indirection that cost more per request
    than the rest of the routing; the routes already carry the router's prefix and tags."""
    api.router.routes.extend(router.routes)
