"""The `limited` network policy: which host names an environment's owner allows, and which
addresses a sandbox may ever reach.

Two checks, both needed. `EgressPolicy.check_target` decides on the *name* a request asks
for (exact hosts and `*.suffix` entries, ports 80 and 443 unless an entry names one; IP
literals are refused in every spelling, so the only way to an address is through a name on
the list). `address_allowed` decides on every *address* that name resolves to: only globally
routable unicast passes, so an allowed name pointing at 10.0.0.5, 127.0.0.1 or the cloud
metadata service is refused all the same. Both sides go through one normalization
(`normalize_host`), so a name cannot be spelled past the list.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass

MAX_ALLOWED_HOSTS = 100
DEFAULT_PORTS = frozenset({80, 443})
# The one IP literal the test-only loopback mode lets through, spelled exactly so.
LOOPBACK_LITERAL = "127.0.0.1"

_MAX_NAME = 253
_MAX_LABEL = 63
# Letters, digits, hyphens inside (RFC 1123), and underscores, which real names do carry.
_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")
_PORT = re.compile(r"[0-9]{1,5}")
# The WHATWG URL parser reads a host whose last label is a number (decimal, or `0x` hex,
# even an empty `0x`) as IPv4 and never as a name; browsers and curl agree, so do we.
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")
# ASCII that may appear in a host name before IDNA encoding; anything else ASCII (`/`, `%`,
# `\`, `?`, `#`, space, controls...) is a URL smuggled into a host and is refused.
_ASCII_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


@dataclass(frozen=True)
class Decision:
    """The proxy's answer to one request: `reason` is `allowed` or why it was refused."""

    allowed: bool
    reason: str


@dataclass(frozen=True)
class AllowedHost:
    """One validated allowlist entry: `host` is normalized (lower-case, IDNA, no trailing
    dot); `wildcard` means any subdomain of `host` but not `host` itself; `port` None means
    80 and 443."""

    host: str
    wildcard: bool = False
    port: int | None = None

    def matches_host(self, host: str) -> bool:
        """`host` must already be normalized; a look-alike such as `evilexample.com` never
        ends in `.example.com`."""
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host

    def matches_port(self, port: int) -> bool:
        return port == self.port if self.port is not None else port in DEFAULT_PORTS

    def __str__(self) -> str:
        name = f"*.{self.host}" if self.wildcard else self.host
        return f"{name}:{self.port}" if self.port is not None else name


_NOT_ALLOWED = Decision(False, "not_allowed")


