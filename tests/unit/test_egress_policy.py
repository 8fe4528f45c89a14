"""The `limited` policy's rules, as tables: which allowlist entries an owner may save, which
request targets they let through, and which resolved addresses are ever dialed."""

from __future__ import annotations

import pytest

from mosoo_core.network import (
    AllowedHost,
    Decision,
    EgressPolicy,
    address_allowed,
    is_ip_literal,
    normalize_host,
    parse_allowed_host,
    parse_allowlist,
)
from mosoo_core.network._tls import NotClientHello, parse_client_hello

# --- allowlist entries ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("api.example.com", AllowedHost("api.example.com")),
        ("API.Example.COM", AllowedHost("api.example.com")),
        ("api.example.com.", AllowedHost("api.example.com")),
        ("*.example.com", AllowedHost("example.com", wildcard=True)),
        ("*.Example.com.", AllowedHost("example.com", wildcard=True)),
        ("api.example.com:8443", AllowedHost("api.example.com", port=8443)),
        ("*.example.com:1", AllowedHost("example.com", wildcard=True, port=1)),
        ("pkg.example.com:65535", AllowedHost("pkg.example.com", port=65535)),
        ("localhost", AllowedHost("localhost")),
        ("bücher.example", AllowedHost("xn--bcher-kva.example")),
        ("xn--bcher-kva.example", AllowedHost("xn--bcher-kva.example")),
        ("my_host.example.com", AllowedHost("my_host.example.com")),
        ("a" * 63 + ".com", AllowedHost("a" * 63 + ".com")),
        ("123.example.com", AllowedHost("123.example.com")),
    ],
)
def test_a_valid_entry_is_normalized(entry: str, expected: AllowedHost) -> None:
    assert parse_allowed_host(entry) == expected


@pytest.mark.parametrize(
    "entry",
    [
        "",
        " ",
        "api.example.com ",
        " api.example.com",
        "api .example.com",
        "api.example.com\t",
        "https://api.example.com",
        "http://api.example.com",
        "api.example.com/",
        "api.example.com/path",
        "x/y",
        "user@api.example.com",
        "a@b",
        "*",
        "*.",
        "*.com",
        "**.example.com",
        "*example.com",
        "a.*.example.com",
        "api.*",
        "*.*.example.com",
        "api.example.com:",
        "api.example.com:0",
        "api.example.com:65536",
        "api.example.com:+80",
        "api.example.com:٨٠",
        "api.example.com:80:80",
        "api..example.com",
        ".example.com",
        "example.com..",
        "a" * 64 + ".com",
        ".".join(["a" * 60] * 5),
        "exa%6dple.com",
        "example.com?x",
        "example.com#x",
        "exa\\mple.com",
        "-",
        "-api.example.com",
        "api-.example.com",
        # IP literals, every spelling
        "127.0.0.1",
        "127.0.0.1:8080",
        "8.8.8.8",
        "2130706433",
        "0x7f000001",
        "0x7f.0.0.1",
        "0177.0.0.1",
        "127.1",
        "[::1]",
        "[::1]:443",
        "::1",
        "[::ffff:127.0.0.1]",
        "*.127.0.0.1",
        "*.0.1",
        "example.123",
        "example.0x1f",
    ],
)
def test_an_invalid_entry_is_refused_naming_it(entry: str) -> None:
    with pytest.raises(ValueError, match=r"allowed host|empty") as raised:
        parse_allowed_host(entry)
    if entry:
        assert repr(entry) in str(raised.value)


def test_the_loopback_literal_is_an_entry_only_in_the_test_mode_and_with_a_port() -> None:
    assert parse_allowed_host("127.0.0.1:8080", allow_loopback=True) == AllowedHost(
        "127.0.0.1", port=8080
    )
    with pytest.raises(ValueError):
        parse_allowed_host("127.0.0.1", allow_loopback=True)
    with pytest.raises(ValueError):
        parse_allowed_host("127.1:8080", allow_loopback=True)
    with pytest.raises(ValueError):
        parse_allowed_host("10.0.0.1:8080", allow_loopback=True)


def test_an_allowlist_drops_duplicates_after_normalization_and_keeps_order() -> None:
    assert parse_allowlist(
        ["b.example.com", "A.example.com", "B.EXAMPLE.COM.", "a.example.com"]
    ) == (
        AllowedHost("b.example.com"),
        AllowedHost("a.example.com"),
    )


def test_an_allowlist_holds_at_most_a_hundred_hosts() -> None:
    assert len(parse_allowlist([f"h{i}.example.com" for i in range(100)])) == 100
    with pytest.raises(ValueError, match="at most 100"):
        parse_allowlist([f"h{i}.example.com" for i in range(101)])


