"""The `mosoo` CLI as a user runs it (`.venv/bin/mosoo`), against a real `mosoo web` process:
device-flow sign-in (approval, denial, expiry, single use) and the saved token in use."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import agents, api_client, identity, migrations
from mosoo_core.clock import utcnow
from mosoo_core.tables.identity import AccessToken, DeviceAuthorization
from tests.support.openai_server import FailedTurn, TextTurn, ToolCall, ToolCallsTurn
from tests.support.processes import (
    ROOT,
    console_slot,
    mosoo_env,
    page_served,
    running,
    stop_group,
    wait_for,
)
from tests.support.redis_db import db_number
from tests.support.stack import RuntimeStack, make_agent, runtime_stack

pytestmark = pytest.mark.integration

REDIS_DB = db_number(4)
MOSOO = str(ROOT / ".venv" / "bin" / "mosoo")
CODE_LINE = "check that it shows this code:"


@dataclass(frozen=True)
class Web:
    url: str
    log: Path


@pytest.fixture(scope="module")
def web(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    migrations.upgrade(database_url)
    redis.Redis(db=REDIS_DB).flushdb()
    data_dir = tmp_path_factory.mktemp("cli-web")
    log = data_dir / "web.log"
    env = mosoo_env(data_dir, database_url, MOSOO_REDIS_URL=f"redis://127.0.0.1:6379/{REDIS_DB}")
    with console_slot() as console, running(["web"], env | console.env, log) as process:
        try:
            wait_for(
                lambda: page_served(f"{console.url}/login"),
                600,
                "the console to be served",
                process,
            )
        except Exception:
            print(log.read_text()[-5000:])
            raise
        yield Web(url=console.url, log=log)


@dataclass
class CliRun:
    """A running `mosoo` command whose output is collected as it comes."""

    process: subprocess.Popen[str]
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)

    def start_readers(self) -> None:
        for stream, sink in (
            (self.process.stdout, self.stdout),
            (self.process.stderr, self.stderr),
        ):
            reader = threading.Thread(
                target=lambda s=stream, k=sink: k.extend(iter(s.readline, "")), daemon=True
            )
            reader.start()
            self.readers.append(reader)

    def user_code(self) -> str:
        wait_for(
            lambda: any(CODE_LINE in line for line in self.stdout), 30, "the CLI to print the code"
        )
        line = next(line for line in self.stdout if CODE_LINE in line)
        return line.split(CODE_LINE, 1)[1].strip()

    def finish(self, timeout: float = 60) -> int:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            stop_group(self.process)  # type: ignore[arg-type]
            raise
        # The readers finish once the pipes close: wait for them rather than for time.
        wait_for(self._drained, 5, "the CLI output")
        return code

    def _drained(self) -> bool:
        return all(thread.is_alive() is False for thread in self.readers)

    @property
    def out(self) -> str:
        return "".join(self.stdout)

    @property
    def err(self) -> str:
        return "".join(self.stderr)


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    return tmp_path / "config"


def _cli(web: Web, config_dir: Path, *args: str) -> CliRun:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOSOO_")}
    env.update(MOSOO_CONFIG_DIR=str(config_dir), MOSOO_URL=web.url, PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        [MOSOO, *args],
        env=env,
        cwd=config_dir.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    run = CliRun(process)
    run.start_readers()
    return run


def _account(engine: Engine, email: str = "cli@example.com") -> str:
    with Session(engine) as db:
        account_id = identity.sign_in_identity(db, provider="email", subject=email, email=email).id
        db.commit()
    return account_id


def _approve(engine: Engine, account_id: str, user_code: str) -> None:
    with Session(engine) as db:
        identity.approve_device_authorization(db, account_id, user_code)
        db.commit()


def test_login_approved_saves_a_private_token_that_lists_agents(
    web: Web, engine: Engine, config_dir: Path
) -> None:
    account_id = _account(engine)
    with Session(engine) as db:
        app_id = identity.list_apps(db, account_id)[0].id
        agent = agents.create_agent(db, account_id, app_id, name="Support Bot", kind="cattle")
        db.commit()

    login = _cli(web, config_dir, "login")
    user_code = login.user_code()
    assert f"{web.url}/cli-auth?code={user_code}" in login.out
    _approve(engine, account_id, user_code)
    assert login.finish() == 0, login.err
    assert "Signed in" in login.out and "cli@example.com" in login.out

    saved = config_dir / "credentials.json"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    credentials = json.loads(saved.read_text())
    assert credentials["url"] == web.url and credentials["token"].startswith("mst_")
    with Session(engine) as db:
        token = identity.authenticate_access_token(db, credentials["token"])
        assert token.account_id == account_id and token.source == "cli"
        row = db.exec(select(DeviceAuthorization)).one()
        assert row.status == "consumed" and row.access_token_id == token.id
        # The plaintext token is nowhere in the database.
        assert credentials["token"] not in str(db.exec(select(AccessToken)).one().model_dump())

    # Single use: the consumed code cannot be approved again, and no second token was minted.
    with Session(engine) as db, pytest.raises(Exception, match="already been used"):
        identity.approve_device_authorization(db, account_id, user_code)
    with Session(engine) as db:
        assert len(db.exec(select(AccessToken)).all()) == 1

    listed = _cli(web, config_dir, "agents", "list")
    assert listed.finish() == 0, listed.err
    assert agent.id in listed.out and "Support Bot" in listed.out


def test_login_denied_exits_non_zero_and_saves_nothing(
    web: Web, engine: Engine, config_dir: Path
) -> None:
    account_id = _account(engine)
    login = _cli(web, config_dir, "login")
    user_code = login.user_code()
    with Session(engine) as db:
        identity.deny_device_authorization(db, account_id, user_code)
        db.commit()
    assert login.finish() == 1
    assert "denied" in login.err
    assert not (config_dir / "credentials.json").exists()
    with Session(engine) as db:
        assert db.exec(select(AccessToken)).all() == []


def test_login_expired_exits_non_zero_and_saves_nothing(
    web: Web, engine: Engine, config_dir: Path
) -> None:
    account_id = _account(engine)
    login = _cli(web, config_dir, "login")
    user_code = login.user_code()
    # Ten minutes pass for the server: the code's expiry moves into the past.
    with Session(engine) as db:
        db.execute(
            sa.update(DeviceAuthorization).values(expires_at=utcnow() - timedelta(seconds=1))
        )
        db.commit()
    assert login.finish() == 1
    assert "expired" in login.err
    assert not (config_dir / "credentials.json").exists()
    with Session(engine) as db, pytest.raises(Exception, match="expired"):
        identity.approve_device_authorization(db, account_id, user_code)


def test_a_consumed_device_code_is_refused_by_the_running_server(web: Web, engine: Engine) -> None:
    account_id = _account(engine)
    started = httpx.post(f"{web.url}/api/auth/cli/start", json={"client_name": "replay"}).json()
    _approve(engine, account_id, started["user_code"])
    first = httpx.post(
        f"{web.url}/api/auth/cli/token", json={"device_code": started["device_code"]}
    )
    assert first.status_code == 200 and first.json()["access_token"].startswith("mst_")
    replay = httpx.post(
        f"{web.url}/api/auth/cli/token", json={"device_code": started["device_code"]}
    )
    assert replay.status_code == 400 and replay.json()["error"]["code"] == "invalid_grant"


def test_commands_without_a_valid_token_say_how_to_sign_in(
    web: Web, engine: Engine, config_dir: Path
) -> None:
    unsigned = _cli(web, config_dir, "agents", "list")
    assert unsigned.finish() == 1
    assert "mosoo login" in unsigned.err

    account_id = _account(engine)
    with Session(engine) as db:
        created = identity.create_access_token(db, account_id, "soon revoked")
        identity.revoke_access_token(db, account_id, created.token.id)
        db.commit()
    config_dir.mkdir(parents=True)
    (config_dir / "credentials.json").write_text(
        f'{{"url": "{web.url}", "token": "{created.secret}"}}'
    )
    revoked = _cli(web, config_dir, "agents", "list")
    assert revoked.finish() == 1
    assert "not valid any more" in revoked.err


def test_logout_forgets_the_saved_token(web: Web, config_dir: Path) -> None:
    config_dir.mkdir(parents=True)
    saved = config_dir / "credentials.json"
    saved.write_text(f'{{"url": "{web.url}", "token": "mst_{"a" * 43}"}}')
    out = _cli(web, config_dir, "logout")
    assert out.finish() == 0
    assert not saved.exists()
    again = _cli(web, config_dir, "logout")
    assert again.finish() == 0 and "Not signed in" in again.out


# --- the client's network behaviour, against a small loopback server -----------------------


class _ScriptedHandler(BaseHTTPRequestHandler):
    """Answers from the server's `script`: a list of callables, one per request."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append(dict(self.headers))  # type: ignore[attr-defined]
        self.server.script.pop(0)(self)  # type: ignore[attr-defined]

    do_POST = do_GET

    def log_message(self, *_args: object) -> None:
        pass


