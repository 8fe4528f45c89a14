"""JSON bodies are small (a message is at most 100,000 characters): refuse anything bigger
before it is read into memory. File uploads have their own, streamed limit."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

JSON_BODY_LIMIT = 2 * 1024 * 1024
_MESSAGE = "Request bodies are limited to 2 MiB (upload files with POST /agents/{agent_id}/files)."


class BodyLimit:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"] == "POST" and scope["path"].rstrip("/").endswith("/files")):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > JSON_BODY_LIMIT:
            refusal = JSONResponse({"error": {"code": "payload_too_large", "message": _MESSAGE}}, status_code=413)
            await refusal(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > JSON_BODY_LIMIT:  # a chunked body without Content-Length
                    raise HTTPException(413, _MESSAGE)
            return message

        await self.app(scope, counted, send)
