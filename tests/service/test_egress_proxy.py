"""The egress proxy against real loopback servers and real sockets: what an allowed request
does, and every way a sandbox might try to get past a `limited` policy.

Upstreams live on 127.0.0.1, so allowed paths use the test-only `allow_loopback` policy;
each refusal is shown with the reason the proxy recorded and, where it matters, with proof
that the upstream saw no connection. httpx reaches the proxy the way a sandbox's tools do:
through a loopback forwarder that writes the `MOSOO-EGRESS <token>` preamble first.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self
from urllib.parse import parse_qs

import h11
import httpx
import pytest

from mosoo_core.network import (
    EgressContext,
    EgressPolicy,
    EgressProxy,
    NetworkDecision,
)
from tests.support.certificates import Certificate, self_signed

TOKEN = "run-token-for-tests"
RUN_ID, THREAD_ID = "run_1", "thread_1"


# --- real upstream servers ------------------------------------------------------------------


@dataclass
class SeenRequest:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


class _LoopbackServer:
    """A server on 127.0.0.1 at a free port; subclasses answer in `_handle`."""

    context: ssl.SSLContext | None = None

    def __init__(self) -> None:
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> Self:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError  # each server answers in its own way


class HttpUpstream(_LoopbackServer):
    """A loopback HTTP/1.1 server with a few routes; counts connections, keeps requests."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[SeenRequest] = []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection = h11.Connection(h11.SERVER)
        try:
            while True:
                request, body = await self._read_request(connection, reader)
                if request is None:
                    return
                seen = SeenRequest(
                    request.method.decode(),
                    request.target.decode(),
                    {n.decode(): v.decode() for n, v in request.headers},
                    body,
                )
                self.requests.append(seen)
                if not await self._respond(connection, writer, seen):
                    return
                if connection.our_state is not h11.DONE:
                    return
                connection.start_next_cycle()
        except (ConnectionError, h11.ProtocolError):
            pass
        finally:
            writer.close()

    async def _read_request(
        self, connection: h11.Connection, reader: asyncio.StreamReader
    ) -> tuple[h11.Request | None, bytes]:
        request: h11.Request | None = None
        body = b""
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return request, body
            else:
                return None, b""

    async def _respond(
        self, connection: h11.Connection, writer: asyncio.StreamWriter, seen: SeenRequest
    ) -> bool:
        path, _, query = seen.target.partition("?")
        if path == "/until-close":
            # HTTP/1.0 style: no length, the body ends when the connection does.
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nstreamed until close")
            await writer.drain()
            return False
        status, headers, chunks = 200, [("content-type", "text/plain")], [b"hello"]
        if path == "/chunked":
            chunks = [b"chunk-one,", b"chunk-two"]
        elif path == "/echo":
            chunks = [seen.body]
        elif path == "/redirect":
            status, chunks = 302, []
            headers.append(("location", parse_qs(query)["to"][0]))
        if path != "/chunked":
            headers.append(("content-length", str(sum(len(c) for c in chunks))))
        if seen.method == "HEAD":
            chunks = []
        send = connection.send
        writer.write(send(h11.Response(status_code=status, headers=headers)) or b"")
        for chunk in chunks:
            writer.write(send(h11.Data(data=chunk)) or b"")
        writer.write(send(h11.EndOfMessage()) or b"")
        await writer.drain()
        return True