def test_an_entry_prints_as_it_would_be_typed() -> None:
    entries = ["*.example.com:8443", "api.example.com"]
    assert [str(entry) for entry in parse_allowlist(entries)] == entries


# --- matching request targets ---------------------------------------------------------------

POLICY = EgressPolicy.from_entries(
    ["api.example.com", "*.example.org", "pkg.example.net:8443", "bücher.example"]
)


@pytest.mark.parametrize(
    ("host", "port"),
    [
        ("api.example.com", 443),
        ("api.example.com", 80),
        ("API.EXAMPLE.COM", 443),
        ("Api.Example.Com.", 443),
        ("a.example.org", 443),
        ("deep.a.example.org", 80),
        ("A.EXAMPLE.ORG.", 443),
        ("pkg.example.net", 8443),
        ("bücher.example", 443),
        ("xn--bcher-kva.example", 443),
        ("BÜCHER.example", 443),
        ("api\u3002example\u3002com", 443),  # ideographic full stop is a label separator
    ],
)
def test_a_listed_target_passes(host: str, port: int) -> None:
    assert POLICY.check_target(host, port) is None


@pytest.mark.parametrize(
    ("host", "port", "reason"),
    [
        ("other.example.com", 443, "not_allowed"),
        ("example.com", 443, "not_allowed"),
        ("example.org", 443, "not_allowed"),  # the wildcard's apex is not included
        ("api.example.com.evil.com", 443, "not_allowed"),
        ("evilapi.example.com", 443, "not_allowed"),
        ("api-example.com", 443, "not_allowed"),
        ("evilexample.org", 443, "not_allowed"),
        ("a.example.org.evil.com", 443, "not_allowed"),
        ("example.org.evil.com", 443, "not_allowed"),
        ("xexample.org", 443, "not_allowed"),
        ("api.example.co", 443, "not_allowed"),
        ("ex\u0430mple.org", 443, "not_allowed"),  # Cyrillic a: another name
        ("api.example.com", 8080, "port_not_allowed"),
        ("api.example.com", 22, "port_not_allowed"),
        ("a.example.org", 8443, "port_not_allowed"),
        ("pkg.example.net", 443, "port_not_allowed"),
        ("pkg.example.net", 80, "port_not_allowed"),
        ("api.example.com", 0, "port_not_allowed"),
        ("api.example.com", 65536, "port_not_allowed"),
        ("api.example.com@evil.com", 443, "userinfo"),
        ("user:pass@api.example.com", 443, "userinfo"),
        ("evil.com@api.example.com", 443, "userinfo"),
        ("api.example.com..", 443, "invalid_host"),
        ("", 443, "invalid_host"),
        ("api.example.com/", 443, "invalid_host"),
        ("api.example.com%2f", 443, "invalid_host"),
        ("api.example.com\\", 443, "invalid_host"),
        ("api.example.com ", 443, "invalid_host"),
        ("api.exam\x00ple.com", 443, "invalid_host"),
        ("a" * 64 + ".example.org", 443, "invalid_host"),
        ("api.example.com\uff0f", 443, "invalid_host"),  # fullwidth solidus becomes "/"
    ],
)
def test_an_unlisted_or_disguised_target_is_refused(host: str, port: int, reason: str) -> None:
    assert POLICY.check_target(host, port) == Decision(False, reason)


IP_LITERALS = [
    "127.0.0.1",
    "127.0.0.1.",
    "8.8.8.8",
    "169.254.169.254",
    "2130706433",
    "0x7f000001",
    "0X7F000001",
    "0x7f.0.0.1",
    "0x7f.0x0.0x0.0x1",
    "0177.0.0.1",
    "0177.0000.0000.0001",
    "127.1",
    "127.0.1",
    "0",
    "0x",
    "017700000001",
    "[::1]",
    "::1",
    "[::]",
    "[::ffff:127.0.0.1]",
    "::ffff:127.0.0.1",
    "[::ffff:7f00:1]",
    "[0:0:0:0:0:ffff:127.0.0.1]",
    "[fe80::1%25eth0]",
    "fe80::1%eth0",
    "[64:ff9b::7f00:1]",
    "[2001:db8::1]",
    "\uff11\uff12\uff17.\uff10.\uff10.\uff11",  # fullwidth 127.0.0.1
    "127\u30020\u30020\u30021",  # ideographic full stops
    "example.123",
    "example.0x7f",
    "api.example.com.1",
]


@pytest.mark.parametrize("host", IP_LITERALS)
def test_an_ip_literal_is_refused_in_every_spelling(host: str) -> None:
    assert POLICY.check_target(host, 443) == Decision(False, "ip_literal")


@pytest.mark.parametrize("host", [h for h in IP_LITERALS if h.isascii()])
def test_every_ascii_spelling_of_an_address_reads_as_an_ip_literal(host: str) -> None:
    assert is_ip_literal(host)


