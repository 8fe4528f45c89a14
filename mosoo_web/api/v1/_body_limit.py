"""JSON bodies are small (a message is at most 100,000 characters): refuse anything bigger
before it is read into memory. File uploads have their own, streamed limit."""

from __future__ import annotations

from starlette.types import ASGIApp, Scope

from mosoo_web.api import body_limit

JSON_BODY_LIMIT = 2 * 1024 * 1024
_MESSAGE = "Request bodies are limited to 2 MiB (upload files with POST /agents/{agent_id}/files)."


def _not_an_upload(scope: Scope) -> bool:
    # File and skill uploads have their own, streamed limits.
    path = scope["path"].rstrip("/")
    return not (scope["method"] == "POST" and path.endswith(("/files", "/skills")))


class BodyLimit(body_limit.BodyLimit):
    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app, limit=JSON_BODY_LIMIT, message=_MESSAGE, applies=_not_an_upload)
