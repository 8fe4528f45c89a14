"""Requests control and web make to a URL an owner typed go through one guard, so a tenant
cannot point them at the operator's network (SSRF): MCP (control's proxy, Test connection,
OAuth discovery and token requests) and model providers (the model gateway, a provider
key's Test connection).

The guard is an httpcore network backend: for every new connection it resolves the host
once, checks every address it resolves to with the egress proxy's address rules
(`address_allowed`: private, loopback, link-local, CGNAT, metadata, IPv4-mapped...), and dials
the checked address itself, so no second lookup can answer something else (DNS rebinding).
httpcore still passes the host name for TLS, so SNI and the certificate check are the name's.
Redirects open connections through the same backend and are checked the same way.

Each feature has its own setting (a `Reach`): `MOSOO_MCP_ALLOW_PRIVATE_NETWORKS=true` and
`MOSOO_PROVIDER_ALLOW_PRIVATE_NETWORKS=true` let private, loopback and CGNAT addresses
through, for an operator whose MCP servers, or models (Ollama, vLLM), live on their own
network; the metadata service and other link-local addresses stay refused whatever the
setting (no MCP server or model lives there).

httpx (control's proxy, OAuth) and httpx2 (the `mcp` SDK's fork, Test connection) each have
their own httpcore (`httpcore`, `httpcore2`): the same checks, one backend class per library.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import anyio
import anyio.to_thread
import httpcore
import httpcore2
import httpx
import httpx2

from mosoo_core.network.policy import address_allowed, is_ip_literal
from mosoo_core.settings import get_settings

# What no setting lets through: the cloud metadata service and the link-local range it lives
# in (ECS and EKS credentials, Azure's DNS...), and anything that is not an address.
ALWAYS_REFUSED = frozenset({"metadata_address", "link_local_address", "invalid_address"})
_PHRASES = {
    "loopback_address": "a loopback address",
    "private_address": "a private address",
    "cgnat_address": "a carrier-grade NAT address",
    "link_local_address": "a link-local address",
    "metadata_address": "the cloud metadata address",
    "unspecified_address": "an unspecified address",
    "multicast_address": "a multicast address",
    "broadcast_address": "the broadcast address",
    "reserved_address": "a reserved address",
    "invalid_address": "an invalid address",
}
# As httpx's defaults.
_MAX_CONNECTIONS = 100
_MAX_KEEPALIVE_CONNECTIONS = 20
_KEEPALIVE_EXPIRY = 5.0

Resolver = Callable[[str, int], Sequence[str]]


@dataclass(frozen=True)
class Reach:
    """Which feature's setting lets private networks through, and how a refusal says so."""

    setting: str  # the environment variable
    hint: str  # "if <hint>"
    allowed: Callable[[], bool]


MCP = Reach(
    "MOSOO_MCP_ALLOW_PRIVATE_NETWORKS",
    "your MCP servers live on your own network",
    lambda: get_settings().mcp_allow_private_networks,
)
PROVIDERS = Reach(
    "MOSOO_PROVIDER_ALLOW_PRIVATE_NETWORKS",
    "your models are served on your own network (Ollama, vLLM)",
    lambda: get_settings().provider_allow_private_networks,
)
ALLOW_PRIVATE_SETTING = MCP.setting


def describe_refusal(
    subject: str, reason: str, address: str | None = None, *, reach: Reach = MCP
) -> str:
    """One line for the owner: what was refused and, when the setting would lift it, how."""
    phrase = _PHRASES.get(reason, reason.replace("_", " "))
    if address is None:
        text = f"refused: {subject} resolves to {phrase}"
    elif address == subject:
        text = f"refused: {subject} is {phrase}"
    else:
        text = f"refused: {subject} resolves to {phrase} ({address})"
    if reason in ALWAYS_REFUSED:
        return text
    return f"{text}; set {reach.setting}=true if {reach.hint}"


class OutboundRefused(Exception):
    """A connection the guard would not make: `host` resolves to `address`, refused for
    `reason` (one of `address_allowed`'s)."""

    def __init__(self, host: str, address: str, reason: str, reach: Reach = MCP) -> None:
        super().__init__(describe_refusal(host, reason, address, reach=reach))
        self.reach = reach
        self.host = host
        self.address = address
        self.reason = reason


# Raised inside each library's connection pool as its own ConnectError, so httpx and httpx2
# report a refusal as any failed connection (`httpx.ConnectError`, caused by the refusal).
class _Refused(OutboundRefused, httpcore.ConnectError):
    pass


class _Refused2(OutboundRefused, httpcore2.ConnectError):
    pass


def refusal_in(error: BaseException) -> OutboundRefused | None:
    """The guard's refusal behind `error` (its causes, and the members of exception groups)."""
    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending:
        item = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, OutboundRefused):
            return item
        if isinstance(item, BaseExceptionGroup):
            pending += item.exceptions
        pending += [linked for linked in (item.__cause__, item.__context__) if linked is not None]
    return None


