"""A small, real Anthropic Messages API server that answers from a script (tests only).

Starlette on uvicorn, on a free 127.0.0.1 port in a background thread (the shared
`LoopbackServer`). Each `POST /v1/messages` takes the next turn of the script:

- `MessageTurn`: content blocks in order (`ThinkingBlock`, `TextBlock`, `ToolUseBlock`) and
  the usage numbers. Streamed, it is Anthropic's event sequence: `message_start` (the input
  counts, `output_tokens: 1`), `ping`, then per block `content_block_start`,
  `content_block_delta`s (`thinking_delta` then a `signature_delta`, `text_delta`,
  `input_json_delta` with the tool input's JSON in pieces, the first one empty),
  `content_block_stop`, then `message_delta` (stop reason and the final `output_tokens`) and
  `message_stop`. Not streamed, one whole `message`. `drop_after=N` drops the connection
  after N deltas, as a dying proxy does.
- `ErrorTurn`: an HTTP error with Anthropic's error body (`overloaded_error` is 529, a
  `rate_limit_error` 429 carries `retry-after`).
- `StreamErrorTurn`: HTTP 200, some text, then an `error` event (how an overload that
  happens mid-answer arrives).

`POST /v1/messages/count_tokens` answers `{"input_tokens": N}` without taking a turn (N
from `count_tokens`, else the body's size); `GET /v1/models` lists the configured models.
Every request is recorded (method, path, query, headers, JSON body) and every streamed
answer's exact bytes are kept in `streamed`. With `api_key` set, a request without it in
`x-api-key` gets a 401 (`accept_bearer=True` takes `Authorization: Bearer` as well); a
request without `anthropic-version` gets a 400, as Anthropic answers.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.oidc_provider import LoopbackServer

# Importing it also hides uvicorn's report of a deliberately dropped stream.
from tests.support.openai_server import DroppedConnection
from tests.support.recording import read_request


@dataclass
class TextBlock:
    """A text block; a str is streamed word by word, a list gives the deltas exactly."""

    text: str | list[str]


@dataclass
class ThinkingBlock:
    thinking: list[str]
    signature: str = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"


@dataclass
class ToolUseBlock:
    name: str
    input: dict[str, Any]
    id: str = ""
    pieces: int = 3  # how many `input_json_delta`s carry the JSON (after the empty first one)


Block = TextBlock | ThinkingBlock | ToolUseBlock


@dataclass
class MessageTurn:
    content: list[Block]
    # input_tokens, cache_creation_input_tokens, cache_read_input_tokens, output_tokens;
    # missing ones are made up from the sizes (the cache counts as 0).
    usage: dict[str, int] = field(default_factory=dict)
    stop_reason: str | None = None  # default: "tool_use" with a tool block, else "end_turn"
    delay: float = 0.0  # seconds before each delta
    drop_after: int | None = None  # drop the connection after this many deltas


@dataclass
class ErrorTurn:
    status: int = 529
    type: str = "overloaded_error"
    message: str = "Overloaded"
    retry_after: int | None = None


@dataclass
class StreamErrorTurn:
    text: list[str] = field(default_factory=list)
    type: str = "overloaded_error"
    message: str = "Overloaded"


Turn = MessageTurn | ErrorTurn | StreamErrorTurn


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names
    body: Any  # the parsed JSON body, or None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list((self.body or {}).get("messages", []))


def _pieces(text: str | list[str]) -> list[str]:
    if isinstance(text, list):
        return text
    words = text.split(" ")
    return [word if i == 0 else f" {word}" for i, word in enumerate(words)] if text else []


def _split(text: str, parts: int) -> list[str]:
    size = max(1, -(-len(text) // max(1, parts)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _sse(kind: str, data: dict[str, Any]) -> str:
    # Anthropic's framing: an `event:` line, one compact `data:` line, a blank line.
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _new_id(prefix: str) -> str:
    return f"{prefix}_01{uuid.uuid4().hex[:22]}"


class ScriptedAnthropicServer:
    """Start with `start()` or as a context manager; `base_url` ends in `/v1` (the Anthropic
    preset's shape) and `origin` is what `ANTHROPIC_BASE_URL` / `anthropic.Anthropic(base_url=)`
    take."""

    def __init__(
        self,
        script: Sequence[Turn] = (),
        *,
        models: Sequence[str] = ("claude-test",),
        api_key: str | None = None,
        accept_bearer: bool = False,
        count_tokens: int | None = None,
    ) -> None:
        self.models = list(models)
        self.api_key = api_key
        self.accept_bearer = accept_bearer
        self.count_tokens = count_tokens
        self._script: list[Turn] = list(script)
        self._requests: list[RecordedRequest] = []
        self._streamed: list[bytes] = []
        self._lock = threading.Lock()
        self.loopback = LoopbackServer()

    @property
    def origin(self) -> str:
        return self.loopback.url

    @property
    def base_url(self) -> str:
        return f"{self.loopback.url}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def message_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == "/v1/messages"]

    @property
    def streamed(self) -> list[bytes]:
        """The exact bytes of each streamed answer, in order, once it has been sent whole."""
        with self._lock:
            return list(self._streamed)

    def add(self, *turns: Turn) -> None:
        with self._lock:
            self._script.extend(turns)

    def start(self) -> ScriptedAnthropicServer:
        app = Starlette(
            routes=[
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )
        self.loopback.start(app)
        return self

    def stop(self) -> None:
        self.loopback.stop()

    def __enter__(self) -> ScriptedAnthropicServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- endpoints -------------------------------------------------------------------------

    async def _record(self, request: Request) -> Any:
        body, headers = await read_request(request)
        with self._lock:
            self._requests.append(
                RecordedRequest(
                    request.method,
                    request.url.path,
                    request.url.query,
                    headers,
                    body,
                )
            )
        return body

    def _refused(self, request: Request) -> Response | None:
        if self.api_key is not None:
            offered = {request.headers.get("x-api-key", "")}
            if self.accept_bearer:
                offered.add(request.headers.get("authorization", "").removeprefix("Bearer "))
            if self.api_key not in offered:
                return _error(401, "authentication_error", "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return _error(400, "invalid_request_error", "anthropic-version: header is required")
        return None

    async def _models(self, request: Request) -> Response:
        await self._record(request)
        if (refused := self._refused(request)) is not None:
            return refused
        data = [
            {
                "type": "model",
                "id": model,
                "display_name": model,
                "created_at": "2025-01-01T00:00:00Z",
            }
            for model in self.models
        ]
        return JSONResponse(
            {
                "data": data,
                "has_more": False,
                "first_id": self.models[0] if self.models else None,
                "last_id": self.models[-1] if self.models else None,
            }
        )

    async def _count_tokens(self, request: Request) -> Response:
        body = await self._record(request)
        if (refused := self._refused(request)) is not None:
            return refused
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "invalid_request_error", "messages: Field required")
        counted = self.count_tokens
        if counted is None:
            counted = _prompt_tokens(body)
        return JSONResponse({"input_tokens": counted})

    async def _messages(self, request: Request) -> Response:
        body = await self._record(request)
        if (refused := self._refused(request)) is not None:
            return refused
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "invalid_request_error", "messages: Field required")
        if not isinstance(body.get("max_tokens"), int):
            return _error(400, "invalid_request_error", "max_tokens: Field required")
        with self._lock:
            turn = self._script.pop(0) if self._script else None
        if turn is None:
            return _error(400, "invalid_request_error", "the test script has no more turns")
        if isinstance(turn, ErrorTurn):
            headers = {"retry-after": str(turn.retry_after)} if turn.retry_after else {}
            return _error(turn.status, turn.type, turn.message, headers)
        model = str(body.get("model") or self.models[0])
        headers = {"request-id": _new_id("req")}
        if isinstance(turn, StreamErrorTurn) and not body.get("stream"):
            return _error(529, turn.type, turn.message)
        usage = _usage(turn, _prompt_tokens(body))
        if not body.get("stream"):
            assert isinstance(turn, MessageTurn)
            return JSONResponse(_whole_message(turn, model, usage), headers=headers)
        return StreamingResponse(
            self._stream(turn, model, usage),
            media_type="text/event-stream; charset=utf-8",
            headers={"cache-control": "no-cache", **headers},
        )

    async def _stream(
        self, turn: MessageTurn | StreamErrorTurn, model: str, usage: dict[str, Any]
    ) -> AsyncIterator[bytes]:
        """Anthropic's streaming events, in the order and framing Anthropic sends them."""
        sent: list[bytes] = []

        def out(kind: str, data: dict[str, Any]) -> bytes:
            frame = _sse(kind, data).encode()
            sent.append(frame)
            return frame

        start_usage = {**usage, "output_tokens": 1}
        message = {
            "id": _new_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": start_usage,
        }
        yield out("message_start", {"type": "message_start", "message": message})
        yield out("ping", {"type": "ping"})
        if isinstance(turn, StreamErrorTurn):
            if turn.text:
                yield out(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
                for piece in turn.text:
                    yield out(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": 0,
                            "delta": {"type": "text_delta", "text": piece},
                        },
                    )
            error = {"type": turn.type, "message": turn.message}
            yield out("error", {"type": "error", "error": error})
            self._keep(sent)
            return
        deltas = 0
        for index, block in enumerate(turn.content):
            start, pieces, closing = _block_events(block)
            yield out(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
            for delta in [*pieces, *closing]:
                if turn.drop_after is not None and deltas >= turn.drop_after:
                    raise DroppedConnection(f"dropped after {turn.drop_after} deltas")
                await asyncio.sleep(turn.delay)
                deltas += 1
                yield out(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            yield out("content_block_stop", {"type": "content_block_stop", "index": index})
        yield out(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": _stop_reason(turn), "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
        yield out("message_stop", {"type": "message_stop"})
        self._keep(sent)

    def _keep(self, sent: list[bytes]) -> None:
        with self._lock:
            self._streamed.append(b"".join(sent))


def _error(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {
            "type": "error",
            "error": {"type": kind, "message": message},
            "request_id": _new_id("req"),
        },
        status_code=status,
        headers=headers,
    )


def _prompt_tokens(body: dict[str, Any]) -> int:
    size = len(json.dumps(body.get("messages", []))) + len(json.dumps(body.get("system", "")))
    return size // 4 + 1


def _usage(turn: MessageTurn | StreamErrorTurn, prompt_tokens: int) -> dict[str, Any]:
    given = turn.usage if isinstance(turn, MessageTurn) else {}
    output = sum(
        len(_pieces(b.text)) if isinstance(b, TextBlock) else 4
        for b in (turn.content if isinstance(turn, MessageTurn) else [])
    )
    created = given.get("cache_creation_input_tokens", 0)
    return {
        "input_tokens": given.get("input_tokens", prompt_tokens),
        "cache_creation_input_tokens": created,
        "cache_read_input_tokens": given.get("cache_read_input_tokens", 0),
        "cache_creation": {"ephemeral_5m_input_tokens": created, "ephemeral_1h_input_tokens": 0},
        "output_tokens": given.get("output_tokens", max(1, output)),
        "service_tier": "standard",
    }


def _stop_reason(turn: MessageTurn) -> str:
    if turn.stop_reason:
        return turn.stop_reason
    return "tool_use" if any(isinstance(b, ToolUseBlock) for b in turn.content) else "end_turn"


def _tool_id(block: ToolUseBlock) -> str:
    if not block.id:
        block.id = _new_id("toolu")
    return block.id


def _block_events(
    block: Block,
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """A block's `content_block_start` body, its deltas, and the deltas that close it."""
    if isinstance(block, ThinkingBlock):
        return (
            {"type": "thinking", "thinking": "", "signature": ""},
            [{"type": "thinking_delta", "thinking": piece} for piece in block.thinking],
            [{"type": "signature_delta", "signature": block.signature}],
        )
    if isinstance(block, TextBlock):
        return (
            {"type": "text", "text": ""},
            [{"type": "text_delta", "text": piece} for piece in _pieces(block.text)],
            [],
        )
    arguments = json.dumps(block.input)
    return (
        {"type": "tool_use", "id": _tool_id(block), "name": block.name, "input": {}},
        [
            {"type": "input_json_delta", "partial_json": piece}
            for piece in ["", *_split(arguments, block.pieces)]
        ],
        [],
    )


def _whole_message(turn: MessageTurn, model: str, usage: dict[str, Any]) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for block in turn.content:
        if isinstance(block, ThinkingBlock):
            content.append(
                {
                    "type": "thinking",
                    "thinking": "".join(block.thinking),
                    "signature": block.signature,
                }
            )
        elif isinstance(block, TextBlock):
            content.append({"type": "text", "text": "".join(_pieces(block.text))})
        else:
            content.append(
                {
                    "type": "tool_use",
                    "id": _tool_id(block),
                    "name": block.name,
                    "input": block.input,
                }
            )
    return {
        "id": _new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _stop_reason(turn),
        "stop_sequence": None,
        "usage": usage,
    }
