"""The model gateway: a run's grant becomes the provider's key here, in control's memory
only; the provider's answer streams back unchanged and each call leaves one usage record.

Two APIs, one code path: the OpenAI-compatible one (`/gateway/openai/v1/...`) and
Anthropic's Messages API (`/gateway/anthropic/v1/messages`, `.../messages/count_tokens`,
`.../models`). An `Api` says only what differs between them: which paths it relays, how
the key travels, the shape of the gateway's own errors and where the usage numbers are."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx
from opentelemetry import trace
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from mosoo_core import tracing, usage, vault
from mosoo_core.control import _traces
from mosoo_core.db import session_scope
from mosoo_core.errors import MosooError
from mosoo_core.logs import get_logger
from mosoo_core.network import outbound
from mosoo_core.network.outbound import PROVIDERS
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


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.headers.get("x-api-key")


# --- usage taps ---------------------------------------------------------------------------


class UsageTap(abc.ABC):
    """Watches a streamed (SSE) or plain JSON answer for the provider's usage numbers;
    each API's tap says where they are (`_take`, called with every JSON object seen)."""

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
        if isinstance(obj, dict):
            self._take(obj)

    @abc.abstractmethod
    def _take(self, obj: dict[str, Any]) -> None: ...

    def finish(self) -> None:
        if self.streaming:
            self._line(self.buffer.strip())
        else:
            with contextlib.suppress(ValueError):
                obj = json.loads(self.buffer or b"null")
                if isinstance(obj, dict):
                    self._take(obj)

    @abc.abstractmethod
    def numbers(self) -> usage.UsageNumbers | None: ...


class OpenAIUsageTap(UsageTap):
    """Chat Completions' usage chunk (or whole answer), the Responses API's
    `response.completed`."""

    def _take(self, obj: dict[str, Any]) -> None:
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

    def numbers(self) -> usage.UsageNumbers | None:
        return usage.parse_usage(self.usage)


class AnthropicUsageTap(UsageTap):
    """Messages API: `message_start` carries the input counts (and the model), each
    `message_delta` the cumulative counts so far (at least `output_tokens`); a whole
    `message` carries them all."""

    def _take(self, obj: dict[str, Any]) -> None:
        kind = obj.get("type")
        message = obj.get("message") if kind == "message_start" else obj
        if kind in ("message_start", "message") and isinstance(message, dict):
            if isinstance(message.get("model"), str):
                self.model = message["model"]
            if isinstance(message.get("usage"), dict):
                self.usage = dict(message["usage"])
        elif kind == "message_delta" and isinstance(obj.get("usage"), dict):
            latest = {k: v for k, v in obj["usage"].items() if v is not None}
            self.usage = {**(self.usage or {}), **latest}

    def numbers(self) -> usage.UsageNumbers | None:
        return usage.parse_anthropic_usage(self.usage)


# --- the APIs -----------------------------------------------------------------------------


class Api(abc.ABC):
    """What one upstream API needs from the shared proxy."""

    name: ClassVar[str]
    tap: ClassVar[type[UsageTap]]

    @abc.abstractmethod
    def offers(self, method: str, path: str) -> bool:
        """Whether the gateway relays this call at all."""

    @abc.abstractmethod
    def bills(self, method: str, path: str) -> bool:
        """Whether a successful call is a model call that leaves a usage record."""

    @abc.abstractmethod
    def error(self, status: int, code: str, message: str) -> JSONResponse: ...

    def prepare(self, path: str, payload: dict[str, Any]) -> dict[str, Any] | None:
        """A rewritten request body, or None to relay the caller's bytes unchanged."""
        return None

    @abc.abstractmethod
    def upstream_headers(self, request: Request, upstream: Upstream) -> dict[str, str]: ...


