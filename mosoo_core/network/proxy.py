"""The egress proxy: a sandbox's only way to the internet under a `limited` policy.

An in-sandbox forwarder hands each of the sandbox's connections to this proxy, first writing
one preamble line, `MOSOO-EGRESS <token>\\r\\n`. The token names the run (`authenticate`),
and with it the run's frozen policy: nothing the sandbox sends afterwards can change it.
Then the connection speaks HTTP/1.1 to a forward proxy:

- `CONNECT host:port` (HTTPS): the name is checked, resolved here, every address checked,
  the *checked* address dialed (no second lookup, so no DNS-rebinding race); after
  `200 Connection Established` the TLS ClientHello is read and its SNI must be the CONNECT
  host before a byte of it is forwarded; then bytes are spliced both ways.
- `GET http://host/path` (absolute form, any method): the same checks, then the request
  goes upstream in origin form with `Host` set from the checked target, on a fresh upstream
  connection; the response streams back. Every request of a kept-alive client connection
  is checked on its own, so a redirect the client follows is checked like any request.

Each request ends in one `NetworkDecision` given to `record` (later a `network.request`
event). `allowed` says whether anything was forwarded upstream; `reason` is `allowed` or
why not (see `REFUSAL_REASONS` and `FAILURE_REASONS`). Paths and tokens are never recorded
or logged: a URL can carry a secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import h11

from mosoo_core.logs import get_logger
from mosoo_core.network._tls import MAX_CLIENT_HELLO_BYTES, NotClientHello, parse_client_hello
from mosoo_core.network.policy import (
    LOOPBACK_LITERAL,
    EgressPolicy,
    address_allowed,
    normalize_host,
)

log = get_logger(__name__)

PREAMBLE_PREFIX = b"MOSOO-EGRESS "
MAX_PREAMBLE_BYTES = 1024
MAX_REQUEST_HEAD_BYTES = 16 * 1024
# Upstream servers send larger heads than clients (cookies, CSPs); still bounded.
MAX_RESPONSE_HEAD_BYTES = 64 * 1024
_CHUNK = 64 * 1024
_TOKEN = re.compile(rb"[\x21-\x7e]{1,512}")
_PORT = re.compile(r"[0-9]{1,5}")
_MAX_RECORDED_HOST = 255

# The policy said no: nothing left the proxy.
REFUSAL_REASONS = frozenset(
    {
        "not_allowed",
        "port_not_allowed",
        "ip_literal",
        "userinfo",
        "invalid_host",
        "loopback_address",
        "private_address",
        "cgnat_address",
        "link_local_address",
        "metadata_address",
        "unspecified_address",
        "multicast_address",
        "broadcast_address",
        "reserved_address",
        "invalid_address",
        "sni_missing",
        "sni_mismatch",
        "not_tls",
        "bad_target",
        "scheme_not_supported",
    }
)
# The policy allowed it but the exchange did not complete.
FAILURE_REASONS = frozenset(
    {
        "dns_failed",
        "connect_failed",
        "handshake_timeout",
        "client_closed",
        "client_timeout",
        "bad_request",
        "bad_gateway",
        "upstream_closed",
        "upstream_timeout",
        "aborted",
    }
)

# Headers that describe one hop (RFC 9110 7.6.1), plus the client's words to its proxy.
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
_STATUS_TEXT = {
    400: "Bad Request",
    403: "Forbidden",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    504: "Gateway Timeout",
}


@dataclass(frozen=True)
class EgressContext:
    """Who a connection belongs to, as `authenticate` found it: the run's frozen policy and
    ids that are only copied into each `NetworkDecision`."""

    policy: EgressPolicy
    run_id: str
    thread_id: str


@dataclass(frozen=True)
class NetworkDecision:
    """One request through the proxy, recorded when it ends."""

    host: str
    port: int
    method: str
    allowed: bool
    reason: str
    run_id: str
    thread_id: str
    bytes_sent: int = 0  # client -> upstream, as written to the upstream socket
    bytes_received: int = 0  # upstream -> client, as read from the upstream socket
    duration_ms: int = 0
    address: str | None = None  # the address dialed
    status: int | None = None  # the upstream's HTTP status (absolute-form requests)


Authenticate = Callable[[str], Awaitable[EgressContext | None]]
Record = Callable[[NetworkDecision], Awaitable[None] | None]
Resolve = Callable[[str, int], Awaitable[list[str]]]


class _Stop(Exception):
    """Ends one request: `status` is the error response to send, None when none can be
    (the tunnel is already open, or the client is gone)."""

    def __init__(self, status: int | None, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class _Exchange:
    context: EgressContext
    method: str
    host: str = ""
    port: int = 0
    address: str | None = None
    forwarded: bool = False
    responded: bool = False
    recorded: bool = False
    status: int | None = None
    bytes_sent: int = 0
    bytes_received: int = 0
    started: float = field(default_factory=time.monotonic)

    def decision(self, reason: str) -> NetworkDecision:
        return NetworkDecision(
            host=self.host[:_MAX_RECORDED_HOST],
            port=self.port,
            method=self.method,
            allowed=self.forwarded,
            reason=reason,
            run_id=self.context.run_id,
            thread_id=self.context.thread_id,
            bytes_sent=self.bytes_sent,
            bytes_received=self.bytes_received,
            duration_ms=round((time.monotonic() - self.started) * 1000),
            address=self.address,
            status=self.status,
        )


class _HttpPeer:
    """One side of an HTTP exchange: its socket, its h11 state and its byte counts."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        role: type[h11.CLIENT] | type[h11.SERVER],
        max_head_bytes: int,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(role, max_incomplete_event_size=max_head_bytes)
        self.sent = 0
        self.received = 0

    async def next_event(self, timeout: float) -> h11.Event | type[h11.PAUSED]:
        """The next event within `timeout` seconds in all (a slow drip of header bytes
        does not reset it)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            event = self.h11.next_event()
            if isinstance(event, h11.Event):
                return event
            if event is h11.PAUSED:
                return h11.PAUSED
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError
            data = await asyncio.wait_for(self.reader.read(_CHUNK), remaining)
            self.received += len(data)
            self.h11.receive_data(data)

    async def send(self, event: h11.Event) -> None:
        data = self.h11.send(event)
        if data:
            self.writer.write(data)
            self.sent += len(data)
            await self.writer.drain()


async def _default_resolve(host: str, port: int) -> list[str]:
    answers = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(sockaddr[0]) for *_, sockaddr in answers]


def _split_authority(authority: str, default_port: int | None) -> tuple[str, int]:
    """`host[:port]` into its parts; the host is kept as written (brackets and `@` too) so
    the policy names the refusal. A missing or malformed port is a bad target."""
    if "@" in authority:
        raise _Stop(403, "userinfo")  # before any split: `allowed:80@evil` has a colon too
    host, port_text = authority, ""
    if "]" in authority:
        host, _, rest = authority.rpartition("]")
        host += "]"
        if rest and not rest.startswith(":"):
            raise _Stop(400, "bad_target")
        port_text = rest[1:]
    elif ":" in authority:
        host, _, port_text = authority.rpartition(":")
    if not port_text and default_port is not None:
        return host, default_port
    if not _PORT.fullmatch(port_text) or not 1 <= int(port_text) <= 65535 or not host:
        raise _Stop(400, "bad_target")
    return host, int(port_text)


def _absolute_target(exchange: _Exchange, target: str) -> tuple[str, int, str]:
    """`http://host[:port]/path?query` into (host, port, origin-form target)."""
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise _Stop(400, "bad_target")
    if scheme.lower() == "https":
        raise _Stop(400, "scheme_not_supported")  # HTTPS goes through CONNECT
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, path = rest[:end], rest[end:].partition("#")[0]
    if not authority:
        raise _Stop(400, "bad_target")
    exchange.host = authority
    host, port = _split_authority(authority, 80)
    if not path.startswith("/"):
        path = "/" + path
    return host, port, path


def _head_size(request: h11.Request) -> int:
    """About the bytes of the request's head on the wire."""
    line = len(request.method) + len(request.target) + 12
    return line + sum(len(name) + len(value) + 4 for name, value in request.headers)