def private_networks_allowed() -> bool:
    """`MOSOO_MCP_ALLOW_PRIVATE_NETWORKS`: the operator's servers live on their own network."""
    return MCP.allowed()


def address_refusal(
    ip: str, *, allow_private: bool | None = None, reach: Reach = MCP
) -> str | None:
    """None when an outbound connection may go to `ip`, else `address_allowed`'s reason.
    `allow_private` None reads the reach's setting."""
    if allow_private is None:
        allow_private = reach.allowed()
    reason = address_allowed(ip)
    if reason is None or (allow_private and reason not in ALWAYS_REFUSED):
        return None
    return reason


def literal_address(host: str) -> str | None:
    """The address an IP-literal host names (`10.0.0.5`, `[::1]`'s `::1`, and the spellings a
    resolver reads as IPv4: `127.1`, `2130706433`, `0x7f000001`...), else None."""
    if not is_ip_literal(host):
        return None
    candidate = host.strip("[]")
    try:
        address = ipaddress.ip_address(candidate)
    except ValueError:
        pass
    else:
        mapped = getattr(address, "ipv4_mapped", None)
        return f"::ffff:{mapped}" if mapped is not None else str(address)
    try:
        return str(ipaddress.IPv4Address(socket.inet_aton(candidate)))
    except (OSError, ValueError):
        return None


def literal_refusal(
    host: str, *, allow_private: bool | None = None, reach: Reach = MCP
) -> str | None:
    """The refusal message for a URL whose host is an IP literal of a refused range (checked
    before any connection, for a form error), else None; names go through the guard."""
    address = literal_address(host)
    if address is None:
        return None
    reason = address_refusal(address, allow_private=allow_private, reach=reach)
    return describe_refusal(host, reason, address, reach=reach) if reason else None


def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to for TCP, in the resolver's order, each once."""
    answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(answer[4][0]) for answer in answers))


@dataclass(frozen=True)
class OutboundGuard:
    """The rules of one client: `allow_private` None reads the reach's setting at each
    connection (so a changed environment applies without rebuilding clients); `resolver` is
    the system's."""

    allow_private: bool | None = None
    resolver: Resolver = resolve
    reach: Reach = MCP

    def check(self, host: str, addresses: Iterable[str]) -> list[str]:
        """`addresses` when every one may be dialled; `OutboundRefused` naming the first that
        may not (one bad answer refuses the name: the next lookup could pick it)."""
        checked = list(addresses)
        allow_private = self.reach.allowed() if self.allow_private is None else self.allow_private
        for address in checked:
            reason = address_refusal(address, allow_private=allow_private)
            if reason is not None:
                raise OutboundRefused(host, address, reason, self.reach)
        return checked


def _checked(
    guard: OutboundGuard, host: str, answers: Sequence[str], refused: type[OutboundRefused]
) -> list[str]:
    """The answers to dial, or the refusal as the calling library's own ConnectError."""
    try:
        addresses = guard.check(host, answers)
    except OutboundRefused as refusal:
        raise refused(refusal.host, refusal.address, refusal.reason, refusal.reach) from None
    if not addresses:
        raise OSError(f"{host} resolves to no address")
    return addresses


async def _checked_async(
    guard: OutboundGuard,
    host: str,
    port: int,
    timeout: float | None,
    refused: type[OutboundRefused],
) -> list[str]:
    # getaddrinfo blocks: in a worker thread, as asyncio's own lookup does.
    with anyio.fail_after(timeout):
        answers = await anyio.to_thread.run_sync(guard.resolver, host, port, abandon_on_cancel=True)
    return _checked(guard, host, answers, refused)


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def _remaining(deadline: float | None) -> float | None:
    # One connect timeout for the lookup and every address, as the egress proxy's.
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


# --- httpcore (httpx) -----------------------------------------------------------------------