class ByteSink(_LoopbackServer):
    """A loopback TCP server that only counts what reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.received = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        while data := await reader.read(65536):
            self.received += len(data)
        writer.close()


class TlsUpstream(_LoopbackServer):
    """A loopback HTTPS server: answers `secure` to one request per connection."""

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__()
        self.context = context
        self.handshakes = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handshakes += 1  # asyncio calls us only once the handshake is done
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nsecure")
            await writer.drain()
        writer.close()


# --- the proxy, and a forwarder like the sandbox's ------------------------------------------


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()


@dataclass
class Egress:
    proxy: EgressProxy
    port: int
    forwarder_port: int
    decisions: list[NetworkDecision]
    tokens: list[str]

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.forwarder_port}"

    def client(self, **options: object) -> httpx.AsyncClient:
        return httpx.AsyncClient(proxy=self.proxy_url, trust_env=False, timeout=10, **options)

    async def wait_for_decisions(self, count: int) -> list[NetworkDecision]:
        # A tunnel is recorded when it ends, which can trail the client's last read.
        async with asyncio.timeout(5):
            while len(self.decisions) < count:
                await asyncio.sleep(0.01)
        return self.decisions

    async def open(self, preamble: bytes | None = None) -> Raw:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(f"MOSOO-EGRESS {TOKEN}\r\n".encode() if preamble is None else preamble)
        return Raw(reader, writer)


StartEgress = Callable[..., Awaitable[Egress]]


@pytest.fixture
async def start_egress() -> AsyncIterator[StartEgress]:
    """Start a proxy for one policy (and a preamble-writing forwarder in front of it)."""
    stack = contextlib.AsyncExitStack()

    async def start(
        entries: list[str],
        *,
        allow_loopback: bool = True,
        resolve: Callable[[str, int], Awaitable[list[str]]] | None = None,
        **options: float,
    ) -> Egress:
        policy = EgressPolicy.from_entries(entries, allow_loopback=allow_loopback)
        decisions: list[NetworkDecision] = []
        tokens: list[str] = []

        async def authenticate(token: str) -> EgressContext | None:
            tokens.append(token)
            return EgressContext(policy, RUN_ID, THREAD_ID) if token == TOKEN else None

        async def record(decision: NetworkDecision) -> None:
            decisions.append(decision)

        proxy = EgressProxy(authenticate, record, resolve, **options)
        server = await proxy.serve_tcp("127.0.0.1", 0)
        stack.push_async_callback(proxy.close)
        port = server.sockets[0].getsockname()[1]

        async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
            up_writer.write(f"MOSOO-EGRESS {TOKEN}\r\n".encode())
            # Ended by the proxy's close at teardown: quietly (3.11 logs a cancelled handler).
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            writer.close()
            up_writer.close()

        forwarder = await asyncio.start_server(forward, "127.0.0.1", 0)
        stack.callback(forwarder.close)
        return Egress(proxy, port, forwarder.sockets[0].getsockname()[1], decisions, tokens)

    yield start
    await stack.aclose()


@pytest.fixture
async def upstream() -> AsyncIterator[HttpUpstream]:
    server = await HttpUpstream().start()
    yield server
    await server.close()


@pytest.fixture
async def other_upstream() -> AsyncIterator[HttpUpstream]:
    server = await HttpUpstream().start()
    yield server
    await server.close()


@pytest.fixture(scope="module")
def certificate() -> Certificate:
    return self_signed("localhost", "alt.test")


@pytest.fixture
async def tls_upstream(certificate: Certificate, tmp_path: Path) -> AsyncIterator[TlsUpstream]:
    server = await TlsUpstream(certificate.server_context(tmp_path)).start()
    yield server
    await server.close()


@pytest.fixture
async def sink() -> AsyncIterator[ByteSink]:
    server = await ByteSink().start()
    yield server
    await server.close()


def static_resolver(table: dict[str, list[str]]) -> Callable[[str, int], Awaitable[list[str]]]:
    async def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "not in the test's table")
        return table[host]

    return resolve


# --- raw clients ----------------------------------------------------------------------------


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class Raw:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    buffered: bytes = field(default=b"")

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def response(self) -> Response:
        """One response with a Content-Length body (all the proxy's own answers have one)."""
        async with asyncio.timeout(5):
            head = await self.reader.readuntil(b"\r\n\r\n")
            status_line, *lines = head.decode("latin-1").split("\r\n")
            headers = {
                k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines if ln)
            }
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return Response(int(status_line.split()[1]), headers, body)

    async def closed(self) -> bool:
        """True once the peer has closed, without sending anything more."""
        async with asyncio.timeout(5):
            with contextlib.suppress(ConnectionError):
                return await self.reader.read(65536) == b""
        return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


def get(url: str, host: str = "ignored.example", extra: str = "") -> bytes:
    return f"GET {url} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode()


def connect(authority: str) -> bytes:
    return f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode()


