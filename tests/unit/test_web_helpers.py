"""Small pure rules of the web layer."""

from __future__ import annotations

import pytest

from mosoo_core.settings import reset_settings_cache
from mosoo_web.api.cookies import safe_next
from mosoo_web.client_ip import client_address
from mosoo_web.pages.dev_mailbox import is_loopback
from mosoo_web.state.session import cookie_value


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/apps/123", "/apps/123"),
        ("/apps?x=1", "/apps?x=1"),
        ("", "/"),
        (None, "/"),
        ("https://evil.example/", "/"),
        ("//evil.example/path", "/"),
        ("/\\evil.example", "/"),
        ("javascript:alert(1)", "/"),
        ("apps", "/"),
    ],
)
def test_safe_next_only_follows_local_paths(target: str | None, expected: str) -> None:
    assert safe_next(target) == expected


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("127.8.0.3", True),
        ("10.0.0.1", False),
        ("192.168.1.2", False),
        ("", False),
        ("nope", False),
    ],
)
def test_dev_mailbox_answers_only_loopback(address: str, expected: bool) -> None:
    assert is_loopback(address) is expected


def test_cookie_value_reads_the_session_cookie_and_survives_garbage() -> None:
    assert cookie_value("a=1; mosoo_session=tok-en_1; b=2", "mosoo_session") == "tok-en_1"
    assert cookie_value("", "mosoo_session") is None
    assert cookie_value("garbage;;;=", "mosoo_session") is None


@pytest.mark.parametrize(
    ("trusted", "peer", "forwarded_for", "client"),
    [
        ("", "127.0.0.1", "203.0.113.9", "127.0.0.1"),  # no proxy trusted: the header is ignored
        ("127.0.0.1", "10.1.1.1", "203.0.113.9", "10.1.1.1"),  # from an untrusted peer: ignored
        ("127.0.0.1", "127.0.0.1", "203.0.113.9", "203.0.113.9"),
        (
            "127.0.0.1",
            "127.0.0.1",
            "6.6.6.6, 203.0.113.9",
            "203.0.113.9",
        ),  # the client's own left part is not believed
        ("127.0.0.1,10.0.0.2", "127.0.0.1", "203.0.113.9, 10.0.0.2", "203.0.113.9"),  # two proxies
        ("127.0.0.1", "127.0.0.1", "", "127.0.0.1"),
        ("127.0.0.1", "127.0.0.1", "garbage", "127.0.0.1"),
        ("::1", "::1", "[2001:db8::1]", "2001:db8::1"),
    ],
)
def test_client_address_believes_forwarded_for_only_from_trusted_proxies(
    monkeypatch: pytest.MonkeyPatch, trusted: str, peer: str, forwarded_for: str, client: str
) -> None:
    monkeypatch.setenv("MOSOO_TRUSTED_PROXIES", trusted)
    reset_settings_cache()
    assert client_address(peer, forwarded_for) == client