class GuardedBackend(httpcore.NetworkBackend):
    """httpcore's sync backend, dialling only addresses the guard checked. `dial` makes the
    connection to one address (httpcore's own backend unless given)."""

    def __init__(self, guard: OutboundGuard, dial: httpcore.NetworkBackend | None = None) -> None:
        self._guard = guard
        self._dial = dial or httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        deadline = _deadline(timeout)
        try:
            addresses = _checked(self._guard, host, self._guard.resolver(host, port), _Refused)
        except OSError as error:  # socket.gaierror: the name does not resolve
            raise httpcore.ConnectError(f"{host}: {error}") from error
        failure: Exception | None = None
        for address in addresses:
            try:
                return self._dial.connect_tcp(
                    address, port, _remaining(deadline), local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                failure = error
        assert failure is not None
        raise failure

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("outbound requests do not use Unix sockets")

    def sleep(self, seconds: float) -> None:
        self._dial.sleep(seconds)


async def _connect_checked(
    guard: OutboundGuard,
    dial: Any,
    lib: ModuleType,
    refused: type[OutboundRefused],
    host: str,
    port: int,
    timeout: float | None,
    local_address: str | None,
    socket_options: Iterable[Any] | None,
) -> Any:
    # The async connect of both httpcore generations (`lib`: httpcore or httpcore2, whose
    # APIs are the same): resolve, check every address, dial the first that answers.
    deadline = _deadline(timeout)
    try:
        addresses = await _checked_async(guard, host, port, timeout, refused)
    except TimeoutError as error:
        raise lib.ConnectTimeout(f"{host}: the name did not resolve in time") from error
    except OSError as error:
        raise lib.ConnectError(f"{host}: {error}") from error
    failure: Exception | None = None
    for address in addresses:
        try:
            return await dial.connect_tcp(
                address, port, _remaining(deadline), local_address, socket_options
            )
        except (lib.ConnectError, lib.ConnectTimeout) as error:
            failure = error
    assert failure is not None
    raise failure


class AsyncGuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's async backend (anyio, so asyncio and trio), dialling only checked addresses."""

    def __init__(
        self, guard: OutboundGuard, dial: httpcore.AsyncNetworkBackend | None = None
    ) -> None:
        self._guard = guard
        self._dial = dial or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream: httpcore.AsyncNetworkStream = await _connect_checked(
            self._guard, self._dial, httpcore, _Refused,
            host, port, timeout, local_address, socket_options,
        )  # fmt: skip
        return stream

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("outbound requests do not use Unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._dial.sleep(seconds)


# --- httpcore2 (httpx2, the mcp SDK's client) -----------------------------------------------


class AsyncGuardedBackend2(httpcore2.AsyncNetworkBackend):
    """`AsyncGuardedBackend` for httpcore2."""

    def __init__(
        self, guard: OutboundGuard, dial: httpcore2.AsyncNetworkBackend | None = None
    ) -> None:
        self._guard = guard
        self._dial = dial or httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        stream: httpcore2.AsyncNetworkStream = await _connect_checked(
            self._guard, self._dial, httpcore2, _Refused2,
            host, port, timeout, local_address, socket_options,
        )  # fmt: skip
        return stream

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("outbound requests do not use Unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._dial.sleep(seconds)


# --- transports -----------------------------------------------------------------------------
# httpx's transports take no network backend: each is built as usual (TLS context, limits),
# then given a connection pool of the same settings whose backend is the guard.


def transport(
    guard: OutboundGuard | None = None, *, dial: httpcore.NetworkBackend | None = None
) -> httpx.HTTPTransport:
    """A sync httpx transport whose every connection goes through the guard (`dial`: what
    connects to a checked address, httpcore's own backend unless given)."""
    ssl_context = httpx.create_ssl_context()
    built = httpx.HTTPTransport(verify=ssl_context)
    built._pool = httpcore.ConnectionPool(
        ssl_context=ssl_context,
        max_connections=_MAX_CONNECTIONS,
        max_keepalive_connections=_MAX_KEEPALIVE_CONNECTIONS,
        keepalive_expiry=_KEEPALIVE_EXPIRY,
        network_backend=GuardedBackend(guard or OutboundGuard(), dial),
    )
    return built


def async_transport(
    guard: OutboundGuard | None = None, *, dial: httpcore.AsyncNetworkBackend | None = None
) -> httpx.AsyncHTTPTransport:
    """An async httpx transport whose every connection goes through the guard."""
    ssl_context = httpx.create_ssl_context()
    built = httpx.AsyncHTTPTransport(verify=ssl_context)
    built._pool = httpcore.AsyncConnectionPool(
        ssl_context=ssl_context,
        max_connections=_MAX_CONNECTIONS,
        max_keepalive_connections=_MAX_KEEPALIVE_CONNECTIONS,
        keepalive_expiry=_KEEPALIVE_EXPIRY,
        network_backend=AsyncGuardedBackend(guard or OutboundGuard(), dial),
    )
    return built


def async_transport2(
    guard: OutboundGuard | None = None, *, dial: httpcore2.AsyncNetworkBackend | None = None
) -> httpx2.AsyncHTTPTransport:
    """An async httpx2 transport (for the `mcp` SDK) whose every connection goes through the
    guard."""
    ssl_context = httpx2.create_ssl_context()
    built = httpx2.AsyncHTTPTransport(verify=ssl_context)
    built._pool = httpcore2.AsyncConnectionPool(
        ssl_context=ssl_context,
        max_connections=_MAX_CONNECTIONS,
        max_keepalive_connections=_MAX_KEEPALIVE_CONNECTIONS,
        keepalive_expiry=_KEEPALIVE_EXPIRY,
        network_backend=AsyncGuardedBackend2(guard or OutboundGuard(), dial),
    )
    return built
