"""`/api/...` goes straight to the API app; everything else to the console (Reflex).

Reflex serves its backend as a Starlette app of its own around ours: error pages, CORS, the
context it needs for pages and states, a router and a mount, about a tenth of the CPU of an
authenticated `GET /api/v1/threads/{id}` (bench/api.py), for requests that use none of it.
The API app carries everything its requests need (its error handlers, the same CORS
middleware Reflex gives it, the origin check, body limits, request spans), so the process's
outermost ASGI callable sends them there first. Lifespan events, the console's pages, its
websocket and uploads still reach Reflex's app as before.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

API_PREFIX = "/api"


class ApiFirst:
    """ASGI: HTTP and websocket requests under `/api` to `api`, the rest to `console`."""

    def __init__(self, api: ASGIApp, console: ASGIApp) -> None:
        self.api = api
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan" and _under_api(scope["path"]):
            await self.api(scope, receive, send)
        else:
            await self.console(scope, receive, send)


def _under_api(path: str) -> bool:
    return path == API_PREFIX or path.startswith(API_PREFIX + "/")
