"""Public API v1 fixtures: owners with a published agent and a token, Redis DB 5, the app
in-process (TestClient) or in a real uvicorn server on a loopback port."""

from __future__ import annotations

import base64
import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis
import uvicorn
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import agents, identity, vault
from mosoo_core.settings import reset_settings_cache
from mosoo_web.api import build_api
from mosoo_web.api.v1 import _ratelimit
from tests.support.processes import free_port, wait_for
from tests.support.redis_db import db_number

REDIS_DB = db_number(5)
REDIS_URL = f"redis://127.0.0.1:6379/{REDIS_DB}"


@dataclass(frozen=True)
class ApiOwner:
    account_id: str
    app_id: str
    agent_id: str
    credential_id: str
    token: str
    token_id: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def use_redis(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """Point this process (services, rate limiter and the Celery client) at `url`."""
    monkeypatch.setenv("MOSOO_REDIS_URL", url)
    reset_settings_cache()


@pytest.fixture
def api_env(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    monkeypatch.setenv("MOSOO_MASTER_KEY", base64.b64encode(os.urandom(32)).decode())
    redis.Redis.from_url(REDIS_URL).flushdb()
    use_redis(monkeypatch, REDIS_URL)
    # The counters are gone with the flush; so is what this process held of them (a window
    # another test used up, at the same fixed time, would refuse this test's first request).
    monkeypatch.setattr(_ratelimit, "LIMITER", _ratelimit.Limiter())
    yield engine
    redis.Redis.from_url(REDIS_URL).flushdb()


def add_provider_key(
    db: Session,
    account_id: str,
    app_id: str,
    *,
    api_key: str,
    base_url: str = "http://127.0.0.1:9/v1",
) -> vault.ProviderCredentialView:
    """An OpenAI-compatible provider key offering `test-model`, as the owner adds it on the
    console's Providers page (the API never takes a provider key)."""
    return vault.create_provider_credential(
        db,
        account_id,
        app_id,
        vault.ProviderCredentialInput(
            name="Local",
            provider="openai_compatible",
            base_url=base_url,
            api_key=api_key,
            models=["test-model"],
        ),
    )


def make_owner(engine: Engine, email: str, *, publish: bool = True) -> ApiOwner:
    """An account whose App has a provider key and a ready agent (published unless told),
    plus a personal access token."""
    with Session(engine) as db:
        account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
        app_id = identity.list_apps(db, account.id)[0].id
        credential = add_provider_key(db, account.id, app_id, api_key="sk-test-" + email)
        agent = agents.create_agent(db, account.id, app_id, name=f"Agent of {email}", kind="cattle")
        agents.update_agent(
            db,
            account.id,
            app_id,
            agent.id,
            agents.AgentChanges(
                provider_credential_id=credential.id, model="test-model", system_prompt="You help."
            ),
        )
        if publish:
            agents.publish_agent(db, account.id, app_id, agent.id)
        token = identity.create_access_token(db, account.id, f"tests {email}")
        db.commit()
        return ApiOwner(account.id, app_id, agent.id, credential.id, token.secret, token.token.id)


@pytest.fixture
def owner(api_env: Engine) -> ApiOwner:
    return make_owner(api_env, "owner@example.com")


@pytest.fixture
def other(api_env: Engine) -> ApiOwner:
    return make_owner(api_env, "other@example.com")


@pytest.fixture
def client(api_env: Engine) -> Iterator[TestClient]:
    with TestClient(build_api(), base_url="http://127.0.0.1") as test_client:
        yield test_client


@dataclass(frozen=True)
class LiveServer:
    base_url: str


@contextlib.contextmanager
def live_server() -> Iterator[LiveServer]:
    """The web process's API in a real uvicorn server on a loopback port (in a thread)."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            build_api(), host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
    )
    thread = threading.Thread(target=server.run, name="api-uvicorn", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 20, "uvicorn to start")
        yield LiveServer(f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        thread.join(20)
