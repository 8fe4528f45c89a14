"""The driver's WebSocket client (RFC 6455): its one connection to control, over control's
Unix socket or TCP (`ws://`, `wss://`).

Why not the `websockets` package: importing it cost a cold driver 20-30 ms of its ~190 ms
start on this kind of machine (its package loads `importlib.metadata`, and with it `email`
and `zipfile`, to spell its version, and `urllib.request` for proxies), and a cold driver's
start is on a pool miss's critical path. The driver needs a small part of it: one client,
text frames, answering pings (uvicorn pings every 20 s and closes a peer that does not
answer), pinging in turn (a control that went silent, over TCP, is noticed within
`ping_interval + ping_timeout`, as the package did by default), the closing handshake, and
refusing what a server must not send. No extensions are offered, so none may come back.

A task reads the socket all the time: pings are answered while the driver is busy elsewhere
(a backend starting can take longer than uvicorn's 20 s), and whole messages wait in a queue
for `recv` (at most `max_queue`; then the task stops reading, and the socket pushes back).
One consumer at a time (`recv`, or `async for`); any number of writers (a frame is one
`write` call, so frames never interleave).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import struct
from types import TracebackType
from typing import NoReturn, Self
from urllib.parse import SplitResult, urlsplit

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONTINUATION, OP_TEXT, OP_BINARY = 0x0, 0x1, 0x2
OP_CLOSE, OP_PING, OP_PONG = 0x8, 0x9, 0xA
_DATA_OPCODES = frozenset({OP_CONTINUATION, OP_TEXT, OP_BINARY})
_CONTROL_OPCODES = frozenset({OP_CLOSE, OP_PING, OP_PONG})

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_NO_STATUS = 1005
CLOSE_ABNORMAL = 1006  # never sent: the connection ended without a close frame
CLOSE_INVALID_DATA = 1007
CLOSE_TOO_BIG = 1009


class WebSocketError(Exception):
    """Anything that ends the connection: the driver reconnects."""


class HandshakeFailed(WebSocketError):
    """Control did not accept the upgrade (an HTTP status, a wrong accept key, an
    extension we did not offer)."""


class ConnectionClosed(WebSocketError):
    """The connection is closed; `code` is the peer's (or 1006 without a close frame)."""

    def __init__(self, code: int, reason: str = "") -> None:
        super().__init__(f"closed ({code}{': ' + reason if reason else ''})")
        self.code = code
        self.reason = reason

    @property
    def normal(self) -> bool:
        return self.code in (CLOSE_NORMAL, CLOSE_GOING_AWAY)


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()