@pytest.mark.parametrize(
    "host", ["example.com", "123.example.com", "0x7f.example.com", "deadbeef", "1e100.net"]
)
def test_a_name_with_digits_is_not_an_ip_literal(host: str) -> None:
    assert not is_ip_literal(host)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1", "0x7f000001", "[::1]", "2130706433"])
def test_an_ip_literal_is_refused_even_when_the_list_names_it_outside_the_test_mode(
    host: str,
) -> None:
    # A list frozen in a test installation, read by a policy without the test mode.
    policy = EgressPolicy((AllowedHost("127.0.0.1", port=8080),), allow_loopback=False)
    assert policy.check_target(host, 8080) == Decision(False, "ip_literal")


def test_the_test_mode_lets_only_the_canonical_loopback_literal_on_its_listed_port() -> None:
    policy = EgressPolicy.from_entries(["127.0.0.1:8080"], allow_loopback=True)
    assert policy.check_target("127.0.0.1", 8080) is None
    assert policy.check_target("127.0.0.1", 8081) == Decision(False, "port_not_allowed")
    for spelling in ("127.1", "2130706433", "0x7f000001", "0177.0.0.1", "[::1]", "127.0.0.2"):
        assert policy.check_target(spelling, 8080) == Decision(False, "ip_literal")


def test_an_empty_policy_refuses_everything() -> None:
    assert EgressPolicy(()).check_target("example.com", 443) == Decision(False, "not_allowed")


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("Example.COM.", "example.com"),
        ("bücher.example", "xn--bcher-kva.example"),
        ("LOCALHOST.", "localhost"),
    ],
)
def test_a_host_normalizes_to_one_spelling(raw: str, normalized: str) -> None:
    assert normalize_host(raw) == normalized


@pytest.mark.parametrize("raw", ["a@b.com", "127.0.0.1", "a..b", "a b.com"])
def test_normalizing_a_non_name_raises(raw: str) -> None:
    with pytest.raises(ValueError):
        normalize_host(raw)


# --- resolved addresses ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "ip",
    [
        "8.8.8.8",
        "1.1.1.1",
        "93.184.215.14",
        "172.15.255.255",
        "172.32.0.1",
        "100.63.255.255",
        "100.128.0.1",
        "2606:4700:4700::1111",
        "2001:4860:4860::8888",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",  # NAT64 of a global address
    ],
)
def test_a_global_unicast_address_passes(ip: str) -> None:
    assert address_allowed(ip) is None
    assert address_allowed(ip, allow_loopback=True) is None


@pytest.mark.parametrize(
    ("ip", "reason"),
    [
        ("127.0.0.1", "loopback_address"),
        ("127.255.255.254", "loopback_address"),
        ("::1", "loopback_address"),
        ("10.0.0.5", "private_address"),
        ("172.16.0.1", "private_address"),
        ("172.31.255.255", "private_address"),
        ("192.168.1.1", "private_address"),
        ("100.64.0.1", "cgnat_address"),
        ("100.100.100.200", "cgnat_address"),  # Alibaba Cloud metadata
        ("100.127.255.255", "cgnat_address"),
        ("169.254.169.254", "metadata_address"),
        ("169.254.0.1", "link_local_address"),
        ("fd00:ec2::254", "metadata_address"),
        ("0.0.0.0", "unspecified_address"),
        ("0.1.2.3", "unspecified_address"),
        ("::", "unspecified_address"),
        ("224.0.0.1", "multicast_address"),
        ("239.255.255.250", "multicast_address"),
        ("ff02::1", "multicast_address"),
        ("255.255.255.255", "broadcast_address"),
        ("240.0.0.1", "reserved_address"),
        ("192.0.0.170", "reserved_address"),
        ("192.0.2.1", "reserved_address"),
        ("198.51.100.1", "reserved_address"),
        ("203.0.113.1", "reserved_address"),
        ("198.18.0.1", "reserved_address"),
        ("fc00::1", "private_address"),
        ("fd12:3456::1", "private_address"),
        ("fec0::1", "private_address"),
        ("fe80::1", "link_local_address"),
        ("fe80::1%eth0", "link_local_address"),
        ("2001:db8::1", "reserved_address"),
        ("100::1", "reserved_address"),
        ("64:ff9b:1::1", "private_address"),
        # IPv6 forms that carry a non-global IPv4 address
        ("::ffff:127.0.0.1", "loopback_address"),
        ("::ffff:10.0.0.1", "private_address"),
        ("::ffff:169.254.169.254", "metadata_address"),
        ("::ffff:0:10.0.0.1", "private_address"),  # IPv4-translated
        ("::10.0.0.1", "private_address"),  # IPv4-compatible
        ("::8.8.8.8", "reserved_address"),  # IPv4-compatible is deprecated even when global
        ("64:ff9b::a00:5", "private_address"),  # NAT64 of 10.0.0.5
        ("64:ff9b::a9fe:a9fe", "metadata_address"),  # NAT64 of 169.254.169.254
        ("2002:a00:1::1", "private_address"),  # 6to4 of 10.0.0.1
        ("2002:808:808::1", "reserved_address"),  # 6to4 is deprecated even when global
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "reserved_address"),  # Teredo
        ("2001:0:a00:1::", "private_address"),  # Teredo with a private server
        ("not-an-address", "invalid_address"),
        ("", "invalid_address"),
    ],
)
def test_a_non_global_address_is_refused(ip: str, reason: str) -> None:
    assert address_allowed(ip) == reason