class _Refused(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def is_ip_literal(host: str) -> bool:
    """True for an address in any spelling a resolver or URL parser would read as one:
    dotted, short (`127.1`), decimal (`2130706433`), hex (`0x7f000001`, `0x7f.0.0.1`),
    octal (`0177.0.0.1`), any IPv6 form (anything with `:` or brackets), or a name whose
    last label is a number (`foo.123`)."""
    if any(char in host for char in ":[]"):
        return True
    candidate = host.lower().removesuffix(".")
    try:
        socket.inet_aton(candidate)
        return True
    except (OSError, ValueError):  # ValueError: a NUL or non-ASCII character
        pass
    try:
        ipaddress.ip_address(candidate)
        return True
    except ValueError:
        pass
    return bool(_NUMERIC_LABEL.fullmatch(candidate.rsplit(".", 1)[-1]))


def _normalize(raw: str) -> str:
    """The one spelling of a host name used for matching, DNS and the SNI comparison."""
    if not raw or len(raw) > _MAX_NAME + 1:
        raise _Refused("invalid_host")
    if "@" in raw:
        raise _Refused("userinfo")
    if is_ip_literal(raw):
        raise _Refused("ip_literal")
    if any(char.isascii() and char not in _ASCII_HOST_CHARS for char in raw):
        raise _Refused("invalid_host")
    host = raw.lower().removesuffix(".")
    try:
        host = host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise _Refused("invalid_host") from None
    labels = host.split(".")
    if len(host) > _MAX_NAME or not all(_LABEL.fullmatch(label) for label in labels):
        raise _Refused("invalid_host")
    # Unicode spells digits and dots too (fullwidth `127.0.0.1`): check the result again.
    if is_ip_literal(host):
        raise _Refused("ip_literal")
    return host


def normalize_host(host: str) -> str:
    """Lower-case, one trailing dot stripped, IDNA-encoded; `ValueError` (naming the reason)
    for userinfo, IP literals and anything that is not a valid host name."""
    try:
        return _normalize(host)
    except _Refused as refused:
        raise ValueError(f"{refused.reason}: {host!r}") from None


def _parse_port(text: str) -> int | None:
    """A port written in ASCII digits, 1-65535 (`str.isdigit` would take `٨٠`)."""
    if not _PORT.fullmatch(text):
        return None
    port = int(text)
    return port if 1 <= port <= 65535 else None


def parse_allowed_host(entry: str, *, allow_loopback: bool = False) -> AllowedHost:
    """Validate one allowlist entry an owner typed: `api.example.com`, `*.example.com`,
    either with an optional `:port`. `ValueError` naming the entry otherwise.

    With `allow_loopback` (the test-only mode), `127.0.0.1:<port>` is accepted too; it only
    ever matches under a policy that has `allow_loopback` as well.
    """
    if not isinstance(entry, str) or not entry:
        raise ValueError("allowed host entry is empty")
    if any(char.isspace() for char in entry):
        raise ValueError(f"allowed host {entry!r}: contains whitespace")
    if "/" in entry or "@" in entry:
        raise ValueError(f"allowed host {entry!r}: a host name only, no scheme, path or user")
    name, port = entry, None
    if entry.count(":") == 1 and "[" not in entry:
        name, _, port_text = entry.rpartition(":")
        port = _parse_port(port_text)
        if port is None:
            raise ValueError(f"allowed host {entry!r}: port must be 1-65535")
    if allow_loopback and name == LOOPBACK_LITERAL and port is not None:
        return AllowedHost(host=LOOPBACK_LITERAL, port=port)
    wildcard = name.startswith("*.")
    suffix = name[2:] if wildcard else name
    if "*" in suffix:
        raise ValueError(f"allowed host {entry!r}: a wildcard may only be a leading '*.'")
    try:
        host = _normalize(suffix)
    except _Refused as refused:
        raise ValueError(f"allowed host {entry!r}: {_ENTRY_PROBLEMS[refused.reason]}") from None
    # `*.com` would open a whole top-level domain: a wildcard needs a registrable suffix.
    if wildcard and "." not in host:
        raise ValueError(f"allowed host {entry!r}: a wildcard needs at least two labels")
    return AllowedHost(host=host, wildcard=wildcard, port=port)


_ENTRY_PROBLEMS = {
    "invalid_host": "not a valid host name",
    "ip_literal": "IP addresses are not allowed, only host names",
    "userinfo": "a host name only, no user",
}


def parse_allowlist(
    entries: Iterable[str], *, allow_loopback: bool = False
) -> tuple[AllowedHost, ...]:
    """Validate an owner's list: each entry as `parse_allowed_host`, duplicates (after
    normalization) dropped, order kept, at most `MAX_ALLOWED_HOSTS`."""
    parsed: dict[AllowedHost, None] = {}
    for entry in entries:
        parsed.setdefault(parse_allowed_host(entry, allow_loopback=allow_loopback))
        if len(parsed) > MAX_ALLOWED_HOSTS:
            raise ValueError(f"at most {MAX_ALLOWED_HOSTS} allowed hosts")
    return tuple(parsed)


@dataclass(frozen=True)
class EgressPolicy:
    """A run's frozen `limited` policy. `allow_loopback` is a test-only mode: entries
    `127.0.0.1:<port>` match and DNS answers on loopback pass; all else stays refused."""

    allowed: tuple[AllowedHost, ...]
    allow_loopback: bool = False

    @classmethod
    def from_entries(cls, entries: Iterable[str], *, allow_loopback: bool = False) -> EgressPolicy:
        return cls(parse_allowlist(entries, allow_loopback=allow_loopback), allow_loopback)

    def check_target(self, host: str, port: int) -> Decision | None:
        """None when `host:port` passes the list (its addresses are checked after DNS),
        else the refusal: `userinfo`, `ip_literal`, `invalid_host`, `not_allowed`,
        `port_not_allowed`."""
        if not 1 <= port <= 65535:
            return Decision(False, "port_not_allowed")
        if self.allow_loopback and host == LOOPBACK_LITERAL:
            decision = self._match(LOOPBACK_LITERAL, port)
            # Unlisted, it is just another IP literal.
            return Decision(False, "ip_literal") if decision == _NOT_ALLOWED else decision
        try:
            name = _normalize(host)
        except _Refused as refused:
            return Decision(False, refused.reason)
        return self._match(name, port)

    def _match(self, host: str, port: int) -> Decision | None:
        candidates = [entry for entry in self.allowed if entry.matches_host(host)]
        if not candidates:
            return _NOT_ALLOWED
        if not any(entry.matches_port(port) for entry in candidates):
            return Decision(False, "port_not_allowed")
        return None


# --- addresses ------------------------------------------------------------------------------


_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _networks(*pairs: tuple[str, str]) -> tuple[tuple[_Network, str], ...]:
    return tuple((ipaddress.ip_network(network), reason) for network, reason in pairs)


# Checked in order, first match wins (the metadata address before its link-local range).
# Anything not listed must still be `is_global`, and IPv6 must be in 2000::/3.
_REFUSED_V4 = _networks(
    ("169.254.169.254/32", "metadata_address"),  # AWS, GCP, Azure, OpenStack, Oracle
    ("0.0.0.0/8", "unspecified_address"),
    ("10.0.0.0/8", "private_address"),
    ("172.16.0.0/12", "private_address"),
    ("192.168.0.0/16", "private_address"),
    ("100.64.0.0/10", "cgnat_address"),  # includes Alibaba's metadata, 100.100.100.200
    ("169.254.0.0/16", "link_local_address"),
    ("224.0.0.0/4", "multicast_address"),
    ("255.255.255.255/32", "broadcast_address"),
    ("240.0.0.0/4", "reserved_address"),
    ("192.0.0.0/24", "reserved_address"),  # IETF protocol assignments
    ("192.0.2.0/24", "reserved_address"),  # documentation
    ("198.51.100.0/24", "reserved_address"),
    ("203.0.113.0/24", "reserved_address"),
    ("198.18.0.0/15", "reserved_address"),  # benchmarking
    ("192.88.99.0/24", "reserved_address"),  # old 6to4 relays
)
_REFUSED_V6 = _networks(
    ("fd00:ec2::254/128", "metadata_address"),  # AWS over IPv6
    ("fc00::/7", "private_address"),  # unique local
    ("fec0::/10", "private_address"),  # old site-local
    ("fe80::/10", "link_local_address"),
    ("ff00::/8", "multicast_address"),
    ("64:ff9b:1::/48", "private_address"),  # local-use NAT64
    ("100::/64", "reserved_address"),  # discard
    ("2001:db8::/32", "reserved_address"),  # documentation
    ("3fff::/20", "reserved_address"),  # documentation
    ("2001::/23", "reserved_address"),  # IETF protocol assignments (Teredo is unwrapped first)
    ("2002::/16", "reserved_address"),  # 6to4, deprecated (RFC 7526)
)
_LOOPBACK_V4 = ipaddress.ip_network("127.0.0.0/8")
_LOOPBACK_V6 = ipaddress.IPv6Address("::1")
_UNSPECIFIED_V6 = ipaddress.IPv6Address("::")
_GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 form carries (and a dual-stack host would reach):
    mapped, translated, compatible, NAT64, 6to4, and Teredo's server and client."""
    if address.ipv4_mapped is not None:
        return [address.ipv4_mapped]
    if address.teredo is not None:
        return list(address.teredo)
    if address.sixtofour is not None:
        return [address.sixtofour]
    if any(address in network for network in (_NAT64, _IPV4_TRANSLATED, _IPV4_COMPATIBLE)):
        return [ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)]
    return []


