"""The driver's WebSocket client (driver/websocket.py).

Against the `websockets` package's server, an implementation we did not write (uvicorn,
control's own server, is the peer of tests/driver/test_connection.py), and against a raw
socket server for what a well-behaved server never sends.
"""

from __future__ import annotations

import asyncio
import base64
import os
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from websockets.asyncio.server import ServerConnection, serve, unix_serve

from driver.websocket import (
    CLOSE_INVALID_DATA,
    CLOSE_PROTOCOL_ERROR,
    CLOSE_TOO_BIG,
    OP_BINARY,
    OP_CLOSE,
    OP_CONTINUATION,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    ConnectionClosed,
    HandshakeFailed,
    accept_key,
    connect,
    encode_frame,
    mask,
)

URL = "ws://control/driver/socket"
Handler = Callable[[ServerConnection], Awaitable[None]]


@asynccontextmanager
async def library_server(socket_dir: Path, handler: Handler) -> AsyncIterator[str]:
    path = str(socket_dir / "ws.sock")
    async with unix_serve(handler, path, compression=None, ping_interval=None):
        yield path


def test_mask_is_its_own_inverse_and_matches_the_byte_loop() -> None:
    key = b"\x01\x80\xfe\x7f"
    for size in [*range(10), 125, 126, 65_536, 1 << 20]:
        data = os.urandom(size)
        masked = mask(data, key)
        assert masked == bytes(b ^ key[i % 4] for i, b in enumerate(data))
        assert mask(masked, key) == data


