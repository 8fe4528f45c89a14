"""Email delivery over real SMTP: the outbox service against an aiosmtpd sink on loopback, and
a real `mosoo worker` process taking the delivery task from a real Redis broker."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import identity, mail
from mosoo_core.celery_app import configured_app
from mosoo_core.mail._service import MAX_ATTEMPTS
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.mail import OutboundEmail
from mosoo_core.tasks_client import enqueue_email_delivery
from tests.support.processes import free_port, mosoo_env, running, stop_group, wait_for
from tests.support.redis_db import redis_url
from tests.support.smtp_sink import SMTPSink

pytestmark = [
    pytest.mark.integration,
    # The sink accepts AUTH without TLS on purpose: it only listens on 127.0.0.1.
    pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS:UserWarning"),
]

SENDER = "Mosoo Codes <codes@mosoo.test>"
SMTP_USER = "relay-user"
SMTP_PASSWORD = "relay-password"
# A separate Redis database so the worker test never sees (or clears) anyone else's queue.
WORKER_REDIS_URL = redis_url(14)
CODE = re.compile(r"\b(\d{6})\b")


def _use_smtp(monkeypatch: pytest.MonkeyPatch, port: int, **extra: str) -> None:
    monkeypatch.setenv("MOSOO_SMTP_HOST", "127.0.0.1")
    monkeypatch.setenv("MOSOO_SMTP_PORT", str(port))
    monkeypatch.setenv("MOSOO_SMTP_STARTTLS", "false")
    monkeypatch.setenv("MOSOO_SMTP_FROM", SENDER)
    monkeypatch.setenv("MOSOO_SMTP_TIMEOUT_SECONDS", "10")
    for key, value in extra.items():
        monkeypatch.setenv(key, value)
    reset_settings_cache()


@pytest.fixture
def sink(monkeypatch: pytest.MonkeyPatch) -> Iterator[SMTPSink]:
    with SMTPSink() as server:
        _use_smtp(monkeypatch, server.port)
        yield server


@pytest.fixture
def auth_sink(monkeypatch: pytest.MonkeyPatch) -> Iterator[SMTPSink]:
    """A relay that requires AUTH; the test chooses which password Mosoo is configured with."""
    with SMTPSink(username=SMTP_USER, password=SMTP_PASSWORD) as server:
        _use_smtp(monkeypatch, server.port, MOSOO_SMTP_USERNAME=SMTP_USER)
        yield server


def _use_password(monkeypatch: pytest.MonkeyPatch, password: str) -> None:
    monkeypatch.setenv("MOSOO_SMTP_PASSWORD", password)
    reset_settings_cache()


def _stored(engine: Engine, email_id: str) -> OutboundEmail:
    """The row as another connection sees it (only what was committed)."""
    with Session(engine) as other:
        row = other.get(OutboundEmail, email_id)
        assert row is not None
        other.expunge(row)
        return row


def _request_code(db: Session, email: str = "ada@example.com") -> str:
    requested = identity.request_email_code(db, email=email, ip="127.0.0.1")
    db.commit()
    return requested.outbound_email_id


def test_a_sign_in_code_is_delivered_by_smtp_from_the_configured_sender_and_its_body_is_cleared(
    sink: SMTPSink, db: Session, engine: Engine
) -> None:
    email_id = _request_code(db, "Ada@Example.com")

    assert mail.deliver_email(db, email_id) == "sent"
    db.commit()

    [received] = sink.wait_for_messages(1, timeout=10)
    assert received.rcpt_tos == ["ada@example.com"]
    assert received.from_header == SENDER
    assert received.mail_from == "codes@mosoo.test"
    code_match = CODE.search(received.body)
    assert code_match is not None, received.body
    code = code_match.group(1)
    assert code in received.subject
    # The delivered code is the one that signs in.
    account = identity.verify_email_code(db, email="ada@example.com", code=code)
    assert account.email == "ada@example.com"
    stored = _stored(engine, email_id)
    assert stored.status == "sent"
    assert stored.body == ""
    assert stored.attempts == 1
    assert stored.sent_at is not None
    assert mail.list_dev_mailbox(db) == []


def test_delivering_a_sent_email_again_does_not_send_a_second_copy(
    sink: SMTPSink, db: Session, engine: Engine
) -> None:
    email_id = _request_code(db)
    assert mail.deliver_email(db, email_id) == "sent"
    db.commit()

    assert mail.deliver_email(db, email_id) == "sent"
    db.commit()

    # The sink stores a message before it answers DATA, so a second send would already be here.
    assert len(sink.messages) == 1
    assert _stored(engine, email_id).attempts == 1


def test_smtp_credentials_are_used_and_the_right_password_delivers(
    auth_sink: SMTPSink, db: Session, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use_password(monkeypatch, SMTP_PASSWORD)
    email_id = _request_code(db)

    assert mail.deliver_email(db, email_id) == "sent"
    db.commit()

    [received] = auth_sink.wait_for_messages(1, timeout=10)
    assert received.login == SMTP_USER
    assert _stored(engine, email_id).status == "sent"


def test_a_wrong_smtp_password_keeps_the_email_pending_until_the_last_attempt_fails_it(
    auth_sink: SMTPSink, db: Session, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use_password(monkeypatch, "not-the-password")
    email_id = _request_code(db)

    assert mail.deliver_email(db, email_id) == "pending"
    db.commit()

    stored = _stored(engine, email_id)
    assert stored.status == "pending"
    assert stored.attempts == 1
    assert stored.last_error.startswith("SMTPAuthenticationError")
    assert "Your Mosoo sign-in code" in stored.body  # kept for the next attempt
    assert auth_sink.failed_logins >= 1

    for _ in range(MAX_ATTEMPTS - 2):
        assert mail.deliver_email(db, email_id) == "pending"
        db.commit()
    assert mail.deliver_email(db, email_id) == "failed"
    db.commit()

    stored = _stored(engine, email_id)
    assert stored.status == "failed"
    assert stored.attempts == MAX_ATTEMPTS
    assert stored.body == ""
    assert stored.last_error.startswith("SMTPAuthenticationError")
    # A failed message is final: no further attempt is made.
    assert mail.deliver_email(db, email_id) == "failed"
    assert _stored(engine, email_id).attempts == MAX_ATTEMPTS
    assert auth_sink.messages == []


def test_an_unreachable_smtp_server_leaves_the_email_pending_without_raising(
    db: Session, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use_smtp(monkeypatch, free_port())  # nothing listens there: the connection is refused
    email_id = _request_code(db)

    assert mail.deliver_email(db, email_id) == "pending"
    db.commit()

    stored = _stored(engine, email_id)
    assert stored.status == "pending"
    assert stored.attempts == 1
    assert stored.last_error.startswith("ConnectionRefusedError")
    assert "Your Mosoo sign-in code" in stored.body
    assert email_id in mail.pending_email_ids(db)


def _wait_logged(
    condition: Callable[[], bool], what: str, process: subprocess.Popen[bytes], log_path: Path
) -> None:
    """wait_for (at most 60 s), showing the process log when it fails."""
    try:
        wait_for(condition, 60, what, process)
    except (TimeoutError, RuntimeError) as error:
        raise AssertionError(f"{error}; log:\n{log_path.read_text()[-5000:]}") from error


@pytest.fixture
def worker_broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An empty Redis database as the broker, for this process and the worker alike (the
    Celery app follows the settings, so this process sends there from now on)."""
    broker = redis.Redis.from_url(WORKER_REDIS_URL)
    broker.flushdb()
    monkeypatch.setenv("MOSOO_REDIS_URL", WORKER_REDIS_URL)
    reset_settings_cache()
    assert configured_app().conf.broker_url == WORKER_REDIS_URL
    try:
        yield WORKER_REDIS_URL
    finally:
        broker.flushdb()
        broker.close()


