"""The control client: the driver's one WebSocket to control, kept alive across drops.

It sends `hello` (the boot token the first time, then the resume token of the last
`welcome`), starts the backend after the first `welcome`, sends `ready`, heartbeats,
batches events (at most 64 and under the 1 MiB frame limit), keeps every event until an
`ack` names it and re-sends the rest after a reconnect, and hands each command to the
backend once (a command re-delivered after a reconnect gets its last status again).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import random
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import pydantic_core

from driver import __version__
from driver.protocol import (
    MAX_EVENTS_PER_BATCH,
    MAX_FRAME_BYTES,
    MAX_RECONNECT_BACKOFF_SECONDS,
    PROTOCOL_VERSION,
    Ack,
    Close,
    Command,
    CommandUpdate,
    DriverEvent,
    Heartbeat,
    Hello,
    LogLine,
    Logs,
    ProtocolError,
    Ready,
    Welcome,
    encode,
    parse_control_message,
)
from driver.websocket import ClientWebSocket, WebSocketError, connect

log = logging.getLogger("driver.connection")

# Path of the driver WebSocket on control's Unix socket (and on its TCP endpoint).
DRIVER_SOCKET_PATH = "/driver/socket"
# `close` codes after which the driver reconnects instead of exiting.
RECONNECT_CLOSE_CODES = frozenset({"going_away", "reconnect"})
HANDSHAKE_TIMEOUT_SECONDS = 15.0
INITIAL_BACKOFF_SECONDS = 0.25
# With no connection for this long the driver gives up (control failed the run long before).
GIVE_UP_AFTER_SECONDS = 600.0
SHUTDOWN_FLUSH_SECONDS = 5.0
MAX_EVENT_BYTES = 256 * 1024
MAX_BATCH_BYTES = MAX_FRAME_BYTES - 64 * 1024
MAX_LOG_LINES_PER_MESSAGE = 256
MAX_PENDING_LOG_LINES = 1000
MAX_REMEMBERED_COMMANDS = 10_000
MIN_HEARTBEAT_SECONDS = 0.05
# Event batches sent and not yet acknowledged: while one is stored, the events emitted
# meanwhile wait to go in the next batch together (control's writer then has fewer, larger
# batches to store when it is busy, and no wait when it is not).
MAX_BATCHES_IN_FLIGHT = 1


class ControlRejected(Exception):
    """Control sent `close {code, reason}`: the driver must stop."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason


class ControlUnreachable(Exception):
    """No connection to control for longer than the give-up delay."""


class BackendStartFailed(Exception):
    """The backend could not start after the first `welcome`."""


class _Reconnect(Exception):
    """This connection is over; dial again."""


class _FlushLogs:
    """Marker in the outgoing queue: send the pending log lines here."""


class _SayReady:
    """Marker in the outgoing queue: send `ready` here (after `assign`)."""


_FLUSH_LOGS = _FlushLogs()
_READY = _SayReady()
# str = the source_event_id of an unacked event
_Outgoing = str | CommandUpdate | _FlushLogs | _SayReady


_now_text: tuple[int, str] = (-1, "")  # the last millisecond spelled, and its spelling


def utc_now() -> str:
    """This millisecond in UTC, as `2026-12-07T21:39:06.123Z`. A busy backend emits many
    events a millisecond: each spells it once (datetime's isoformat cost 5 µs an event)."""
    global _now_text
    milliseconds = time.time_ns() // 1_000_000
    known, text = _now_text
    if milliseconds != known:
        seconds, fraction = divmod(milliseconds, 1000)
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{fraction:03d}Z"
        _now_text = (milliseconds, text)
    return text


SECRET_MASK = "••••"
# A source_event_id: the millisecond, this process's random tag, then a counter (32 hex
# digits). Unique across drivers by the tag, and rising within a driver, so control's
# unique index on (thread, source_event_id) takes each event at its end where random ids
# (uuid4) dirtied a page of it per event (bench/events.py: two thirds of the pages a group
# wrote to SQLite's log). It says nothing a thread's events do not already say.
_ID_TAG = os.urandom(6).hex()
_id_counter = itertools.count()


def new_source_event_id() -> str:
    return f"{time.time_ns() // 1_000_000:012x}{_ID_TAG}{next(_id_counter) & 0xFFFFFFFF:08x}"


