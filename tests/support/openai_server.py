"""A small, real OpenAI-compatible HTTP server that answers from a script (tests only).

Starlette on uvicorn, on a free 127.0.0.1 port in a background thread. Each
`POST /v1/chat/completions` or `POST /v1/responses` takes the next turn of the script (one
script for both): text (streamed in several chunks, optionally after reasoning chunks, with
a delay before each chunk), tool calls, an HTTP error, or a failure after the stream began.

Chat Completions streams `chat.completion.chunk`s (tool calls as `tool_calls` deltas) and
ends with a usage chunk when the request asks for `stream_options.include_usage`. The
Responses API streams its typed events (`response.created`, `response.output_item.added`,
`response.reasoning_summary_text.delta`, `response.output_text.delta`,
`response.function_call_arguments.delta`/`.done`, `response.output_item.done`, ...) and ends
with `response.completed` carrying the usage; a `FailedTurn` ends it with `response.failed`
(or an `error` event) instead, and Chat Completions with an `{"error": ...}` chunk.
A text turn with `drop_after=N` drops the connection after N text chunks (no final chunk, no
terminating zero-length chunk), as a dying proxy does. Non-streaming requests get a whole
`chat.completion` or `response`; `GET /v1/models` lists the configured models. Every request
is recorded (method, path, headers including Authorization, JSON body). With `api_key` set,
a request without that key (as `Authorization: Bearer` or `x-api-key`) gets a 401.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.processes import loopback_listener
from tests.support.recording import read_request


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any] | str
    id: str = ""

    def arguments_json(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass
class TextTurn:
    """Answer with text. A str is streamed word by word; a list gives the chunks exactly."""

    text: str | list[str]
    reasoning: list[str] = field(default_factory=list)
    delay: float = 0.0  # seconds before each chunk
    usage: dict[str, int] | None = (
        None  # prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens
    )
    drop_after: int | None = None  # drop the connection after this many text chunks


@dataclass
class ToolCallsTurn:
    calls: list[ToolCall]
    text: str = ""  # streamed before the calls
    delay: float = 0.0
    usage: dict[str, int] | None = None


@dataclass
class ErrorTurn:
    status: int = 500
    message: str = "scripted failure"
    code: str | None = None  # the error body's `code` (e.g. "forwarder_error")


@dataclass
class FailedTurn:
    """The stream starts (HTTP 200), streams `text` chunks, then the model fails: Responses
    API `response.failed` (or an `error` event with `event="error"`); Chat Completions an
    `{"error": ...}` chunk."""

    message: str = "the model failed"
    code: str = "server_error"
    text: list[str] = field(default_factory=list)
    event: str = "response.failed"  # or "error"


Turn = TextTurn | ToolCallsTurn | ErrorTurn | FailedTurn


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: Any  # the parsed JSON body, or None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list((self.body or {}).get("messages", []))

    @property
    def input(self) -> list[dict[str, Any]]:
        """A Responses API request's input items (a plain string input as one user message)."""
        value = (self.body or {}).get("input", [])
        return [{"role": "user", "content": value}] if isinstance(value, str) else list(value)


class DroppedConnection(Exception):
    """Raised inside a streamed answer to make uvicorn drop the connection mid-body."""


class _HideDroppedConnections(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], DroppedConnection))


_uvicorn_errors = logging.getLogger("uvicorn.error")
if not any(isinstance(f, _HideDroppedConnections) for f in _uvicorn_errors.filters):
    _uvicorn_errors.addFilter(_HideDroppedConnections())


def _chunks_of(text: str | list[str]) -> list[str]:
    if isinstance(text, list):
        return text
    return re.findall(r"\s*\S+", text) or [text]