def test_the_worker_process_delivers_an_email_enqueued_through_redis_and_stops_cleanly(
    sink: SMTPSink,
    db: Session,
    engine: Engine,
    database_url: str,
    worker_broker: str,
    tmp_path: Path,
) -> None:
    env = mosoo_env(
        tmp_path / "worker-data",
        database_url,
        MOSOO_REDIS_URL=worker_broker,
        MOSOO_SMTP_HOST="127.0.0.1",
        MOSOO_SMTP_PORT=str(sink.port),
        MOSOO_SMTP_STARTTLS="false",
        MOSOO_SMTP_FROM=SENDER,
        MOSOO_SMTP_TIMEOUT_SECONDS="10",
    )
    log_path = tmp_path / "worker.log"

    with running(["worker", "--concurrency", "1"], env, log_path) as worker:
        _wait_logged(
            lambda: "worker.ready" in log_path.read_text(),
            "the worker to be ready",
            worker,
            log_path,
        )
        email_id = _request_code(db)

        enqueue_email_delivery(email_id)

        _wait_logged(
            lambda: len(sink.messages) >= 1, "the worker to send the email", worker, log_path
        )
        _wait_logged(
            lambda: _stored(engine, email_id).status == "sent",
            "the row to be sent",
            worker,
            log_path,
        )
        exit_code = stop_group(worker)

    [received] = sink.messages
    assert received.rcpt_tos == ["ada@example.com"]
    assert CODE.search(received.body) is not None
    assert _stored(engine, email_id).body == ""
    log = log_path.read_text()
    assert exit_code == 0, log[-5000:]
    assert "worker.ready" in log
    assert "worker.stopped" in log
