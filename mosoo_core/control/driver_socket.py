"""The driver endpoint: one WebSocket per driver (PROTOCOL.md). Events are stored before
they are acknowledged; commands are pushed from the database and re-sent after reconnects;
a bad frame closes only its own connection, with a reason."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import redis.asyncio as aioredis
from starlette.websockets import WebSocket, WebSocketDisconnect

from driver.protocol import (
    MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    SUPPORTED_PROTOCOL_VERSIONS,
    Ack,
    Close,
    Command,
    CommandUpdate,
    Events,
    Heartbeat,
    Hello,
    Logs,
    ProtocolError,
    Ready,
    Welcome,
    encode,
    parse_driver_message,
)
from mosoo_core import streams
from mosoo_core.control._event_writer import EventWriter
from mosoo_core.db import session_scope
from mosoo_core.logs import get_logger
from mosoo_core.sessions import driver_plane

log = get_logger(__name__)
HELLO_TIMEOUT_SECONDS = 10.0
COMMAND_POLL_SECONDS = 2.0


class DriverConnection:
    def __init__(
        self,
        websocket: WebSocket,
        redis: aioredis.Redis,
        heartbeat_interval_ms: int,
        writer: EventWriter,
    ) -> None:
        self.websocket = websocket
        self.redis = redis
        self.writer = writer
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.instance_id = ""
        self.connection_id = ""
        self.sent_command_seq = 0
        # Until a batch holds no event stored before, this connection may be re-sending
        # what its last one left unacknowledged (PROTOCOL.md): its batches are looked up.
        self.may_repeat = True
        self.send_lock = asyncio.Lock()
        self.wake = asyncio.Event()

    async def send(self, message: Any) -> None:
        async with self.send_lock:
            await self.websocket.send_text(encode(message))

    async def refuse(self, code: str, reason: str) -> None:
        log.warning(
            "driver.refused", instance_id=self.instance_id or None, code=code, reason=reason
        )
        with contextlib.suppress(Exception):
            await self.send(Close(code=code, reason=reason))
            await self.websocket.close(code=1008, reason=code)

    async def receive_frame(self, timeout: float | None = None) -> str:
        message = await asyncio.wait_for(self.websocket.receive(), timeout)
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000))
        text = message.get("text")
        if text is None:
            data = message.get("bytes") or b""
            if len(data) > MAX_FRAME_BYTES:
                raise ProtocolError("frame_too_large", "frame exceeds 1 MiB")
            raise ProtocolError("invalid_frame", "frames must be JSON text")
        if len(text) > MAX_FRAME_BYTES:
            raise ProtocolError("frame_too_large", "frame exceeds 1 MiB")
        return str(text)

    async def run(self) -> None:
        await self.websocket.accept()
        try:
            frame = await self.receive_frame(HELLO_TIMEOUT_SECONDS)
            hello = parse_driver_message(frame)
        except TimeoutError:
            await self.refuse("hello_timeout", "no hello within 10 seconds")
            return
        except WebSocketDisconnect:
            return
        except ProtocolError as error:
            await self.refuse(error.code, error.message)
            return
        if not isinstance(hello, Hello):
            await self.refuse("expected_hello", "the first message must be hello")
            return
        self.instance_id = hello.driver_instance_id
        if hello.protocol_version not in SUPPORTED_PROTOCOL_VERSIONS:
            await self.refuse(
                "protocol_version", f"control speaks protocol 1 to {PROTOCOL_VERSION}"
            )
            return
        try:
            welcome = await asyncio.to_thread(self._accept, hello)
        except driver_plane.DriverRefused as refused:
            await self.refuse(refused.code, refused.reason)
            return
        self.connection_id = welcome.connection_id
        await self.send(
            Welcome(
                connection_id=welcome.connection_id,
                heartbeat_interval_ms=self.heartbeat_interval_ms,
                resume_token=welcome.resume_token,
            )
        )
        log.info("driver.connected", instance_id=self.instance_id, connection_id=self.connection_id)
        pusher = asyncio.create_task(self._push_commands())
        try:
            await self._receive_loop()
        finally:
            pusher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pusher
            await asyncio.to_thread(self._disconnected)
            log.info(
                "driver.disconnected",
                instance_id=self.instance_id,
                connection_id=self.connection_id,
            )

    def _accept(self, hello: Hello) -> driver_plane.DriverWelcome:
        with session_scope() as db:
            return driver_plane.accept_hello(db, hello)

    def _ready(self, ready: Ready) -> None:
        with session_scope() as db:
            driver_plane.mark_ready(
                db,
                self.instance_id,
                self.connection_id,
                standby=ready.standby,
                capabilities=ready.capabilities,
            )

    def _disconnected(self) -> None:
        with session_scope() as db:
            driver_plane.mark_disconnected(db, self.instance_id, self.connection_id)

    async def _receive_loop(self) -> None:
        while True:
            try:
                frame = await self.receive_frame()
                message = parse_driver_message(frame)
                await self._handle(message)
            except WebSocketDisconnect:
                return
            except ProtocolError as error:
                await self.refuse(error.code, error.message)
                return
            except driver_plane.DriverRefused as refused:
                await self.refuse(refused.code, refused.reason)
                return

    async def _handle(self, message: Any) -> None:
        if isinstance(message, Heartbeat):
            await asyncio.to_thread(self._in_db, driver_plane.record_heartbeat)
        elif isinstance(message, Events):
            # Stored (committed) before the ack; published meanwhile: see _event_writer.
            stored = await self.writer.store(
                self.instance_id,
                self.connection_id,
                list(message.events),
                may_repeat=self.may_repeat,
            )
            self.may_repeat = self.may_repeat and any(event.duplicate for event in stored)
            await self.send(
                Ack(
                    source_event_ids=[e.source_event_id for e in message.events],
                    seqs=[s.seq for s in stored if s.source_event_id],
                )
            )
        elif isinstance(message, Ready):
            await asyncio.to_thread(self._ready, message)
            if not message.standby:  # a warm pool member is ready for a run, not yet in one
                await streams.announce_ready(self.redis, self.instance_id)
            log.info("driver.ready", instance_id=self.instance_id)
        elif isinstance(message, CommandUpdate):
            await asyncio.to_thread(self._command_update, message)
        elif isinstance(message, Logs):
            for line in message.lines:
                log.info(
                    "driver.log",
                    instance_id=self.instance_id,
                    level=line.level,
                    message=line.message[:2000],
                )
        elif isinstance(message, Hello):
            raise ProtocolError("unexpected_hello", "hello was already received")

    def _in_db(self, action: Any) -> None:
        with session_scope() as db:
            action(db, self.instance_id, self.connection_id)

    def _command_update(self, update: CommandUpdate) -> None:
        with session_scope() as db:
            driver_plane.apply_command_update(db, self.instance_id, update)

    async def _push_commands(self) -> None:
        pubsub = self.redis.pubsub()
        await pubsub.subscribe(streams.commands_channel(self.instance_id))
        listener = asyncio.create_task(self._listen(pubsub))
        try:
            while True:
                commands = await asyncio.to_thread(self._pending_commands)
                for command in commands:
                    await self.send(command)
                    self.sent_command_seq = max(self.sent_command_seq, command.seq)
                self.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), COMMAND_POLL_SECONDS)
        finally:
            listener.cancel()
            with contextlib.suppress(Exception):
                await pubsub.unsubscribe()
                await pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated

    async def _listen(self, pubsub: Any) -> None:
        async for item in pubsub.listen():
            if item.get("type") == "message":
                self.wake.set()

    def _pending_commands(self) -> list[Command]:
        with session_scope() as db:
            return driver_plane.commands_to_send(
                db, self.instance_id, after_seq=self.sent_command_seq
            )