class OpenAIApi(Api):
    name = "openai"
    tap = OpenAIUsageTap
    # Model calls and model listing only. The key behind the grant is the owner's account
    # key: files, batches, fine-tuning, assistants or vector stores would let a sandbox read,
    # spend or delete the owner's data outside any usage record.
    _POST = re.compile(r"chat/completions|completions|responses|embeddings")
    _GET = re.compile(r"models(/[A-Za-z0-9._:@/-]+)?")

    def offers(self, method: str, path: str) -> bool:
        pattern = {"POST": self._POST, "GET": self._GET}.get(method)
        return pattern is not None and pattern.fullmatch(path) is not None

    def bills(self, method: str, path: str) -> bool:
        return method == "POST"

    def error(self, status: int, code: str, message: str) -> JSONResponse:
        # OpenAI-style error body so SDKs surface a readable message.
        return JSONResponse(
            {"error": {"code": code, "message": message, "type": code}}, status_code=status
        )

    def prepare(self, path: str, payload: dict[str, Any]) -> dict[str, Any] | None:
        if payload.get("stream") and path.endswith("chat/completions"):
            # Ask for the usage chunk so every streamed call can be recorded exactly.
            options = {**(payload.get("stream_options") or {}), "include_usage": True}
            return {**payload, "stream_options": options}
        return None

    def upstream_headers(self, request: Request, upstream: Upstream) -> dict[str, str]:
        return vault.provider_headers(upstream.provider, upstream.api_key)


# Anthropic's error types by status, for the gateway's own refusals.
_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",
    413: "request_too_large",
}
# The caller's own Anthropic headers that shape the call (API version, beta features).
_ANTHROPIC_PASSTHROUGH = ("anthropic-version", "anthropic-beta")


class AnthropicApi(Api):
    name = "anthropic"
    tap = AnthropicUsageTap
    # Model calls and model listing only: batches, files and the rest would spend or hold
    # data outside any usage record.
    _POST = re.compile(r"messages(/count_tokens)?")
    _GET = re.compile(r"models(/[A-Za-z0-9._:@-]+)?")

    def offers(self, method: str, path: str) -> bool:
        pattern = {"POST": self._POST, "GET": self._GET}.get(method)
        return pattern is not None and pattern.fullmatch(path) is not None

    def bills(self, method: str, path: str) -> bool:
        return method == "POST" and path == "messages"  # count_tokens is free

    def error(self, status: int, code: str, message: str) -> JSONResponse:
        kind = _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        return JSONResponse(
            {"type": "error", "error": {"type": kind, "message": message, "code": code}},
            status_code=status,
        )

    def upstream_headers(self, request: Request, upstream: Upstream) -> dict[str, str]:
        # Anthropic itself takes `x-api-key` (plus a version); a Messages-compatible
        # endpoint of another kind takes a bearer key.
        passed = {k: v for k in _ANTHROPIC_PASSTHROUGH if (v := request.headers.get(k))}
        return {
            **vault.provider_headers(upstream.provider, upstream.api_key, native=True),
            **passed,
        }


# --- the proxy ----------------------------------------------------------------------------


