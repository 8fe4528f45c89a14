"""Email-code sign-in rules (ARCHITECTURE.md section 6)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from sqlmodel import Session, select

from mosoo_core import identity, mail
from mosoo_core.clock import utcnow
from mosoo_core.errors import InvalidInput, RateLimited
from mosoo_core.tables.identity import Account, App, EmailCode, Organization
from mosoo_core.tables.mail import OutboundEmail


def _code_sent_to(db: Session, email: str) -> str:
    message = mail.list_dev_mailbox(db, limit=1)[0]
    assert message.to_address == email
    match = re.search(r"\b(\d{6})\b", message.body)
    assert match
    return match.group(1)


def test_code_is_six_digits_hashed_and_expires_in_ten_minutes(db: Session) -> None:
    now = utcnow()
    identity.request_email_code(db, email="Ada@Example.com", ip="10.0.0.1", now=now)
    code = _code_sent_to(db, "ada@example.com")
    row = db.exec(select(EmailCode)).one()
    assert len(code) == 6 and code.isdigit()
    assert code not in row.code_hash and len(row.code_hash) == 64
    assert row.expires_at == now + timedelta(minutes=10)


def test_first_sign_in_creates_account_organization_and_default_app(db: Session) -> None:
    identity.request_email_code(db, email="new@example.com")
    account = identity.verify_email_code(
        db, email="new@example.com", code=_code_sent_to(db, "new@example.com")
    )
    org = db.exec(select(Organization).where(Organization.owner_account_id == account.id)).one()
    apps = db.exec(select(App).where(App.organization_id == org.id)).all()
    assert [a.name for a in apps] == ["Default App"]
    assert account.email == "new@example.com"


def test_second_sign_in_reuses_the_account(db: Session) -> None:
    ids = []
    for _ in range(2):
        identity.request_email_code(db, email="same@example.com")
        ids.append(
            identity.verify_email_code(
                db, email="same@example.com", code=_code_sent_to(db, "same@example.com")
            ).id
        )
    assert ids[0] == ids[1]
    assert len(db.exec(select(Account)).all()) == 1
    assert len(db.exec(select(Organization)).all()) == 1


def test_expired_code_is_refused(db: Session) -> None:
    now = utcnow()
    identity.request_email_code(db, email="late@example.com", now=now)
    code = _code_sent_to(db, "late@example.com")
    with pytest.raises(InvalidInput) as error:
        identity.verify_email_code(
            db, email="late@example.com", code=code, now=now + timedelta(minutes=10, seconds=1)
        )
    assert error.value.message == identity.INVALID_CODE


def test_sixth_try_fails_even_with_the_right_code(db: Session) -> None:
    identity.request_email_code(db, email="guess@example.com")
    code = _code_sent_to(db, "guess@example.com")
    wrong = f"{(int(code) + 1) % 1_000_000:06d}"
    for _ in range(5):
        with pytest.raises(InvalidInput):
            identity.verify_email_code(db, email="guess@example.com", code=wrong)
    with pytest.raises(InvalidInput):
        identity.verify_email_code(db, email="guess@example.com", code=code)
    assert db.exec(select(Account)).all() == []


def test_fifth_try_can_still_succeed(db: Session) -> None:
    identity.request_email_code(db, email="close@example.com")
    code = _code_sent_to(db, "close@example.com")
    wrong = f"{(int(code) + 1) % 1_000_000:06d}"
    for _ in range(4):
        with pytest.raises(InvalidInput):
            identity.verify_email_code(db, email="close@example.com", code=wrong)
    assert (
        identity.verify_email_code(db, email="close@example.com", code=code).email
        == "close@example.com"
    )


def test_a_code_works_once(db: Session) -> None:
    identity.request_email_code(db, email="once@example.com")
    code = _code_sent_to(db, "once@example.com")
    identity.verify_email_code(db, email="once@example.com", code=code)
    with pytest.raises(InvalidInput):
        identity.verify_email_code(db, email="once@example.com", code=code)


def test_a_new_code_replaces_the_previous_one(db: Session) -> None:
    identity.request_email_code(db, email="twice@example.com")
    first = _code_sent_to(db, "twice@example.com")
    identity.request_email_code(db, email="twice@example.com")
    second = _code_sent_to(db, "twice@example.com")
    if first != second:
        with pytest.raises(InvalidInput):
            identity.verify_email_code(db, email="twice@example.com", code=first)
    assert identity.verify_email_code(db, email="twice@example.com", code=second)


def test_code_for_another_address_does_not_work(db: Session) -> None:
    identity.request_email_code(db, email="a@example.com")
    code = _code_sent_to(db, "a@example.com")
    identity.request_email_code(db, email="b@example.com")
    with pytest.raises(InvalidInput):
        identity.verify_email_code(db, email="b@example.com", code=code) if code != _code_sent_to(
            db, "b@example.com"
        ) else (_ for _ in ()).throw(InvalidInput("same code by chance"))


def test_unknown_and_known_addresses_get_the_same_answer(db: Session) -> None:
    identity.request_email_code(db, email="known@example.com")
    identity.verify_email_code(
        db, email="known@example.com", code=_code_sent_to(db, "known@example.com")
    )
    known = identity.request_email_code(db, email="known@example.com")
    unknown = identity.request_email_code(db, email="nobody@example.com")
    assert type(known) is type(unknown)
    assert known.email == "known@example.com" and unknown.email == "nobody@example.com"
    assert _code_sent_to(db, "nobody@example.com")
    # Nothing is created for the unknown address until a code is verified.
    assert db.exec(select(Account).where(Account.email == "nobody@example.com")).first() is None


def test_sends_are_limited_per_address(db: Session) -> None:
    now = utcnow()
    for i in range(5):
        identity.request_email_code(db, email="spam@example.com", ip=f"10.0.0.{i}", now=now)
    with pytest.raises(RateLimited) as error:
        identity.request_email_code(db, email="spam@example.com", ip="10.0.0.99", now=now)
    assert 0 < error.value.retry_after_seconds <= 3601
    # An hour later the address may ask again.
    identity.request_email_code(
        db, email="spam@example.com", now=now + timedelta(hours=1, seconds=1)
    )


def test_sends_are_limited_per_ip(db: Session) -> None:
    now = utcnow()
    for i in range(20):
        identity.request_email_code(db, email=f"user{i}@example.com", ip="192.0.2.7", now=now)
    with pytest.raises(RateLimited):
        identity.request_email_code(db, email="other@example.com", ip="192.0.2.7", now=now)
    identity.request_email_code(db, email="other@example.com", ip="192.0.2.8", now=now)


def test_rate_limit_answers_the_same_for_known_and_unknown_addresses(db: Session) -> None:
    identity.sign_in_identity(db, provider="email", subject="k@example.com", email="k@example.com")
    messages = []
    for address in ("k@example.com", "u@example.com"):
        for _ in range(5):
            identity.request_email_code(db, email=address)
        with pytest.raises(RateLimited) as error:
            identity.request_email_code(db, email=address)
        messages.append(error.value.message)
    assert messages[0] == messages[1]


@pytest.mark.parametrize("bad", ["", "   ", "not-an-email", "a@", "x" * 400 + "@example.com"])
def test_invalid_addresses_are_refused_clearly(db: Session, bad: str) -> None:
    with pytest.raises(InvalidInput) as error:
        identity.request_email_code(db, email=bad)
    assert error.value.field == "email"
    assert db.exec(select(OutboundEmail)).all() == []


@pytest.mark.parametrize("bad", ["", "12345", "1234567", "abcdef"])
def test_malformed_codes_are_refused_without_using_a_try(db: Session, bad: str) -> None:
    identity.request_email_code(db, email="m@example.com")
    with pytest.raises(InvalidInput):
        identity.verify_email_code(db, email="m@example.com", code=bad)
    assert db.exec(select(EmailCode)).one().attempts == 0
