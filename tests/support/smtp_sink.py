"""A small, real SMTP server standing in for the operator's mail relay, built on aiosmtpd.

It listens on a free 127.0.0.1 port in a background thread and keeps every message it accepts
(envelope and parsed headers and body). With `username`/`password` it advertises AUTH (PLAIN
and LOGIN, allowed without TLS because it only listens on loopback) and refuses mail from a
client that has not signed in, so a test can tell that configured credentials are used.
"""

from __future__ import annotations

import email
import email.policy
import threading
import time
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from tests.support.processes import free_port


@dataclass(frozen=True)
class ReceivedMessage:
    mail_from: str
    rcpt_tos: list[str]
    # The user the client signed in as ("" when the sink does not ask for AUTH).
    login: str
    message: EmailMessage

    @property
    def subject(self) -> str:
        return str(self.message["Subject"])

    @property
    def from_header(self) -> str:
        return str(self.message["From"])

    @property
    def body(self) -> str:
        part = self.message.get_body(preferencelist=("plain",))
        return part.get_content() if part is not None else ""  # type: ignore[attr-defined]


class SMTPSink:
    """Start with `start()` (or use as a context manager); `stop()` frees the port."""

    def __init__(self, *, username: str = "", password: str = "") -> None:
        self.host = "127.0.0.1"
        self.port = free_port()
        self.username = username
        self.password = password
        self._messages: list[ReceivedMessage] = []
        self._changed = threading.Condition()
        self.failed_logins = 0
        auth: dict[str, Any] = {}
        if username:
            auth = {
                "authenticator": self._authenticate,
                "auth_required": True,
                "auth_require_tls": False,
            }
        self._controller = Controller(
            self,
            hostname=self.host,
            port=self.port,
            # A fixed name: the default looks up this machine's FQDN, which can be slow.
            server_hostname="smtp-sink.mosoo.test",
            **auth,
        )

    def start(self) -> SMTPSink:
        self._controller.start()
        return self

    def stop(self) -> None:
        self._controller.stop()

    def __enter__(self) -> SMTPSink:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def messages(self) -> list[ReceivedMessage]:
        with self._changed:
            return list(self._messages)

    def wait_for_messages(self, count: int, timeout: float = 30) -> list[ReceivedMessage]:
        """Block until at least `count` messages have arrived; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self._messages) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"the SMTP sink got {len(self._messages)} of {count} messages in {timeout}s"
                    )
                self._changed.wait(remaining)
            return list(self._messages)

    def _authenticate(
        self, _server: SMTP, _session: Session, _envelope: Envelope, _mechanism: str, auth_data: Any
    ) -> AuthResult:
        if (
            isinstance(auth_data, LoginPassword)
            and auth_data.login == self.username.encode()
            and auth_data.password == self.password.encode()
        ):
            return AuthResult(success=True, auth_data=auth_data)
        with self._changed:
            self.failed_logins += 1
        return AuthResult(success=False, handled=False)

    # aiosmtpd handler hook: called once the whole message has been received.
    async def handle_DATA(self, _server: SMTP, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or envelope.content or b""
        if isinstance(raw, str):
            raw = raw.encode()
        parsed = email.message_from_bytes(raw, policy=email.policy.default)
        login = (
            session.auth_data.login.decode() if isinstance(session.auth_data, LoginPassword) else ""
        )
        received = ReceivedMessage(
            mail_from=envelope.mail_from or "",
            rcpt_tos=list(envelope.rcpt_tos),
            login=login,
            message=parsed,  # type: ignore[arg-type]
        )
        with self._changed:
            self._messages.append(received)
            self._changed.notify_all()
        return "250 Message accepted for delivery"
