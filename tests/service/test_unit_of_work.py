"""`commit_refusal`: a refusal's bookkeeping survives the unit of work's rollback."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import identity
from mosoo_core.db import commit_refusal, session_scope
from mosoo_core.errors import InvalidInput
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.identity import EmailCode, SignInFailure
from mosoo_core.tables.mail import OutboundEmail


def _failures(engine: Engine) -> int:
    with Session(engine) as db:
        return len(db.exec(select(SignInFailure)).all())


def test_a_plain_refusal_is_rolled_back(engine: Engine) -> None:
    with pytest.raises(InvalidInput), session_scope(engine) as db:
        db.add(SignInFailure(email="a@example.com"))
        db.flush()
        raise InvalidInput("no")
    assert _failures(engine) == 0


def test_a_recorded_refusal_survives_the_rollback_and_whatever_the_caller_raises(
    engine: Engine,
) -> None:
    with pytest.raises(RuntimeError), session_scope(engine) as db:
        db.add(SignInFailure(email="a@example.com"))
        try:
            commit_refusal(db, InvalidInput("no"))
        except InvalidInput as error:  # a front door translating the error
            raise RuntimeError("translated") from error
    assert _failures(engine) == 1


def _issue_code(engine: Engine, email: str) -> tuple[str, str]:
    """A fresh code for `email`: (the code, a wrong one)."""
    with session_scope(engine) as db:
        identity.request_email_code(db, email=email)
    with Session(engine) as db:
        bodies = db.exec(select(OutboundEmail.body).where(OutboundEmail.to_address == email)).all()
    code = next(word for word in bodies[-1].split() if word.isdigit() and len(word) == 6)
    return code, f"{(int(code) + 1) % 1_000_000:06d}"


def test_each_wrong_code_uses_a_try_in_its_own_unit_of_work(engine: Engine) -> None:
    """As every front door calls it: one unit of work per request, refused ones included."""
    _, wrong = _issue_code(engine, "try@example.com")
    for expected in range(1, 6):
        with pytest.raises(InvalidInput), session_scope(engine) as db:
            identity.verify_email_code(db, email="try@example.com", code=wrong)
        with Session(engine) as db:
            attempts = db.exec(
                select(EmailCode.attempts).where(EmailCode.email == "try@example.com")
            ).one()
        assert attempts == expected
    assert _failures(engine) == 5


def test_concurrent_guesses_cannot_share_a_try(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-then-write counter loses increments under concurrency; a try is claimed by one
    conditional UPDATE before the code is compared."""
    monkeypatch.setenv("MOSOO_EMAIL_VERIFY_FAILURES_PER_ADDRESS_PER_HOUR", "1000")
    reset_settings_cache()
    code, wrong = _issue_code(engine, "race@example.com")
    start = threading.Barrier(12)
    outcomes: list[str] = []

    def guess() -> None:
        start.wait()
        try:
            with session_scope(engine) as db:
                identity.verify_email_code(db, email="race@example.com", code=wrong)
            outcomes.append("signed in")
        except InvalidInput:
            outcomes.append("refused")

    threads = [threading.Thread(target=guess) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes == ["refused"] * 12
    with Session(engine) as db:
        assert (
            db.exec(select(EmailCode.attempts).where(EmailCode.email == "race@example.com")).one()
            == 5
        )
    with pytest.raises(InvalidInput), session_scope(engine) as db:
        identity.verify_email_code(db, email="race@example.com", code=code)