def client_hello(server_hostname: str | None) -> bytes:
    """The first flight a real TLS client sends for `server_hostname` (None: no SNI)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    outgoing = ssl.MemoryBIO()
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname=server_hostname)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def refragment(flight: bytes, size: int) -> list[bytes]:
    """The first TLS record re-cut into records of `size` payload bytes."""
    length = int.from_bytes(flight[3:5], "big")
    payload, rest = flight[5 : 5 + length], flight[5 + length :]
    records = [
        flight[:3] + len(payload[i : i + size]).to_bytes(2, "big") + payload[i : i + size]
        for i in range(0, len(payload), size)
    ]
    return [*records[:-1], records[-1] + rest]


async def tls_request(
    raw: Raw,
    hostname: str,
    context: ssl.SSLContext,
    cut_first_flight: Callable[[bytes], list[bytes]] | None = None,
) -> bytes:
    """A whole HTTPS request over an open tunnel, TLS done by hand (MemoryBIO) so the first
    flight can be cut up; returns the decrypted response."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=hostname)
    first = True
    async with asyncio.timeout(10):
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                data = outgoing.read()
                pieces = cut_first_flight(data) if first and cut_first_flight else [data]
                for piece in pieces:
                    await raw.send(piece)
                    if len(pieces) > 1:
                        await asyncio.sleep(0.02)  # separate TCP reads on the proxy's side
                first = False
                incoming.write(await raw.reader.read(65536))
        await raw.send(outgoing.read())  # the client's Finished
        tls.write(b"GET / HTTP/1.1\r\nHost: " + hostname.encode() + b"\r\n\r\n")
        await raw.send(outgoing.read())
        answer = b""
        while b"secure" not in answer:
            chunk = await raw.reader.read(65536)
            if not chunk:
                break
            incoming.write(chunk)
            with contextlib.suppress(ssl.SSLWantReadError):
                answer += tls.read(65536)
    return answer


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --- allowed traffic ------------------------------------------------------------------------


async def test_an_allowed_http_request_is_forwarded_in_origin_form_and_recorded(
    start_egress: StartEgress, upstream: HttpUpstream
) -> None:
    egress = await start_egress([f"localhost:{upstream.port}"])
    async with egress.client() as client:
        response = await client.get(
            f"http://localhost:{upstream.port}/hello?q=1",
            headers={"Proxy-Authorization": "Basic c2VjcmV0", "X-Custom": "kept"},
        )
    assert response.status_code == 200
    assert response.text == "hello"
    [seen] = upstream.requests
    assert seen.target == "/hello?q=1"
    assert seen.headers["host"] == f"localhost:{upstream.port}"
    assert seen.headers["x-custom"] == "kept"
    assert not [name for name in seen.headers if name.startswith("proxy-")]
    [decision] = await egress.wait_for_decisions(1)
    assert (decision.host, decision.port, decision.method) == ("localhost", upstream.port, "GET")
    assert (decision.allowed, decision.reason, decision.status) == (True, "allowed", 200)
    assert (decision.run_id, decision.thread_id) == (RUN_ID, THREAD_ID)
    assert decision.bytes_sent > 0
    assert decision.bytes_received > 0
    assert decision.address in ("127.0.0.1", "::1")
    assert egress.tokens == [TOKEN]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/chunked", b"chunk-one,chunk-two"),
        ("/until-close", b"streamed until close"),
        ("/hello", b"hello"),
    ],
)
async def test_every_response_framing_streams_back(
    start_egress: StartEgress, upstream: HttpUpstream, path: str, body: bytes
) -> None:
    egress = await start_egress([f"localhost:{upstream.port}"])
    async with egress.client() as client:
        response = await client.get(f"http://localhost:{upstream.port}{path}")
    assert response.status_code == 200
    assert response.content == body


async def test_request_bodies_go_upstream_with_their_length_or_chunked(
    start_egress: StartEgress, upstream: HttpUpstream
) -> None:
    egress = await start_egress([f"localhost:{upstream.port}"])

    async def chunks() -> AsyncIterator[bytes]:
        yield b"part-one,"
        yield b"part-two"

    async with egress.client() as client:
        sized = await client.post(f"http://localhost:{upstream.port}/echo", content=b"x" * 100_000)
        chunked = await client.post(f"http://localhost:{upstream.port}/echo", content=chunks())
    assert sized.content == b"x" * 100_000
    assert chunked.content == b"part-one,part-two"
    assert upstream.requests[1].headers.get("transfer-encoding") == "chunked"
    assert (await egress.wait_for_decisions(2))[0].bytes_sent > 100_000


