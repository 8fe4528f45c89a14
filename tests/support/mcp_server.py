"""A real MCP server for tests, built with the official `mcp` SDK (MCPServer), serving
Streamable HTTP on a free 127.0.0.1 port in a background thread.

Its tools: `whoami` answers the `Authorization` header the request carried (so a test sees
what credential reached the server), `echo` its text, `picture` a PNG image, `forecast`
structured content (with its text form), `slow` sleeps before it answers, `broken` always
fails (an `isError` result). Every HTTP request is recorded (method, path, headers).

With `bearer` set, a request without `Authorization: Bearer <bearer>` is a 401; with
`token_check` set, the bearer token is checked by that function instead (the OAuth tests
give one that asks their authorization server). With `authorization_server` set, the server
serves its protected-resource metadata (RFC 9728) naming it, and its 401s point at that
document in `WWW-Authenticate`, as MCP's authorization spec says.
"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ImageContent
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from mosoo_core.settings import reset_settings_cache
from tests.support.processes import loopback_listener

# A 1x1 PNG.
PIXEL_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
TOOL_NAMES = ("whoami", "echo", "picture", "forecast", "slow", "broken")


class Forecast(BaseModel):
    city: str
    temperature_c: float
    sky: str


@dataclass(frozen=True)
class SeenRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names

    @property
    def authorization(self) -> str:
        return self.headers.get("authorization", "")


def build_mcp(name: str = "mosoo-test") -> MCPServer:
    mcp = MCPServer(name, instructions="Tools for Mosoo's tests.", log_level="WARNING")

    @mcp.tool(description="The Authorization header this request carried.", structured_output=False)
    def whoami(ctx: Context) -> str:
        headers = ctx.headers or {}
        return f"authorization={headers.get('authorization', '')}"

    @mcp.tool(description="Answers the text it is given.", structured_output=False)
    def echo(text: str) -> str:
        return f"echo: {text}"

    @mcp.tool(description="A one-pixel PNG.", structured_output=False)
    def picture() -> list[Any]:
        return [
            "Here is the picture.",
            ImageContent(
                type="image", data=base64.b64encode(PIXEL_PNG).decode(), mime_type="image/png"
            ),
        ]

    @mcp.tool(description="Tomorrow's weather for a city, as structured content.")
    def forecast(city: str) -> Forecast:
        return Forecast(city=city, temperature_c=21.5, sky="clear")

    @mcp.tool(description="Sleeps for `seconds`, then answers.", structured_output=False)
    async def slow(seconds: float = 1.0) -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @mcp.tool(description="Always fails.", structured_output=False)
    def broken() -> str:
        raise RuntimeError("the broken tool broke")

    return mcp


class _Recorder:
    """ASGI middleware: records each request; answers 401 when the bearer does not pass."""

    def __init__(self, app: ASGIApp, server: MCPTestServer) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        seen = SeenRequest(
            request.method, request.url.path, {k.lower(): v for k, v in request.headers.items()}
        )
        with self.server.lock:
            self.server.seen.append(seen)
        if (
            request.url.path == "/.well-known/oauth-protected-resource"
            or request.url.path.startswith("/.well-known/oauth-protected-resource/")
        ):
            response: Response = self.server.resource_metadata_response()
            await response(scope, receive, send)
            return
        if not self.server.authorized(seen.authorization):
            challenge = 'Bearer error="invalid_token"'
            if self.server.authorization_server:
                challenge += f', resource_metadata="{self.server.origin}/.well-known/oauth-protected-resource"'
            response = JSONResponse(
                {"error": "invalid_token"},
                status_code=401,
                headers={"WWW-Authenticate": challenge},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class MCPTestServer:
    """Start with `start()` or as a context manager; `url` is the MCP endpoint."""

    def __init__(
        self,
        *,
        bearer: str | None = None,
        token_check: Callable[[str], bool] | None = None,
        authorization_server: str | None = None,
        json_response: bool = False,
    ) -> None:
        self.bearer = bearer
        self.token_check = token_check
        self.authorization_server = authorization_server
        self.seen: list[SeenRequest] = []
        self.lock = threading.Lock()
        self._socket = loopback_listener()
        self.port = int(self._socket.getsockname()[1])
        app = build_mcp().streamable_http_app(
            json_response=json_response,
            # Requests come through Mosoo's proxy with the upstream's own Host.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self._server = uvicorn.Server(
            uvicorn.Config(_Recorder(app, self), log_level="warning", lifespan="on", loop="asyncio")
        )
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.origin}/mcp"

    def authorized(self, authorization: str) -> bool:
        if self.bearer is None and self.token_check is None:
            return True
        if not authorization.lower().startswith("bearer "):
            return False
        token = authorization[7:].strip()
        if self.token_check is not None:
            return self.token_check(token)
        return token == self.bearer

    def resource_metadata_response(self) -> Response:
        if not self.authorization_server:
            return JSONResponse({"error": "not_found"}, status_code=404)
        return JSONResponse(
            {
                "resource": self.url,
                "authorization_servers": [self.authorization_server],
                "bearer_methods_supported": ["header"],
            }
        )

    def requests(self) -> list[SeenRequest]:
        with self.lock:
            return list(self.seen)

    def mcp_requests(self) -> list[SeenRequest]:
        return [r for r in self.requests() if r.path.startswith("/mcp")]

    def start(self) -> MCPTestServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the MCP test server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> MCPTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# The test servers listen on 127.0.0.1, which control and web refuse to reach unless the
# operator allows private networks (see mosoo_core/network/outbound.py).
ALLOW_PRIVATE_NETWORKS = {"MOSOO_MCP_ALLOW_PRIVATE_NETWORKS": "true"}


def allow_private_networks(monkeypatch: pytest.MonkeyPatch, allowed: bool = True) -> None:
    """Be, in this process, an operator who allows MCP servers on private networks (or not)."""
    if allowed:
        monkeypatch.setenv("MOSOO_MCP_ALLOW_PRIVATE_NETWORKS", "true")
    else:
        monkeypatch.delenv("MOSOO_MCP_ALLOW_PRIVATE_NETWORKS", raising=False)
    reset_settings_cache()