class ControlConnection:
    """Implements `driver.backends.EventSink` (`emit`, `command_update`) for the backend."""

    def __init__(
        self,
        *,
        control_url: str,
        driver_instance_id: str,
        boot_token: str,
        runtime: str,
        capabilities: Sequence[str] = (),
        on_command: Callable[[Command], Awaitable[None]] | None = None,
        on_first_welcome: Callable[[], Awaitable[None]] | None = None,
        secrets: Sequence[str] = (),
        initial_backoff: float = INITIAL_BACKOFF_SECONDS,
        max_backoff: float = MAX_RECONNECT_BACKOFF_SECONDS,
        give_up_after: float = GIVE_UP_AFTER_SECONDS,
        handshake_timeout: float = HANDSHAKE_TIMEOUT_SECONDS,
    ) -> None:
        scheme = urlsplit(control_url).scheme
        if scheme not in ("unix", "ws", "wss"):
            raise ValueError(f"control_url must be unix://, ws:// or wss://, not {scheme!r}")
        self.control_url = control_url
        self.driver_instance_id = driver_instance_id
        self.runtime = runtime
        self.capabilities = list(capabilities)
        self.on_command = on_command
        self.on_first_welcome = on_first_welcome
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.give_up_after = give_up_after
        self.handshake_timeout = handshake_timeout

        self._boot_token = boot_token
        self._masks: list[str] = []
        self.mask_secrets(secrets)
        # A driver booted without a run (warm pool) says `ready {standby}` until it is
        # assigned one; `announce_ready` then says ready for it.
        self.standby = False
        self._resume_token: str | None = None
        self._last_acked: str | None = None
        self._backend_started = False
        self._unacked: OrderedDict[str, str] = OrderedDict()  # source_event_id -> encoded event
        self._outgoing: deque[_Outgoing] = deque()
        self._pending_logs: deque[LogLine] = deque()
        self._command_status: OrderedDict[str, CommandUpdate | None] = OrderedDict()
        self._wakeup = asyncio.Event()
        self._stopping = asyncio.Event()
        self._send_lock = asyncio.Lock()
        self._batches_in_flight = 0
        self.connected = asyncio.Event()  # set while a welcomed connection is up
        self.connections = 0  # welcomed connections so far

    # --- what the backend calls ----------------------------------------------------------

    def emit(self, run_id: str, kind: str, payload: dict[str, Any] | None = None) -> str:
        """Queue one event; kept until control acknowledges it. Returns its source_event_id."""
        # Encoded as `DriverEvent` would be, without building one (a model, validated, then
        # dumped, cost three times as much). What the model checked is checked here: an event
        # control would refuse must fail its emitter, not the connection's batch.
        payload = {} if payload is None else payload
        if not 0 < len(run_id) <= 64 or not isinstance(kind, str) or not isinstance(payload, dict):
            raise ValueError(f"not an event: run_id {run_id!r}, kind {kind!r}, a payload dict")
        source_event_id = new_source_event_id()
        fields = {
            "source_event_id": source_event_id,
            "run_id": run_id,
            "kind": kind,
            "occurred_at": utc_now(),
            "payload": payload,
        }
        encoded = pydantic_core.to_json(fields).decode()
        for mask in self._masks:
            encoded = encoded.replace(mask, SECRET_MASK)
        if len(encoded.encode("utf-8")) > MAX_EVENT_BYTES:
            encoded = _shrunk(DriverEvent(**fields))
            log.warning("event_truncated", extra={"kind": kind, "run_id": run_id})
        self._unacked[source_event_id] = encoded
        self._queue(source_event_id)
        return source_event_id

    def command_update(
        self,
        command_id: str,
        status: str,
        result: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        message = CommandUpdate(
            command_id=command_id,
            status=status,
            result=result,
            error=error[:4096] if error is not None else None,
        )
        self._remember_command(command_id, message)
        self._queue(message)

    def mask_secrets(self, secrets: Sequence[str]) -> None:
        """The values of the environment's secret variables, masked in every event sent: a
        command that prints one shows it to the model, never to the thread's log."""
        self._masks = sorted(
            {json.dumps(value)[1:-1] for value in secrets if value}, key=len, reverse=True
        )

    def announce_ready(self) -> None:
        """A standby driver took its run and started its backend: say `ready` (with the
        backend's capabilities), as every later reconnect will."""
        self.standby = False
        self._queue(_READY)

    def _ready(self) -> Ready:
        if self.standby:
            return Ready(at=utc_now(), standby=True)
        return Ready(at=utc_now(), capabilities=self.capabilities)

    def log_line(self, level: str, message: str) -> None:
        """Queue a log line for control (best effort, bounded, never re-sent)."""
        if len(self._pending_logs) >= MAX_PENDING_LOG_LINES:
            return
        line = LogLine(
            level=level if level in ("debug", "info", "warning", "error") else "error",
            message=message[:8192],
            at=utc_now(),
        )
        if not self._pending_logs:
            self._queue(_FLUSH_LOGS)
        self._pending_logs.append(line)

    @property
    def unacked_count(self) -> int:
        return len(self._unacked)

    @property
    def resume_token(self) -> str | None:
        return self._resume_token

    def stop(self) -> None:
        """Ask `run()` to flush what is queued, close the connection and return."""
        self._stopping.set()

    # --- the connection loop -------------------------------------------------------------

    async def run(self) -> None:
        """Connect and serve until `stop()`. Raises ControlRejected when control closes us
        with a reason, ControlUnreachable after `give_up_after` seconds without a connection,
        BackendStartFailed when the backend does not start."""
        attempt = 0
        disconnected_since = time.monotonic()
        while not self._stopping.is_set():
            welcomed = False
            try:
                async with self._dial() as websocket:
                    welcome = await self._handshake(websocket)
                    welcomed = True
                    attempt = 0
                    await self._serve(websocket, welcome)
            except (ControlRejected, BackendStartFailed):
                raise
            except (
                _Reconnect,
                OSError,
                TimeoutError,
                ProtocolError,
                WebSocketError,
            ) as error:
                if not self._stopping.is_set():
                    log.warning(
                        "control_connection_lost",
                        extra={"error": f"{type(error).__name__}: {error}", "attempt": attempt},
                    )
            finally:
                self.connected.clear()
            if welcomed:
                disconnected_since = time.monotonic()
            if self._stopping.is_set():
                break
            if time.monotonic() - disconnected_since > self.give_up_after:
                raise ControlUnreachable(f"no connection to control for {self.give_up_after:g} s")
            delay = min(self.max_backoff, self.initial_backoff * 2**attempt) * random.uniform(
                0.8, 1.0
            )
            attempt += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=delay)
        log.info("control_connection_closed")

    def _dial(self) -> connect:
        # No proxy (a sandbox's egress proxy variables must not apply to control) and no
        # compression (frames are small JSON: it would cost CPU on both ends for little).
        options: dict[str, Any] = {
            "max_size": MAX_FRAME_BYTES,
            "open_timeout": self.handshake_timeout,
            "close_timeout": 2,
        }
        parts = urlsplit(self.control_url)
        if parts.scheme == "unix":
            return connect(f"ws://control{DRIVER_SOCKET_PATH}", unix_path=parts.path, **options)
        return connect(self.control_url, **options)

    async def _handshake(self, websocket: ClientWebSocket) -> Welcome:
        hello = Hello(
            driver_instance_id=self.driver_instance_id,
            boot_token=None if self._resume_token else self._boot_token,
            resume_token=self._resume_token,
            protocol_version=PROTOCOL_VERSION,
            driver_version=__version__,
            runtime=self.runtime,
            capabilities=self.capabilities,
            pid=os.getpid(),
            last_acked_source_event_id=self._last_acked,
        )
        await websocket.send(encode(hello))
        frame = await asyncio.wait_for(websocket.recv(), timeout=self.handshake_timeout)
        message = parse_control_message(frame)
        if isinstance(message, Close):
            self._on_close(message)
        if not isinstance(message, Welcome):
            raise _Reconnect(f"expected welcome, got {message.type}")
        self._resume_token = message.resume_token
        self.connections += 1
        log.info(
            "control_welcome",
            extra={"connection_id": message.connection_id, "resumed": self.connections > 1},
        )
        return message

    async def _serve(self, websocket: ClientWebSocket, welcome: Welcome) -> None:
        if welcome.acked_source_event_id:
            # Only that event is dropped; anything older is re-sent and dropped by control.
            self._on_ack([welcome.acked_source_event_id])
        if not self._backend_started:
            if self.on_first_welcome is not None:
                try:
                    await self.on_first_welcome()
                except Exception as error:
                    log.exception("backend_start_failed")
                    with contextlib.suppress(Exception):
                        await websocket.send(
                            encode(
                                Logs(
                                    lines=[
                                        LogLine(
                                            level="error",
                                            message=f"backend failed to start: {error}"[:8192],
                                            at=utc_now(),
                                        )
                                    ]
                                )
                            )
                        )
                    raise BackendStartFailed(f"{type(error).__name__}: {error}") from error
            self._backend_started = True
        await self._send(websocket, encode(self._ready()))
        self._requeue()
        self.connected.set()
        interval = max(MIN_HEARTBEAT_SECONDS, welcome.heartbeat_interval_ms / 1000)
        tasks = {
            asyncio.create_task(self._receive_loop(websocket), name="control-receive"),
            asyncio.create_task(self._send_loop(websocket), name="control-send"),
            asyncio.create_task(
                self._heartbeat_loop(websocket, interval), name="control-heartbeat"
            ),
        }
        stopping = asyncio.create_task(self._stopping.wait())
        try:
            done, _ = await asyncio.wait({*tasks, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if stopping in done:
                await self._flush(SHUTDOWN_FLUSH_SECONDS, tasks)
                return
            for task in done:
                task.result()  # ControlRejected, or the connection's error
            raise _Reconnect("the connection ended")
        finally:
            for task in (*tasks, stopping):
                task.cancel()
            for task in (*tasks, stopping):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _flush(self, timeout: float, tasks: set[asyncio.Task[None]]) -> None:
        """On stop: wait (bounded) until every event is acknowledged and the queue is sent."""
        deadline = time.monotonic() + timeout
        while (self._unacked or self._outgoing) and time.monotonic() < deadline:
            if any(task.done() for task in tasks):
                break
            await asyncio.sleep(0.02)
        if self._unacked:
            log.warning("stopping_with_unacked_events", extra={"count": len(self._unacked)})

    async def _receive_loop(self, websocket: ClientWebSocket) -> None:
        async for frame in websocket:
            try:
                message = parse_control_message(frame)
            except ProtocolError as error:
                log.warning(
                    "control_frame_invalid", extra={"code": error.code, "error": error.message}
                )
                continue
            if isinstance(message, Ack):
                self._on_ack(message.source_event_ids)
                self._batches_in_flight = max(0, self._batches_in_flight - 1)
                self._wakeup.set()
            elif isinstance(message, Command):
                await self._dispatch(message)
            elif isinstance(message, Close):
                self._on_close(message)
            else:
                log.warning("control_unexpected_welcome")

    async def _send_loop(self, websocket: ClientWebSocket) -> None:
        self._batches_in_flight = 0  # a new connection: nothing sent on it awaits an ack
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._outgoing:
                batch = isinstance(self._outgoing[0], str)
                if batch and self._batches_in_flight >= MAX_BATCHES_IN_FLIGHT:
                    break  # its ack wakes this loop; the events meanwhile go in one batch
                frame = self._next_frame()
                if frame is not None:
                    self._batches_in_flight += batch
                    await self._send(websocket, frame)

    async def _heartbeat_loop(self, websocket: ClientWebSocket, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            await self._send(websocket, encode(Heartbeat(at=utc_now())))

    async def _send(self, websocket: ClientWebSocket, frame: str) -> None:
        async with self._send_lock:
            await websocket.send(frame)

    # --- queue -----------------------------------------------------------------------------

    def _queue(self, item: _Outgoing) -> None:
        self._outgoing.append(item)
        self._wakeup.set()

    def _requeue(self) -> None:
        """After a (re)connect: every unacknowledged event first, in order, then the rest."""
        # A `ready` still queued was just said on connecting.
        rest = [item for item in self._outgoing if not isinstance(item, str | _SayReady)]
        self._outgoing = deque([*self._unacked.keys(), *rest])
        self._wakeup.set()

    def _next_frame(self) -> str | None:
        item = self._outgoing.popleft()
        if isinstance(item, CommandUpdate):
            return encode(item)
        if isinstance(item, _SayReady):
            return encode(self._ready())
        if isinstance(item, _FlushLogs):
            lines = [
                self._pending_logs.popleft()
                for _ in range(min(len(self._pending_logs), MAX_LOG_LINES_PER_MESSAGE))
            ]
            if self._pending_logs:
                self._outgoing.append(_FLUSH_LOGS)
            return encode(Logs(lines=lines)) if lines else None
        parts: list[str] = []
        size = 0
        self._outgoing.appendleft(item)
        while (
            self._outgoing
            and isinstance(self._outgoing[0], str)
            and len(parts) < MAX_EVENTS_PER_BATCH
        ):
            encoded = self._unacked.get(self._outgoing[0])
            if encoded is None:  # acknowledged meanwhile
                self._outgoing.popleft()
                continue
            length = len(encoded.encode("utf-8")) + 1
            if parts and size + length > MAX_BATCH_BYTES:
                break
            parts.append(encoded)
            size += length
            self._outgoing.popleft()
        if not parts:
            return None
        return '{"type":"events","events":[' + ",".join(parts) + "]}"

    def _on_ack(self, source_event_ids: list[str]) -> None:
        for source_event_id in source_event_ids:
            if self._unacked.pop(source_event_id, None) is not None:
                self._last_acked = source_event_id

    def _on_close(self, message: Close) -> None:
        if message.code in RECONNECT_CLOSE_CODES:
            raise _Reconnect(f"control asked to reconnect ({message.code})")
        if self._stopping.is_set():
            raise _Reconnect("closed while stopping")
        log.error("control_closed_driver", extra={"code": message.code, "reason": message.reason})
        raise ControlRejected(message.code, message.reason)

    # --- commands --------------------------------------------------------------------------

    async def _dispatch(self, command: Command) -> None:
        if command.command_id in self._command_status:
            last = self._command_status[command.command_id]
            log.info(
                "command_redelivered",
                extra={"command_id": command.command_id, "kind": command.kind},
            )
            if last is not None:
                self._queue(last)
            return
        self._remember_command(command.command_id, None)
        log.info(
            "command_received",
            extra={"command_id": command.command_id, "kind": command.kind, "seq": command.seq},
        )
        if self.on_command is None:
            self.command_update(command.command_id, "failed", error="the driver has no backend")
            return
        try:
            await self.on_command(command)
        except Exception as error:
            log.exception(
                "command_failed", extra={"command_id": command.command_id, "kind": command.kind}
            )
            self.command_update(
                command.command_id, "failed", error=f"{type(error).__name__}: {error}"
            )

    def _remember_command(self, command_id: str, update: CommandUpdate | None) -> None:
        self._command_status[command_id] = update
        self._command_status.move_to_end(command_id)
        while len(self._command_status) > MAX_REMEMBERED_COMMANDS:
            self._command_status.popitem(last=False)


class ControlLogHandler(logging.Handler):
    """Sends the driver's own log records to control as `logs` lines (best effort)."""

    LEVELS = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warning"}

    def __init__(self, connection: ControlConnection, level: int = logging.INFO) -> None:
        super().__init__(level)
        self.connection = connection

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.connection.log_line(self.LEVELS.get(record.levelno, "error"), self.format(record))
        except Exception:
            self.handleError(record)


def _shrunk(event: DriverEvent) -> str:
    """The event with its long strings cut until it fits MAX_EVENT_BYTES."""
    limit = 64 * 1024
    while limit >= 64:
        payload = _truncate_strings(event.payload, limit)
        encoded = event.model_copy(
            update={"payload": {**payload, "truncated": True}}
        ).model_dump_json()
        if len(encoded.encode("utf-8")) <= MAX_EVENT_BYTES:
            return encoded
        limit //= 4
    return event.model_copy(update={"payload": {"truncated": True}}).model_dump_json()


def _truncate_strings(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        return value[:limit] + f"\n[... truncated, {len(value) - limit} characters omitted]"
    if isinstance(value, dict):
        return {key: _truncate_strings(item, limit) for key, item in value.items()}
    if isinstance(value, list):
        return [_truncate_strings(item, limit) for item in value[:1000]]
    return value
