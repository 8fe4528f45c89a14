"""Sign-in codes through `POST /api/auth/email/start` and `/verify` of a real `mosoo web`:
tries per code, sends per address and per IP, failed verifications per address and per IP.
After each refusal the database must hold what enforces the limit."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta

import httpx
import pytest
from sqlalchemy.engine import Engine
from sqlmodel import col

from mosoo_core.clock import utcnow
from mosoo_core.tables.identity import Account, AuthSession, EmailCode, SignInFailure
from mosoo_core.tables.mail import OutboundEmail
from tests.security.conftest import (
    count,
    error_code,
    latest_code,
    next_loopback_address,
    request_code,
    rows,
    sign_in,
    update,
    verify,
    wrong,
)

pytestmark = pytest.mark.integration

Web = Callable[..., httpx.Client]


def _without_date(response: httpx.Response, *also: str) -> dict[str, str]:
    skip = {"date", *also}
    return {k.lower(): v for k, v in response.headers.items() if k.lower() not in skip}


# --- tries per code ------------------------------------------------------------------------


def test_a_code_allows_5_tries_then_is_dead_even_with_the_right_code(
    web: Web, engine: Engine
) -> None:
    """README: "Codes are 6 digits, expire after 10 minutes, allow 5 tries"."""
    client, email = web(), "five-tries@example.com"
    assert request_code(client, email).status_code == 200
    code = latest_code(engine, email)
    assert [verify(client, email, wrong(code)).status_code for _ in range(5)] == [400] * 5
    sixth = verify(client, email, code)
    assert sixth.status_code == 400 and error_code(sixth) == "invalid_request"
    assert "mosoo_session" not in sixth.cookies
    [row] = rows(engine, EmailCode, EmailCode.email == email)
    assert row.attempts == 5 and row.consumed_at is None  # committed, not rolled back
    assert count(engine, AuthSession) == 0
    assert count(engine, Account, Account.email == email) == 0


def test_the_fifth_try_with_the_right_code_still_signs_in(web: Web, engine: Engine) -> None:
    """README: "Codes ... allow 5 tries" (the fifth is still a try)."""
    client, email = web(), "fifth-try@example.com"
    request_code(client, email)
    code = latest_code(engine, email)
    assert [verify(client, email, wrong(code)).status_code for _ in range(4)] == [400] * 4
    fifth = verify(client, email, code)
    assert fifth.status_code == 200 and fifth.cookies.get("mosoo_session")
    [row] = rows(engine, EmailCode, EmailCode.email == email)
    assert row.attempts == 5 and row.consumed_at is not None
    assert count(engine, AuthSession) == 1


def test_a_code_is_6_digits_and_expires_after_10_minutes(web: Web, engine: Engine) -> None:
    """README: "Codes are 6 digits, expire after 10 minutes"."""
    client, email = web(), "expiring@example.com"
    request_code(client, email)
    code = latest_code(engine, email)
    assert len(code) == 6 and code.isdigit()
    [row] = rows(engine, EmailCode, EmailCode.email == email)
    assert row.expires_at - row.created_at == timedelta(minutes=10)
    update(engine, EmailCode, EmailCode.id == row.id, expires_at=utcnow() - timedelta(seconds=1))
    refused = verify(client, email, code)
    assert refused.status_code == 400 and error_code(refused) == "invalid_request"
    assert "mosoo_session" not in refused.cookies
    assert count(engine, AuthSession) == 0 and count(engine, Account, Account.email == email) == 0
    [after] = rows(engine, EmailCode, EmailCode.email == email)
    assert after.consumed_at is None


def test_500_wrong_codes_then_the_right_one_is_refused_and_the_tries_persist(
    web: Web, engine: Engine
) -> None:
    """The issue's reproduction, README: "Codes ... allow 5 tries": 500 wrong codes on one
    connection, then the right one, is refused; no session exists afterwards."""
    client, email = web(), "brute@example.com"
    request_code(client, email)
    code = latest_code(engine, email)
    statuses = [verify(client, email, wrong(code)).status_code for _ in range(500)]
    assert set(statuses) <= {400, 429} and statuses[:5] == [400] * 5
    right = verify(client, email, code)
    assert right.status_code in (400, 429), right.text
    assert "mosoo_session" not in right.cookies
    [row] = rows(engine, EmailCode, EmailCode.email == email)
    assert row.attempts == 5 and row.consumed_at is None
    assert count(engine, SignInFailure, SignInFailure.email == email) >= 10
    assert count(engine, AuthSession) == 0
    assert count(engine, Account, Account.email == email) == 0


# --- sends ---------------------------------------------------------------------------------


def test_sends_are_limited_to_5_an_hour_per_address(web: Web, engine: Engine) -> None:
    """README: "sends are limited per address (5 an hour)" (MOSOO_EMAIL_SENDS_PER_ADDRESS_PER_HOUR).
    Spelling the address differently, or asking from another IP, does not make it another one."""
    email = "sends@example.com"
    spellings = [
        "sends@example.com",
        "Sends@Example.com",
        " sends@example.com ",
        "SENDS@EXAMPLE.COM",
        "sends@example.COM",
    ]
    assert [request_code(web(), spelled).status_code for spelled in spellings] == [200] * 5
    refused = request_code(web(), "sends@EXAMPLE.com")
    assert refused.status_code == 429 and error_code(refused) == "rate_limited"
    assert 1 <= int(refused.headers["retry-after"]) <= 3601
    assert count(engine, EmailCode, EmailCode.email == email) == 5
    assert count(engine, OutboundEmail, OutboundEmail.to_address == email) == 5


def test_sends_are_limited_to_20_an_hour_per_ip(web: Web, engine: Engine) -> None:
    """README: "sends are limited ... per IP (20 an hour)" (MOSOO_EMAIL_SENDS_PER_IP_PER_HOUR)."""
    ip = next_loopback_address()
    client = web(ip)
    assert [request_code(client, f"ip-{i}@example.com").status_code for i in range(20)] == [
        200
    ] * 20
    refused = request_code(client, "ip-20@example.com")
    assert refused.status_code == 429 and error_code(refused) == "rate_limited"
    assert 1 <= int(refused.headers["retry-after"]) <= 3601
    assert count(engine, EmailCode, EmailCode.requested_ip == ip) == 20
    assert count(engine, EmailCode, EmailCode.email == "ip-20@example.com") == 0
    assert request_code(web(), "ip-20@example.com").status_code == 200  # another IP still can


def test_the_per_ip_send_limit_ignores_a_forwarded_for_header_from_the_client(
    web: Web, engine: Engine
) -> None:
    """README: "sends are limited ... per IP (20 an hour)": the IP is the peer's, so a client
    cannot become 20 new IPs by sending `X-Forwarded-For` itself."""
    ip = next_loopback_address()
    client = web(ip)
    answers = [
        client.post(
            "/api/auth/email/start",
            json={"email": f"xff-{i}@example.com"},
            headers={
                "X-Forwarded-For": f"203.0.113.{i}",
                "X-Real-IP": f"198.51.100.{i}",
                "Forwarded": f"for=192.0.2.{i}",
            },
        ).status_code
        for i in range(21)
    ]
    assert answers == [200] * 20 + [429]
    assert count(engine, EmailCode, EmailCode.requested_ip == ip) == 20


def test_behind_a_local_https_proxy_each_client_has_its_own_per_ip_send_limit(
    web: Web, engine: Engine
) -> None:
    """README: "put the web port behind an HTTPS proxy" and sends are limited "per IP (20 an
    hour)": behind a proxy named in MOSOO_TRUSTED_PROXIES (127.0.0.1 here, sending
    `X-Forwarded-For`) the IP counted is the client's, not the proxy's."""
    proxy = web("127.0.0.1")
    answers = [
        proxy.post(
            "/api/auth/email/start",
            json={"email": f"behind-proxy-{i}@example.com"},
            headers={"X-Forwarded-For": f"203.0.113.{i}"},
        ).status_code
        for i in range(21)
    ]
    assert answers == [200] * 21
    assert count(engine, EmailCode, EmailCode.requested_ip == "127.0.0.1") == 0
    assert count(engine, EmailCode, EmailCode.requested_ip == "203.0.113.7") == 1


def test_sign_in_request_bodies_over_64_kib_are_refused(web: Web, engine: Engine) -> None:
    """README: sign-in request bodies are limited to 64 KiB: `413 payload_too_large` before
    the body is read (declared or chunked), and nothing stored."""
    email = "big-body@example.com"
    body = json.dumps({"email": email, "padding": "x" * (64 * 1024)}).encode()
    refused = web().post(
        "/api/auth/email/start", content=body, headers={"Content-Type": "application/json"}
    )
    assert refused.status_code == 413
    assert refused.json()["error"]["code"] == "payload_too_large"
    chunked = web().post(
        "/api/auth/email/start",
        content=iter([body[:1000], body[1000:]]),
        headers={"Content-Type": "application/json"},
    )
    assert chunked.status_code == 413
    assert count(engine, EmailCode, EmailCode.email == email) == 0


def test_asking_for_a_code_answers_the_same_for_known_and_unknown_addresses(
    web: Web, engine: Engine
) -> None:
    """ARCHITECTURE §6: email codes get the "same answer whether or not the address exists"."""
    sign_in(web(), engine, "known-start@example.com")
    known = request_code(web(), "known-start@example.com")
    unknown = request_code(web(), "unknown-start@example.com")
    assert known.status_code == unknown.status_code == 200
    assert known.content == unknown.content
    assert _without_date(known) == _without_date(unknown)


# --- failed verifications ------------------------------------------------------------------


def test_failed_verifications_are_limited_to_10_an_hour_per_address_even_for_the_right_code(
    web: Web, engine: Engine
) -> None:
    """Failed verifications are limited per address (MOSOO_EMAIL_VERIFY_FAILURES_PER_ADDRESS_PER_HOUR,
    10) over one hour, on top of the per-code tries: over it `POST /api/auth/email/verify` is
    429 `rate_limited` with `Retry-After`, even for the right code, from any IP."""
    email = "throttled@example.com"
    for _ in range(2):  # two codes, five wrong tries each: ten failures
        request_code(web(), email)
        code = latest_code(engine, email)
        assert [verify(web(), email, wrong(code)).status_code for _ in range(5)] == [400] * 5
    assert request_code(web(), email).status_code == 200
    code = latest_code(engine, email)
    refused = verify(web(), email, code)  # a fresh IP: the limit is the address's
    assert refused.status_code == 429, refused.text
    assert error_code(refused) == "rate_limited"
    assert 1 <= int(refused.headers["retry-after"]) <= 3601
    assert "mosoo_session" not in refused.cookies
    failures = rows(engine, SignInFailure, SignInFailure.email == email)
    assert len(failures) >= 10 and all(f.ip.startswith("127.") for f in failures)
    fresh = rows(engine, EmailCode, EmailCode.email == email, col(EmailCode.consumed_at).is_(None))
    assert len(fresh) == 1 and fresh[0].attempts == 0  # the throttle used none of its tries
    assert count(engine, AuthSession) == 0


def test_failed_verifications_are_limited_to_50_an_hour_per_ip_even_for_the_right_code(
    web: Web, engine: Engine
) -> None:
    """Failed verifications are limited per IP (MOSOO_EMAIL_VERIFY_FAILURES_PER_IP_PER_HOUR, 50)
    over one hour: over it the right code from that IP is 429 `rate_limited` with
    `Retry-After`; the same code from another IP still signs in."""
    guesser_ip = next_loopback_address()
    guesser, mailer = web(guesser_ip), web()
    for i in range(
        10
    ):  # ten addresses, five wrong tries each: 50 failures, none over the address limit
        email = f"spray-{i}@example.com"
        request_code(mailer, email)
        code = latest_code(engine, email)
        assert [verify(guesser, email, wrong(code)).status_code for _ in range(5)] == [400] * 5
    target = "spray-target@example.com"
    request_code(mailer, target)
    code = latest_code(engine, target)
    refused = verify(guesser, target, code)
    assert refused.status_code == 429, refused.text
    assert error_code(refused) == "rate_limited"
    assert 1 <= int(refused.headers["retry-after"]) <= 3601
    assert count(engine, SignInFailure, SignInFailure.ip == guesser_ip) >= 50
    assert count(engine, AuthSession) == 0
    assert verify(web(), target, code).status_code == 200
    assert count(engine, AuthSession) == 1


def test_throttled_verifications_answer_the_same_for_known_and_unknown_addresses(
    web: Web, engine: Engine
) -> None:
    """Over the verification limit the answers are identical (status, body, headers apart from
    Date) for an address that has an account and one that does not."""
    known, unknown = "known-verify@example.com", "unknown-verify@example.com"
    sign_in(web(), engine, known)
    assert count(engine, Account, Account.email == known) == 1
    answers: dict[str, list[httpx.Response]] = {known: [], unknown: []}
    for _ in range(11):  # interleaved, so both windows start together
        for email in (known, unknown):
            answers[email].append(verify(web(), email, "000000"))
    for email in (known, unknown):
        assert [a.status_code for a in answers[email]] == [400] * 10 + [429]
    for mine, theirs in zip(answers[known], answers[unknown], strict=True):
        assert mine.status_code == theirs.status_code and mine.content == theirs.content
        assert _without_date(mine, "retry-after") == _without_date(theirs, "retry-after")
    # Retry-After counts down from each address's first failure, a few milliseconds apart.
    assert (
        abs(
            int(answers[known][-1].headers["retry-after"])
            - int(answers[unknown][-1].headers["retry-after"])
        )
        <= 1
    )
    assert count(engine, SignInFailure, SignInFailure.email == known) >= 10
    assert count(engine, SignInFailure, SignInFailure.email == unknown) >= 10
    assert count(engine, Account, Account.email == unknown) == 0
