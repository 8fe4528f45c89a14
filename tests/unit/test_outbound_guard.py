"""The outbound guard of the MCP feature: which addresses control and web may connect to
(the egress proxy's rules, lifted for private networks by the operator's setting, never for
the metadata service), a name resolved once and dialled at the address that was checked
(TLS still for the name), redirects checked like any connection, and the refusal as a
`ConnectError` of each client library. Refusals of private ranges are checked as decisions
or against a recording dial; only loopback is ever connected to."""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import anyio
import httpcore
import httpcore2
import httpx
import httpx2
import pytest

from mosoo_core.network import outbound
from mosoo_core.network.outbound import OutboundGuard, OutboundRefused
from tests.support.mcp_server import allow_private_networks

HINT = "set MOSOO_MCP_ALLOW_PRIVATE_NETWORKS=true if your MCP servers live on your own network"
PUBLIC_V4 = "93.184.215.14"  # never dialled: the tests that pass it dial a recorder
PUBLIC_V6 = "2606:4700:4700::1111"
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("10.0.0.5", "private_address"),
        ("172.16.3.4", "private_address"),
        ("192.168.1.1", "private_address"),
        ("127.0.0.1", "loopback_address"),
        ("127.8.9.10", "loopback_address"),
        ("100.64.0.1", "cgnat_address"),
        ("169.254.169.254", "metadata_address"),
        ("169.254.170.2", "link_local_address"),
        ("0.0.0.0", "unspecified_address"),
        ("::1", "loopback_address"),
        ("fd00::1", "private_address"),
        ("fe80::1", "link_local_address"),
        ("fd00:ec2::254", "metadata_address"),
        ("::ffff:127.0.0.1", "loopback_address"),
        ("::ffff:10.0.0.5", "private_address"),
        ("::ffff:169.254.169.254", "metadata_address"),
        ("64:ff9b::a00:5", "private_address"),  # NAT64 of 10.0.0.5
    ],
)
def test_private_loopback_metadata_and_mapped_addresses_are_refused(
    address: str, reason: str
) -> None:
    assert outbound.address_refusal(address, allow_private=False) == reason


@pytest.mark.parametrize("address", [PUBLIC_V4, PUBLIC_V6, f"::ffff:{PUBLIC_V4}"])
def test_public_addresses_pass(address: str) -> None:
    assert outbound.address_refusal(address, allow_private=False) is None


def test_allowing_private_networks_never_lets_the_metadata_service_through() -> None:
    for address in ("10.0.0.5", "127.0.0.1", "::1", "100.64.0.1", "fd00::1", "::ffff:10.0.0.5"):
        assert outbound.address_refusal(address, allow_private=True) is None, address
    for address in ("169.254.169.254", "::ffff:169.254.169.254", "fd00:ec2::254", "fe80::1"):
        assert outbound.address_refusal(address, allow_private=True) is not None, address


def test_the_setting_decides_when_the_guard_is_not_told(monkeypatch: pytest.MonkeyPatch) -> None:
    assert outbound.address_refusal("10.0.0.5") == "private_address"
    allow_private_networks(monkeypatch)
    assert outbound.address_refusal("10.0.0.5") is None
    assert outbound.address_refusal("169.254.169.254") == "metadata_address"


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("10.0.0.5", "10.0.0.5"),
        ("[::1]", "::1"),
        ("::ffff:7f00:1", "::ffff:127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
    ],
)
def test_every_spelling_of_an_address_is_read_as_that_address(host: str, address: str) -> None:
    assert outbound.literal_address(host) == address


def test_a_literal_s_refusal_names_it_and_the_setting_and_a_name_is_left_to_the_resolver() -> None:
    assert outbound.literal_refusal("10.0.0.5", allow_private=False) == (
        f"refused: 10.0.0.5 is a private address; {HINT}"
    )
    assert outbound.literal_refusal("169.254.169.254", allow_private=True) == (
        "refused: 169.254.169.254 is the cloud metadata address"
    )
    assert outbound.literal_refusal("mcp.example.com", allow_private=False) is None
    assert outbound.literal_refusal(PUBLIC_V4, allow_private=False) is None