class ScriptedOpenAIServer:
    """Start with `start()` or as a context manager; `base_url` ends in `/v1`."""

    def __init__(
        self,
        script: Sequence[Turn] = (),
        *,
        models: Sequence[str] = ("test-model",),
        api_key: str | None = None,
    ) -> None:
        self.models = list(models)
        self.api_key = api_key
        self._script: list[Turn] = list(script)
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self.streams_completed = 0
        self.streams_aborted = 0
        self._socket = loopback_listener()
        self.port = int(self._socket.getsockname()[1])
        app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat_completions, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )
        self._server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", lifespan="off", loop="asyncio")
        )
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == "/v1/chat/completions"]

    @property
    def responses_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == "/v1/responses"]

    def add(self, *turns: Turn) -> None:
        with self._lock:
            self._script.extend(turns)

    def start(self) -> ScriptedOpenAIServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the scripted OpenAI server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> ScriptedOpenAIServer:
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
                    headers,
                    body,
                )
            )
        return body

    def _refused(self, request: Request) -> Response | None:
        if self.api_key is None:
            return None
        offered = {
            request.headers.get("authorization", ""),
            "Bearer " + request.headers.get("x-api-key", ""),
        }
        if f"Bearer {self.api_key}" in offered:
            return None
        return _error(401, "Incorrect API key provided.", "invalid_api_key")

    async def _models(self, request: Request) -> Response:
        await self._record(request)
        if (refused := self._refused(request)) is not None:
            return refused
        data = [
            {"id": model, "object": "model", "created": 0, "owned_by": "mosoo-tests"}
            for model in self.models
        ]
        return JSONResponse({"object": "list", "data": data})

    async def _chat_completions(self, request: Request) -> Response:
        body = await self._record(request)
        if (refused := self._refused(request)) is not None:
            return refused
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "the body must be a JSON object with messages")
        with self._lock:
            turn = self._script.pop(0) if self._script else None
        if turn is None:
            return _error(400, "the test script has no more turns")
        if isinstance(turn, ErrorTurn):
            return _error(turn.status, turn.message, turn.code)
        model = str(body.get("model") or self.models[0])
        if isinstance(turn, FailedTurn) and not body.get("stream"):
            return _error(500, turn.message, turn.code)
        usage = _usage(turn, _prompt_chars(body["messages"]))
        if not body.get("stream"):
            assert not isinstance(turn, FailedTurn)
            return JSONResponse(_completion(turn, model, usage))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(
            self._stream(turn, model, usage if include_usage else None),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache"},
        )

    async def _stream(
        self, turn: TextTurn | ToolCallsTurn | FailedTurn, model: str, usage: dict[str, Any] | None
    ) -> AsyncIterator[str]:
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        created = int(time.time())
        finished = False

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
            data = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }
            return f"data: {json.dumps(data)}\n\n"

        try:
            yield chunk({"role": "assistant", "content": ""})
            if isinstance(turn, FailedTurn):
                for piece in turn.text:
                    yield chunk({"content": piece})
                error = {"message": turn.message, "type": "server_error", "code": turn.code}
                yield f"data: {json.dumps({'error': error})}\n\n"
                finished = True
                return
            if isinstance(turn, TextTurn):
                for piece in turn.reasoning:
                    await asyncio.sleep(turn.delay)
                    yield chunk({"reasoning_content": piece})
            text = turn.text
            for index, piece in enumerate(_chunks_of(text) if text else []):
                if (
                    isinstance(turn, TextTurn)
                    and turn.drop_after is not None
                    and index >= turn.drop_after
                ):
                    raise DroppedConnection(f"dropped after {turn.drop_after} chunks")
                await asyncio.sleep(turn.delay)
                yield chunk({"content": piece})
            if isinstance(turn, ToolCallsTurn):
                for index, call in enumerate(turn.calls):
                    await asyncio.sleep(turn.delay)
                    call_id = call.id or f"call_{uuid.uuid4().hex[:12]}"
                    yield chunk(
                        {
                            "tool_calls": [
                                {
                                    "index": index,
                                    "id": call_id,
                                    "type": "function",
                                    "function": {"name": call.name, "arguments": ""},
                                }
                            ]
                        }
                    )
                    arguments = call.arguments_json()
                    middle = len(arguments) // 2
                    for piece in (arguments[:middle], arguments[middle:]):
                        if piece:
                            yield chunk(
                                {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                            )
            yield chunk({}, "tool_calls" if isinstance(turn, ToolCallsTurn) else "stop")
            if usage is not None:
                data = {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage,
                }
                yield f"data: {json.dumps(data)}\n\n"
            yield "data: [DONE]\n\n"
            finished = True
        finally:
            with self._lock:
                if finished:
                    self.streams_completed += 1
                else:
                    self.streams_aborted += 1

    async def _responses(self, request: Request) -> Response:
        body = await self._record(request)
        if (refused := self._refused(request)) is not None:
            return refused
        if not isinstance(body, dict) or not isinstance(body.get("input"), (list, str)):
            return _error(400, "the body must be a JSON object with input")
        with self._lock:
            turn = self._script.pop(0) if self._script else None
        if turn is None:
            return _error(400, "the test script has no more turns")
        if isinstance(turn, ErrorTurn):
            return _error(turn.status, turn.message, turn.code)
        model = str(body.get("model") or self.models[0])
        if isinstance(turn, FailedTurn) and not body.get("stream"):
            return _error(500, turn.message, turn.code)
        items = [{"content": body["input"]}] if isinstance(body["input"], str) else body["input"]
        usage = _responses_usage(
            _usage(turn, _prompt_chars(items) + len(str(body.get("instructions") or "")))
        )
        if not body.get("stream"):
            assert not isinstance(turn, FailedTurn)
            response = _response_object(
                f"resp_{uuid.uuid4().hex[:12]}", model, "completed", _output_items(turn), usage
            )
            return JSONResponse(response)
        return StreamingResponse(
            self._responses_stream(turn, model, usage),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache"},
        )

    async def _responses_stream(
        self, turn: TextTurn | ToolCallsTurn | FailedTurn, model: str, usage: dict[str, Any]
    ) -> AsyncIterator[str]:
        """The Responses API's typed SSE events, in the order OpenAI sends them."""
        response_id = f"resp_{uuid.uuid4().hex[:12]}"
        sequence = 0
        output: list[dict[str, Any]] = []
        finished = False

        def event(kind: str, **data: Any) -> str:
            nonlocal sequence
            sequence += 1
            return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': sequence, **data})}\n\n"

        def response(status: str, **extra: Any) -> dict[str, Any]:
            return _response_object(response_id, model, status, output, None, **extra)

        try:
            yield event("response.created", response=response("in_progress"))
            yield event("response.in_progress", response=response("in_progress"))
            delay = 0.0 if isinstance(turn, FailedTurn) else turn.delay
            if isinstance(turn, TextTurn) and turn.reasoning:
                index, item_id = len(output), f"rs_{uuid.uuid4().hex[:12]}"
                yield event(
                    "response.output_item.added",
                    output_index=index,
                    item={"id": item_id, "type": "reasoning", "summary": []},
                )
                part: dict[str, Any] = {"type": "summary_text", "text": ""}
                yield event(
                    "response.reasoning_summary_part.added",
                    item_id=item_id,
                    output_index=index,
                    summary_index=0,
                    part=part,
                )
                for piece in turn.reasoning:
                    await asyncio.sleep(delay)
                    yield event(
                        "response.reasoning_summary_text.delta",
                        item_id=item_id,
                        output_index=index,
                        summary_index=0,
                        delta=piece,
                    )
                summary = "".join(turn.reasoning)
                yield event(
                    "response.reasoning_summary_text.done",
                    item_id=item_id,
                    output_index=index,
                    summary_index=0,
                    text=summary,
                )
                part = {"type": "summary_text", "text": summary}
                yield event(
                    "response.reasoning_summary_part.done",
                    item_id=item_id,
                    output_index=index,
                    summary_index=0,
                    part=part,
                )
                item = {"id": item_id, "type": "reasoning", "summary": [part]}
                output.append(item)
                yield event("response.output_item.done", output_index=index, item=item)
            text = turn.text
            pieces = _chunks_of(text) if text else []
            if pieces:
                index, item_id = len(output), f"msg_{uuid.uuid4().hex[:12]}"
                message: dict[str, Any] = {
                    "id": item_id,
                    "type": "message",
                    "role": "assistant",
                    "status": "in_progress",
                    "content": [],
                }
                yield event("response.output_item.added", output_index=index, item=message)
                part = {"type": "output_text", "text": "", "annotations": []}
                yield event(
                    "response.content_part.added",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    part=part,
                )
                for number, piece in enumerate(pieces):
                    if (
                        isinstance(turn, TextTurn)
                        and turn.drop_after is not None
                        and number >= turn.drop_after
                    ):
                        raise DroppedConnection(f"dropped after {turn.drop_after} chunks")
                    await asyncio.sleep(delay)
                    yield event(
                        "response.output_text.delta",
                        item_id=item_id,
                        output_index=index,
                        content_index=0,
                        delta=piece,
                        logprobs=[],
                    )
            if pieces and not isinstance(turn, FailedTurn):
                whole = "".join(pieces)
                yield event(
                    "response.output_text.done",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    text=whole,
                    logprobs=[],
                )
                part = {"type": "output_text", "text": whole, "annotations": []}
                yield event(
                    "response.content_part.done",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    part=part,
                )
                message = {**message, "status": "completed", "content": [part]}
                output.append(message)
                yield event("response.output_item.done", output_index=index, item=message)
            if isinstance(turn, FailedTurn):
                error = {"code": turn.code, "message": turn.message}
                if turn.event == "error":
                    yield event("error", code=turn.code, message=turn.message, param=None)
                else:
                    yield event("response.failed", response=response("failed", error=error))
                finished = True
                return
            if isinstance(turn, ToolCallsTurn):
                for call in turn.calls:
                    await asyncio.sleep(delay)
                    index, item_id = len(output), f"fc_{uuid.uuid4().hex[:12]}"
                    item = {
                        "id": item_id,
                        "type": "function_call",
                        "status": "in_progress",
                        "call_id": call.id or f"call_{uuid.uuid4().hex[:12]}",
                        "name": call.name,
                        "arguments": "",
                    }
                    yield event("response.output_item.added", output_index=index, item=item)
                    arguments = call.arguments_json()
                    middle = len(arguments) // 2
                    for piece in (arguments[:middle], arguments[middle:]):
                        if piece:
                            yield event(
                                "response.function_call_arguments.delta",
                                item_id=item_id,
                                output_index=index,
                                delta=piece,
                            )
                    yield event(
                        "response.function_call_arguments.done",
                        item_id=item_id,
                        output_index=index,
                        arguments=arguments,
                    )
                    item = {**item, "status": "completed", "arguments": arguments}
                    output.append(item)
                    yield event("response.output_item.done", output_index=index, item=item)
            yield event("response.completed", response={**response("completed"), "usage": usage})
            finished = True
        finally:
            with self._lock:
                if finished:
                    self.streams_completed += 1
                else:
                    self.streams_aborted += 1


def _error(status: int, message: str, code: str | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": "invalid_request_error", "code": code}},
        status_code=status,
    )


def _prompt_chars(items: list[Any]) -> int:
    return sum(
        len(json.dumps(m.get("content", m.get("output", "")))) for m in items if isinstance(m, dict)
    )


def _usage(turn: TextTurn | ToolCallsTurn | FailedTurn, prompt_chars: int) -> dict[str, Any]:
    """Chat Completions usage: the turn's numbers, or rough ones from the sizes."""
    given = dict(getattr(turn, "usage", None) or {})
    text = turn.text
    usage: dict[str, Any] = {
        "prompt_tokens": given.get("prompt_tokens", prompt_chars // 4 + 1),
        "completion_tokens": given.get("completion_tokens", len(_chunks_of(text)) if text else 1),
    }
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    if "cached_tokens" in given:
        usage["prompt_tokens_details"] = {"cached_tokens": given["cached_tokens"]}
    if "reasoning_tokens" in given:
        usage["completion_tokens_details"] = {"reasoning_tokens": given["reasoning_tokens"]}
    return usage


def _completion(
    turn: TextTurn | ToolCallsTurn, model: str, usage: dict[str, Any]
) -> dict[str, Any]:
    text = "".join(_chunks_of(turn.text)) if turn.text else None
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if isinstance(turn, ToolCallsTurn):
        message["tool_calls"] = [
            {
                "id": call.id or f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json()},
            }
            for call in turn.calls
        ]
    if isinstance(turn, TextTurn) and turn.reasoning:
        message["reasoning_content"] = "".join(turn.reasoning)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if isinstance(turn, ToolCallsTurn) else "stop",
            }
        ],
        "usage": usage,
    }


