"""A server span per HTTP request of the API (`/api/...`: the public `/api/v1` and the
console's own endpoints), when tracing exports: the trace of a run starts at the request that
sends its message, or continues the caller's when it sends a W3C `traceparent`.

Named `<method> <route template>` (`POST /api/v1/threads/{thread_id}/events`): never the raw
path or query (ids, tokens), never a header or a body. Off, it is not installed at all."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mosoo_core import tracing

TRACED_PREFIX = "/api/"
# Anything else a client sends as a method is `_OTHER` (OpenTelemetry's HTTP conventions).
METHODS = frozenset(
    {"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"}
)


def install_request_spans(api: FastAPI) -> None:
    """Outermost middleware of `api` when this process exports spans; nothing otherwise."""
    if tracing.enabled():
        api.add_middleware(RequestSpans)


class RequestSpans:
    """ASGI middleware: one SERVER span around each HTTP request under `/api/`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(TRACED_PREFIX):
            await self.app(scope, receive, send)
            return
        method = scope["method"] if scope["method"] in METHODS else "_OTHER"
        root_path = scope.get("root_path", "")
        status: dict[str, int] = {}

        async def send_recording_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        with tracing.tracer().start_as_current_span(
            method,
            context=tracing.context_from(_traceparent(scope)),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method},
            record_exception=False,  # an exception's message may carry what a request sent
            set_status_on_exception=False,
        ) as span:
            try:
                await self.app(scope, receive, send_recording_status)
            except Exception:  # what the server answers when the app raises
                status.setdefault("code", 500)
                raise
            finally:
                _describe(span, method, _route(scope, root_path), status.get("code"))


def _traceparent(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == b"traceparent":
            return bytes(value).decode("latin-1")
    return ""


def _route(scope: Scope, root_path: str) -> str:
    """The matched route's template behind the prefixes of the mounts it sits in ("" when
    nothing matched; `<mount>/{path}` when a mount matched but nothing inside it). Mounts
    here have fixed paths (`/api/v1`), so a prefix holds no id."""
    prefix = str(scope.get("root_path", ""))[len(root_path) :]
    route: Any = scope.get("route")
    if route is None or isinstance(route, Mount):
        return prefix + "/{path}" if prefix else ""
    return prefix + str(getattr(route, "path_format", "") or getattr(route, "path", ""))


def _describe(span: trace.Span, method: str, route: str, status: int | None) -> None:
    if route:
        span.update_name(f"{method} {route}")
        span.set_attribute("http.route", route)
    if status is not None:
        span.set_attribute("http.response.status_code", status)
    if status is None or status >= 500:
        span.set_status(Status(StatusCode.ERROR))