def _connection_tokens(headers: list[tuple[bytes, bytes]]) -> set[bytes]:
    """Header names a `Connection` header declares hop-by-hop."""
    return {
        token.strip().lower()
        for name, value in headers
        if name == b"connection"
        for token in value.split(b",")
    }


def _request_headers(request: h11.Request, host_header: str) -> list[tuple[bytes, bytes]]:
    headers = list(request.headers)
    dropped = _HOP_BY_HOP | _connection_tokens(headers) | {b"host", b"expect"}
    # Framing is a hop's business, but the body keeps its shape: h11 re-frames it. With
    # both framings present, chunked wins and Content-Length goes (RFC 9112 6.1: smuggling).
    chunked = any(n == b"transfer-encoding" for n, _ in headers)
    if chunked:
        dropped |= {b"content-length"}
    kept = [(n, v) for n, v in headers if n not in dropped and not n.startswith(b"proxy-")]
    if chunked:
        kept.append((b"transfer-encoding", b"chunked"))
    # One upstream connection per request: tell the server, so it closes promptly.
    return [(b"host", host_header.encode("ascii")), *kept, (b"connection", b"close")]


def _response_headers(response: h11.Response) -> list[tuple[bytes, bytes]]:
    headers = list(response.headers)
    dropped = _HOP_BY_HOP | _connection_tokens(headers)
    # Without Content-Length, h11 frames the body for our client (chunked, or close).
    return [(n, v) for n, v in headers if n not in dropped]