def _responses_usage(chat_usage: dict[str, Any]) -> dict[str, Any]:
    """The same numbers in the Responses API's shape (whose details are always present)."""
    return {
        "input_tokens": chat_usage["prompt_tokens"],
        "input_tokens_details": {
            "cached_tokens": (chat_usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        },
        "output_tokens": chat_usage["completion_tokens"],
        "output_tokens_details": {
            "reasoning_tokens": (chat_usage.get("completion_tokens_details") or {}).get(
                "reasoning_tokens", 0
            )
        },
        "total_tokens": chat_usage["total_tokens"],
    }


def _output_items(turn: TextTurn | ToolCallsTurn) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if isinstance(turn, TextTurn) and turn.reasoning:
        summary = [{"type": "summary_text", "text": "".join(turn.reasoning)}]
        items.append({"id": f"rs_{uuid.uuid4().hex[:12]}", "type": "reasoning", "summary": summary})
    if turn.text:
        content = [
            {"type": "output_text", "text": "".join(_chunks_of(turn.text)), "annotations": []}
        ]
        items.append(
            {
                "id": f"msg_{uuid.uuid4().hex[:12]}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": content,
            }
        )
    if isinstance(turn, ToolCallsTurn):
        items.extend(
            {
                "id": f"fc_{uuid.uuid4().hex[:12]}",
                "type": "function_call",
                "status": "completed",
                "call_id": call.id or f"call_{uuid.uuid4().hex[:12]}",
                "name": call.name,
                "arguments": call.arguments_json(),
            }
            for call in turn.calls
        )
    return items


def _response_object(
    response_id: str,
    model: str,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": model,
        "output": list(output),
        "error": None,
        "incomplete_details": None,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
        **extra,
    }
