"""Adding a router's routes to an app."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI


def add_routes(api: FastAPI, router: APIRouter) -> None:
    """The router's routes themselves, not the router (`include_router`): FastAPI matches an
    included router's routes through a per-route indirection that cost more per request
    than the rest of the routing; the routes already carry the router's prefix and tags."""
    api.router.routes.extend(router.routes)