def _classify_v4(address: ipaddress.IPv4Address, allow_loopback: bool) -> str | None:
    if address in _LOOPBACK_V4:
        return None if allow_loopback else "loopback_address"
    for network, reason in _REFUSED_V4:
        if address in network:
            return reason
    return None if address.is_global else "reserved_address"


def _classify_v6(address: ipaddress.IPv6Address) -> str | None:
    for network, reason in _REFUSED_V6:
        if address in network:
            return reason
    if address not in _GLOBAL_UNICAST_V6 or not address.is_global:
        return "reserved_address"
    return None


def address_allowed(ip: str, allow_loopback: bool = False) -> str | None:
    """None when `ip` (a resolver's answer) is globally routable unicast, else why not:
    `loopback_address`, `private_address`, `cgnat_address`, `link_local_address`,
    `metadata_address`, `unspecified_address`, `multicast_address`, `broadcast_address`,
    `reserved_address`, `invalid_address`. IPv6 forms that embed an IPv4 address are judged
    by that address too; only mapped (::ffff:a.b.c.d) and NAT64 (64:ff9b::/96) forms of a
    global IPv4 address pass, the others (Teredo, compatible...) are not web servers' addresses
    and stay refused. `allow_loopback` lets 127.0.0.0/8 and ::1 through (test-only)."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return "invalid_address"
    if isinstance(address, ipaddress.IPv4Address):
        return _classify_v4(address, allow_loopback)
    # The scope (`%eth0`) only says which link; the address alone decides.
    address = ipaddress.IPv6Address(int(address))
    # Before the embedded forms: ::1 and :: would read as IPv4-compatible 0.0.0.1 and 0.0.0.0.
    if address == _LOOPBACK_V6:
        return None if allow_loopback else "loopback_address"
    if address == _UNSPECIFIED_V6:
        return "unspecified_address"
    for embedded in _embedded_ipv4(address):
        reason = _classify_v4(embedded, allow_loopback)
        if reason is not None:
            return reason
    if address.ipv4_mapped is not None or address in _NAT64:
        return None  # a global IPv4 address written as IPv6, judged as IPv4 above
    return _classify_v6(address)
