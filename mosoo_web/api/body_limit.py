"""Refuse a request body over a limit before it is read into memory: by its declared
Content-Length at once, and while it streams when it has none (chunked)."""

from __future__ import annotations

from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimit:
    """`applies(scope)` chooses the requests the limit covers (the rest pass untouched)."""

    def __init__(
        self, app: ASGIApp, *, limit: int, message: str, applies: Callable[[Scope], bool]
    ) -> None:
        self.app = app
        self.limit = limit
        self.message = message
        self.applies = applies

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.applies(scope):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            refusal = JSONResponse(
                {"error": {"code": "payload_too_large", "message": self.message}}, status_code=413
            )
            await refusal(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:  # a chunked body without Content-Length
                    # An HTTPException, because FastAPI turns any other error while reading a body into 400.
                    raise HTTPException(413, self.message)
            return message

        await self.app(scope, counted, send)