def build_routes(
    resolve_upstream: Callable[[Any, driver_plane.GrantContext], Upstream],
    transport: httpx.AsyncBaseTransport | None = None,
) -> list[Route]:
    """`resolve_upstream(db, grant)` decrypts the run's credential (vault). Every connection
    to a provider goes through the outbound guard (an owner typed its base URL)."""
    client = httpx.AsyncClient(
        transport=transport or outbound.async_transport(outbound.OutboundGuard(reach=PROVIDERS)),
        timeout=httpx.Timeout(600.0, connect=15.0),
    )

    def authorize(
        api: Api, token: str | None, model: str | None
    ) -> tuple[driver_plane.GrantContext, Upstream] | JSONResponse:
        with session_scope() as db:
            grant = driver_plane.resolve_model_grant(db, token)
            if grant is None:
                return api.error(
                    401, "invalid_grant", "The model grant is unknown, expired or its run is over."
                )
            if model is not None and grant.allowed_models and model not in grant.allowed_models:
                return api.error(
                    403, "model_not_allowed", f"Model {model!r} is not allowed for this run."
                )
            try:
                return grant, resolve_upstream(db, grant)
            except (LookupError, MosooError):
                return api.error(
                    409, "provider_missing", "The run's provider key no longer exists."
                )

    def record(
        grant: driver_plane.GrantContext, upstream: Upstream, model: str, tap: UsageTap
    ) -> None:
        tap.finish()
        numbers = tap.numbers()
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

    async def relay(api: Api, request: Request) -> Response:
        path = request.path_params["path"]
        if not api.offers(request.method, path):
            return api.error(404, "not_offered", f"The gateway does not relay {path!r}.")
        body = await request.body()
        if len(body) > MAX_REQUEST_BYTES:
            return api.error(413, "request_too_large", "Request body exceeds 8 MiB.")
        payload: Any = None
        if body:
            try:
                payload = json.loads(body)
            except ValueError:
                return api.error(400, "invalid_json", "Request body is not JSON.")
        model = payload.get("model") if isinstance(payload, dict) else None
        outcome = await asyncio.to_thread(authorize, api, _bearer(request), model)
        if isinstance(outcome, JSONResponse):
            return outcome
        grant, upstream = outcome
        streaming = isinstance(payload, dict) and bool(payload.get("stream"))
        if isinstance(payload, dict) and (rewritten := api.prepare(path, payload)) is not None:
            body = json.dumps(rewritten).encode()
        # Identity encoding: the bytes we relay are exactly the provider's bytes.
        headers = {
            "content-type": request.headers.get("content-type", "application/json"),
            "accept-encoding": "identity",
            **api.upstream_headers(request, upstream),
        }
        url = f"{upstream.base_url.rstrip('/')}/{path}"
        span = await _upstream_span(api, grant, model, request.method, path)
        if span is not None:
            headers["traceparent"] = tracing.traceparent(span)
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
            _end(span, error=type(error).__name__)
            refusal = outbound.refusal_in(error)
            if refusal is not None:
                # The host and address go to control's log; the sandbox gets the rule only.
                log.warning(
                    "gateway.upstream_refused",
                    api=api.name,
                    run_id=grant.run_id,
                    host=refusal.host,
                    address=refusal.address,
                    reason=refusal.reason,
                )
                return api.error(
                    502,
                    "upstream_refused",
                    outbound.describe_refusal("the provider", refusal.reason, reach=PROVIDERS)
                    + ".",
                )
            log.warning(
                "gateway.upstream_unreachable",
                api=api.name,
                run_id=grant.run_id,
                error=type(error).__name__,
            )
            return api.error(
                502,
                "upstream_unreachable",
                f"The provider could not be reached ({type(error).__name__}).",
            )
        tap = api.tap(streaming=streaming)

        async def stream() -> AsyncIterator[bytes]:
            async for chunk in answer.aiter_bytes():
                tap.feed(chunk)
                yield chunk

        async def done() -> None:
            await answer.aclose()
            _end(span, status=answer.status_code)
            # An error answer (its status and body relayed as they are) bills nothing.
            if answer.status_code < 400 and api.bills(request.method, path):
                await asyncio.to_thread(record, grant, upstream, model or "", tap)

        response_headers = {
            k: v for k, v in answer.headers.items() if k.lower() not in _HOP_HEADERS
        }
        return StreamingResponse(
            stream(),
            status_code=answer.status_code,
            headers=response_headers,
            background=BackgroundTask(done),
        )

    async def _upstream_span(
        api: Api, grant: driver_plane.GrantContext, model: str | None, method: str, path: str
    ) -> trace.Span | None:
        """Traced, the provider call is a `gateway.upstream` span under the run's trace."""
        if not tracing.enabled():
            return None
        parent = await asyncio.to_thread(_traces.traceparent_of_run, grant.run_id)
        return tracing.tracer().start_span(
            "gateway.upstream",
            context=tracing.context_from(parent),
            kind=trace.SpanKind.CLIENT,
            attributes={
                "mosoo.run_id": grant.run_id,
                "mosoo.gateway_api": api.name,
                "gen_ai.request.model": model or "",
                "http.request.method": method,
                "url.path": path,
            },
        )

    def route(prefix: str, api: Api) -> Route:
        async def endpoint(request: Request) -> Response:
            return await relay(api, request)

        return Route(f"/gateway/{prefix}/v1/{{path:path}}", endpoint, methods=["GET", "POST"])

    return [route("openai", OpenAIApi()), route("anthropic", AnthropicApi())]


def _end(span: trace.Span | None, *, status: int = 0, error: str = "") -> None:
    if span is None:
        return
    if status:
        span.set_attribute("http.response.status_code", status)
    if error or status >= 400:
        span.set_status(trace.Status(trace.StatusCode.ERROR, error or str(status)))
    span.end()
