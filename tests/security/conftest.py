"""The real stack for the security tests: ONE `mosoo web` (and, for the driver and gateway
tests, one `mosoo control`) per test session, sharing a migrated database, Redis db 14, the
master key and a data dir with this process.

Every test reaches a limit through its front door (HTTP to the web process, the driver
socket or the gateway of the control process) and reads the database afterwards: a refusal
only counts when what enforces it was committed. Tests stay independent although the limits
they hit are counted in the database and in Redis: the `engine` fixture empties the tables
before each test, Redis db 14 is flushed before each test, and each test's HTTP clients
connect from their own loopback address (127.0.x.y), so per-IP counters never mix.
"""

from __future__ import annotations

import base64
import itertools
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, func, select

from mosoo_core import identity, migrations, sessions, vault
from mosoo_core.sessions import driver_plane
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.mail import OutboundEmail
from mosoo_core.tables.sessions import SessionRun
from tests.api.conftest import ApiOwner
from tests.support.processes import console_slot, free_port, mosoo_env, running, wait_for
from tests.support.redis_db import db_number

REDIS_DB = db_number(14)
REDIS_URL = f"redis://127.0.0.1:6379/{REDIS_DB}"
MASTER_KEY = base64.b64encode(os.urandom(32)).decode()
API_RATE_LIMIT_PER_MINUTE = 5
STARTUP_TIMEOUT = 900  # building the Reflex frontend takes minutes on a loaded machine

# The limits under test, set explicitly (mosoo_env lifts the per-IP send limit for the
# browser tests). Those the README states are kept at the README's numbers.
LIMITS = {
    "MOSOO_EMAIL_CODE_MAX_ATTEMPTS": "5",
    "MOSOO_EMAIL_SENDS_PER_ADDRESS_PER_HOUR": "5",
    "MOSOO_EMAIL_SENDS_PER_IP_PER_HOUR": "20",
    "MOSOO_EMAIL_VERIFY_FAILURES_PER_ADDRESS_PER_HOUR": "10",
    "MOSOO_EMAIL_VERIFY_FAILURES_PER_IP_PER_HOUR": "50",
    "MOSOO_API_RATE_LIMIT_PER_MINUTE": str(API_RATE_LIMIT_PER_MINUTE),
    # 127.0.0.1 plays the HTTPS proxy; the other clients connect from 127.0.x.y (not trusted).
    "MOSOO_TRUSTED_PROXIES": "127.0.0.1",
}


@pytest.hookimpl(trylast=True)  # after pytest has grouped the items by database backend
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The first test of this folder on each backend also waits for `mosoo web` to build and
    start: give it the startup's time on top of the usual per-test timeout."""
    here = Path(__file__).parent
    seen: set[object] = set()
    for item in items:
        if here not in Path(str(item.path)).parents:
            continue
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("database_url") if callspec is not None else None
        if backend not in seen:
            seen.add(backend)
            item.add_marker(pytest.mark.timeout(STARTUP_TIMEOUT + 300))


@dataclass(frozen=True)
class Installation:
    """What the processes share with this one: the database, the data dir, the settings."""

    database_url: str
    data_dir: Path
    env: dict[str, str]
    logs: Path


def _tail(path: Path, size: int = 6000) -> str:
    return path.read_text(errors="replace")[-size:] if path.exists() else "(no log)"


@pytest.fixture(scope="session")
def installation(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Installation:
    migrations.upgrade(database_url)
    redis.Redis.from_url(REDIS_URL).flushdb()
    data_dir = tmp_path_factory.mktemp("security-data")
    env = mosoo_env(
        data_dir,
        database_url,
        MOSOO_REDIS_URL=REDIS_URL,
        MOSOO_MASTER_KEY=MASTER_KEY,
        MOSOO_CONTROL_PORT=str(free_port()),
        **LIMITS,
    )
    return Installation(database_url, data_dir, env, tmp_path_factory.mktemp("security-logs"))


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="session")
def web_url(installation: Installation) -> Iterator[str]:
    """One `mosoo web` for the whole folder (it listens on every address, so clients can
    connect from any loopback address). A port can be taken by someone else during the
    build, before the server binds it: a process that exits while starting gets one more go
    on another console slot."""
    for attempt in (1, 2):
        log = installation.logs / f"web-{attempt}.log"
        with (
            console_slot() as console,
            running(["web"], installation.env | console.env, log) as process,
        ):
            url = console.url
            try:
                wait_for(
                    lambda: _healthy(url),  # noqa: B023 - called right here, within this iteration
                    STARTUP_TIMEOUT,
                    "mosoo web to answer /api/health",
                    process,
                )
            except RuntimeError as exited:
                print(f"mosoo web attempt {attempt} exited while starting:\n{_tail(log)}")
                if attempt == 2:
                    raise RuntimeError(f"{exited}\n{_tail(log)}") from None
                continue
            except TimeoutError as slow:
                raise TimeoutError(f"{slow}\n{_tail(log)}") from None
            yield url
            return


@dataclass(frozen=True)
class Control:
    socket_path: Path
    log: Path

    def http(self) -> httpx.Client:
        """HTTP to control over its Unix socket, as a sandbox's forwarder reaches the gateway."""
        return httpx.Client(
            transport=httpx.HTTPTransport(uds=str(self.socket_path)),
            base_url="http://control",
            timeout=30,
        )


@pytest.fixture(scope="session")
def control(installation: Installation) -> Iterator[Control]:
    """One `mosoo control` with the web's settings (database, Redis, master key, data dir)."""
    log = installation.logs / "control.log"
    with running(["control"], installation.env, log) as process:
        try:
            wait_for(
                lambda: b"control.ready" in log.read_bytes(),
                120,
                "mosoo control to be ready",
                process,
            )
        except (RuntimeError, TimeoutError) as failed:
            raise RuntimeError(f"{failed}\n{_tail(log)}") from None
        yield Control(
            socket_path=installation.data_dir / "run" / "control" / "control.sock", log=log
        )