async def test_a_head_request_gets_the_head_only_and_the_connection_stays_usable(
    start_egress: StartEgress, upstream: HttpUpstream
) -> None:
    egress = await start_egress([f"localhost:{upstream.port}"])
    raw = await egress.open()
    await raw.send(
        f"HEAD http://localhost:{upstream.port}/hello HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    )
    head = await raw.reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"content-length: 5" in head
    await raw.send(get(f"http://localhost:{upstream.port}/hello"))
    assert (await raw.response()).body == b"hello"
    await raw.close()


async def test_a_client_expecting_100_continue_is_invited_and_its_body_forwarded(
    start_egress: StartEgress, upstream: HttpUpstream
) -> None:
    egress = await start_egress([f"localhost:{upstream.port}"])
    raw = await egress.open()
    await raw.send(
        f"POST http://localhost:{upstream.port}/echo HTTP/1.1\r\nHost: x\r\n"
        "Expect: 100-continue\r\nContent-Length: 4\r\n\r\n".encode()
    )
    async with asyncio.timeout(5):
        assert (await raw.reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 100")
    await raw.send(b"ping")
    assert (await raw.response()).body == b"ping"
    assert "expect" not in upstream.requests[0].headers
    await raw.close()


async def test_an_allowed_https_request_tunnels_through_connect(
    start_egress: StartEgress, tls_upstream: TlsUpstream, certificate: Certificate
) -> None:
    egress = await start_egress([f"localhost:{tls_upstream.port}"])
    async with egress.client(verify=certificate.client_context()) as client:
        response = await client.get(f"https://localhost:{tls_upstream.port}/")
    assert response.status_code == 200
    assert response.text == "secure"
    [decision] = await egress.wait_for_decisions(1)
    assert (decision.method, decision.allowed, decision.reason) == ("CONNECT", True, "allowed")
    assert decision.host == "localhost"
    assert decision.bytes_sent > 0
    assert decision.bytes_received > 0


async def test_a_client_hello_split_over_records_and_reads_still_tunnels(
    start_egress: StartEgress, tls_upstream: TlsUpstream, certificate: Certificate
) -> None:
    egress = await start_egress([f"localhost:{tls_upstream.port}"])
    raw = await egress.open()
    await raw.send(connect(f"localhost:{tls_upstream.port}"))
    assert (await raw.response()).status == 200
    # A real handshake whose first flight is cut into 40-byte records, sent in pieces.
    cuts: list[int] = []

    def cut(flight: bytes) -> list[bytes]:
        pieces = refragment(flight, 40)
        cuts.append(len(pieces))
        return pieces

    answer = await tls_request(raw, "localhost", certificate.client_context(), cut)
    assert b"secure" in answer
    assert cuts[0] > 3
    await raw.close()
    [decision] = await egress.wait_for_decisions(1)
    assert decision.reason == "allowed"


def _first_flight(context: ssl.SSLContext, hostname: str) -> bytes:
    outgoing = ssl.MemoryBIO()
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname=hostname)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


async def test_the_proxy_serves_a_unix_socket(
    start_egress: StartEgress, upstream: HttpUpstream, tmp_path: Path
) -> None:
    egress = await start_egress([f"localhost:{upstream.port}"])
    path = tmp_path / "e.sock"
    await egress.proxy.serve_unix(path)
    reader, writer = await asyncio.open_unix_connection(path)
    raw = Raw(reader, writer)
    await raw.send(f"MOSOO-EGRESS {TOKEN}\r\n".encode())
    await raw.send(get(f"http://localhost:{upstream.port}/hello"))
    response = await raw.response()
    assert (response.status, response.body) == (200, b"hello")
    await raw.close()


async def test_names_are_normalized_before_matching(
    start_egress: StartEgress, upstream: HttpUpstream
) -> None:
    egress = await start_egress([f"localhost:{upstream.port}"])
    raw = await egress.open()
    for spelling in ("LOCALHOST.", "LocalHost", "localhost."):
        await raw.send(get(f"http://{spelling}:{upstream.port}/hello"))
        assert (await raw.response()).status == 200
    await raw.close()
    assert [d.host for d in await egress.wait_for_decisions(3)] == ["localhost"] * 3
    assert {r.headers["host"] for r in upstream.requests} == {f"localhost:{upstream.port}"}


async def test_a_wildcard_entry_allows_subdomains_only(
    start_egress: StartEgress, upstream: HttpUpstream
) -> None:
    names = ["api.allowed.test", "allowed.test", "evilallowed.test", "allowed.test.evil.test"]
    resolve = static_resolver({name: ["127.0.0.1"] for name in names})
    egress = await start_egress([f"*.allowed.test:{upstream.port}"], resolve=resolve)
    async with egress.client() as client:
        statuses = [
            (await client.get(f"http://{name}:{upstream.port}/hello")).status_code for name in names
        ]
    assert statuses == [200, 403, 403, 403]
    # Each name is its own connection, and an allowed one is recorded when it ends: any order.
    decisions = await egress.wait_for_decisions(4)
    assert sorted(d.reason for d in decisions) == ["allowed", *["not_allowed"] * 3]
    assert upstream.connections == 1


# --- refusals -------------------------------------------------------------------------------


async def test_a_host_not_on_the_list_is_refused_with_a_readable_403(
    start_egress: StartEgress, upstream: HttpUpstream, tls_upstream: TlsUpstream
) -> None:
    egress = await start_egress(
        [f"localhost:{upstream.port}"], resolve=static_resolver({"other.test": ["127.0.0.1"]})
    )
    async with egress.client() as client:
        response = await client.get(f"http://other.test:{upstream.port}/hello")
        with pytest.raises(httpx.ProxyError):
            await client.get(f"https://other.test:{tls_upstream.port}/")
    assert response.status_code == 403
    assert response.headers["x-mosoo-egress"] == "refused"
    assert response.text == f"egress refused: not_allowed (other.test:{upstream.port})\n"
    assert [(d.method, d.allowed, d.reason) for d in egress.decisions] == [
        ("GET", False, "not_allowed"),
        ("CONNECT", False, "not_allowed"),
    ]
    assert upstream.connections == 0
    assert tls_upstream.handshakes == 0


@pytest.mark.parametrize(
    "request_bytes",
    [
        get("http://localhost:{port}@evil.test/hello"),
        get("http://user:pass@localhost:{port}/hello"),
        connect("localhost:{port}@evil.test:443"),
        connect("evil.test@localhost:{port}"),
    ],
)
async def test_userinfo_in_the_target_is_refused(
    start_egress: StartEgress, upstream: HttpUpstream, request_bytes: bytes
) -> None:
    egress = await start_egress([f"localhost:{upstream.port}"])
    raw = await egress.open()
    await raw.send(request_bytes.replace(b"{port}", str(upstream.port).encode()))
    response = await raw.response()
    assert response.status == 403
    assert b"egress refused: userinfo" in response.body
    assert [d.reason for d in egress.decisions] == ["userinfo"]
    assert upstream.connections == 0


@pytest.mark.parametrize(
    "host",
    [
        "localhost.evil.test",
        "evillocalhost",
        "localhost-evil.test",
        "xlocalhost",
        "localhost..",
    ],
)
async def test_a_look_alike_of_an_allowed_name_is_refused(
    start_egress: StartEgress, upstream: HttpUpstream, host: str
) -> None:
    egress = await start_egress(
        [f"localhost:{upstream.port}"], resolve=static_resolver({host: ["127.0.0.1"]})
    )
    raw = await egress.open()
    await raw.send(get(f"http://{host}:{upstream.port}/hello"))
    assert (await raw.response()).status == 403
    assert egress.decisions[0].reason in ("not_allowed", "invalid_host")
    assert upstream.connections == 0


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",  # the list names localhost, not the literal
        "127.1",
        "2130706433",
        "0x7f000001",
        "0x7f.0.0.1",
        "0177.0.0.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[0:0:0:0:0:ffff:7f00:1]",
    ],
)
@pytest.mark.parametrize("method", ["GET", "CONNECT"])
async def test_an_ip_literal_target_is_refused_in_every_spelling(
    start_egress: StartEgress, upstream: HttpUpstream, host: str, method: str
) -> None:
    egress = await start_egress([f"localhost:{upstream.port}"])
    raw = await egress.open()
    target = f"{host}:{upstream.port}"
    await raw.send(get(f"http://{target}/hello") if method == "GET" else connect(target))
    response = await raw.response()
    assert response.status == 403
    assert [(d.method, d.reason) for d in egress.decisions] == [(method, "ip_literal")]
    assert upstream.connections == 0


