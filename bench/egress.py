"""The egress proxy's cost: small GETs to a loopback server, direct against through the proxy.

One process serves the upstreams (HTTP and HTTPS with a self-signed certificate, keep-alive),
one runs the `EgressProxy` with a `limited` policy naming them (test-only loopback mode);
the clients, in this process, speak the same minimal HTTP/1.1 either way, so the difference
is the proxy: the preamble, the policy and DNS checks, a fresh upstream connection per
absolute-form request, and for HTTPS the CONNECT, the SNI check and the splice. Prints
requests/second, latency p50/p95 and the added latency and throughput ratio, for:

- http keep-alive: one client connection per worker, GET http://localhost:<port>/ on it;
- https in one tunnel: one CONNECT (or direct TLS connection) per worker, GETs inside it;
- https tunnel per request: a new connection, CONNECT and TLS handshake for every GET.

    .venv/bin/python bench/egress.py                      # C = 1 and 20
    .venv/bin/python -m bench.egress --requests 5000 --concurrency 1 50
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import multiprocessing
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import h11  # noqa: E402

from tests.support.certificates import self_signed  # noqa: E402

TOKEN = "bench-token"
BODY = b"hello from upstream"


# --- the upstreams and the proxy, each in its own process -----------------------------------


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Keep-alive HTTP/1.1: every request gets BODY."""
    connection = h11.Connection(h11.SERVER)
    try:
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                connection.receive_data(data)
                if not data and connection.their_state is not h11.DONE:
                    return
            elif isinstance(event, h11.EndOfMessage):
                headers = [("content-length", str(len(BODY))), ("content-type", "text/plain")]
                writer.write(connection.send(h11.Response(status_code=200, headers=headers)) or b"")
                writer.write(connection.send(h11.Data(data=BODY)) or b"")
                writer.write(connection.send(h11.EndOfMessage()) or b"")
                await writer.drain()
                if connection.our_state is not h11.DONE:
                    return
                connection.start_next_cycle()
            elif not isinstance(event, h11.Request | h11.Data):
                return
    except (ConnectionError, h11.ProtocolError, ssl.SSLError):
        pass
    finally:
        writer.close()


def _upstreams(ports: multiprocessing.Queue[tuple[int, int]], cert: bytes, key: bytes) -> None:
    async def main() -> None:
        directory = Path(tempfile.mkdtemp(prefix="mosoo-bench-egress-"))
        (directory / "cert.pem").write_bytes(cert)
        (directory / "key.pem").write_bytes(key)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
        http = await asyncio.start_server(_answer, "127.0.0.1", 0, backlog=1024)
        https = await asyncio.start_server(_answer, "127.0.0.1", 0, ssl=context, backlog=1024)
        ports.put((http.sockets[0].getsockname()[1], https.sockets[0].getsockname()[1]))
        await asyncio.Event().wait()

    asyncio.run(main())


