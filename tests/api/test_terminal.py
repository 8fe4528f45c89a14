"""`/api/terminal/{agent_id}`: the owner's terminal, through a real uvicorn server and a real
websocket client, into a real Docker sandbox. What the owner types runs there and closing the
page ends it; every refusal goes through the handshake an attacker would use (no cookie,
another owner's cookie, another site's page, the terminal turned off, a Task), and the
database says after what was recorded."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
import redis
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from mosoo_core import agents, identity
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.runtime import pet_idle
from mosoo_core.runtime import terminal as terminals
from mosoo_core.runtime.labels import installation_label
from mosoo_core.runtime.pets import pet_sandboxes
from mosoo_core.runtime.sandbox import (
    TERMINAL_MARKER_ENV,
    SandboxBackend,
    SandboxRef,
    SandboxSpec,
    get_backend,
)
from mosoo_core.settings import get_settings, reset_settings_cache
from mosoo_core.tables.identity import AuthSession
from mosoo_core.tables.pets import PetOperation
from mosoo_web.api import terminal as terminal_api
from tests.api.conftest import LiveServer, live_server
from tests.support.processes import wait_for
from tests.support.redis_db import own_redis_database, redis_url

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

REDIS_URL = redis_url(9)  # flushed before and after, like test_event_feed.py's
CONTROL = re.compile(r"\x1b(\[[0-9;?]*[A-Za-z]|\][^\x07]*\x07)|\r")


@dataclass(frozen=True)
class Owner:
    account_id: str
    agent_id: str
    token: str


@pytest.fixture
def redis_db(monkeypatch: pytest.MonkeyPatch) -> Iterator[redis.Redis]:
    yield from own_redis_database(monkeypatch, REDIS_URL)


@pytest.fixture
def server(
    engine: Engine, redis_db: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LiveServer]:
    with live_server() as running:
        # The console's origin is this server's: the route reads it on each handshake.
        monkeypatch.setenv("MOSOO_PUBLIC_URL", running.base_url)
        reset_settings_cache()
        yield running


@pytest.fixture
def backend(server: LiveServer) -> SandboxBackend:
    return get_backend()  # the one the server uses (Docker where an engine answers)


def _owner(engine: Engine, email: str, kind: str = "pet") -> Owner:
    with Session(engine) as db:
        account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
        app_id = identity.list_apps(db, account.id)[0].id
        agent = agents.create_agent(db, account.id, app_id, name="Keeper", kind=kind)
        token = identity.start_session(db, account.id, method="email").token
        found = Owner(account.id, agent.id, token)
        db.commit()
    return found


@pytest.fixture
def owner(engine: Engine, backend: SandboxBackend) -> Iterator[tuple[Owner, SandboxRef]]:
    """An owner whose Assistant has a running sandbox (made as a run makes it: labelled with
    its subject and this installation)."""
    found = _owner(engine, "owner@example.com")
    ref = backend.create(
        SandboxSpec(
            subject=f"agent:{found.agent_id}",
            app_id="app",
            labels={**installation_label(), "mosoo.test": "1"},
        )
    )
    yield found, ref
    backend.remove(ref)


def _connect(
    server: LiveServer,
    agent_id: str,
    token: str | None,
    *,
    origin: str | None = "same",
    query: str = "rows=24&cols=80",
) -> ClientConnection:
    url = server.base_url.replace("http://", "ws://") + f"/api/terminal/{agent_id}?{query}"
    headers = {"Cookie": f"{get_settings().session_cookie}={token}"} if token else {}
    if origin == "same":
        origin = server.base_url
    return connect(url, additional_headers=headers, origin=origin, open_timeout=30)  # type: ignore[arg-type]


def _closed_with(socket: ClientConnection) -> tuple[int, str]:
    """The close frame the server sent (reading past any output)."""
    try:
        while True:
            socket.recv(timeout=30)
    except ConnectionClosed as closed:
        assert closed.rcvd is not None, "closed without a close frame"
        return closed.rcvd.code, closed.rcvd.reason


class Screen:
    def __init__(self, socket: ClientConnection) -> None:
        self.socket, self.text = socket, ""

    def run(self, command: str, pattern: str) -> re.Match[str]:
        self.socket.send(command.encode() + b"\r")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            chunk = self.socket.recv(timeout=max(0.1, deadline - time.monotonic()))
            assert isinstance(chunk, bytes), "output comes as binary frames"
            self.text += CONTROL.sub("", chunk.decode(errors="replace"))
            if match := re.search(pattern, self.text):
                self.text = self.text[match.end() :]
                return match
        raise AssertionError(f"no {pattern!r} after {command!r} in {self.text!r}")


def terminal_processes(backend: SandboxBackend, ref: SandboxRef) -> int:
    """How many processes in the sandbox belong to a terminal (looked at from inside)."""
    script = f"grep -lsa {TERMINAL_MARKER_ENV}= /proc/[0-9]*/environ | grep -vc self || true"
    return int(backend.exec(ref, ["sh", "-c", script]).stdout_text.strip() or 0)


def recorded(agent_id: str) -> list[tuple[str, str, str]]:
    """The Agent's Logs lines (operation, outcome, error), oldest first."""
    with session_scope() as db:
        rows = db.exec(
            select(PetOperation)
            .where(PetOperation.agent_id == agent_id)
            .order_by(col(PetOperation.created_at), col(PetOperation.id))
        ).all()
        return [(row.operation, row.outcome, row.error) for row in rows]