async def test_the_test_mode_allows_the_listed_loopback_literal_and_no_other_spelling(
    start_egress: StartEgress, upstream: HttpUpstream
) -> None:
    egress = await start_egress([f"127.0.0.1:{upstream.port}"])
    async with egress.client() as client:
        allowed = await client.get(f"http://127.0.0.1:{upstream.port}/hello")
        refused = await client.get(f"http://2130706433:{upstream.port}/hello")
    assert (allowed.status_code, refused.status_code) == (200, 403)
    assert sorted(d.reason for d in await egress.wait_for_decisions(2)) == ["allowed", "ip_literal"]


async def test_a_name_resolving_to_loopback_is_refused_without_the_test_mode(
    start_egress: StartEgress, upstream: HttpUpstream, tls_upstream: TlsUpstream
) -> None:
    egress = await start_egress(
        [f"localhost:{upstream.port}", f"localhost:{tls_upstream.port}"], allow_loopback=False
    )
    async with egress.client() as client:
        response = await client.get(f"http://localhost:{upstream.port}/hello")
        with pytest.raises(httpx.ProxyError):
            await client.get(f"https://localhost:{tls_upstream.port}/")
    assert response.status_code == 403
    assert "loopback_address" in response.text
    assert [d.reason for d in egress.decisions] == ["loopback_address", "loopback_address"]
    assert (upstream.connections, tls_upstream.handshakes) == (0, 0)