def _error_response(status: int, body: str, *, refused: bool) -> bytes:
    payload = body.encode("ascii", "replace") + b"\n"
    lines = [
        f"HTTP/1.1 {status} {_STATUS_TEXT.get(status, 'Error')}",
        "Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(payload)}",
        "Connection: close",
    ]
    if refused:
        lines.append("X-Mosoo-Egress: refused")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + payload


class EgressProxy:
    """An HTTP/1.1 forward proxy that enforces each connection's `EgressPolicy`.

    `authenticate(token)` maps the preamble's token to a context (None refuses the
    connection); `record(decision)` receives one `NetworkDecision` per request (it may be a
    coroutine function); `resolve(host, port)` returns a name's addresses (the system
    resolver by default). Serve it with `serve_tcp`/`serve_unix`, or pass `handle` to an
    asyncio server of your own; `close` ends the servers and every live connection.
    """

    def __init__(
        self,
        authenticate: Authenticate,
        record: Record,
        resolve: Resolve | None = None,
        *,
        connect_timeout: float = 10.0,
        idle_timeout: float = 60.0,
        handshake_timeout: float = 10.0,
        max_connections_per_run: int = 256,
    ) -> None:
        self._authenticate = authenticate
        self._record_callback = record
        self._resolve = resolve or _default_resolve
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self.handshake_timeout = handshake_timeout
        self.max_connections_per_run = max_connections_per_run
        self._servers: list[asyncio.Server] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._per_run: dict[str, int] = {}
        self._closing = False

    async def serve_tcp(self, host: str = "127.0.0.1", port: int = 0) -> asyncio.Server:
        server = await asyncio.start_server(self.handle, host, port)
        self._servers.append(server)
        return server

    async def serve_unix(self, path: str | os.PathLike[str]) -> asyncio.Server:
        server = await asyncio.start_unix_server(self.handle, path=os.fspath(path))
        self._servers.append(server)
        return server

    async def close(self) -> None:
        self._closing = True
        for server in self._servers:
            server.close()
        await asyncio.sleep(0)  # connections accepted just now start, and so can be cancelled
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers.clear()

    # --- one client connection ---------------------------------------------------------

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection to its end; never raises (a bad client only loses its own
        connection)."""
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            await self._serve_connection(reader, writer)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # Python 3.11's start_server reports a cancelled handler as an unhandled error;
            # a connection ended by `close` is the expected end, so it ends quietly.
            if not self._closing:
                raise
        except Exception:
            log.exception("egress_connection_failed")
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        authenticated = await self._authenticated(reader)
        if authenticated is None:
            return
        context, rest = authenticated
        run = context.run_id
        if self._per_run.get(run, 0) >= self.max_connections_per_run:
            log.warning("egress_too_many_connections", run_id=run)
            return
        self._per_run[run] = self._per_run.get(run, 0) + 1
        try:
            client = _HttpPeer(reader, writer, h11.SERVER, MAX_REQUEST_HEAD_BYTES)
            if rest:  # h11 reads empty data as the end of the connection
                client.h11.receive_data(rest)
            await self._serve_requests(context, client)
        finally:
            self._per_run[run] -= 1
            if not self._per_run[run]:
                del self._per_run[run]

    async def _authenticated(
        self, reader: asyncio.StreamReader
    ) -> tuple[EgressContext, bytes] | None:
        """The preamble's context and the bytes behind the preamble. The token lives only in
        this frame, gone before any request is served (tracebacks can show frames' locals)."""
        preamble = await self._read_preamble(reader)
        if preamble is None:
            log.info("egress_preamble_refused")
            return None
        token, rest = preamble
        context = await self._context_for(token)
        if context is None:
            log.info("egress_token_refused")
            return None
        return context, rest

    async def _read_preamble(self, reader: asyncio.StreamReader) -> tuple[str, bytes] | None:
        """(token, bytes after the line) or None; reads no further than a wrong prefix."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.handshake_timeout
        buffer = b""
        while b"\n" not in buffer:
            if buffer[: len(PREAMBLE_PREFIX)] != PREAMBLE_PREFIX[: len(buffer)]:
                return None
            if len(buffer) >= MAX_PREAMBLE_BYTES:
                return None
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            try:
                chunk = await asyncio.wait_for(
                    reader.read(MAX_PREAMBLE_BYTES - len(buffer)), remaining
                )
            except TimeoutError:
                return None
            if not chunk:
                return None
            buffer += chunk
        line, _, rest = buffer.partition(b"\n")
        if not line.startswith(PREAMBLE_PREFIX) or not line.endswith(b"\r"):
            return None
        token = line[len(PREAMBLE_PREFIX) : -1]
        if not _TOKEN.fullmatch(token):
            return None
        return token.decode("ascii"), rest

    async def _context_for(self, token: str) -> EgressContext | None:
        try:
            return await asyncio.wait_for(self._authenticate(token), self.handshake_timeout)
        except Exception as error:
            # Not log.exception: the traceback's frames hold the token.
            log.error("egress_authenticate_failed", error=type(error).__name__)
            return None

    async def _serve_requests(self, context: EgressContext, client: _HttpPeer) -> None:
        while True:
            try:
                event = await client.next_event(self.idle_timeout)
            except h11.RemoteProtocolError as error:
                # No request to record: the head itself was malformed or too large.
                status = 431 if error.error_status_hint == 431 else 400
                log.info("egress_bad_request", status=status, run_id=context.run_id)
                await self._reply(client, _error_response(status, "bad request", refused=False))
                return
            if not isinstance(event, h11.Request):
                return  # the client closed, or sent nothing in time
            if _head_size(event) > MAX_REQUEST_HEAD_BYTES:
                # h11 caps a head that arrives in pieces; this one arrived whole.
                log.info("egress_bad_request", status=431, run_id=context.run_id)
                await self._reply(client, _error_response(431, "bad request", refused=False))
                return
            if not await self._request(context, client, event):
                return
            client.h11.start_next_cycle()

    async def _request(
        self, context: EgressContext, client: _HttpPeer, request: h11.Request
    ) -> bool:
        """Serve one request and record it; True when the client connection stays open."""
        exchange = _Exchange(context, request.method.decode("ascii", "replace"))
        reason = "aborted"  # unless it ends as below: an unexpected error, or cancelled
        try:
            if request.method == b"CONNECT":
                await self._tunnel(exchange, client, request)
                keep_open = False
            else:
                keep_open = await self._forward(exchange, client, request)
            reason = "allowed"
            return keep_open
        except _Stop as stop:
            reason = stop.reason
            # Recorded before the client hears of it: the refusal is in the run's log by
            # the time the agent sees its 403.
            await self._conclude(exchange, reason)
            if stop.status is not None and not exchange.responded:
                await self._reply(client, self._stop_response(exchange, stop))
            return False
        finally:
            await self._conclude(exchange, reason)

    async def _conclude(self, exchange: _Exchange, reason: str) -> None:
        """Log a refusal and record the exchange, once."""
        if exchange.recorded:
            return
        exchange.recorded = True
        if reason in REFUSAL_REASONS:
            log.info(
                "egress_refused",
                host=exchange.host[:_MAX_RECORDED_HOST],
                port=exchange.port,
                reason=reason,
                run_id=exchange.context.run_id,
            )
        await self._record(exchange.decision(reason))

    @staticmethod
    def _stop_response(exchange: _Exchange, stop: _Stop) -> bytes:
        refused = stop.reason in REFUSAL_REASONS
        target = f"({exchange.host[:_MAX_RECORDED_HOST]}:{exchange.port})"
        if stop.status == 400:
            hint = " (use CONNECT for https)" if stop.reason == "scheme_not_supported" else ""
            return _error_response(400, f"bad request: {stop.reason}{hint}", refused=refused)
        if refused:
            return _error_response(403, f"egress refused: {stop.reason} {target}", refused=True)
        status = stop.status or 502
        return _error_response(status, f"egress failed: {stop.reason} {target}", refused=False)

    async def _reply(self, client: _HttpPeer, data: bytes) -> None:
        with contextlib.suppress(ConnectionError):
            client.writer.write(data)
            await client.writer.drain()

    async def _record(self, decision: NetworkDecision) -> None:
        try:
            result = self._record_callback(decision)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("egress_record_failed", run_id=decision.run_id)

    # --- policy, DNS, dialing --------------------------------------------------------------

    async def _admit(self, exchange: _Exchange, host: str, port: int) -> list[str]:
        """Check `host:port` and every address it resolves to; the addresses to dial."""
        policy = exchange.context.policy
        exchange.host, exchange.port = host, port
        refusal = policy.check_target(host, port)
        if refusal is not None:
            raise _Stop(403, refusal.reason)
        if policy.allow_loopback and host == LOOPBACK_LITERAL:
            return [LOOPBACK_LITERAL]
        exchange.host = name = normalize_host(host)
        try:
            answers = await asyncio.wait_for(self._resolve(name, port), self.connect_timeout)
        except (OSError, TimeoutError, UnicodeError):
            raise _Stop(502, "dns_failed") from None
        addresses = list(dict.fromkeys(answers))
        if not addresses:
            raise _Stop(502, "dns_failed")
        # One bad answer refuses the name: a resolver's order is not ours to trust.
        for address in addresses:
            reason = address_allowed(address, policy.allow_loopback)
            if reason is not None:
                raise _Stop(403, reason)
        return addresses

    async def _dial(
        self, exchange: _Exchange, addresses: list[str]
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout
        for address in addresses:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                streams = await asyncio.wait_for(
                    asyncio.open_connection(address, exchange.port), remaining
                )
            except (OSError, TimeoutError):
                continue
            exchange.address = address
            return streams
        raise _Stop(502, "connect_failed")

    # --- CONNECT ---------------------------------------------------------------------------

    async def _tunnel(self, exchange: _Exchange, client: _HttpPeer, request: h11.Request) -> None:
        authority = request.target.decode("ascii", "replace")
        exchange.host = authority
        host, port = _split_authority(authority, None)
        exchange.host, exchange.port = host, port
        # A CONNECT has no body; after its end, h11 holds the bytes behind it for us.
        if not isinstance(await self._client_event(client), h11.EndOfMessage):
            raise _Stop(400, "bad_request")
        addresses = await self._admit(exchange, host, port)
        # Dialed before answering, so a dead upstream gets a 502 the client can show; no
        # byte goes to it until the SNI has been checked.
        upstream_reader, upstream_writer = await self._dial(exchange, addresses)
        try:
            client.writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            exchange.responded = True
            await self._client_drain(client)
            hello = await self._client_hello(client, exchange.host)
            exchange.forwarded = True
            try:
                upstream_writer.write(hello)
                exchange.bytes_sent += len(hello)
                await upstream_writer.drain()
            except OSError:
                raise _Stop(None, "upstream_closed") from None
            await self._splice(exchange, client, upstream_reader, upstream_writer)
        finally:
            upstream_writer.close()
            with contextlib.suppress(Exception):
                await upstream_writer.wait_closed()

    async def _client_hello(self, client: _HttpPeer, host: str) -> bytes:
        """The client's first bytes in the tunnel, once they are a ClientHello for `host`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.handshake_timeout
        data = bytearray(client.h11.trailing_data[0])
        while True:
            try:
                hello = parse_client_hello(bytes(data))
            except NotClientHello:
                raise _Stop(None, "not_tls") from None
            if hello is not None:
                break
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise _Stop(None, "handshake_timeout")
            try:
                chunk = await asyncio.wait_for(
                    client.reader.read(MAX_CLIENT_HELLO_BYTES - len(data)), remaining
                )
            except TimeoutError:
                raise _Stop(None, "handshake_timeout") from None
            if not chunk:
                raise _Stop(None, "client_closed")
            data += chunk
        if hello.server_name is None:
            raise _Stop(None, "sni_missing")
        try:
            server_name = normalize_host(hello.server_name)
        except ValueError:
            raise _Stop(None, "sni_mismatch") from None
        if server_name != host:
            raise _Stop(None, "sni_mismatch")
        return bytes(data)

    async def _splice(
        self,
        exchange: _Exchange,
        client: _HttpPeer,
        upstream_reader: asyncio.StreamReader,
        upstream_writer: asyncio.StreamWriter,
    ) -> None:
        """Copy both ways until both sides are done, or neither spoke for `idle_timeout`."""
        loop = asyncio.get_running_loop()
        last_activity = loop.time()

        async def pump(
            source: asyncio.StreamReader, target: asyncio.StreamWriter, upstream_bound: bool
        ) -> None:
            nonlocal last_activity
            while True:
                try:
                    data = await asyncio.wait_for(source.read(_CHUNK), self.idle_timeout)
                except TimeoutError:
                    # Quiet this way is fine while the other way still talks.
                    if loop.time() - last_activity >= self.idle_timeout:
                        raise
                    continue
                if not data:
                    if target.can_write_eof():
                        target.write_eof()  # pass the half-close on
                    return
                last_activity = loop.time()
                target.write(data)
                if upstream_bound:
                    exchange.bytes_sent += len(data)
                else:
                    exchange.bytes_received += len(data)
                await target.drain()

        tasks = [
            asyncio.create_task(pump(client.reader, upstream_writer, True)),
            asyncio.create_task(pump(upstream_reader, client.writer, False)),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for task in tasks:
                task.cancel()
            # A reset or an idle end is how tunnels end: not an error of the proxy.
            await asyncio.gather(*tasks, return_exceptions=True)

    # --- absolute-form HTTP ----------------------------------------------------------------

    async def _forward(self, exchange: _Exchange, client: _HttpPeer, request: h11.Request) -> bool:
        target = request.target.decode("ascii", "replace")
        host, port, path = _absolute_target(exchange, target)
        exchange.host, exchange.port = host, port
        addresses = await self._admit(exchange, host, port)
        upstream_reader, upstream_writer = await self._dial(exchange, addresses)
        upstream = _HttpPeer(upstream_reader, upstream_writer, h11.CLIENT, MAX_RESPONSE_HEAD_BYTES)
        try:
            await self._send_request(exchange, client, upstream, request, path)
            await self._relay_response(exchange, client, upstream)
        finally:
            exchange.bytes_sent, exchange.bytes_received = upstream.sent, upstream.received
            upstream_writer.close()
            with contextlib.suppress(Exception):
                await upstream_writer.wait_closed()
        return client.h11.our_state is h11.DONE and client.h11.their_state is h11.DONE

    async def _send_request(
        self,
        exchange: _Exchange,
        client: _HttpPeer,
        upstream: _HttpPeer,
        request: h11.Request,
        path: str,
    ) -> None:
        host_header = exchange.host if exchange.port == 80 else f"{exchange.host}:{exchange.port}"
        if client.h11.client_is_waiting_for_100_continue:
            # Expect is not forwarded: we invite the body ourselves and stream it on.
            await self._client_send(client, h11.InformationalResponse(status_code=100, headers=[]))
        exchange.forwarded = True
        await self._upstream_send(
            upstream,
            h11.Request(
                method=request.method,
                target=path.encode("ascii"),
                headers=_request_headers(request, host_header),
            ),
        )
        while True:
            event = await self._client_event(client)
            if isinstance(event, h11.Data):
                await self._upstream_send(upstream, h11.Data(data=event.data))
            elif isinstance(event, h11.EndOfMessage):
                await self._upstream_send(upstream, h11.EndOfMessage())
                return
            else:
                raise _Stop(None, "client_closed")

    async def _relay_response(
        self, exchange: _Exchange, client: _HttpPeer, upstream: _HttpPeer
    ) -> None:
        while True:
            event = await self._upstream_event(upstream)
            if isinstance(event, h11.Response):
                break
            if not isinstance(event, h11.InformationalResponse):
                raise _Stop(502, "upstream_closed")
        exchange.status = event.status_code
        await self._client_send(
            client,
            h11.Response(
                status_code=event.status_code,
                headers=_response_headers(event),
                reason=event.reason,
            ),
        )
        exchange.responded = True
        while True:
            body = await self._upstream_event(upstream)
            if isinstance(body, h11.Data):
                await self._client_send(client, h11.Data(data=body.data))
            elif isinstance(body, h11.EndOfMessage):
                await self._client_send(client, h11.EndOfMessage())
                return
            else:
                raise _Stop(None, "upstream_closed")

    # --- the two sides' errors, named once -------------------------------------------------

    async def _client_event(self, client: _HttpPeer) -> h11.Event | type[h11.PAUSED]:
        try:
            return await client.next_event(self.idle_timeout)
        except h11.RemoteProtocolError:
            raise _Stop(400, "bad_request") from None
        except TimeoutError:
            raise _Stop(None, "client_timeout") from None
        except (OSError, asyncio.IncompleteReadError):
            raise _Stop(None, "client_closed") from None

    async def _client_send(self, client: _HttpPeer, event: h11.Event) -> None:
        try:
            await client.send(event)
        except (OSError, h11.LocalProtocolError):
            raise _Stop(None, "client_closed") from None

    async def _client_drain(self, client: _HttpPeer) -> None:
        try:
            await client.writer.drain()
        except OSError:
            raise _Stop(None, "client_closed") from None

    async def _upstream_event(self, upstream: _HttpPeer) -> h11.Event | type[h11.PAUSED]:
        try:
            return await upstream.next_event(self.idle_timeout)
        except h11.RemoteProtocolError:
            raise _Stop(502, "bad_gateway") from None
        except TimeoutError:
            raise _Stop(504, "upstream_timeout") from None
        except (OSError, asyncio.IncompleteReadError):
            raise _Stop(502, "upstream_closed") from None

    async def _upstream_send(self, upstream: _HttpPeer, event: h11.Event) -> None:
        try:
            await upstream.send(event)
        except (OSError, h11.LocalProtocolError):
            raise _Stop(502, "upstream_closed") from None