def test_the_owner_types_in_the_terminal_and_closing_the_page_ends_its_processes(
    server: LiveServer,
    owner: tuple[Owner, SandboxRef],
    backend: SandboxBackend,
    engine: Engine,
) -> None:
    found, ref = owner
    with _connect(server, found.agent_id, found.token, query="rows=30&cols=90") as socket:
        screen = Screen(socket)
        assert screen.run("pwd; id -u", r"\n(/\S+)\n(\d+)\n").groups() == ("/workspace", "10001")
        assert screen.run("stty size", r"\n(\d+ \d+)\n").group(1) == "30 90"
        socket.send(json.dumps({"type": "resize", "rows": 40, "cols": 120}))
        assert screen.run("stty size", r"\n(\d+ \d+)\n").group(1) == "40 120"
        assert screen.run("echo TERM=$TERM", r"\nTERM=(\S+)\n").group(1) == "xterm-256color"
        screen.run("sleep 1234 & setsid sleep 1235 & echo started", r"\nstarted\n")
        assert terminal_processes(backend, ref) >= 3
    # The page went: the shell and both sleeps go with it.
    wait_for(lambda: terminal_processes(backend, ref) == 0, 30, "the terminal's processes to end")
    wait_for(lambda: len(recorded(found.agent_id)) == 2, 10, "the close to be recorded")
    assert recorded(found.agent_id) == [
        ("terminal open", "done", ""),
        ("terminal close", "done", ""),
    ]
    assert redis.Redis.from_url(REDIS_URL).zcard(f"terminal:slots:{found.agent_id}") == 0


def test_no_session_another_owner_and_a_task_are_refused(
    server: LiveServer, owner: tuple[Owner, SandboxRef], engine: Engine, backend: SandboxBackend
) -> None:
    found, ref = owner
    stranger = _owner(engine, "stranger@example.com")
    task = _owner(engine, "tasks@example.com", kind="cattle")

    for token in (None, "not-a-session-token"):
        with _connect(server, found.agent_id, token) as socket:
            assert _closed_with(socket) == (4401, "Sign in to the console to open the terminal.")
    # Another owner's Agent is indistinguishable from one that does not exist.
    with _connect(server, found.agent_id, stranger.token) as socket:
        assert _closed_with(socket) == (4404, "Agent not found.")
    with _connect(server, "01" + "Z" * 24, found.token) as socket:
        assert _closed_with(socket) == (4404, "Agent not found.")
    with _connect(server, task.agent_id, task.token) as socket:
        code, reason = _closed_with(socket)
        assert (code, reason.startswith("Only an Assistant")) == (4409, True)
    # A signed-out session is no session.
    identity.sign_out(found.token)
    with _connect(server, found.agent_id, found.token) as socket:
        assert _closed_with(socket)[0] == 4401

    assert recorded(found.agent_id) == []  # nothing reached the Agent
    assert terminal_processes(backend, ref) == 0