@pytest.mark.parametrize(
    ("answers", "reason"),
    [
        (["10.0.0.5"], "private_address"),
        (["127.0.0.1", "10.0.0.5"], "private_address"),  # one bad answer refuses the name
        (["169.254.169.254"], "metadata_address"),
        (["::ffff:10.0.0.5"], "private_address"),
        (["100.64.0.1"], "cgnat_address"),
        (["fd00:ec2::254"], "metadata_address"),
    ],
)
async def test_a_name_resolving_to_a_private_address_is_refused_and_nothing_is_dialed(
    start_egress: StartEgress, upstream: HttpUpstream, answers: list[str], reason: str
) -> None:
    egress = await start_egress(
        [f"internal.test:{upstream.port}"],
        resolve=static_resolver({"internal.test": answers}),
    )
    async with egress.client() as client:
        response = await client.get(f"http://internal.test:{upstream.port}/hello")
    assert response.status_code == 403
    assert reason in response.text
    [decision] = egress.decisions
    assert (decision.allowed, decision.reason, decision.address) == (False, reason, None)
    assert upstream.connections == 0


async def test_a_port_not_listed_is_refused(
    start_egress: StartEgress, upstream: HttpUpstream, other_upstream: HttpUpstream
) -> None:
    egress = await start_egress([f"localhost:{upstream.port}"])
    async with egress.client() as client:
        response = await client.get(f"http://localhost:{other_upstream.port}/hello")
    assert response.status_code == 403
    assert [d.reason for d in egress.decisions] == ["port_not_allowed"]
    assert other_upstream.connections == 0


async def test_connect_with_a_different_sni_is_refused_before_a_byte_is_forwarded(
    start_egress: StartEgress, sink: ByteSink
) -> None:
    egress = await start_egress([f"localhost:{sink.port}"])
    raw = await egress.open()
    await raw.send(connect(f"localhost:{sink.port}"))
    assert (await raw.response()).status == 200
    await raw.send(client_hello("alt.test"))
    assert await raw.closed()
    [decision] = await egress.wait_for_decisions(1)
    assert (decision.allowed, decision.reason, decision.bytes_sent) == (False, "sni_mismatch", 0)
    assert sink.received == 0