@pytest.mark.parametrize("ip", ["127.0.0.1", "127.0.0.53", "::1", "::ffff:127.0.0.1"])
def test_the_test_mode_lets_loopback_answers_through(ip: str) -> None:
    assert address_allowed(ip, allow_loopback=True) is None


@pytest.mark.parametrize("ip", ["10.0.0.5", "169.254.169.254", "192.168.0.1", "fd00:ec2::254"])
def test_the_test_mode_refuses_everything_else_still(ip: str) -> None:
    assert address_allowed(ip, allow_loopback=True) is not None


# --- the ClientHello reader -----------------------------------------------------------------


def _record(payload: bytes) -> bytes:
    return b"\x16\x03\x01" + len(payload).to_bytes(2, "big") + payload


def _client_hello(extensions: bytes) -> bytes:
    body = (
        b"\x03\x03"
        + bytes(32)
        + b"\x00"  # session id
        + b"\x00\x02\x13\x01"  # one cipher suite
        + b"\x01\x00"  # null compression
        + len(extensions).to_bytes(2, "big")
        + extensions
    )
    return b"\x01" + len(body).to_bytes(3, "big") + body


def _sni(*names: bytes) -> bytes:
    entries = b"".join(b"\x00" + len(n).to_bytes(2, "big") + n for n in names)
    content = len(entries).to_bytes(2, "big") + entries
    return b"\x00\x00" + len(content).to_bytes(2, "big") + content


def test_the_server_name_is_read_from_a_client_hello() -> None:
    hello = parse_client_hello(_record(_client_hello(_sni(b"api.example.com"))))
    assert hello is not None
    assert hello.server_name == "api.example.com"


def test_a_client_hello_split_over_records_and_reads_is_read_whole() -> None:
    message = _client_hello(_sni(b"api.example.com"))
    data = b"".join(_record(message[i : i + 7]) for i in range(0, len(message), 7))
    for cut in range(len(data)):
        assert parse_client_hello(data[:cut]) is None
    hello = parse_client_hello(data + b"\x14\x03\x03\x00\x01\x01")  # then ChangeCipherSpec
    assert hello is not None
    assert hello.server_name == "api.example.com"


def test_a_client_hello_without_extensions_has_no_server_name() -> None:
    message = _client_hello(b"")[:-2]  # drop the empty extensions vector entirely
    message = b"\x01" + (len(message) - 4).to_bytes(3, "big") + message[4:]
    hello = parse_client_hello(_record(message))
    assert hello is not None
    assert hello.server_name is None


@pytest.mark.parametrize(
    "data",
    [
        b"GET / HTTP/1.1\r\n\r\n",
        b"\x17\x03\x03\x00\x05hello",  # application data first
        _record(b"\x02\x00\x00\x00"),  # a ServerHello
        _record(_client_hello(_sni(b"a.example.com") + _sni(b"b.example.com"))),
        _record(_client_hello(_sni(b"a.example.com", b"b.example.com"))),
        _record(_client_hello(_sni(b""))),
        _record(_client_hello(_sni(b"a.exa\x00mple.com"))),
        _record(_client_hello(b"\x00\x00\x00\x09\x00\x07\x00\x00\x09abc")),  # short name
        _record(b"\x01\xff\xff\xff"),  # declares a 16 MiB message
        b"\x16\x03\x01\x40\x01",  # a record over 16 KiB
    ],
)
def test_anything_but_a_well_formed_client_hello_is_refused(data: bytes) -> None:
    with pytest.raises(NotClientHello):
        parse_client_hello(data)


def test_a_client_hello_that_never_ends_is_refused_at_the_cap() -> None:
    # Many tiny records, each well formed, that never complete the message.
    header = b"\x01\x00\x3f\xff"
    data = _record(header) + _record(b"\x00") * 4000
    with pytest.raises(NotClientHello):
        parse_client_hello(data)
