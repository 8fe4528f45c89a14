"""A small stand-in for control, for driver tests: the driver WebSocket at `/driver/socket`
and a model gateway at `/gateway/openai/v1/...` on one Unix socket, like the real control.

Starlette on uvicorn in a background thread. It checks the boot token (single use) and the
resume token (rotated on every `welcome`), records every frame the driver sends, stores
events once per `source_event_id`, acknowledges them (unless told not to), and lets a test
send commands, drop the connection or close the driver with a reason. The gateway checks
`Authorization: Bearer <grant>` and streams the upstream's (the scripted OpenAI server's)
answer back unchanged.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect


@dataclass(frozen=True)
class Frame:
    connection: int  # 1 for the first connection, 2 after the first reconnect, ...
    message: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.message.get("type"))


class ControlHarness:
    def __init__(
        self,
        socket_path: Path,
        *,
        boot_token: str = "boot-token-1",
        heartbeat_interval_ms: int = 100,
        auto_ack: bool = True,
        gateway_upstream: str | None = None,
        gateway_grant: str | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.boot_token = boot_token
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.auto_ack = auto_ack
        self.gateway_upstream = gateway_upstream
        self.gateway_grant = gateway_grant
        # (code, reason) to answer the next hello with, instead of welcome.
        self.reject_next_hello: tuple[str, str] | None = None
        # What `GET /driver/workspace` answers a driver presenting gateway_grant: a tar of the
        # thread's checkpoint, or None (204: the thread has none).
        self.workspace_tar: bytes | None = None
        self.issued_resume_tokens: list[str] = []
        self.gateway_requests: list[dict[str, Any]] = []
        self._frames: list[Frame] = []
        self._events: dict[str, dict[str, Any]] = {}
        self._boot_token_used = False
        self._connection_counter = itertools.count(1)
        self._current: tuple[int, WebSocket] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        app = Starlette(
            routes=[
                WebSocketRoute("/driver/socket", self._driver_socket),
                Route("/gateway/{rest:path}", self._gateway, methods=["GET", "POST"]),
                Route("/driver/workspace", self._workspace, methods=["GET"]),
            ]
        )
        config = uvicorn.Config(
            app, uds=str(socket_path), log_level="warning", lifespan="off", loop="asyncio"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> ControlHarness:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the control harness did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> ControlHarness:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def control_url(self) -> str:
        return f"unix://{self.socket_path}"

    # --- what the driver sent --------------------------------------------------------------

    @property
    def frames(self) -> list[Frame]:
        with self._lock:
            return list(self._frames)

    def of_type(self, kind: str, connection: int | None = None) -> list[dict[str, Any]]:
        return [
            f.message
            for f in self.frames
            if f.type == kind and (connection is None or f.connection == connection)
        ]

    @property
    def events(self) -> list[dict[str, Any]]:
        """Stored events, once each, in the order first received."""
        with self._lock:
            return list(self._events.values())

    def event_kinds(self, run_id: str | None = None) -> list[str]:
        return [e["kind"] for e in self.events if run_id is None or e["run_id"] == run_id]

    def command_updates(self, command_id: str) -> list[str]:
        return [
            m["status"] for m in self.of_type("command_update") if m["command_id"] == command_id
        ]

    @property
    def connection_count(self) -> int:
        with self._lock:
            return max((f.connection for f in self._frames), default=0)

    async def wait(
        self, condition: Callable[[], bool], timeout: float = 10.0, what: str = "condition"
    ) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            await asyncio.sleep(0.01)

    def wait_sync(
        self, condition: Callable[[], bool], timeout: float = 10.0, what: str = "condition"
    ) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            time.sleep(0.01)

    # --- acting on the driver --------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        current, loop = self._current, self._loop
        if current is None or loop is None:
            raise RuntimeError("no driver is connected")
        asyncio.run_coroutine_threadsafe(current[1].send_text(json.dumps(message)), loop).result(
            timeout=5
        )

    _command_seq = itertools.count(1)

    def send_command(
        self, kind: str, payload: dict[str, Any], command_id: str | None = None
    ) -> str:
        command_id = command_id or f"cmd_{uuid.uuid4().hex[:12]}"
        self.send(
            {
                "type": "command",
                "command_id": command_id,
                "seq": next(self._command_seq),
                "kind": kind,
                "payload": payload,
            }
        )
        return command_id

    def ack(self, source_event_ids: list[str]) -> None:
        self.send({"type": "ack", "source_event_ids": source_event_ids, "seqs": []})

    def drop(self) -> None:
        """End the connection without a protocol `close` message (as a crash of control would)."""
        current, loop = self._current, self._loop
        if current is None or loop is None:
            raise RuntimeError("no driver is connected")
        asyncio.run_coroutine_threadsafe(current[1].close(code=1011), loop).result(timeout=5)

    def close_driver(self, code: str, reason: str) -> None:
        self.send({"type": "close", "code": code, "reason": reason})
        self.drop()

    # --- endpoints -------------------------------------------------------------------------

    async def _driver_socket(self, websocket: WebSocket) -> None:
        await websocket.accept()
        self._loop = asyncio.get_running_loop()
        number = next(self._connection_counter)
        self._current = (number, websocket)
        try:
            while True:
                message = json.loads(await websocket.receive_text())
                with self._lock:
                    self._frames.append(Frame(number, message))
                if message.get("type") == "hello":
                    if not await self._answer_hello(websocket, message):
                        return
                elif message.get("type") == "events":
                    with self._lock:
                        for event in message["events"]:
                            self._events.setdefault(event["source_event_id"], event)
                    if self.auto_ack:
                        ids = [event["source_event_id"] for event in message["events"]]
                        await websocket.send_text(
                            json.dumps({"type": "ack", "source_event_ids": ids, "seqs": []})
                        )
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            if self._current is not None and self._current[0] == number:
                self._current = None

    async def _answer_hello(self, websocket: WebSocket, hello: dict[str, Any]) -> bool:
        refusal: tuple[str, str] | None = self.reject_next_hello
        self.reject_next_hello = None
        if refusal is None:
            if hello.get("resume_token"):
                if (
                    not self.issued_resume_tokens
                    or hello["resume_token"] != self.issued_resume_tokens[-1]
                ):
                    refusal = ("resume_token_invalid", "unknown or outdated resume token")
            elif hello.get("boot_token") != self.boot_token:
                refusal = ("boot_token_invalid", "unknown boot token")
            elif self._boot_token_used:
                refusal = ("boot_token_used", "the boot token was already used")
        if refusal is not None:
            await websocket.send_text(
                json.dumps({"type": "close", "code": refusal[0], "reason": refusal[1]})
            )
            await websocket.close(code=1008)
            return False
        self._boot_token_used = True
        token = f"resume-{len(self.issued_resume_tokens) + 1}-{uuid.uuid4().hex[:8]}"
        self.issued_resume_tokens.append(token)
        await websocket.send_text(
            json.dumps(
                {
                    "type": "welcome",
                    "connection_id": f"conn-{len(self.issued_resume_tokens)}",
                    "heartbeat_interval_ms": self.heartbeat_interval_ms,
                    "resume_token": token,
                }
            )
        )
        return True

    async def _workspace(self, request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {self.gateway_grant}":
            return JSONResponse({"error": {"code": "unauthenticated"}}, status_code=401)
        if self.workspace_tar is None:
            return Response(status_code=204)
        return Response(self.workspace_tar, media_type="application/x-tar")

    async def _gateway(self, request: Request) -> Response:
        self.gateway_requests.append({"path": request.url.path, "headers": dict(request.headers)})
        if (
            self.gateway_grant is not None
            and request.headers.get("authorization") != f"Bearer {self.gateway_grant}"
        ):
            return JSONResponse(
                {"error": {"code": "unauthenticated", "message": "bad grant"}}, status_code=401
            )
        rest = request.path_params["rest"]
        if self.gateway_upstream is None or not rest.startswith("openai/"):
            return JSONResponse(
                {"error": {"code": "not_found", "message": "no such gateway"}}, status_code=404
            )
        client = httpx.AsyncClient(base_url=self.gateway_upstream, trust_env=False, timeout=None)
        upstream = await client.send(
            client.build_request(
                request.method,
                "/" + rest.removeprefix("openai/"),
                headers={"content-type": request.headers.get("content-type", "application/json")},
                content=await request.body(),
            ),
            stream=True,
        )

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            finally:
                await upstream.aclose()
                await client.aclose()

        headers = {
            k: v
            for k, v in upstream.headers.items()
            if k.lower() in ("content-type", "cache-control")
        }
        return StreamingResponse(body(), status_code=upstream.status_code, headers=headers)
