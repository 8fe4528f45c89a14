"""Small pure rules of the web layer."""

from __future__ import annotations

import pytest

from mosoo_web.api.cookies import safe_next
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
    [("127.0.0.1", True), ("::1", True), ("127.8.0.3", True), ("10.0.0.1", False), ("192.168.1.2", False), ("", False), ("nope", False)],
)
def test_dev_mailbox_answers_only_loopback(address: str, expected: bool) -> None:
    assert is_loopback(address) is expected


def test_cookie_value_reads_the_session_cookie_and_survives_garbage() -> None:
    assert cookie_value("a=1; mosoo_session=tok-en_1; b=2", "mosoo_session") == "tok-en_1"
    assert cookie_value("", "mosoo_session") is None
    assert cookie_value("garbage;;;=", "mosoo_session") is None