def _proxy(ports: multiprocessing.Queue[int], entries: list[str]) -> None:
    from mosoo_core.logs import configure_logging
    from mosoo_core.network import EgressContext, EgressPolicy, EgressProxy, NetworkDecision

    configure_logging("bench-egress", level="WARNING", json=True)
    policy = EgressPolicy.from_entries(entries, allow_loopback=True)

    async def authenticate(token: str) -> EgressContext | None:
        return EgressContext(policy, "run_bench", "thread_bench") if token == TOKEN else None

    def record(decision: NetworkDecision) -> None:
        if not decision.allowed:
            print(f"refused: {decision}", file=sys.stderr, flush=True)

    async def main() -> None:
        proxy = EgressProxy(authenticate, record, max_connections_per_run=10_000)
        server = await proxy.serve_tcp("127.0.0.1", 0)
        ports.put(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    asyncio.run(main())


def _self_signed() -> tuple[bytes, bytes]:
    made = self_signed("localhost")
    return made.cert_pem, made.key_pem


# --- the clients ----------------------------------------------------------------------------


@dataclass
class Setup:
    http_port: int
    https_port: int
    proxy_port: int
    tls: ssl.SSLContext


Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _get(streams: Streams, target: bytes) -> float:
    """One GET on an open connection; seconds until its whole response is read."""
    reader, writer = streams
    started = time.perf_counter()
    writer.write(b"GET " + target + b" HTTP/1.1\r\nHost: localhost\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    if await reader.readexactly(length) != BODY:
        raise RuntimeError("unexpected body")
    return time.perf_counter() - started


async def _via_proxy(setup: Setup) -> Streams:
    reader, writer = await asyncio.open_connection("127.0.0.1", setup.proxy_port)
    writer.write(f"MOSOO-EGRESS {TOKEN}\r\n".encode())
    return reader, writer


async def _tunnel(setup: Setup) -> Streams:
    reader, writer = await _via_proxy(setup)
    authority = f"localhost:{setup.https_port}".encode()
    writer.write(b"CONNECT " + authority + b" HTTP/1.1\r\nHost: " + authority + b"\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"CONNECT refused: {head!r}")
    await writer.start_tls(setup.tls, server_hostname="localhost")
    return reader, writer


async def _direct_tls(setup: Setup) -> Streams:
    return await asyncio.open_connection(
        "127.0.0.1", setup.https_port, ssl=setup.tls, server_hostname="localhost"
    )


@dataclass
class Route:
    """How one scenario reaches the upstream: open a connection, and the request target."""

    open: Callable[[Setup], Awaitable[Streams]]
    target: Callable[[Setup], bytes]
    connection_per_request: bool = False


SCENARIOS: dict[str, tuple[Route, Route]] = {
    "http keep-alive": (
        Route(
            lambda s: asyncio.open_connection("127.0.0.1", s.http_port),
            lambda s: b"/",
        ),
        Route(_via_proxy, lambda s: f"http://localhost:{s.http_port}/".encode()),
    ),
    "https in one tunnel": (
        Route(_direct_tls, lambda s: b"/"),
        Route(_tunnel, lambda s: b"/"),
    ),
    "https tunnel per request": (
        Route(_direct_tls, lambda s: b"/", connection_per_request=True),
        Route(_tunnel, lambda s: b"/", connection_per_request=True),
    ),
}


async def _close(streams: Streams) -> None:
    streams[1].close()
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        await streams[1].wait_closed()


async def _worker(setup: Setup, route: Route, count: int, samples: list[float]) -> None:
    target = route.target(setup)
    if route.connection_per_request:
        for _ in range(count):
            started = time.perf_counter()
            streams = await route.open(setup)
            await _get(streams, target)
            samples.append(time.perf_counter() - started)
            await _close(streams)
        return
    streams = await route.open(setup)
    for _ in range(count):
        samples.append(await _get(streams, target))
    await _close(streams)


@dataclass
class Result:
    per_second: float
    p50_ms: float
    p95_ms: float


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


async def _measure(setup: Setup, route: Route, requests: int, concurrency: int) -> Result:
    await _worker(setup, route, 5, [])  # warm-up
    samples: list[float] = []
    per_worker = max(1, requests // concurrency)
    started = time.perf_counter()
    await asyncio.gather(*(_worker(setup, route, per_worker, samples) for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return Result(len(samples) / elapsed, statistics.median(samples) * 1000, _p95(samples) * 1000)


def _line(name: str, concurrency: int, direct: Result, proxied: Result) -> str:
    return (
        f"  {name:<25} C={concurrency:<3} "
        f"direct {direct.per_second:7.0f} req/s p50 {direct.p50_ms:6.2f} ms p95 {direct.p95_ms:6.2f} ms | "
        f"proxy {proxied.per_second:7.0f} req/s p50 {proxied.p50_ms:6.2f} ms p95 {proxied.p95_ms:6.2f} ms | "
        f"added p50 {proxied.p50_ms - direct.p50_ms:+6.2f} ms p95 {proxied.p95_ms - direct.p95_ms:+6.2f} ms, "
        f"throughput x{proxied.per_second / direct.per_second:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000, help="GETs per series")
    parser.add_argument(
        "--tunnels", type=int, default=300, help="GETs per 'tunnel per request' series"
    )
    parser.add_argument("--concurrency", type=int, nargs="*", default=[1, 20])
    args = parser.parse_args()

    cert, key = _self_signed()
    spawn = multiprocessing.get_context("spawn")
    upstream_ports: multiprocessing.Queue[tuple[int, int]] = spawn.Queue()
    proxy_ports: multiprocessing.Queue[int] = spawn.Queue()
    upstreams = spawn.Process(target=_upstreams, args=(upstream_ports, cert, key), daemon=True)
    upstreams.start()
    http_port, https_port = upstream_ports.get(timeout=30)
    entries = [f"localhost:{http_port}", f"localhost:{https_port}"]
    proxy = spawn.Process(target=_proxy, args=(proxy_ports, entries), daemon=True)
    proxy.start()
    try:
        setup = Setup(
            http_port,
            https_port,
            proxy_ports.get(timeout=30),
            ssl.create_default_context(cadata=cert.decode()),
        )
        print(
            "egress proxy: small GETs to a loopback server, direct vs through the proxy "
            "(upstreams, proxy and clients in three processes)"
        )
        for name, (direct_route, proxy_route) in SCENARIOS.items():
            count = args.tunnels if direct_route.connection_per_request else args.requests
            for concurrency in args.concurrency:
                direct = asyncio.run(_measure(setup, direct_route, count, concurrency))
                proxied = asyncio.run(_measure(setup, proxy_route, count, concurrency))
                print(_line(name, concurrency, direct, proxied), flush=True)
    finally:
        proxy.terminate()
        upstreams.terminate()
        proxy.join(10)
        upstreams.join(10)


if __name__ == "__main__":
    main()