async def test_messages_both_ways_with_every_length_encoding(socket_dir: Path) -> None:
    seen_paths: list[str] = []

    async def echo(connection: ServerConnection) -> None:
        assert connection.request is not None
        seen_paths.append(connection.request.path)
        async for message in connection:
            await connection.send(message)

    sizes = [0, 1, 125, 126, 65_535, 65_536, 300_000]
    async with library_server(socket_dir, echo) as path, connect(URL, unix_path=path) as ws:
        for size in sizes:
            text = "é" * (size // 2) + "x" * (size % 2)
            await ws.send(text)
            assert await ws.recv() == text
        await ws.send(b"\x00\xff")
        assert await ws.recv() == b"\x00\xff"
    assert seen_paths == ["/driver/socket"]


async def test_over_tcp_the_url_gives_host_port_and_path() -> None:
    """A driver on another Docker host dials control's TCP endpoint (`ws://host:port/...`)."""
    seen: list[tuple[str, str | None]] = []

    async def echo(connection: ServerConnection) -> None:
        assert connection.request is not None
        seen.append((connection.request.path, connection.request.headers.get("Host")))
        await connection.send(await connection.recv())

    async with serve(echo, "127.0.0.1", 0, compression=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        url = f"ws://127.0.0.1:{port}/prefix/driver/socket?v=2"
        async with connect(url) as ws:
            await ws.send("over tcp")
            assert await ws.recv() == "over tcp"
    assert seen == [("/prefix/driver/socket?v=2", f"127.0.0.1:{port}")]


def test_only_websocket_urls_are_dialed() -> None:
    for url in ("http://control/driver/socket", "unix:///run/control.sock", "ws:///no-host"):
        with pytest.raises(ValueError, match="not a ws"):
            connect(url)


async def test_a_fragmented_message_is_put_back_together(socket_dir: Path) -> None:
    async def fragments(connection: ServerConnection) -> None:
        await connection.send(["one ", "two ", "three"])  # three frames, one message
        await connection.send("after")
        await connection.wait_closed()

    async with library_server(socket_dir, fragments) as path, connect(URL, unix_path=path) as ws:
        assert await ws.recv() == "one two three"
        assert await ws.recv() == "after"


async def test_pings_are_answered(socket_dir: Path) -> None:
    """uvicorn pings its peers every 20 s and closes one that does not answer."""
    answered = asyncio.Event()

    async def pinger(connection: ServerConnection) -> None:
        pong = await connection.ping(b"are you there")
        await asyncio.wait_for(pong, timeout=5)
        answered.set()
        await connection.send("done")
        await connection.wait_closed()

    async with library_server(socket_dir, pinger) as path, connect(URL, unix_path=path) as ws:
        assert await ws.recv() == "done"  # recv answered the ping on its way
    assert answered.is_set()


async def test_a_normal_close_ends_iteration_and_any_other_raises(socket_dir: Path) -> None:
    async def closer(connection: ServerConnection) -> None:
        assert connection.request is not None
        code = int(connection.request.path.rsplit("/", 1)[1])
        await connection.send("last")
        await connection.close(code, "bye")

    async with library_server(socket_dir, closer) as path:
        async with connect("ws://control/close/1000", unix_path=path) as ws:
            assert [message async for message in ws] == ["last"]
            assert ws.closed is not None and ws.closed.code == 1000
            with pytest.raises(ConnectionClosed):
                await ws.send("too late")
        async with connect("ws://control/close/1011", unix_path=path) as ws:
            received: list[str | bytes] = []
            with pytest.raises(ConnectionClosed) as closed:
                async for message in ws:
                    received.append(message)
            assert received == ["last"]
            assert (closed.value.code, closed.value.reason) == (1011, "bye")


async def test_our_close_is_a_clean_handshake(socket_dir: Path) -> None:
    codes: list[int | None] = []

    async def record(connection: ServerConnection) -> None:
        await connection.wait_closed()
        codes.append(connection.close_code)  # the code of the close frame it received

    async with library_server(socket_dir, record) as path:
        async with connect(URL, unix_path=path) as ws:
            await ws.send("hello")
        await asyncio.sleep(0.05)
    assert codes == [1000]


# --- a raw server: what a well-behaved one never sends -----------------------------------


class RawServer:
    """Answers the upgrade as told, then sends the given bytes and records what comes back."""

    def __init__(self, socket_dir: Path, response: Callable[[str], bytes], then: bytes) -> None:
        self.path = str(socket_dir / "raw.sock")
        self.response = response
        self.then = then
        self.received = b""
        self.done = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        key = next(
            line.split(":", 1)[1].strip()
            for line in head.split("\r\n")
            if line.lower().startswith("sec-websocket-key:")
        )
        writer.write(self.response(key) + self.then)
        await writer.drain()
        try:
            while chunk := await asyncio.wait_for(reader.read(65_536), timeout=2):
                self.received += chunk
        except TimeoutError:
            pass
        writer.close()
        self.done.set()

    async def close_code_received(self) -> int:
        """The code of the close frame the client sent (masked, as a client's must be)."""
        await asyncio.wait_for(self.done.wait(), timeout=5)
        first, second = self.received[0], self.received[1]
        assert first == 0x80 | OP_CLOSE and second & 0x80
        key, payload = self.received[2:6], self.received[6 : 6 + (second & 0x7F)]
        return int(struct.unpack("!H", mask(payload, key)[:2])[0])


def upgrade(key: str, extra: str = "") -> bytes:
    return (
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept_key(key)}\r\n{extra}\r\n"
    ).encode()


@asynccontextmanager
async def raw_server(
    socket_dir: Path, then: bytes = b"", response: Callable[[str], bytes] = upgrade
) -> AsyncIterator[RawServer]:
    server = RawServer(socket_dir, response, then)
    listener = await asyncio.start_unix_server(server.handle, server.path)
    async with listener:
        yield server


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (lambda key: b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n", "HTTP 403"),
        (
            lambda key: upgrade(base64.b64encode(b"another key 1234").decode()),
            "Sec-WebSocket-Accept",
        ),
        (lambda key: upgrade(key, "Sec-WebSocket-Extensions: permessage-deflate\r\n"), "ext"),
        (lambda key: b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP response"),
        (lambda key: b"HTTP/1.1 101 Switching Protocols\r\n", "closed during the handshake"),
    ],
)
async def test_a_refused_or_wrong_upgrade_fails_the_handshake(
    socket_dir: Path, response: Callable[[str], bytes], error: str
) -> None:
    async with raw_server(socket_dir, response=response) as server:
        with pytest.raises(HandshakeFailed, match=error):
            async with connect(URL, unix_path=server.path, open_timeout=5):
                pass


def frame(first: int, payload: bytes, *, masked_with: bytes | None = None) -> bytes:
    """A server frame built by hand: `first` is FIN, RSV and opcode as one byte."""
    size = len(payload)
    length = struct.pack("!B", size) if size < 126 else struct.pack("!BH", 126, size)
    if masked_with is None:
        return bytes([first]) + length + payload
    return bytes([first, 0x80 | length[0]]) + length[1:] + masked_with + mask(payload, masked_with)


@pytest.mark.parametrize(
    ("then", "code"),
    [
        (frame(0x80 | OP_TEXT, b"hi", masked_with=b"abcd"), CLOSE_PROTOCOL_ERROR),
        (frame(0x80 | 0x40 | OP_TEXT, b"compressed?"), CLOSE_PROTOCOL_ERROR),
        (frame(0x80 | 0x3, b"reserved opcode"), CLOSE_PROTOCOL_ERROR),
        (frame(0x80 | OP_CONTINUATION, b"nothing to continue"), CLOSE_PROTOCOL_ERROR),
        (frame(OP_TEXT, b"a") + frame(0x80 | OP_TEXT, b"b"), CLOSE_PROTOCOL_ERROR),
        (frame(OP_PING, b"fragmented ping"), CLOSE_PROTOCOL_ERROR),
        (frame(0x80 | OP_TEXT, b"\xff\xfe not utf-8"), CLOSE_INVALID_DATA),
        # Announces 2 GiB: refused from the header, before any of it is read.
        (bytes([0x80 | OP_TEXT, 127]) + struct.pack("!Q", 1 << 31), CLOSE_TOO_BIG),
        (frame(OP_TEXT, b"x" * 600) + frame(0x80 | OP_CONTINUATION, b"y" * 600), CLOSE_TOO_BIG),
    ],
)
async def test_a_server_that_breaks_the_protocol_is_closed_with_the_reason(
    socket_dir: Path, then: bytes, code: int
) -> None:
    async with raw_server(socket_dir, then=then) as server:
        async with connect(URL, unix_path=server.path, max_size=1000) as ws:
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
            assert closed.value.code == code
        assert await server.close_code_received() == code


async def test_a_connection_that_ends_without_a_close_frame_is_abnormal(
    socket_dir: Path,
) -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        key = head.split("Sec-WebSocket-Key: ", 1)[1].split("\r\n", 1)[0]
        writer.write(upgrade(key) + frame(0x80 | OP_TEXT, b"one"))
        await writer.drain()
        writer.close()

    path = str(socket_dir / "hangup.sock")
    listener = await asyncio.start_unix_server(hang_up, path)
    async with listener, connect(URL, unix_path=path) as ws:
        received: list[str | bytes] = []
        with pytest.raises(ConnectionClosed) as closed:
            async for message in ws:  # not a normal close: iteration raises
                received.append(message)
        assert received == ["one"]
        assert closed.value.code == 1006


async def test_control_frames_between_fragments_and_unsolicited_pongs(socket_dir: Path) -> None:
    then = (
        frame(OP_TEXT, b"he")
        + frame(0x80 | OP_PING, b"p1")
        + frame(0x80 | OP_PONG, b"unasked")
        + frame(0x80 | OP_CONTINUATION, b"llo")
        + frame(0x80 | OP_BINARY, b"\x01")
    )
    async with raw_server(socket_dir, then=then) as server:
        async with connect(URL, unix_path=server.path) as ws:
            assert await ws.recv() == "hello"
            assert await ws.recv() == b"\x01"
        await asyncio.wait_for(server.done.wait(), timeout=5)
        pong = server.received[: 2 + 4 + 2]
        assert pong[0] == 0x80 | OP_PONG and pong[1] == 0x80 | 2
        assert mask(pong[6:8], pong[2:6]) == b"p1"


def test_a_client_frame_is_masked_with_a_fresh_key() -> None:
    one, two = encode_frame(OP_TEXT, b"same"), encode_frame(OP_TEXT, b"same")
    assert one[1] & 0x80 and one[2:6] != two[2:6]
    assert mask(one[6:], one[2:6]) == b"same"


def test_the_accept_key_is_rfc_6455s() -> None:
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # its 1.3


async def test_pings_are_answered_while_nobody_reads(socket_dir: Path) -> None:
    """A driver busy starting its backend (longer than uvicorn's 20 s ping timeout, at
    times) must not lose its connection for it."""
    answered = asyncio.Event()

    async def pinger(connection: ServerConnection) -> None:
        await asyncio.wait_for(await connection.ping(b"busy?"), timeout=5)
        answered.set()
        await connection.wait_closed()

    async with library_server(socket_dir, pinger) as path, connect(URL, unix_path=path):
        await asyncio.wait_for(answered.wait(), timeout=5)  # no recv meanwhile


async def test_a_silent_server_is_noticed_by_the_keepalive(socket_dir: Path) -> None:
    async with raw_server(socket_dir) as server:  # upgrades, then never answers a ping
        async with connect(URL, unix_path=server.path, ping_interval=0.05, ping_timeout=0.1) as ws:
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), timeout=5)
            assert (closed.value.code, closed.value.reason) == (1006, "keepalive ping timeout")
        await asyncio.wait_for(server.done.wait(), timeout=5)
        assert server.received[0] == 0x80 | OP_PING  # what it sent, unanswered


async def test_a_full_queue_holds_the_socket_back_and_loses_nothing(socket_dir: Path) -> None:
    async def burst(connection: ServerConnection) -> None:
        for number in range(50):
            await connection.send(str(number))
        await connection.wait_closed()

    async with (
        library_server(socket_dir, burst) as path,
        connect(URL, unix_path=path, max_queue=4) as ws,
    ):
        await asyncio.sleep(0.2)  # the reader stops at four
        assert ws._messages.qsize() == 4
        assert [await ws.recv() for _ in range(50)] == [str(n) for n in range(50)]


async def test_after_close_recv_raises_even_when_the_peer_never_answered(
    socket_dir: Path,
) -> None:
    async with raw_server(socket_dir) as server:  # never sends its close frame
        async with connect(URL, unix_path=server.path, close_timeout=0.1) as ws:
            pass
        assert ws.closed is not None and ws.closed.code == 1000
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), timeout=2)
        with pytest.raises(ConnectionClosed):
            await ws.send("too late")
