"""The model gateway: a run's grant becomes the provider's key here, in control's memory
only; the provider's answer streams back unchanged and each call leaves one usage record."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from mosoo_core import usage, vault
from mosoo_core.db import session_scope
from mosoo_core.errors import MosooError
from mosoo_core.logs import get_logger
from mosoo_core.sessions import driver_plane

log = get_logger(__name__)
MAX_REQUEST_BYTES = 8 * 1024 * 1024
# Headers that describe our hop, not the payload.
_HOP_HEADERS = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "content-encoding",
    "upgrade",
}


@dataclass(frozen=True)
class Upstream:
    provider: str
    base_url: str
    api_key: str | None


def _error(status: int, code: str, message: str) -> JSONResponse:
    # OpenAI-style error body so SDKs surface a readable message.
    return JSONResponse(
        {"error": {"code": code, "message": message, "type": code}}, status_code=status
    )


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.headers.get("x-api-key")


class UsageTap:
    """Watches a streamed (SSE) or plain JSON answer for the provider's usage numbers."""

    def __init__(self, streaming: bool) -> None:
        self.streaming = streaming
        self.buffer = b""
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        if not self.streaming:
            return
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            self._line(line.strip())

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if not data or data == b"[DONE]":
            return
        try:
            obj = json.loads(data)
        except ValueError:
            return
        self._take(obj)

    def _take(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            return
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
        response = obj.get("response")  # Responses API: response.completed carries usage
        if isinstance(response, dict):
            if isinstance(response.get("usage"), dict):
                self.usage = response["usage"]
            if isinstance(response.get("model"), str):
                self.model = response["model"]
        if isinstance(obj.get("model"), str):
            self.model = obj["model"]

    def finish(self) -> None:
        if self.streaming:
            self._line(self.buffer.strip())
        else:
            with contextlib.suppress(ValueError):
                self._take(json.loads(self.buffer or b"null"))


def build_routes(
    resolve_upstream: Callable[[Any, driver_plane.GrantContext], Upstream],
    transport: httpx.AsyncBaseTransport | None = None,
) -> list[Route]:
    """`resolve_upstream(db, grant)` decrypts the run's credential (vault)."""
    client = httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(600.0, connect=15.0))

    def authorize(
        token: str | None, model: str | None
    ) -> tuple[driver_plane.GrantContext, Upstream] | JSONResponse:
        with session_scope() as db:
            grant = driver_plane.resolve_model_grant(db, token)
            if grant is None:
                return _error(
                    401, "invalid_grant", "The model grant is unknown, expired or its run is over."
                )
            if model is not None and grant.allowed_models and model not in grant.allowed_models:
                return _error(
                    403, "model_not_allowed", f"Model {model!r} is not allowed for this run."
                )
            try:
                return grant, resolve_upstream(db, grant)
            except (LookupError, MosooError):
                return _error(409, "provider_missing", "The run's provider key no longer exists.")

    def record(
        grant: driver_plane.GrantContext, upstream: Upstream, model: str, tap: UsageTap
    ) -> None:
        tap.finish()
        numbers = usage.parse_usage(tap.usage)
        if numbers is None:
            log.warning("gateway.no_usage", run_id=grant.run_id, model=model)
            return
        with session_scope() as db:
            usage.record_usage(
                db,
                app_id=grant.app_id,
                provider=upstream.provider,
                model=tap.model or model,
                numbers=numbers,
                agent_id=grant.agent_id,
                session_id=grant.session_id,
                run_id=grant.run_id,
                purpose=grant.purpose,
            )

    async def openai_proxy(request: Request) -> Response:
        path = request.path_params["path"]
        body = await request.body()
        if len(body) > MAX_REQUEST_BYTES:
            return _error(413, "request_too_large", "Request body exceeds 8 MiB.")
        payload: Any = None
        if body:
            try:
                payload = json.loads(body)
            except ValueError:
                return _error(400, "invalid_json", "Request body is not JSON.")
        model = payload.get("model") if isinstance(payload, dict) else None
        outcome = await asyncio.to_thread(authorize, _bearer(request), model)
        if isinstance(outcome, JSONResponse):
            return outcome
        grant, upstream = outcome
        streaming = isinstance(payload, dict) and bool(payload.get("stream"))
        if streaming and path.endswith("chat/completions"):
            # Ask for the usage chunk so every streamed call can be recorded exactly.
            payload["stream_options"] = {
                **(payload.get("stream_options") or {}),
                "include_usage": True,
            }
            body = json.dumps(payload).encode()
        # Identity encoding: the bytes we relay are exactly the provider's bytes.
        headers = {
            "content-type": request.headers.get("content-type", "application/json"),
            "accept-encoding": "identity",
            **vault.provider_headers(upstream.provider, upstream.api_key),
        }
        url = f"{upstream.base_url.rstrip('/')}/{path}"
        try:
            upstream_request = client.build_request(
                request.method,
                url,
                content=body or None,
                headers=headers,
                params=request.query_params,
            )
            answer = await client.send(upstream_request, stream=True)
        except httpx.HTTPError as error:
            log.warning(
                "gateway.upstream_unreachable", run_id=grant.run_id, error=type(error).__name__
            )
            return _error(
                502,
                "upstream_unreachable",
                f"The provider could not be reached ({type(error).__name__}).",
            )
        tap = UsageTap(streaming=streaming)

        async def relay() -> AsyncIterator[bytes]:
            async for chunk in answer.aiter_bytes():
                tap.feed(chunk)
                yield chunk

        async def done() -> None:
            await answer.aclose()
            if answer.status_code < 400 and request.method == "POST":
                await asyncio.to_thread(record, grant, upstream, model or "", tap)

        response_headers = {
            k: v for k, v in answer.headers.items() if k.lower() not in _HOP_HEADERS
        }
        return StreamingResponse(
            relay(),
            status_code=answer.status_code,
            headers=response_headers,
            background=BackgroundTask(done),
        )

    return [Route("/gateway/openai/v1/{path:path}", openai_proxy, methods=["GET", "POST"])]