def _resolver(answers: dict[str, list[str]]) -> outbound.Resolver:
    def resolve(host: str, port: int) -> Sequence[str]:
        return answers[host]

    return resolve


def test_a_name_is_refused_when_any_of_its_addresses_is() -> None:
    guard = OutboundGuard(
        allow_private=False,
        resolver=_resolver({"mixed.example.com": [PUBLIC_V4, "10.0.0.5"]}),
    )
    with pytest.raises(OutboundRefused) as refused:
        guard.check("mixed.example.com", guard.resolver("mixed.example.com", 443))
    assert str(refused.value) == (
        f"refused: mixed.example.com resolves to a private address (10.0.0.5); {HINT}"
    )
    assert (refused.value.host, refused.value.address, refused.value.reason) == (
        "mixed.example.com",
        "10.0.0.5",
        "private_address",
    )


# --- through the clients, on loopback ---------------------------------------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[str]

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Host", ""))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def local() -> Iterator[tuple[int, list[str]]]:
    """An HTTP server on 127.0.0.1: its port and the Host header of every request it got."""
    seen: list[str] = []
    handler = type("Handler", (_Recorder,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], seen
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_a_name_resolving_to_loopback_is_refused_by_every_client(
    local: tuple[int, list[str]],
) -> None:
    port, seen = local
    url = f"http://localhost:{port}/"
    guard = OutboundGuard(allow_private=False)
    with (
        httpx.Client(transport=outbound.transport(guard)) as client,
        pytest.raises(httpx.ConnectError) as refused,
    ):
        client.get(url)
    found = outbound.refusal_in(refused.value)
    assert found is not None and found.reason == "loopback_address"
    assert str(refused.value).startswith("refused: localhost resolves to a loopback address (")

    async def both_async_clients() -> None:
        async with httpx.AsyncClient(transport=outbound.async_transport(guard)) as client:
            with pytest.raises(httpx.ConnectError) as refused:
                await client.get(url)
            assert outbound.refusal_in(refused.value) is not None
        async with httpx2.AsyncClient(transport=outbound.async_transport2(guard)) as client2:
            with pytest.raises(httpx2.ConnectError) as refused2:
                await client2.get(url)
            assert outbound.refusal_in(refused2.value) is not None

    anyio.run(both_async_clients)
    assert seen == []


def test_with_the_setting_on_a_loopback_server_is_reached_by_every_client(
    local: tuple[int, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, seen = local
    url = f"http://localhost:{port}/"
    allow_private_networks(monkeypatch)  # read at each connection: the clients are unchanged
    with httpx.Client(transport=outbound.transport()) as client:
        assert client.get(url).text == "ok"

    async def both_async_clients() -> None:
        async with httpx.AsyncClient(transport=outbound.async_transport()) as client:
            assert (await client.get(url)).text == "ok"
        async with httpx2.AsyncClient(transport=outbound.async_transport2()) as client2:
            assert (await client2.get(url)).text == "ok"

    anyio.run(both_async_clients)
    assert seen == [f"localhost:{port}"] * 3


def test_a_name_is_dialled_at_the_address_its_one_lookup_checked(
    local: tuple[int, list[str]],
) -> None:
    port, seen = local
    lookups: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        lookups.append(host)
        # A rebinding resolver: the answer checked first, another for whoever asks next
        # (an address nothing listens on: a second lookup would fail the request).
        return ["127.0.0.1"] if len(lookups) == 1 else ["127.0.0.2"]

    guard = OutboundGuard(allow_private=True, resolver=resolve)
    with httpx.Client(transport=outbound.transport(guard)) as client:
        assert client.get(f"http://mcp.example.test:{port}/").text == "ok"
    assert lookups == ["mcp.example.test"]
    assert seen == [f"mcp.example.test:{port}"]  # the Host is still the name


# --- a recording dial: what would be connected to, without connecting --------------------------


class _Dialled:
    """Every address a backend was asked to connect to, and the TLS name of each connection."""

    def __init__(self, answers: Iterable[bytes] = (ANSWER,)) -> None:
        self.answers = list(answers)
        self.addresses: list[tuple[str, int]] = []
        self.tls_names: list[str | None] = []
        self.sent: list[bytes] = []

    def connected(self, host: str, port: int) -> bytes:
        """Note a connection; the answer it reads (the last one repeats)."""
        self.addresses.append((host, port))
        return self.answers[min(len(self.addresses), len(self.answers)) - 1]


class _Stream(httpcore.NetworkStream):
    def __init__(self, dialled: _Dialled, answer: bytes) -> None:
        self._dialled = dialled
        self._answer = [answer]

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._answer.pop(0) if self._answer else b""

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._dialled.sent.append(buffer)

    def close(self) -> None:
        pass

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        self._dialled.tls_names.append(server_hostname)
        return self


class _Dial(httpcore.NetworkBackend):
    def __init__(self, dialled: _Dialled) -> None:
        self._dialled = dialled

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(self._dialled, self._dialled.connected(host, port))


class _AsyncStream2(httpcore2.AsyncNetworkStream):
    def __init__(self, dialled: _Dialled, answer: bytes) -> None:
        self._sync = _Stream(dialled, answer)
        self._dialled = dialled

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._sync.read(max_bytes)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._sync.write(buffer)

    async def aclose(self) -> None:
        pass

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        self._dialled.tls_names.append(server_hostname)
        return self


class _AsyncDial2(httpcore2.AsyncNetworkBackend):
    def __init__(self, dialled: _Dialled) -> None:
        self._dialled = dialled

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return _AsyncStream2(self._dialled, self._dialled.connected(host, port))


def test_a_public_name_is_dialled_at_its_checked_address_with_tls_for_the_name() -> None:
    dialled = _Dialled()
    guard = OutboundGuard(
        allow_private=False, resolver=_resolver({"mcp.example.com": [PUBLIC_V4, PUBLIC_V6]})
    )
    with httpx.Client(transport=outbound.transport(guard, dial=_Dial(dialled))) as client:
        assert client.get("https://mcp.example.com/mcp").text == "ok"
    assert dialled.addresses == [(PUBLIC_V4, 443)]
    assert dialled.tls_names == ["mcp.example.com"]
    assert b"Host: mcp.example.com\r\n" in b"".join(dialled.sent)


def test_the_mcp_sdk_s_client_is_dialled_at_the_checked_address_too() -> None:
    dialled = _Dialled()
    guard = OutboundGuard(allow_private=False, resolver=_resolver({"mcp.example.com": [PUBLIC_V6]}))

    async def get() -> str:
        transport = outbound.async_transport2(guard, dial=_AsyncDial2(dialled))
        async with httpx2.AsyncClient(transport=transport) as client:
            return (await client.get("https://mcp.example.com:8443/mcp")).text

    assert anyio.run(get) == "ok"
    assert dialled.addresses == [(PUBLIC_V6, 8443)]
    assert dialled.tls_names == ["mcp.example.com"]


def test_a_redirect_is_checked_like_any_connection() -> None:
    moved = b"HTTP/1.1 302 Found\r\nLocation: http://metadata.example.com/latest\r\n"
    dialled = _Dialled([moved + b"Content-Length: 0\r\n\r\n", ANSWER])
    guard = OutboundGuard(
        allow_private=True,
        resolver=_resolver(
            {"mcp.example.com": [PUBLIC_V4], "metadata.example.com": ["169.254.169.254"]}
        ),
    )
    transport = outbound.transport(guard, dial=_Dial(dialled))
    with (
        httpx.Client(transport=transport, follow_redirects=True) as client,
        pytest.raises(httpx.ConnectError) as refused,
    ):
        client.get("http://mcp.example.com/mcp")
    assert str(refused.value) == (
        "refused: metadata.example.com resolves to the cloud metadata address (169.254.169.254)"
    )
    assert dialled.addresses == [(PUBLIC_V4, 80)]
