"""Sign-in endpoints refuse state-changing requests sent by other sites' pages.

SameSite=Lax does not separate ports of one host (`localhost:8080` is the same site as a
console on `localhost:3000`), so a browser's `Origin` is checked against the console's own
origins. A request without `Origin` (the CLI, curl) is not a browser page's and passes.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from mosoo_core.errors import Forbidden
from mosoo_core.logs import get_logger
from mosoo_web.api.errors import error_response

log = get_logger(__name__)

GUARDED_PREFIX = "/api/auth"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class OriginCheck:
    """ASGI middleware: unsafe methods under `/api/auth` need an allowed `Origin` or none."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = frozenset(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] in UNSAFE_METHODS
            and _guarded(scope["path"])
        ):
            # Every `Origin` header counts: a second one must not smuggle a foreign origin past.
            origins = [
                value.decode("latin-1") for name, value in scope["headers"] if name == b"origin"
            ]
            refused = next((origin for origin in origins if origin not in self.allowed), None)
            if refused is not None:
                log.warning(
                    "api.origin_refused",
                    path=scope["path"],
                    method=scope["method"],
                    origin=refused[:200],
                )
                response = error_response(
                    Forbidden("Requests from other sites' pages are refused.")
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _guarded(path: str) -> bool:
    return path == GUARDED_PREFIX or path.startswith(GUARDED_PREFIX + "/")