_addresses = itertools.count(1)


def next_loopback_address() -> str:
    """A loopback address no other test has used (127.0.0.1 is left to everything else)."""
    n = next(_addresses)
    return f"127.0.{1 + n // 250}.{1 + n % 250}"


@pytest.fixture(autouse=True)
def security_env(
    isolated_settings: Path,
    engine: Engine,
    installation: Installation,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[None]:
    """This process's services use the processes' settings (data dir and object store,
    master key, Redis db 14, limits) once `engine` has emptied the tables; Redis starts empty."""
    shared = {
        **LIMITS,
        "MOSOO_REDIS_URL": REDIS_URL,
        "MOSOO_MASTER_KEY": MASTER_KEY,
        "MOSOO_DATA_DIR": str(installation.data_dir),
    }
    for key, value in shared.items():
        monkeypatch.setenv(key, value)
    reset_settings_cache()
    redis.Redis.from_url(REDIS_URL).flushdb()
    yield
    reset_settings_cache()


@pytest.fixture
def web(web_url: str) -> Iterator[Callable[..., httpx.Client]]:
    """`web()` is an HTTP client of the web process connecting from a fresh loopback address
    (`web(ip)` from a given one). One connection each, kept alive between requests."""
    clients: list[httpx.Client] = []

    def make(ip: str | None = None) -> httpx.Client:
        client = httpx.Client(
            base_url=web_url,
            transport=httpx.HTTPTransport(local_address=ip or next_loopback_address(), retries=0),
            timeout=60,
            follow_redirects=False,
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


# --- reading the database ------------------------------------------------------------------


def count(engine: Engine, model: Any, *conditions: Any) -> int:
    with Session(engine) as db:
        return int(db.exec(select(func.count()).select_from(model).where(*conditions)).one())


def rows(engine: Engine, model: Any, *conditions: Any) -> list[Any]:
    with Session(engine) as db:
        return list(db.exec(select(model).where(*conditions)).all())


def update(engine: Engine, model: Any, condition: Any, **values: Any) -> None:
    """Change rows behind the front door's back (to make something expire)."""
    with Session(engine) as db:
        changed = db.exec(sa.update(model).where(condition).values(**values)).rowcount  # type: ignore[call-overload]
        db.commit()
    assert changed >= 1, f"no {model.__tablename__} row matched"


def latest_code(engine: Engine, email: str) -> str:
    """The code of the newest sign-in email to `email` (the dev mailbox keeps the body)."""
    with Session(engine) as db:
        message = db.exec(
            select(OutboundEmail)
            .where(OutboundEmail.to_address == email)
            .order_by(col(OutboundEmail.created_at).desc(), col(OutboundEmail.id).desc())
        ).first()
    assert message is not None, f"no email was sent to {email}"
    found = re.search(r"\b(\d{6})\b", message.body or message.subject)
    assert found, message.subject
    return found.group(1)


def wrong(code: str) -> str:
    """A well-formed code that is not `code`."""
    return f"{(int(code) + 1) % 1_000_000:06d}"


# --- front-door helpers --------------------------------------------------------------------


def request_code(client: httpx.Client, email: str) -> httpx.Response:
    return client.post("/api/auth/email/start", json={"email": email})


def verify(client: httpx.Client, email: str, code: str) -> httpx.Response:
    return client.post("/api/auth/email/verify", json={"email": email, "code": code})


def sign_in(client: httpx.Client, engine: Engine, email: str) -> str:
    """Sign in through the email-code front door; returns the session cookie."""
    assert request_code(client, email).status_code == 200
    response = verify(client, email, latest_code(engine, email))
    assert response.status_code == 200, response.text
    token = response.cookies.get("mosoo_session")
    assert token
    return token


def error_code(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


# --- owners, agents, runs ------------------------------------------------------------------


def new_token(engine: Engine, owner: ApiOwner, label: str) -> tuple[str, str]:
    with Session(engine) as db:
        created = identity.create_access_token(db, owner.account_id, label)
        db.commit()
        return created.secret, created.token.id


@dataclass(frozen=True)
class QueuedRun:
    account_id: str
    app_id: str
    session_id: str
    run_id: str


def queued_run(db: Session, email: str) -> QueuedRun:
    """An account, an Agent and a thread whose first message queued a run."""
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    app_id = identity.list_apps(db, account.id)[0].id
    agent = Agent(app_id=app_id, name="Tester", model="test-model")
    db.add(agent)
    db.flush()
    thread = sessions.create_session(db, account.id, app_id, agent.id)
    sent = sessions.send_message(db, account.id, thread.id, "hello")
    return QueuedRun(account.id, app_id, thread.id, sent.run.id)


def issue_run_grant(db: Session, queued: QueuedRun, base_url: str, api_key: str) -> str:
    """A provider key (at `base_url`) in the run's App and the model grant the worker issues
    for the run at boot."""
    credential = vault.create_provider_credential(
        db,
        queued.account_id,
        queued.app_id,
        vault.ProviderCredentialInput(
            name="Scripted",
            provider="openai_compatible",
            base_url=base_url,
            api_key=api_key,
            models=["test-model"],
        ),
    )
    return driver_plane.issue_model_grant(
        db, run_row(db, queued.run_id), credential_id=credential.id, allowed_models=["test-model"]
    )


def run_row(db: Session, run_id: str) -> SessionRun:
    run = db.get(SessionRun, run_id)
    assert run is not None
    return run