@pytest.mark.parametrize(
    ("first_bytes", "reason"),
    [
        (client_hello(None), "sni_missing"),
        (client_hello("localhost.evil.test"), "sni_mismatch"),
        (b"SSH-2.0-OpenSSH_9.6\r\n", "not_tls"),
        (b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", "not_tls"),
    ],
)
async def test_a_tunnel_that_does_not_open_with_tls_for_its_host_is_refused(
    start_egress: StartEgress, sink: ByteSink, first_bytes: bytes, reason: str
) -> None:
    egress = await start_egress([f"localhost:{sink.port}"])
    raw = await egress.open()
    await raw.send(connect(f"localhost:{sink.port}"))
    assert (await raw.response()).status == 200
    await raw.send(first_bytes)
    assert await raw.closed()
    assert [d.reason for d in await egress.wait_for_decisions(1)] == [reason]
    assert sink.received == 0


async def test_a_redirect_to_a_refused_host_is_refused_when_followed(
    start_egress: StartEgress, upstream: HttpUpstream, other_upstream: HttpUpstream
) -> None:
    egress = await start_egress([f"localhost:{upstream.port}"])
    targets = [f"http://localhost:{other_upstream.port}/", f"http://127.0.0.1:{upstream.port}/"]
    async with egress.client(follow_redirects=True) as client:
        for target in targets:
            response = await client.get(
                f"http://localhost:{upstream.port}/redirect", params={"to": target}
            )
            assert response.status_code == 403
            assert [r.status_code for r in response.history] == [302]
    decisions = await egress.wait_for_decisions(4)
    assert sorted((d.reason, d.status or 0) for d in decisions) == [
        ("allowed", 302),
        ("allowed", 302),
        ("ip_literal", 0),
        ("port_not_allowed", 0),
    ]
    assert other_upstream.connections == 0


async def test_every_request_on_a_kept_alive_connection_is_checked_again(
    start_egress: StartEgress, upstream: HttpUpstream
) -> None:
    egress = await start_egress(
        [f"localhost:{upstream.port}"], resolve=static_resolver({"localhost": ["127.0.0.1"]})
    )
    raw = await egress.open()
    await raw.send(get(f"http://localhost:{upstream.port}/hello"))
    assert (await raw.response()).status == 200
    # The client's Host header cannot pick another virtual host on the same server.
    await raw.send(get(f"http://localhost:{upstream.port}/hello", host="evil.test"))
    assert (await raw.response()).status == 200
    await raw.send(get(f"http://evil.test:{upstream.port}/hello", host="localhost"))
    refused = await raw.response()
    assert refused.status == 403
    assert refused.headers["connection"] == "close"
    assert await raw.closed()
    assert [d.reason for d in egress.decisions] == ["allowed", "allowed", "not_allowed"]
    assert [r.headers["host"] for r in upstream.requests] == [f"localhost:{upstream.port}"] * 2


async def test_a_failed_lookup_or_dial_is_a_502_that_says_why(start_egress: StartEgress) -> None:
    closed_port = free_port()
    egress = await start_egress(
        [f"localhost:{closed_port}", f"nowhere.test:{closed_port}"],
        resolve=static_resolver({"localhost": ["127.0.0.1"]}),
    )
    async with egress.client() as client:
        unresolved = await client.get(f"http://nowhere.test:{closed_port}/")
        unreachable = await client.get(f"http://localhost:{closed_port}/")
    assert (unresolved.status_code, unreachable.status_code) == (502, 502)
    assert "dns_failed" in unresolved.text
    assert "connect_failed" in unreachable.text
    assert [(d.allowed, d.reason) for d in egress.decisions] == [
        (False, "dns_failed"),
        (False, "connect_failed"),
    ]


# --- hostile and malformed clients ----------------------------------------------------------


@pytest.mark.parametrize(
    "preamble",
    [
        b"",
        b"MOSOO-EGRESS wrong-token\r\n",
        b"MOSOO-EGRESS \r\n",
        b"MOSOO-EGRESS " + TOKEN.encode() + b"\n",  # no CR
        b"mosoo-egress " + TOKEN.encode() + b"\r\n",
        b"MOSOO-EGRESS " + b"x" * 2000 + b"\r\n",
        b"GET http://localhost/ HTTP/1.1\r\n",
    ],
)
async def test_a_connection_without_a_valid_preamble_is_closed_unanswered(
    start_egress: StartEgress, upstream: HttpUpstream, preamble: bytes
) -> None:
    egress = await start_egress([f"localhost:{upstream.port}"])
    raw = await egress.open(preamble)
    await raw.send(get(f"http://localhost:{upstream.port}/hello"))
    assert await raw.closed()
    assert egress.decisions == []
    assert upstream.connections == 0
    assert TOKEN not in egress.tokens


async def test_a_preamble_that_arrives_alone_is_not_taken_for_the_end_of_the_connection(
    start_egress: StartEgress, upstream: HttpUpstream
) -> None:
    egress = await start_egress([f"localhost:{upstream.port}"])
    raw = await egress.open()
    async with asyncio.timeout(5):
        while not egress.tokens:  # the proxy has read the preamble, and nothing behind it
            await asyncio.sleep(0.01)
    await raw.send(get(f"http://localhost:{upstream.port}/hello"))
    assert (await raw.response()).status == 200
    await raw.close()


async def test_a_silent_connection_is_closed_after_the_handshake_timeout(
    start_egress: StartEgress,
) -> None:
    egress = await start_egress(["localhost:1"], handshake_timeout=0.2)
    raw = await egress.open(b"MOSOO-EGR")
    assert await raw.closed()


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (get("http://localhost:{port}/", extra="X-Big: " + "a" * 20_000 + "\r\n"), 431),
        (
            b"GET http://localhost:{port}/ HTTP/1.1\r\nHost: a\r\n" + b"X: y\r\n" * 3000 + b"\r\n",
            431,
        ),
        (b"NOT HTTP AT ALL\r\n\r\n", 400),
        (b"GET http://localhost:{port}/ HTTP/1.1\r\n\r\n", 400),  # no Host
        (b"GET http://localhost:{port}/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (
            b"POST http://localhost:{port}/ HTTP/1.1\r\nHost: a\r\n"
            b"Transfer-Encoding: gzip, chunked\r\n\r\n",
            400,
        ),
    ],
)
async def test_a_malformed_or_oversized_request_head_is_answered_and_closed(
    start_egress: StartEgress, upstream: HttpUpstream, request_bytes: bytes, status: int
) -> None:
    egress = await start_egress([f"localhost:{upstream.port}"])
    raw = await egress.open()
    await raw.send(request_bytes.replace(b"{port}", str(upstream.port).encode()))
    assert (await raw.response()).status == status
    assert await raw.closed()
    assert upstream.connections == 0