def test_a_page_of_another_site_cannot_open_it_with_the_owner_cookie(
    server: LiveServer, owner: tuple[Owner, SandboxRef], engine: Engine, backend: SandboxBackend
) -> None:
    found, ref = owner
    port = server.base_url.rsplit(":", 1)[1]
    for origin in (f"http://127.0.0.1:{int(port) + 1}", "https://evil.example", "null"):
        with pytest.raises(InvalidStatus) as refused:
            _connect(server, found.agent_id, found.token, origin=origin)
        assert refused.value.response.status_code == 403
    assert recorded(found.agent_id) == []
    assert terminal_processes(backend, ref) == 0
    # No Origin at all is not a browser page's (a script with the cookie is the owner).
    with _connect(server, found.agent_id, found.token, origin=None) as socket:
        assert Screen(socket).run("echo ok-$((40+2))", r"ok-42")


def test_the_terminal_is_refused_when_turned_off(
    server: LiveServer,
    owner: tuple[Owner, SandboxRef],
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found, _ = owner
    monkeypatch.setenv("MOSOO_TERMINAL_ENABLED", "false")
    reset_settings_cache()
    with _connect(server, found.agent_id, found.token) as socket:
        assert _closed_with(socket) == (4403, "The terminal is turned off on this installation.")
    assert recorded(found.agent_id) == []


def test_a_stopped_sandbox_and_a_fifth_terminal_are_refused_and_recorded(
    server: LiveServer, owner: tuple[Owner, SandboxRef], engine: Engine, backend: SandboxBackend
) -> None:
    found, ref = owner
    opened = [_connect(server, found.agent_id, found.token) for _ in range(4)]
    try:
        for socket in opened:
            Screen(socket).run("echo ready", r"\nready\n")
        with _connect(server, found.agent_id, found.token) as socket:
            assert _closed_with(socket) == (
                4409,
                "At most 4 terminals may be open on one Assistant: close one first.",
            )
        opened.pop().close()
        wait_for(
            lambda: recorded(found.agent_id).count(("terminal close", "done", "")) == 1,
            30,
            "the fourth terminal to close",
        )
        with _connect(server, found.agent_id, found.token) as socket:
            Screen(socket).run("echo again", r"\nagain\n")
    finally:
        for socket in opened:
            socket.close()
    backend.stop(ref)
    with _connect(server, found.agent_id, found.token) as socket:
        code, reason = _closed_with(socket)
    assert code == 4409 and reason.startswith("The sandbox is not running"), reason
    refused = [op for op in recorded(found.agent_id) if op[1] == "refused"]
    assert [(name, outcome) for name, outcome, _ in refused] == [
        ("terminal open", "refused"),
        ("terminal open", "refused"),
    ]


@pytest.mark.parametrize(
    ("frame", "closed"),
    [
        (b"x" * (64 * 1024 + 1), (1009, "Input frames are limited to 64 KiB.")),
        ("ls", (1008, "A text frame must be JSON: send keystrokes as binary.")),
        (
            json.dumps({"type": "resize", "rows": 0, "cols": 80}),
            (1008, "rows must be a whole number from 1 to 500."),
        ),
        (
            json.dumps({"type": "exec"}),
            (1008, 'The only control frame is {"type": "resize", "rows", "cols"}.'),
        ),
        ("{" * 2000, (1009, "Control frames are limited to 1 KiB.")),
    ],
)
def test_a_bad_frame_closes_the_terminal_with_the_reason(
    server: LiveServer,
    owner: tuple[Owner, SandboxRef],
    engine: Engine,
    backend: SandboxBackend,
    frame: bytes | str,
    closed: tuple[int, str],
) -> None:
    found, ref = owner
    with _connect(server, found.agent_id, found.token) as socket:
        Screen(socket).run("echo ready", r"\nready\n")
        socket.send(frame)
        assert _closed_with(socket) == closed
    assert terminal_processes(backend, ref) == 0
    assert recorded(found.agent_id)[-1] == ("terminal close", "done", closed[1])


def test_a_bad_size_is_refused_before_anything_opens(
    server: LiveServer, owner: tuple[Owner, SandboxRef], engine: Engine
) -> None:
    found, _ = owner
    for query in ("rows=0&cols=80", "rows=24&cols=100000", "rows=-3&cols=80", "rows=a&cols=1"):
        with _connect(server, found.agent_id, found.token, query=query) as socket:
            assert _closed_with(socket)[0] == 4400, query
    assert recorded(found.agent_id) == []


def test_signing_out_closes_the_open_terminal_and_ends_its_processes(
    server: LiveServer, owner: tuple[Owner, SandboxRef], engine: Engine, backend: SandboxBackend
) -> None:
    found, ref = owner
    with _connect(server, found.agent_id, found.token) as socket:
        Screen(socket).run("sleep 999 & echo ready", r"\nready\n")
        began = time.monotonic()
        identity.sign_out(found.token)  # announced on Redis, as the console's Sign out does
        assert _closed_with(socket) == (4401, "The sign-in session ended.")
        assert time.monotonic() - began < 10  # the announcement, not the periodic check
    assert terminal_processes(backend, ref) == 0
    assert recorded(found.agent_id)[-1] == (
        "terminal close",
        "done",
        "The sign-in session ended.",
    )


def test_a_sign_in_session_that_expires_unannounced_closes_the_terminal_at_the_next_check(
    server: LiveServer,
    owner: tuple[Owner, SandboxRef],
    engine: Engine,
    backend: SandboxBackend,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Expiry is never announced on Redis: the periodic check must find it."""
    monkeypatch.setattr(terminal_api, "SESSION_CHECK_SECONDS", 0.5)
    found, ref = owner
    with _connect(server, found.agent_id, found.token) as socket:
        Screen(socket).run("sleep 999 & echo ready", r"\nready\n")
        with Session(engine) as db:
            session_id = identity.session_id_for_token(db, found.token)
            auth_session = db.get(AuthSession, session_id)
            assert auth_session is not None
            auth_session.expires_at = utcnow() - timedelta(seconds=1)
            db.add(auth_session)
            db.commit()
        assert _closed_with(socket) == (4401, "The sign-in session ended.")
    assert terminal_processes(backend, ref) == 0
    assert recorded(found.agent_id)[-1] == (
        "terminal close",
        "done",
        "The sign-in session ended.",
    )


def test_an_open_terminal_keeps_its_assistant_from_idle_hibernation(
    server: LiveServer, owner: tuple[Owner, SandboxRef], engine: Engine, backend: SandboxBackend
) -> None:
    found, ref = owner
    later = utcnow() + timedelta(hours=1)
    with Session(engine) as db:
        idle = pet_idle.idle_pets(db, [found.agent_id], now=later, idle=timedelta(minutes=5))
    assert [pet.agent_id for pet in idle] == [found.agent_id]  # nothing else keeps it awake
    with _connect(server, found.agent_id, found.token) as socket:
        Screen(socket).run("echo ready", r"\nready\n")
        assert pet_idle.hibernate_idle_pets(backend, now=later) == 0
        assert [sandbox.id for sandbox in pet_sandboxes(backend, found.agent_id)] == [ref.id]
        Screen(socket).run("echo still-here", r"\nstill-here\n")


def test_a_terminal_size_must_be_whole_numbers_in_bounds() -> None:
    assert terminals.TerminalSize.checked(24, 80) == terminals.TerminalSize(24, 80)
    for rows, cols in ((0, 80), (24, 1001), (True, 80), (24.0, 80), ("24", 80), (None, 80)):
        with pytest.raises(Exception, match="must be a whole number"):
            terminals.TerminalSize.checked(rows, cols)