def mask(data: bytes, key: bytes) -> bytes:
    """XOR with the 4-byte key, as one big-integer operation (C speed, no byte loop)."""
    size = len(data)
    if not size:
        return b""
    stream = key * (size // 4) + key[: size % 4]
    return (int.from_bytes(data, "big") ^ int.from_bytes(stream, "big")).to_bytes(size, "big")


def encode_frame(opcode: int, payload: bytes, *, masked: bool = True) -> bytes:
    """One final frame; a client's is masked (RFC 6455 5.3), a server's is not."""
    size = len(payload)
    if size < 126:
        header = struct.pack("!BB", 0x80 | opcode, (0x80 if masked else 0) | size)
    elif size < 1 << 16:
        header = struct.pack("!BBH", 0x80 | opcode, (0x80 if masked else 0) | 126, size)
    else:
        header = struct.pack("!BBQ", 0x80 | opcode, (0x80 if masked else 0) | 127, size)
    if not masked:
        return header + payload
    key = os.urandom(4)
    return header + key + mask(payload, key)


class ClientWebSocket:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_size: int,
        close_timeout: float,
        max_queue: int = 16,
        ping_interval: float | None = 20.0,
        ping_timeout: float = 20.0,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.max_size = max_size
        self.close_timeout = close_timeout
        self.max_queue = max_queue
        self.closed: ConnectionClosed | None = None  # set once the connection is over
        self._close_sent = False
        # Messages, then (last) the ConnectionClosed that ended them.
        self._messages: asyncio.Queue[str | bytes | ConnectionClosed] = asyncio.Queue()
        self._room = asyncio.Event()  # the queue is below max_queue
        self._room.set()
        self._pongs: dict[bytes, asyncio.Future[None]] = {}
        self._reading = asyncio.create_task(self._read_messages(), name="websocket-reader")
        self._keepalive = (
            asyncio.create_task(self._ping_forever(ping_interval, ping_timeout))
            if ping_interval is not None
            else None
        )

    # --- sending -------------------------------------------------------------------------

    async def send(self, message: str | bytes) -> None:
        if self.closed is not None or self._close_sent:
            raise self.closed or ConnectionClosed(CLOSE_ABNORMAL, "closing")
        if isinstance(message, str):
            await self._write(encode_frame(OP_TEXT, message.encode()))
        else:
            await self._write(encode_frame(OP_BINARY, message))

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """The closing handshake: our close frame, then the peer's (the reader discards any
        message still on its way), within `close_timeout`, then the socket."""
        try:
            if self.closed is None:
                await self._send_close(_close_payload(code, reason))
                async with asyncio.timeout(self.close_timeout):
                    self._room.set()  # a full queue must not stop the reader from seeing it
                    await asyncio.shield(self._reading)
        except (OSError, TimeoutError):
            pass
        finally:
            if self.closed is None:
                self._end(code, reason)
            for task in (self._reading, self._keepalive):
                if task is not None:
                    task.cancel()
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()

    async def _write(self, frame: bytes) -> None:
        self._writer.write(frame)
        await self._writer.drain()

    # --- receiving ------------------------------------------------------------------------

    async def recv(self) -> str | bytes:
        """The next whole message. Raises ConnectionClosed once the connection is over (after
        the messages that came before it)."""
        item = await self._messages.get()
        if isinstance(item, ConnectionClosed):
            self._messages.put_nowait(item)  # and to every later call
            raise item
        if self._messages.qsize() < self.max_queue:
            self._room.set()
        return item

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> str | bytes:
        """Messages until the connection closes: normally (1000, 1001) ends the iteration,
        anything else raises."""
        try:
            return await self.recv()
        except ConnectionClosed as closed:
            if closed.normal:
                raise StopAsyncIteration from None
            raise

    async def _read_messages(self) -> None:
        try:
            while True:
                message = await self._read_message()
                if self._close_sent:
                    continue  # closing: only the peer's close frame matters now
                self._messages.put_nowait(message)
                if self._messages.qsize() >= self.max_queue:
                    self._room.clear()
                    await self._room.wait()
        except ConnectionClosed:
            pass
        except OSError as error:  # writing a pong or a close to a socket that is gone
            self._end(CLOSE_ABNORMAL, type(error).__name__)
        finally:  # recv hears of it after the messages before it, however the reader ended
            closed = self._end(CLOSE_ABNORMAL, "the reader stopped")
            self._messages.put_nowait(closed)

    async def _read_message(self) -> str | bytes:
        fragments: list[bytes] = []
        size = 0
        first_opcode: int | None = None
        while True:
            fin, opcode, payload = await self._read_frame()
            if opcode in _CONTROL_OPCODES:
                await self._control_frame(opcode, payload)
                continue
            if (opcode == OP_CONTINUATION) != (first_opcode is not None):
                await self._fail(CLOSE_PROTOCOL_ERROR, "unexpected continuation frame")
            if first_opcode is None:
                first_opcode = opcode
            size += len(payload)
            if size > self.max_size:
                await self._fail(CLOSE_TOO_BIG, f"message over {self.max_size} bytes")
            fragments.append(payload)
            if fin:
                break
        data = b"".join(fragments)
        if first_opcode == OP_BINARY:
            return data
        try:
            return data.decode()
        except UnicodeDecodeError:
            await self._fail(CLOSE_INVALID_DATA, "a text message that is not UTF-8")

    async def _ping_forever(self, interval: float, timeout: float) -> None:
        """A ping every `interval`; a pong not back within `timeout` ends the connection."""
        while True:
            await asyncio.sleep(interval)
            if self.closed is not None or self._close_sent:
                return
            payload = os.urandom(4)
            pong = self._pongs[payload] = asyncio.get_running_loop().create_future()
            try:
                await self._write(encode_frame(OP_PING, payload))
                await asyncio.wait_for(pong, timeout)
            except TimeoutError:
                self._end(CLOSE_ABNORMAL, "keepalive ping timeout")  # the reader sees the end
                return
            except OSError:
                return
            finally:
                self._pongs.pop(payload, None)

    async def _read_frame(self) -> tuple[bool, int, bytes]:
        try:
            first, second = await self._reader.readexactly(2)
            if first & 0x70:
                await self._fail(CLOSE_PROTOCOL_ERROR, "reserved bits set (no extension)")
            if second & 0x80:
                await self._fail(CLOSE_PROTOCOL_ERROR, "a masked frame from the server")
            fin, opcode, size = bool(first & 0x80), first & 0x0F, second & 0x7F
            if opcode not in _DATA_OPCODES and opcode not in _CONTROL_OPCODES:
                await self._fail(CLOSE_PROTOCOL_ERROR, f"unknown opcode {opcode}")
            if opcode in _CONTROL_OPCODES and (not fin or size > 125):
                await self._fail(CLOSE_PROTOCOL_ERROR, "a fragmented or long control frame")
            if size == 126:
                (size,) = struct.unpack("!H", await self._reader.readexactly(2))
            elif size == 127:
                (size,) = struct.unpack("!Q", await self._reader.readexactly(8))
            if size > self.max_size:
                await self._fail(CLOSE_TOO_BIG, f"a frame over {self.max_size} bytes")
            payload = await self._reader.readexactly(size) if size else b""
        except (asyncio.IncompleteReadError, ConnectionError) as error:
            raise self._end(CLOSE_ABNORMAL, "no close frame") from error
        return fin, opcode, payload

    async def _control_frame(self, opcode: int, payload: bytes) -> None:
        if opcode == OP_PING:
            if not self._close_sent:
                await self._write(encode_frame(OP_PONG, payload))
        elif opcode == OP_CLOSE:
            code, reason = _parse_close(payload)
            await self._send_close(payload[:2])  # echoed (RFC 6455 5.5.1), then the socket goes
            raise self._end(code, reason)
        elif opcode == OP_PONG:  # one of ours (an unasked one is allowed, and ignored)
            waiter = self._pongs.get(payload)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def _fail(self, code: int, reason: str) -> NoReturn:
        """A server that broke the protocol: tell it why, close, raise."""
        await self._send_close(_close_payload(code, reason))
        raise self._end(code, reason)

    async def _send_close(self, payload: bytes) -> None:
        """Our close frame, once per connection (a peer that is gone does not need it)."""
        if self._close_sent:
            return
        self._close_sent = True
        with contextlib.suppress(OSError):
            await self._write(encode_frame(OP_CLOSE, payload))

    def _end(self, code: int, reason: str) -> ConnectionClosed:
        """The connection is over; the first reason given is the one that stays."""
        if self.closed is None:
            self.closed = ConnectionClosed(code, reason)
        self._writer.close()
        return self.closed


def _close_payload(code: int, reason: str) -> bytes:
    return struct.pack("!H", code) + reason.encode()[:123]


def _parse_close(payload: bytes) -> tuple[int, str]:
    if len(payload) < 2:
        return CLOSE_NO_STATUS, ""
    (code,) = struct.unpack("!H", payload[:2])
    return code, payload[2:].decode(errors="replace")


class connect:
    """`async with connect(url) as websocket:`. `url` is `ws://` or `wss://`; with
    `unix_path` the connection goes to that socket and `url` gives only the path and Host."""

    def __init__(
        self,
        url: str,
        *,
        unix_path: str | None = None,
        max_size: int = 1024 * 1024,
        open_timeout: float = 10.0,
        close_timeout: float = 2.0,
        max_queue: int = 16,
        ping_interval: float | None = 20.0,
        ping_timeout: float = 20.0,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("ws", "wss") or not parts.hostname:
            raise ValueError(f"not a ws:// or wss:// URL: {url!r}")
        self.parts = parts
        self.unix_path = unix_path
        self.max_size = max_size
        self.open_timeout = open_timeout
        self.close_timeout = close_timeout
        self.max_queue = max_queue
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self.websocket: ClientWebSocket | None = None

    async def __aenter__(self) -> ClientWebSocket:
        async with asyncio.timeout(self.open_timeout):
            reader, writer = await self._open()
            try:
                await _handshake(reader, writer, self.parts)
            except BaseException:
                writer.close()
                raise
        self.websocket = ClientWebSocket(
            reader,
            writer,
            max_size=self.max_size,
            close_timeout=self.close_timeout,
            max_queue=self.max_queue,
            ping_interval=self.ping_interval,
            ping_timeout=self.ping_timeout,
        )
        return self.websocket

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.websocket is not None:
            await self.websocket.close()

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.unix_path is not None:
            return await asyncio.open_unix_connection(self.unix_path)
        secure = self.parts.scheme == "wss"
        port = self.parts.port or (443 if secure else 80)
        if secure:
            import ssl  # asyncio has it loaded already; only wss needs a context

            return await asyncio.open_connection(
                self.parts.hostname, port, ssl=ssl.create_default_context()
            )
        return await asyncio.open_connection(self.parts.hostname, port)


async def _handshake(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, parts: SplitResult
) -> None:
    key = base64.b64encode(os.urandom(16)).decode()
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    request = (
        f"GET {target} HTTP/1.1\r\n"
        f"Host: {parts.netloc}\r\n"
        "Upgrade: websocket\r\n"
        "Connection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\n"
        "Sec-WebSocket-Version: 13\r\n"
        "\r\n"
    )
    writer.write(request.encode())
    await writer.drain()
    try:
        head = (await reader.readuntil(b"\r\n\r\n"))[:-4]
    except asyncio.IncompleteReadError:
        raise HandshakeFailed("the connection closed during the handshake") from None
    except asyncio.LimitOverrunError:
        raise HandshakeFailed("a handshake response over the reader's limit") from None
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    fields = status_line.split(" ", 2)
    if len(fields) < 2 or not fields[0].startswith("HTTP/1."):
        raise HandshakeFailed(f"not an HTTP response: {status_line[:80]!r}")
    if fields[1] != "101":
        raise HandshakeFailed(f"control answered HTTP {fields[1]}, not 101")
    headers: dict[str, str] = {}
    for line in header_lines:
        name, separator, value = line.partition(":")
        if not separator:
            raise HandshakeFailed(f"a malformed header line: {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    if headers.get("upgrade", "").lower() != "websocket":
        raise HandshakeFailed("the response does not upgrade to websocket")
    if "upgrade" not in {t.strip().lower() for t in headers.get("connection", "").split(",")}:
        raise HandshakeFailed("the response's Connection header lacks upgrade")
    if headers.get("sec-websocket-accept") != accept_key(key):
        raise HandshakeFailed("wrong Sec-WebSocket-Accept")
    if headers.get("sec-websocket-extensions"):
        raise HandshakeFailed("the server chose an extension we did not offer")