@pytest.mark.parametrize(
    ("request_bytes", "reason"),
    [
        (get("/hello"), "bad_target"),  # origin form: not a proxy request
        (get("https://localhost:{port}/hello"), "scheme_not_supported"),
        (get("ftp://localhost:{port}/hello"), "bad_target"),
        (get("http://localhost:99999/"), "bad_target"),
        (get("http:///hello"), "bad_target"),
        (connect("localhost"), "bad_target"),  # CONNECT needs a port
        (connect("localhost:https"), "bad_target"),
    ],
)
async def test_a_request_that_is_not_a_proxy_request_is_a_recorded_400(
    start_egress: StartEgress, upstream: HttpUpstream, request_bytes: bytes, reason: str
) -> None:
    egress = await start_egress([f"localhost:{upstream.port}"])
    raw = await egress.open()
    await raw.send(request_bytes.replace(b"{port}", str(upstream.port).encode()))
    response = await raw.response()
    assert response.status == 400
    assert reason.encode() in response.body
    assert [(d.allowed, d.reason) for d in egress.decisions] == [(False, reason)]
    assert upstream.connections == 0


async def test_hostile_connections_do_not_disturb_the_next_one(
    start_egress: StartEgress, upstream: HttpUpstream
) -> None:
    egress = await start_egress([f"localhost:{upstream.port}"])
    garbage = [
        b"\x00" * 5000,
        b"MOSOO-EGRESS " + TOKEN.encode() + b"\r\n" + b"\xff" * 10_000,
        b"MOSOO-EGRESS " + TOKEN.encode() + b"\r\nGET http://localhost:1/ HTTP/1.1\r\nHo",
        b"MOSOO-EGRESS " + TOKEN.encode() + b"\r\n" + connect(f"localhost:{upstream.port}"),
    ]
    for data in garbage:
        raw = await egress.open(data)
        await raw.close()  # and hang up mid-way
    raw = await egress.open()
    await raw.send(get(f"http://localhost:{upstream.port}/hello"))
    assert (await raw.response()).status == 200
    await raw.close()


async def test_a_failing_record_callback_does_not_fail_the_request(
    upstream: HttpUpstream,
) -> None:
    policy = EgressPolicy.from_entries([f"localhost:{upstream.port}"], allow_loopback=True)

    async def authenticate(token: str) -> EgressContext | None:
        return EgressContext(policy, RUN_ID, THREAD_ID)

    def record(decision: NetworkDecision) -> None:
        raise RuntimeError("event store down")

    proxy = EgressProxy(authenticate, record)
    server = await proxy.serve_tcp()
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", server.sockets[0].getsockname()[1]
        )
        raw = Raw(reader, writer)
        await raw.send(f"MOSOO-EGRESS {TOKEN}\r\n".encode())
        for _ in range(2):
            await raw.send(get(f"http://localhost:{upstream.port}/hello"))
            assert (await raw.response()).status == 200
        await raw.close()
    finally:
        await proxy.close()


async def test_an_idle_tunnel_is_closed(
    start_egress: StartEgress, tls_upstream: TlsUpstream, certificate: Certificate
) -> None:
    egress = await start_egress([f"localhost:{tls_upstream.port}"], idle_timeout=0.3)
    raw = await egress.open()
    await raw.send(connect(f"localhost:{tls_upstream.port}"))
    assert (await raw.response()).status == 200
    await raw.send(_first_flight(certificate.client_context(), "localhost"))
    # The server answers the ClientHello; then neither side speaks and the proxy hangs up.
    async with asyncio.timeout(5):
        while await raw.reader.read(65536):
            pass
    [decision] = await egress.wait_for_decisions(1)
    assert (decision.allowed, decision.reason) == (True, "allowed")
    assert decision.bytes_received > 0


@pytest.fixture(autouse=True)
def _only_loopback(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail loudly if anything in a test dials a non-loopback address."""
    real = socket.socket.connect

    def guarded(self: socket.socket, address: object) -> None:
        if isinstance(address, tuple):
            host = str(address[0])
            assert ipaddress.ip_address(host.split("%")[0]).is_loopback, host
        return real(self, address)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "connect", guarded)
    yield
