"""Control's MCP proxy: a run's per-server grant becomes the server's credential here, in
control's memory only. The sandbox reaches it through the driver's forwarder
(`/gateway/mcp/<server_ref>`, over the control socket), so it works under every network
policy, `none` included; it never learns the server's URL or credential.

Of what the sandbox sends, only the headers MCP's Streamable HTTP transport needs go through
(an allowlist: its `Authorization`, cookies and anything credential-like are dropped); the
vaulted credential is added (an OAuth token refreshed when it has expired, and once more when
the server refuses it). Answers stream back as they come (JSON or SSE), without the headers
that would name the server (`Location`, `WWW-Authenticate`, ...). Each `tools/call` becomes an
`mcp.tool_call` event in the thread: server, tool, duration and outcome, never arguments.
Connections go only where the outbound guard lets them (`network.outbound`: no private,
loopback or metadata address unless the operator allows private networks).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from mosoo_core import mcp, streams
from mosoo_core.db import session_scope
from mosoo_core.errors import MosooError
from mosoo_core.logs import get_logger
from mosoo_core.network import outbound
from mosoo_core.sessions import driver_plane

log = get_logger(__name__)
MAX_REQUEST_BYTES = 8 * 1024 * 1024
# Answers are parsed for the outcome of a tools/call only up to this size (they still stream).
MAX_WATCHED_BYTES = 4 * 1024 * 1024
EVENT_TYPE = "mcp.tool_call"
# What MCP's Streamable HTTP transport sends and needs; nothing else reaches the server.
FORWARDED_REQUEST_HEADERS = (
    "content-type",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
)
# Never back into the sandbox: our hop's headers, and those that could name the server or
# set state on a client (its URL is not the sandbox's to know).
DROPPED_RESPONSE_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-length",
        "content-encoding",
        "upgrade",
        "location",
        "content-location",
        "www-authenticate",
        "set-cookie",
        "link",
        "alt-svc",
        "server",
    }
)


def _error(status: int, code: str, message: str) -> JSONResponse:
    # A JSON-RPC error, as an MCP client reads one at a non-2xx status.
    return JSONResponse(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32001, "message": message, "data": {"code": code}},
        },
        status_code=status,
    )


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    return header[7:].strip() if header.lower().startswith("bearer ") else None


@dataclass
class _Call:
    request_id: Any
    tool: str
    started: float
    outcome: str = ""
    error: str = ""
    duration_ms: int = 0


def tool_calls(body: bytes) -> list[_Call]:
    """The `tools/call` requests of a JSON-RPC message (or batch)."""
    try:
        message = json.loads(body) if body else None
    except ValueError:
        return []
    items = message if isinstance(message, list) else [message]
    now = time.monotonic()
    calls: list[_Call] = []
    for item in items:
        if isinstance(item, dict) and item.get("method") == "tools/call" and "id" in item:
            params = item.get("params") if isinstance(item.get("params"), dict) else {}
            calls.append(_Call(item["id"], str((params or {}).get("name", ""))[:200], now))
    return calls


@dataclass
class AnswerTap:
    """Watches an answer (JSON or SSE) for the JSON-RPC responses to the watched calls."""

    calls: list[_Call]
    streaming: bool
    buffer: bytes = b""
    event_data: list[bytes] = field(default_factory=list)
    watched: int = 0

    def feed(self, chunk: bytes) -> None:
        if not self.pending() or self.watched > MAX_WATCHED_BYTES:
            return
        self.watched += len(chunk)
        self.buffer += chunk
        if not self.streaming:
            return
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            self._line(line.rstrip(b"\r"))

    def _line(self, line: bytes) -> None:
        if not line:
            if self.event_data:
                self._message(b"\n".join(self.event_data))
            self.event_data = []
        elif line.startswith(b"data:"):
            self.event_data.append(line[5:].removeprefix(b" "))

    def _message(self, data: bytes) -> None:
        try:
            message = json.loads(data)
        except ValueError:
            return
        for item in message if isinstance(message, list) else [message]:
            if not isinstance(item, dict) or "id" not in item:
                continue
            for call in self.pending():
                if call.request_id == item["id"]:
                    call.duration_ms = int((time.monotonic() - call.started) * 1000)
                    error = item.get("error")
                    result = item.get("result")
                    if isinstance(error, dict):
                        call.outcome, call.error = "error", str(error.get("message", ""))[:300]
                    elif isinstance(result, dict) and result.get("isError"):
                        call.outcome = "error"
                        call.error = _first_text(result)[:300]
                    else:
                        call.outcome = "ok"

    def pending(self) -> list[_Call]:
        return [call for call in self.calls if not call.outcome]

    def finish(self, status: int) -> None:
        if self.streaming:
            self._line(self.buffer.rstrip(b"\r"))
            self._line(b"")
        elif self.buffer and self.watched <= MAX_WATCHED_BYTES:
            self._message(self.buffer)
        for call in self.pending():
            call.duration_ms = int((time.monotonic() - call.started) * 1000)
            call.outcome = "failed"
            call.error = f"HTTP {status}" if status >= 400 else "no answer to the call"


def _first_text(result: dict[str, Any]) -> str:
    for block in result.get("content") or []:
        if isinstance(block, dict) and block.get("type") == "text":
            return str(block.get("text", ""))
    return ""


def record_calls(grant: mcp.McpGrantContext, server: str, calls: list[_Call]) -> None:
    if not calls:
        return
    with session_scope() as db:
        stored = driver_plane.append_events(
            db,
            grant.session_id,
            [
                driver_plane.NewEvent(
                    type=EVENT_TYPE,
                    payload={
                        "server_id": grant.server_id,
                        "server": server,
                        "tool": call.tool,
                        "duration_ms": call.duration_ms,
                        "outcome": call.outcome,
                        "error": call.error,
                    },
                    run_id=grant.run_id,
                )
                for call in calls
            ],
        )
    streams.publish_events(stored)


def build_routes() -> list[Route]:
    # Every connection through the outbound guard: the URL is whatever the owner typed.
    client = httpx.AsyncClient(
        transport=outbound.async_transport(),
        timeout=httpx.Timeout(connect=15.0, read=600.0, write=60.0, pool=15.0),
        follow_redirects=False,
        trust_env=False,
    )

    def authorize(
        token: str | None, server_ref: str, force_refresh: bool = False
    ) -> tuple[mcp.McpGrantContext, mcp.Upstream] | JSONResponse:
        with session_scope() as db:
            grant = mcp.resolve_grant(db, token, server_ref)
            if grant is None:
                log.warning("mcp_proxy.grant_refused", server_ref=server_ref[:64])
                return _error(
                    401,
                    "invalid_grant",
                    "The MCP grant is unknown, expired, for another server, or its run is over.",
                )
            try:
                return grant, mcp.upstream(
                    db, grant.app_id, grant.server_id, force_refresh=force_refresh
                )
            except LookupError:
                return _error(409, "mcp_server_missing", "The MCP server is gone or disabled.")
            except MosooError as error:  # OAuthUnavailable, a vault failure
                log.warning(
                    "mcp_proxy.credential_unavailable",
                    run_id=grant.run_id,
                    server_id=grant.server_id,
                    error=error.code,
                )
                return _error(502, "mcp_credential_unavailable", error.message)

    async def send(request: Request, upstream: mcp.Upstream, body: bytes) -> httpx.Response:
        headers = {
            name: request.headers[name]
            for name in FORWARDED_REQUEST_HEADERS
            if name in request.headers
        }
        headers["accept-encoding"] = "identity"  # relay the server's bytes as they are
        headers.update(upstream.headers)
        built = client.build_request(
            request.method, upstream.url, content=body or None, headers=headers
        )
        return await client.send(built, stream=True)

    async def proxy(request: Request) -> Response:
        server_ref = request.path_params["server_ref"]
        body = await request.body()
        if len(body) > MAX_REQUEST_BYTES:
            return _error(413, "request_too_large", "Request body exceeds 8 MiB.")
        token = _bearer(request)
        outcome = await asyncio.to_thread(authorize, token, server_ref)
        if isinstance(outcome, JSONResponse):
            return outcome
        grant, upstream = outcome
        calls = tool_calls(body) if request.method == "POST" else []
        try:
            answer = await send(request, upstream, body)
            if answer.status_code == 401 and upstream.headers:
                # The token may have been revoked or expired early: refresh (OAuth) once.
                again = await asyncio.to_thread(authorize, token, server_ref, True)
                if not isinstance(again, JSONResponse):
                    await answer.aclose()
                    upstream = again[1]
                    answer = await send(request, upstream, body)
        except httpx.HTTPError as error:
            tap = AnswerTap(calls, streaming=False)
            tap.finish(502)
            await asyncio.to_thread(record_calls, grant, upstream.name, calls)
            refusal = outbound.refusal_in(error)
            if refusal is not None:
                # The host and address go to control's log, not to the sandbox.
                log.warning(
                    "mcp_proxy.upstream_refused",
                    run_id=grant.run_id,
                    server_id=grant.server_id,
                    host=refusal.host,
                    address=refusal.address,
                    reason=refusal.reason,
                )
                return _error(
                    502,
                    "upstream_refused",
                    outbound.describe_refusal(f"MCP server {upstream.name!r}", refusal.reason)
                    + ".",
                )
            log.warning(
                "mcp_proxy.upstream_unreachable",
                run_id=grant.run_id,
                server_id=grant.server_id,
                error=type(error).__name__,
            )
            return _error(
                502,
                "upstream_unreachable",
                f"The MCP server could not be reached ({type(error).__name__}).",
            )
        content_type = answer.headers.get("content-type", "")
        tap = AnswerTap(calls, streaming=content_type.startswith("text/event-stream"))

        async def relay() -> AsyncIterator[bytes]:
            async for chunk in answer.aiter_raw():
                tap.feed(chunk)
                yield chunk

        async def done() -> None:
            await answer.aclose()
            tap.finish(answer.status_code)
            try:
                await asyncio.to_thread(record_calls, grant, upstream.name, calls)
            except Exception as error:  # the answer went through; only its event is lost
                log.warning(
                    "mcp_proxy.record_failed", run_id=grant.run_id, error=type(error).__name__
                )

        headers = {
            k: v for k, v in answer.headers.items() if k.lower() not in DROPPED_RESPONSE_HEADERS
        }
        return StreamingResponse(
            relay(),
            status_code=answer.status_code,
            headers=headers,
            background=BackgroundTask(done),
        )

    methods = ["GET", "POST", "DELETE"]
    return [
        Route("/gateway/mcp/{server_ref}", proxy, methods=methods),
        Route("/gateway/mcp/{server_ref}/", proxy, methods=methods),
    ]