@contextlib.contextmanager
def _scripted_server(
    script: list[Callable[[BaseHTTPRequestHandler], None]],
) -> Iterator[tuple[str, list[dict[str, str]]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ScriptedHandler)
    server.script = script  # type: ignore[attr-defined]
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.seen  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


def _frame(seq: int, kind: str, payload: dict[str, object]) -> bytes:
    event = {
        "seq": seq,
        "type": kind,
        "run_id": "run1",
        "occurred_at": "2026-01-01T00:00:00Z",
        "payload": payload,
    }
    return f"id: {seq}\nevent: {kind}\ndata: {json.dumps(event)}\n\n".encode()


def _stream_then_drop(*frames: bytes) -> Callable[[BaseHTTPRequestHandler], None]:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        for frame in (b": keep-alive\n\n", *frames):
            handler.wfile.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
        handler.wfile.flush()
        # No closing chunk: the connection breaks mid-stream, as when a proxy drops it.
        handler.close_connection = True
        handler.connection.shutdown(socket.SHUT_RDWR)

    return answer


def _json(status: int, body: dict[str, object]) -> Callable[[BaseHTTPRequestHandler], None]:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    return answer


def test_event_stream_resumes_with_last_event_id_after_a_drop() -> None:
    script = [
        _stream_then_drop(
            _frame(1, "run.started", {}), _frame(2, "agent.message.delta", {"text": "Hel"})
        ),
        _stream_then_drop(
            _frame(3, "agent.message.delta", {"text": "lo"}), _frame(4, "run.completed", {})
        ),
    ]
    with (
        _scripted_server(script) as (url, seen),
        api_client.MosooClient(url, "mst_" + "a" * 43) as client,
    ):
        received = []
        for event in client.stream_events("T1", sleep=lambda _s: None):
            received.append(event["seq"])
            if event["type"] == "run.completed":
                break
    assert received == [1, 2, 3, 4]
    assert "Last-Event-ID" not in seen[0] and seen[1]["Last-Event-ID"] == "2"
    assert seen[0]["Authorization"] == "Bearer mst_" + "a" * 43


def test_device_login_waits_longer_after_slow_down() -> None:
    started = {
        "device_code": "dc",
        "user_code": "BCDF-GHJK",
        "verification_uri": "x",
        "expires_in": 600,
        "interval": 5,
    }
    script = [
        _json(200, started),
        _json(400, {"error": {"code": "authorization_pending", "message": "wait", "interval": 5}}),
        _json(400, {"error": {"code": "slow_down", "message": "slower", "interval": 10}}),
        _json(
            200, {"access_token": "mst_x", "token_type": "Bearer", "account_email": "a@example.com"}
        ),
    ]
    waits: list[float] = []
    with _scripted_server(script) as (url, _seen), api_client.MosooClient(url) as client:
        answer = api_client.device_login(
            client, "test", on_code=lambda _s: None, sleep=waits.append
        )
    assert answer["access_token"] == "mst_x"
    assert waits == [5, 5, 10]


# --- `mosoo run` against the whole stack: web, control, worker, Docker sandbox ---------------


@pytest.fixture
def run_stack(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[RuntimeStack, Web]]:
    with runtime_stack(engine, database_url, tmp_path, monkeypatch, redis_db=REDIS_DB) as stack:
        url = stack.start_web()
        yield stack, Web(url=url, log=stack.logs / "web.log")


def test_run_streams_the_answer_and_exits_by_how_the_run_ended(
    run_stack: tuple[RuntimeStack, Web], config_dir: Path
) -> None:
    stack, web = run_stack
    stack.model.add(
        ToolCallsTurn([ToolCall("bash", {"command": "echo hi"}, id="call_echo")]),
        TextTurn("The answer is 42."),
        FailedTurn(message="the model fell over", code="server_error"),
    )
    owner = make_agent(
        stack.engine, stack.model.base_url, "sk-cli-e2e-key", email="run@example.com"
    )
    with Session(stack.engine) as db:
        agents.publish_agent(db, owner.account_id, owner.app_id, owner.agent_id)
        created = identity.create_access_token(db, owner.account_id, "cli e2e")
        db.commit()
    config_dir.mkdir(parents=True)
    api_client_file = config_dir / "credentials.json"
    api_client_file.write_text(json.dumps({"url": web.url, "token": created.secret}))

    answered = _cli(web, config_dir, "run", "E2E cattle", "what is the answer?")
    assert answered.finish(timeout=240) == 0, (
        answered.err + stack.logs.joinpath("web.log").read_text()[-3000:]
    )
    assert answered.out == "The answer is 42.\n"
    assert "[tool] bash" in answered.err and "thread " in answered.err

    threads = _cli(web, config_dir, "threads", "list", "--agent", owner.agent_id)
    assert threads.finish() == 0, threads.err
    thread_id = answered.err.split("thread ", 1)[1].split()[0]
    assert thread_id in threads.out

    failed = _cli(web, config_dir, "run", owner.agent_id, "try again")
    assert failed.finish(timeout=240) == 1
    assert "run failed" in failed.err and "fell over" in failed.err
